// Port mode (issue 22, LAN) in headless Chromium against a real OpenCode server the gateway runs
// (project alpha, on a port of its own; no base domain): a form login on the main port → the
// portal's link opens alpha's web UI on its port without a second login → pages on a sibling port
// of the same host (the same *site*: ports do not separate sites, and browsers share cookies
// between ports) cannot act with alpha's cookie or the login's: a form post to the control room,
// a credentialed fetch writing to alpha, a WebSocket to alpha, and overwriting alpha's cookie from
// script all fail → alpha's web UI still works afterwards. Run by tests/integration/phone.rs;
// exits non-zero naming the failed step. Env: GW_PORT, ALPHA_PORT, CERT, KEY, ALPHA_DIR, SHOT_DIR.
import { env, launch, playwright } from './chromium.mjs';
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

let step = 'launch';
const browser = await launch(certPath);
const api = await request.newContext({ ignoreHTTPSErrors: true, extraHTTPHeaders: { authorization: basic('alice', 'alice-password-1') } });
const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
const page = await phone.newPage();
const sessions = async () => (await (await api.get(`${login}/p/alpha/session?directory=${encodeURIComponent(alphaDir)}`)).json()).length;

try {
  step = 'log in with the form on the main port';
  await page.goto(`${login}/login`);
  await page.locator('input[name=user]').fill('alice');
  await page.locator('input[name=password]').fill('alice-password-1');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL((u) => u.pathname === '/' && u.port === port);

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
  const ws = await evil.evaluate((url) => new Promise((done) => {
    const s = new WebSocket(url);
    s.onopen = () => done('open');
    s.onerror = () => done('error');
    setTimeout(() => done('timeout'), 10000);
  }), `wss://127.0.0.1:${alphaPort}/pty/pty_x/connect?directory=${encodeURIComponent(alphaDir)}`);
  if (ws !== 'error') throw new Error(`a cross-port WebSocket: ${ws}`);

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
