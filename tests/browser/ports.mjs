// Port mode (issue 22, LAN) in headless Chromium against a real OpenCode server the gateway runs
// (project alpha, on a port of its own; no base domain): a form login on the main port → the
// portal's link opens alpha's web UI on its port without a second login → pages on a sibling port
// of the same host (the same *site*: ports do not separate sites, and browsers share cookies
// between ports) cannot act with alpha's cookie or the login's: a form post to the control room,
// a credentialed fetch writing to alpha, a WebSocket to alpha, and overwriting alpha's cookie from
// script all fail → alpha's web UI still works afterwards → login CSRF from a sibling port: bob
// (a user of alpha too) plants, by script on the sibling port, into a second phone where alice is
// logged in, first the state of a handoff he began with his ticket (the callback refuses it and
// sets no cookie), then his own alpha cookie (alpha sends alice's browser through a handoff of its
// own instead of serving it as bob). Run by tests/integration/phone.rs; exits non-zero naming the
// failed step. Env: GW_PORT, ALPHA_PORT, CERT, KEY, ALPHA_DIR, SHOT_DIR.
import { env, launch, playwright, realTerminal, wsFrom } from './chromium.mjs';
import fs from 'node:fs';
import https from 'node:https';

const { request } = playwright;
const [port, alphaPort, certPath, alphaDir, shots] = ['GW_PORT', 'ALPHA_PORT', 'CERT', 'ALPHA_DIR', 'SHOT_DIR'].map(env);
const login = `https://127.0.0.1:${port}`;
const alpha = `https://127.0.0.1:${alphaPort}`;
const basic = (u, p) => `Basic ${Buffer.from(`${u}:${p}`).toString('base64')}`;

// The attacker's sibling port: same host, another port, the gateway's own certificate (as a
// project's web UI on another port would be).
const page_ = (body) => `<!doctype html><title>sibling</title>${body}`;
const sibling = https.createServer({ key: fs.readFileSync(env('KEY')), cert: fs.readFileSync(certPath) }, (req, res) => {
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end(page_(req.url === '/act'
    ? `<form id=f method=post action="${login}/_gw/act"><input name=project value=alpha><input name=id value=x><input name=do value=once></form><script>document.getElementById('f').submit()</script>`
    : '<p>ready</p>'));
});
await new Promise((r) => sibling.listen(0, '127.0.0.1', r));
const evilOrigin = `https://127.0.0.1:${sibling.address().port}`;

// bob is the attacker: he scripts his own half of a handoff over plain HTTPS (no browser), reading
// what a browser would hide from scripts but shows its own user.
const raw = (url, { cookie, form } = {}) => new Promise((done, fail) => {
  const headers = { accept: 'text/html', 'sec-fetch-mode': 'navigate', ...(cookie ? { cookie } : {}) };
  if (form) Object.assign(headers, { 'content-type': 'application/x-www-form-urlencoded', origin: login });
  const req = https.request(url, { method: form ? 'POST' : 'GET', headers, rejectUnauthorized: false }, (res) => {
    res.resume();
    res.on('end', () => done(res));
  });
  req.on('error', fail);
  req.end(form);
});
const setCookie = (res, name) => {
  const pair = (res.headers['set-cookie'] || []).map((c) => c.split(';')[0]).find((c) => c.startsWith(`${name}=`));
  if (!pair) throw new Error(`no ${name} in a ${res.statusCode} answer`);
  return pair;
};
/// bob's handoff to alpha up to the ticket: his state cookie pair and the callback URL.
const bobBegins = async (bobLogin) => {
  const a = await raw(`${alpha}/`);
  const state = setCookie(a, '__Host-ocgw-handoff-p-alpha');
  const b = await raw(a.headers.location, { cookie: bobLogin });
  if (b.statusCode !== 303) throw new Error(`bob's handoff: ${b.statusCode}`);
  return { state, callback: b.headers.location };
};

const logIn = async (p, user, password) => {
  await p.goto(`${login}/login`);
  await p.locator('input[name=user]').fill(user);
  await p.locator('input[name=password]').fill(password);
  await p.getByRole('button', { name: 'Log in' }).click();
  await p.waitForURL((u) => u.pathname === '/' && u.port === port);
};

let step = 'launch';
const browser = await launch(certPath);
const api = await request.newContext({ ignoreHTTPSErrors: true, extraHTTPHeaders: { authorization: basic('alice', 'alice-password-1') } });
const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
const page = await phone.newPage();
const sessions = async () => (await (await api.get(`${login}/p/alpha/session?directory=${encodeURIComponent(alphaDir)}`)).json()).length;

