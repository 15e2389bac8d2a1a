// Single sign-on in headless Chromium, against a real OpenID Provider (oidc-provider.mjs) whose
// development login and consent pages Chromium fills in: alice signs in with the login page's
// button and sees her projects in the control room, then opens a project host without a second
// login; a project link opened first lands on the project after signing in; her callback URL
// replayed is refused; a callback URL taken from another browser is refused there and still
// works in the browser that started it; "Cancel" at the provider (access_denied) and mallory
// (not in the config) each get a page and no session cookie.
// Run by tests/integration/sso.rs. Env: GW_URL, PROJECT_URL, CERT, SHOT_DIR.
import { env, launch } from './chromium.mjs';

const [gw, projectUrl, certPath, shots] = ['GW_URL', 'PROJECT_URL', 'CERT', 'SHOT_DIR'].map(env);
const gwHost = new URL(gw).hostname;

let step = 'launch';
const browser = await launch(certPath);
const fresh = async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const callbacks = [];
  const logins = [];
  context.on('request', (r) => {
    const u = new URL(r.url());
    if (u.pathname === '/_gw/oidc/callback') callbacks.push(r.url());
    if (u.hostname === gwHost && u.pathname === '/login') logins.push(r.url());
  });
  return { context, page, callbacks, logins };
};
const sessionCookie = async (context) => (await context.cookies()).find((c) => c.name === '__Host-ocgw');
const expect = (cond, what) => { if (!cond) throw new Error(what); };

/// From the gateway's login page to the provider's login form, then sign in as `who` and
/// consent; returns the response of the gateway's callback.
const signIn = async (page, who) => {
  await page.goto(`${gw}/login`);
  await page.locator('#sso').click();
  await page.locator('input[name=login]').waitFor({ timeout: 15000 });
  await page.locator('input[name=login]').fill(who);
  await page.locator('input[name=password]').fill('any password');
  const back = page.waitForResponse((r) => new URL(r.url()).pathname === '/_gw/oidc/callback', { timeout: 20000 });
  await page.getByRole('button', { name: 'Sign-in' }).click();
  const consent = page.getByRole('button', { name: 'Continue' });
  await Promise.race([back, consent.waitFor({ timeout: 20000 }).then(() => consent.click())]);
  return back;
};

