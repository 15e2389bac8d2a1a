// Passkeys (issue 26) in headless Chromium with a phone's viewport and Chromium's virtual
// authenticator (DevTools protocol `WebAuthn`: CTAP2, internal transport, resident keys, user
// verification on):
// alice logs in with her password → "Add a passkey" on the portal → logs out → the login page
// offers "Sign in with a passkey" before the password → she signs in with it → bob adds his own
// passkey, in a page without WebAuthn's JSON helpers (the script's own conversions) → alice's
// passkey answering with bob's user handle is refused → a sign-in's answer sent a second time is
// refused → a ceremony answered on another origin (a project host of the same name) is refused →
// alice signs in with the button, without the helpers, and revokes her passkey on the portal →
// her next passkey sign-in is refused. Prints `passkey alice=<id> bob=<id>` for
// tests/integration/passkeys.rs, which then reads the audit trail and the CLI. Exits non-zero
// naming the failed step. Env: GW_PORT, CERT, SHOT_DIR.
import { env, launch } from './chromium.mjs';

const [port, certPath, shots] = ['GW_PORT', 'CERT', 'SHOT_DIR'].map(env);
const login = `https://gw.localhost:${port}`;
const elsewhere = `https://nosuch.gw.localhost:${port}`;

let step = 'launch';
const browser = await launch(certPath);
const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
const page = await context.newPage();
const shot = (name) => page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });

// A ceremony done by hand in `on` (a page), its options and answer carried by `carry` (the page's
// own fetch, or the test's request from outside the browser): the answer as the gateway got it.
const ceremonyIn = (on, { allow, tamper } = {}) => on.evaluate(async ({ allow, tamper, login }) => {
  const dec = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0)).buffer;
  const post = (fields) => fetch(`${login}/_gw/passkey`, { method: 'POST', credentials: 'include', body: new URLSearchParams(fields) });
  const started = await post({ do: 'sign-in-options' });
  const options = await started.json();
  if (!started.ok) throw new Error(`sign-in-options: ${started.status} ${JSON.stringify(options)}`);
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options);
  if (allow) publicKey.allowCredentials = [{ type: 'public-key', id: dec(allow) }];
  publicKey.timeout = 10000;
  const answer = (await navigator.credentials.get({ publicKey })).toJSON();
  if (tamper) Object.assign(answer.response, tamper);
  const body = { do: 'sign-in', credential: JSON.stringify(answer), ceremony: options.ceremony, next: '/' };
  const r = await post(body);
  return { status: r.status, json: await r.json(), body };
}, { allow, tamper, login });

// A form posted to the gateway from the login page (same origin): its status and JSON.
const post = (fields) => page.evaluate(async ({ fields, login }) => {
  const r = await fetch(`${login}/_gw/passkey`, { method: 'POST', credentials: 'include', body: new URLSearchParams(fields) });
  return { status: r.status, json: await r.json(), cookie: r.headers.has('set-cookie') };
}, { fields, login });

