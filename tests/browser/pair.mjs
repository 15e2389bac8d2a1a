// Pairing a phone in headless Chromium (phone viewport, touch): open the QR code's URL
// (`/pair#<code>`), let the page's script take the code from the fragment, wipe it and submit;
// then check the cookie the browser kept, that the code never left the browser in a URL or a
// Referer, and that the fragment is not in the history.
// Run by tests/integration/pairing.rs; exits non-zero with the failed step's name.
// Env: PAIR_URL (with the fragment), CERT.
import { env, launch } from './chromium.mjs';
import fs from 'node:fs';

const [pairUrl, certPath] = ['PAIR_URL', 'CERT'].map(env);
const code = decodeURIComponent(new URL(pairUrl).hash.slice(1));
const secret = code.slice(5);


let step = 'launch';
const browser = await launch(certPath);
const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
const page = await context.newPage();
const leaks = [];
page.on('request', (r) => {
  const referer = r.headers()['referer'] || '';
  if (r.url().includes(secret) || referer.includes(secret)) leaks.push(`${r.method()} ${r.url()} referer=${referer}`);
});
try {
  step = 'open the pairing link';
  const posted = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/pair', { timeout: 30000 });
  await page.goto(pairUrl);

  step = 'the page posts the code by itself';
  const resp = await posted;
  const form = resp.request().postData() || '';
  if (!form.startsWith('code=')) throw new Error(`posted ${JSON.stringify(form)}`);
  if (resp.status() !== 303) throw new Error(`POST /pair answered ${resp.status()}`);
  await page.waitForURL((u) => u.pathname === '/', { timeout: 30000 });

  step = 'the browser keeps a persistent __Host- cookie';
  const cookies = await context.cookies();
  const c = cookies.find((k) => k.name === '__Host-ocgw');
  if (!c) throw new Error(`no __Host-ocgw cookie: ${JSON.stringify(cookies.map((k) => k.name))}`);
  if (!c.secure || !c.httpOnly || c.sameSite !== 'Lax' || c.path !== '/') throw new Error(`attributes: ${JSON.stringify(c)}`);
  if (!(c.expires > Date.now() / 1000 + 30 * 86400)) throw new Error(`not persistent: expires ${c.expires}`);
  console.log(`cookie ${c.name} secure=${c.secure} httpOnly=${c.httpOnly} sameSite=${c.sameSite} expires_in_days=${Math.round((c.expires - Date.now() / 1000) / 86400)}`);

  step = 'the fragment is gone from the history';
  // Back from `/`: wherever that lands (`/pair` without its fragment, or nowhere when the
  // browser replaced the entry with the submission's), the code is not there.
  await page.goBack();
  if (page.url().includes('#') || page.url().includes(secret)) throw new Error(`history holds ${page.url()}`);
  console.log(`back from / lands on ${page.url()}`);

  step = 'logged in: /login sends the browser on';
  const login = await page.goto(new URL('/login', pairUrl).href);
  if (new URL(login.url()).pathname !== '/') throw new Error(`/login stayed at ${login.url()}`);

  step = 'the code never left the browser in a URL or a Referer';
  if (leaks.length) throw new Error(leaks.join('\n'));
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