let a;
try {
  step = 'the login page offers single sign-on';
  a = await fresh();
  await a.page.goto(`${gw}/login`);
  const label = await a.page.locator('#sso').textContent();
  expect(label.includes('Sign in with Test IdP'), `button reads ${label}`);
  await a.page.screenshot({ path: `${shots}/0-login.png` });

  step = 'alice signs in and sees her projects';
  const done = await signIn(a.page, 'alice');
  expect(done.status() === 303, `the callback answered ${done.status()}`);
  await a.page.waitForURL((u) => u.hostname === gwHost && u.pathname === '/', { timeout: 15000 });
  await a.page.locator('#project-web').waitFor({ timeout: 15000 });
  expect(await a.page.locator('#project-api').count() === 0, 'a project she is not granted is listed');
  await a.page.screenshot({ path: `${shots}/1-control-room.png` });
  const cookies = await a.context.cookies();
  expect(cookies.some((c) => c.name === '__Host-ocgw' && c.httpOnly && c.secure), 'no session cookie');
  expect(!cookies.some((c) => c.name === '__Host-ocgw-sso'), 'the flow cookie outlived the flow');

  step = 'the project host without a second login';
  const before = a.logins.length;
  const project = await a.page.goto(projectUrl);
  expect(new URL(a.page.url()).hostname === new URL(projectUrl).hostname, `ended at ${a.page.url()}`);
  expect(project.status() === 200, `the project answered ${project.status()}`);
  expect(a.logins.length === before, `sent to the login form: ${a.logins.join(', ')}`);

  step = 'the same callback again is refused';
  const replay = await a.page.goto(a.callbacks[0]);
  expect(replay.status() === 403, `a replayed callback answered ${replay.status()}`);
  expect((await a.page.content()).includes('finished already'), 'the refusal page');

  step = 'a callback URL from another browser';
  const b = await fresh();
  let stolen = null;
  // Playwright does not route requests that follow a redirect, and the callback is one: stop at
  // the consent form's post instead, and follow the provider's redirects by hand (with this
  // browser's cookies) until one leaves the provider: that is the callback URL.
  const consentPost = (u) => u.hostname === '127.0.0.1' && u.pathname.startsWith('/interaction/');
  await b.context.route(consentPost, async (route) => {
    const req = route.request();
    if (req.method() !== 'POST' || !(req.postData() || '').includes('prompt=consent')) return route.continue();
    let r = await route.fetch({ maxRedirects: 0 });
    let at = req.url();
    while (r.headers().location && new URL(at).hostname === '127.0.0.1') {
      at = new URL(r.headers().location, at).href;
      if (new URL(at).hostname !== '127.0.0.1') break;
      r = await b.context.request.get(at, { maxRedirects: 0 });
    }
    stolen = new URL(at).pathname === '/_gw/oidc/callback' ? at : null;
    return route.fulfill({ status: 200, contentType: 'text/plain', body: 'stopped before the callback' });
  });
  await b.page.goto(`${gw}/login`);
  await b.page.locator('#sso').click();
  await b.page.locator('input[name=login]').fill('alice');
  await b.page.locator('input[name=password]').fill('any password');
  await b.page.getByRole('button', { name: 'Sign-in' }).click();
  await b.page.getByRole('button', { name: 'Continue' }).click();
  for (let i = 0; i < 200 && !stolen; i++) await b.page.waitForTimeout(50);
  expect(stolen, `the callback was not seen (at ${b.page.url()}; requests: ${b.callbacks.join(', ')})`);
  const elsewhere = await a.page.goto(stolen);
  expect(elsewhere.status() === 403, `another browser's callback answered ${elsewhere.status()}`);
  const own = await b.page.goto(stolen);
  expect(new URL(b.page.url()).pathname === '/' && own.status() === 200, `its own browser ended at ${b.page.url()} (${own.status()})`);
  expect(await sessionCookie(b.context), 'its own browser has no session');
  await b.context.close();

  step = 'a project link opened first signs in through the provider and lands on the project';
  const e = await fresh();
  await e.page.goto(projectUrl);
  await e.page.locator('#sso').click();
  await e.page.locator('input[name=login]').fill('alice');
  await e.page.locator('input[name=password]').fill('any password');
  await e.page.getByRole('button', { name: 'Sign-in' }).click();
  await e.page.getByRole('button', { name: 'Continue' }).click();
  await e.page.waitForURL((u) => u.hostname === new URL(projectUrl).hostname, { timeout: 15000 });
  await e.context.close();

  step = 'cancel at the provider';
  const d = await fresh();
  await d.page.goto(`${gw}/login`);
  await d.page.locator('#sso').click();
  const cancelled = d.page.waitForResponse((r) => new URL(r.url()).pathname === '/_gw/oidc/callback', { timeout: 20000 });
  await d.page.getByRole('link', { name: '[ Cancel ]' }).click();
  const c = await cancelled;
  expect(c.status() === 403, `a cancelled sign-in answered ${c.status()}`);
  await d.page.getByText('did not sign you in (access_denied)').waitFor({ timeout: 10000 });
  expect(!(await sessionCookie(d.context)), 'a cancelled sign-in left a session');

  step = 'mallory is not a user here';
  const m = await signIn(d.page, 'mallory');
  expect(m.status() === 403, `mallory's callback answered ${m.status()}`);
  await d.page.getByText('this account is not a user of this gateway').waitFor({ timeout: 10000 });
  await d.page.screenshot({ path: `${shots}/2-not-a-user.png` });
  expect(!(await sessionCookie(d.context)), 'mallory got a session cookie');
  console.log('ok: every step passed');
} catch (e) {
  console.error(`failed at step "${step}": ${e.stack || e}`);
  if (a) await a.page.screenshot({ path: `${shots}/failed.png` }).catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