try {
  step = 'a virtual authenticator with user verification';
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });

  step = 'alice logs in with her password';
  await page.goto(`${login}/login`);
  await page.locator('input[name=user]').fill('alice');
  await page.locator('input[name=password]').fill('alice-password-1');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL((u) => u.pathname === '/');

  step = 'alice adds a passkey on the portal';
  await page.locator('#passkey-label').fill('alice phone');
  await page.getByRole('button', { name: 'Add a passkey' }).click();
  await page.waitForURL((u) => u.searchParams.get('done') === 'passkey_added', { timeout: 15000 });
  const item = page.locator('.passkey-list li', { hasText: 'alice phone' });
  await item.waitFor();
  const aliceKey = await item.getAttribute('id');
  const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId });
  if (credentials.length !== 1 || !credentials[0].isResidentCredential) throw new Error(`credentials: ${JSON.stringify(credentials)}`);
  const aliceCredential = credentials[0].credentialId.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  await shot('portal-passkey');

  step = 'alice logs out; the login page offers the passkey first';
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL((u) => u.pathname === '/login');
  await page.locator('#passkey-sign-in').waitFor({ state: 'visible' });
  const first = await page.evaluate(() => !!(document.getElementById('passkey').compareDocumentPosition(document.querySelector('form[action="/login"]')) & Node.DOCUMENT_POSITION_FOLLOWING));
  if (!first) throw new Error('the passkey button is not before the password form');
  await shot('login-passkey');

  step = 'alice signs in with her passkey';
  await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
  await page.waitForURL((u) => u.pathname === '/', { timeout: 15000 });
  if (!(await page.locator('#passkeys').textContent()).includes('last used')) throw new Error('the passkey is not shown as used');
  console.log(`signed in with a passkey: ${aliceKey}`);

  step = 'bob adds his own passkey';
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL((u) => u.pathname === '/login');
  await page.locator('input[name=user]').fill('bob');
  await page.locator('input[name=password]').fill('bob-password-1');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL((u) => u.pathname === '/');
  // Bob's handle, as any ceremony of his names it (this one is left unfinished).
  const bobHandle = await page.evaluate(async () => (await (await fetch('/_gw/passkey', { method: 'POST', body: new URLSearchParams({ do: 'register-options' }) })).json()).user.id);
  // As a browser without WebAuthn's JSON helpers (older Safari) would: the page's own conversions.
  const withoutHelpers = () => page.evaluate(() => {
    delete PublicKeyCredential.parseCreationOptionsFromJSON;
    delete PublicKeyCredential.parseRequestOptionsFromJSON;
    delete PublicKeyCredential.prototype.toJSON;
    return !PublicKeyCredential.parseCreationOptionsFromJSON && !PublicKeyCredential.prototype.toJSON;
  });
  if (!(await withoutHelpers())) throw new Error('the JSON helpers are still there');
  await page.locator('#passkey-label').fill('bob laptop');
  await page.getByRole('button', { name: 'Add a passkey' }).click();
  await page.waitForURL((u) => u.searchParams.get('done') === 'passkey_added', { timeout: 15000 });
  const bobKey = await page.locator('.passkey-list li', { hasText: 'bob laptop' }).getAttribute('id');
  console.log(`passkey alice=${aliceKey} bob=${bobKey}`);
  // Only alice's passkey stays on the authenticator: the login page's button picks it.
  const bobCredential = (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials
    .find((c) => c.credentialId !== credentials[0].credentialId);
  await cdp.send('WebAuthn.removeCredential', { authenticatorId, credentialId: bobCredential.credentialId });
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL((u) => u.pathname === '/login');

  step = "alice's passkey answering with bob's user handle is refused";
  const swapped = await ceremonyIn(page, { allow: aliceCredential, tamper: { userHandle: bobHandle } });
  if (swapped.status !== 401 || swapped.json.reason !== 'verification_failed') throw new Error(`swapped handle: ${JSON.stringify(swapped)}`);
  console.log(`another user's handle: ${swapped.status} ${swapped.json.reason}`);

  step = 'an answer sent a second time is refused';
  const once = await ceremonyIn(page, { allow: aliceCredential });
  if (once.status !== 200) throw new Error(`a fresh sign-in: ${JSON.stringify(once)}`);
  const again = await post(once.body);
  if (again.status !== 401 || again.json.reason !== 'no_ceremony') throw new Error(`replayed: ${JSON.stringify(again)}`);
  console.log(`replayed: ${again.status} ${again.json.reason}`);

  step = 'a ceremony answered on another origin is refused';
  // The options from the login host; the authenticator answers on a project host of the same
  // name (same RP ID, another origin: this tab, where the virtual authenticator is); the answer
  // goes back to the login host.
  await context.clearCookies(); // the fresh sign-in above logged this browser in
  const { json: options } = await post({ do: 'sign-in-options' });
  await page.goto(`${elsewhere}/_gw/nothing-here`);
  const foreign = await page.evaluate(async ({ options, allow }) => {
    const dec = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0)).buffer;
    const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON(options);
    publicKey.allowCredentials = [{ type: 'public-key', id: dec(allow) }];
    publicKey.timeout = 10000;
    const answer = (await navigator.credentials.get({ publicKey })).toJSON();
    return { answer, origin: JSON.parse(atob(answer.response.clientDataJSON.replace(/-/g, '+').replace(/_/g, '/'))).origin };
  }, { options, allow: aliceCredential });
  if (foreign.origin !== elsewhere) throw new Error(`signed on ${foreign.origin}`);
  await page.goto(`${login}/login`);
  const fromThere = await post({ do: 'sign-in', credential: JSON.stringify(foreign.answer), ceremony: options.ceremony, next: '/' });
  if (fromThere.status !== 401 || fromThere.json.reason !== 'foreign_origin') throw new Error(`other origin: ${JSON.stringify(fromThere)}`);
  if (await page.evaluate(async () => (await fetch('/login', { redirect: 'manual' })).type === 'opaqueredirect')) throw new Error('signed in by a refused answer');
  console.log(`another origin (${foreign.origin}): ${fromThere.status} ${fromThere.json.reason}`);

  step = 'alice revokes her passkey on the portal';
  // The login page's button again, as a browser without the JSON helpers.
  await page.goto(`${login}/login`);
  if (!(await withoutHelpers())) throw new Error('the JSON helpers are still there');
  await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
  await page.waitForURL((u) => u.pathname === '/', { timeout: 15000 });
  await page.locator(`li#${aliceKey}`).getByRole('button', { name: 'Revoke' }).click();
  await page.waitForURL((u) => u.searchParams.get('done') === 'passkey_removed');
  if (await page.locator(`li#${aliceKey}`).count()) throw new Error('the revoked passkey is still listed');

  step = "the revoked passkey's next sign-in is refused";
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL((u) => u.pathname === '/login');
  // The authenticator still holds it: the gateway, not the authenticator, is what refuses.
  const revoked = await ceremonyIn(page, { allow: aliceCredential });
  if (revoked.status !== 401 || revoked.json.reason !== 'revoked_passkey') throw new Error(`revoked: ${JSON.stringify(revoked)}`);
  console.log(`revoked: ${revoked.status} ${revoked.json.reason}`);
  await shot('revoked');

  console.log('ok: every step passed');
} catch (e) {
  console.error(`failed at step "${step}": ${e.stack || e}`);
  const said = await page.locator('#passkey-error').allTextContents().catch(() => []);
  if (said.join('').trim()) console.error(`the page said: ${said.join(' ')} (${await page.locator('#passkey-error').getAttribute('title').catch(() => '')})`);
  await shot('failure').catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