try {
  step = 'log in with the form on the main port';
  await logIn(page, 'alice', 'alice-password-1');

  step = "the portal links alpha's web UI on its own port";
  const href = await page.locator(`a[href^="${alpha}"]`).first().getAttribute('href');
  if (!href) throw new Error(`no link to ${alpha} on the portal`);

  step = "alpha's web UI opens on its port without a second login";
  await page.goto(href);
  await page.waitForURL((u) => u.port === alphaPort && !u.pathname.startsWith('/_gw'), { timeout: 15000 });
  if (new URL(page.url()).pathname === '/login') throw new Error('a second login was asked for');
  // OpenCode's own app answered (its HTML, not a gateway page), with the port's own cookie.
  const cookies = await phone.cookies(alpha);
  const names = cookies.map((c) => c.name).sort();
  if (!names.includes('__Host-ocgw-p-alpha')) throw new Error(`no port cookie: ${names}`);
  const ownFetch = () => page.evaluate((d) => fetch(`/session?directory=${encodeURIComponent(d)}`).then((x) => x.status), alphaDir);
  const status = await ownFetch();
  if (status !== 200) throw new Error(`the web UI's own API call: ${status}`);
  await page.screenshot({ path: `${shots}/1-alpha-on-its-port.png` });
  const before = await sessions();

  step = 'a sibling port cannot post to the control room with the login cookie';
  const evil = await phone.newPage();
  const answered = evil.waitForResponse((x) => x.url() === `${login}/_gw/act`);
  await evil.goto(`${evilOrigin}/act`);
  const act = await answered;
  if (act.status() !== 403) throw new Error(`a form post from a sibling port: ${act.status()}`);

  step = "a sibling port cannot write to alpha with alpha's cookie";
  await evil.goto(`${evilOrigin}/`);
  const wrote = await evil.evaluate(async (url) => {
    // A "simple" request: no preflight, the cookies of the host go along (same site).
    const x = await fetch(url, { method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'content-type': 'text/plain' }, body: '{}' }).catch((e) => String(e));
    return typeof x === 'string' ? x : x.type;
  }, `${alpha}/session?directory=${encodeURIComponent(alphaDir)}`);
  console.log(`sibling fetch: ${wrote}`);
  if ((await sessions()) !== before) throw new Error('a sibling port created a session in alpha');

  step = 'a WebSocket from a sibling port cannot use alpha\'s cookie';
  // A real terminal of alpha: the same URL opens from alpha's own page.
  const pty = await realTerminal(api, `${login}/p/alpha`, alphaDir);
  const ptyUrl = `wss://127.0.0.1:${alphaPort}/pty/${pty}/connect?directory=${encodeURIComponent(alphaDir)}`;
  const ws = await wsFrom(evil, ptyUrl);
  if (ws !== 'error') throw new Error(`a cross-port WebSocket: ${ws}`);
  const own = await wsFrom(page, ptyUrl);
  if (own !== 'open') throw new Error(`alpha's own WebSocket to its terminal: ${own}`);

  step = "script on a sibling port cannot overwrite alpha's HttpOnly cookie";
  const real = (await phone.cookies(alpha)).find((c) => c.name === '__Host-ocgw-p-alpha').value;
  await evil.evaluate(() => { document.cookie = '__Host-ocgw-p-alpha=forged; Secure; Path=/; SameSite=Lax'; });
  const after = (await phone.cookies(alpha)).filter((c) => c.name === '__Host-ocgw-p-alpha').map((c) => c.value);
  if (after.length !== 1 || after[0] !== real) throw new Error(`alpha's cookie after the toss: ${after}`);
  await evil.close();

  step = "alpha's web UI still works without a login";
  await page.goto(`${alpha}/`);
  await page.waitForURL((u) => u.port === alphaPort && !u.pathname.startsWith('/_gw') && u.pathname !== '/login', { timeout: 15000 });
  const again = await ownFetch();
  if (again !== 200) throw new Error(`after the attacks: ${again}`);

  step = 'bob begins two handoffs to alpha, finishes one';
  const bobLogin = setCookie(await raw(`${login}/login`, { form: 'user=bob&password=bob-password-22&next=%2F' }), '__Host-ocgw');
  const half = await bobBegins(bobLogin);
  const whole = await bobBegins(bobLogin);
  const bobsPort = setCookie(await raw(whole.callback, { cookie: `${bobLogin}; ${whole.state}` }), '__Host-ocgw-p-alpha');

  step = 'a second phone: alice logged in, not yet on alpha';
  const victim = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const vpage = await victim.newPage();
  await logIn(vpage, 'alice', 'alice-password-1');
  const sib = await victim.newPage();
  await sib.goto(`${evilOrigin}/`);
  const plant = async (pair) => {
    await sib.evaluate((c) => { document.cookie = `${c}; Secure; Path=/; SameSite=Lax`; }, pair);
    const [name, value] = pair.split('=');
    // The premise: Chromium takes a __Host- cookie from a sibling port's script for every port.
    if (!(await victim.cookies(alpha)).some((c) => c.name === name && c.value === value)) throw new Error(`${name} was not planted`);
  };

  step = "a sibling port plants bob's handoff state and sends alice's browser to his ticket";
  await plant(half.state);
  const callback = await sib.goto(half.callback);
  if (callback.status() !== 403) throw new Error(`bob's ticket in alice's browser: ${callback.status()}`);
  if ((await victim.cookies(alpha)).some((c) => c.name === '__Host-ocgw-p-alpha')) throw new Error('a port cookie was set');

  step = "a sibling port plants bob's own alpha cookie; alpha hands alice's browser a cookie of her own";
  await sib.goto(`${evilOrigin}/`);
  await plant(bobsPort);
  await vpage.goto(`${alpha}/`);
  await vpage.waitForURL((u) => u.port === alphaPort && !u.pathname.startsWith('/_gw'), { timeout: 15000 });
  const mine = (await victim.cookies(alpha)).filter((c) => c.name === '__Host-ocgw-p-alpha');
  if (mine.length !== 1 || `__Host-ocgw-p-alpha=${mine[0].value}` === bobsPort) throw new Error("alice's browser is bob on alpha");
  await victim.close();
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  await page.screenshot({ path: `${shots}/failed.png` }).catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
  await api.dispose();
  sibling.close();
}
