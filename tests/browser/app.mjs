// The control room as an installable app (issue 26) in headless Chromium with a phone's viewport:
// log in → the page registers the service worker, which takes the page → Chromium's own
// installability check (DevTools protocol `Page.getInstallabilityErrors`) finds no error and
// reads the manifest (`Page.getAppManifest`) → offline (`Network.emulateNetworkConditions` through
// the context), the control room and the inbox open the gateway's offline page, not Chromium's
// error page → the worker's cache holds the app shell and no page → back online, the offline page
// returns to the page asked for on its own. The worker's push handler, given a message through
// `ServiceWorker.deliverPushMessage`, shows a notification naming project and tool that opens
// the inbox (whatever URL the message names). Run by tests/integration/app.rs; exits non-zero naming
// the failed step. Issue 38: the offline page says why within seconds; notifications denied give
// the iOS and Android steps; "Notify me" without a push service ends with a message; logged out is
// said; the same profile relaunched without trusting the gateway's certificate names the
// certificate and the CA page; the gateway stopped (SIGTERM to GW_PID), the same app says it
// cannot reach it. Env: GW_PORT, CERT, SHOT_DIR, GW_PID.
import { env, launchPersistent, launchPersistentUntrusting } from './chromium.mjs';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const [port, certPath, shots, gwPid] = ['GW_PORT', 'CERT', 'SHOT_DIR', 'GW_PID'].map(env);
const login = `https://gw.localhost:${port}`;

let step = 'launch';
// A profile of its own (an incognito context is never installable), removed at the end.
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ocgw-app-'));
const device = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };
let phone = await launchPersistent(certPath, profile, device);
let page = phone.pages()[0] || await phone.newPage();
const shot = (name) => page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
const bounded = async (what, ms, check) => {
  const until = Date.now() + ms;
  for (;;) {
    const got = await check();
    if (got) return got;
    if (Date.now() > until) throw new Error(`${what} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
};

try {
  step = 'log in with the form';
  await page.goto(`${login}/login`);
  await page.locator('input[name=user]').fill('alice');
  await page.locator('input[name=password]').fill('alice-password-1');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL((u) => u.pathname === '/');

  step = 'the service worker takes the page';
  const scope = await page.evaluate(() => navigator.serviceWorker.ready.then((r) => r.scope));
  if (scope !== `${login}/`) throw new Error(`scope ${scope}`);
  await bounded('the page controlled by the worker', 10000, () => page.evaluate(() => !!navigator.serviceWorker.controller));

  step = "Chromium's installability check";
  const cdp = await phone.newCDPSession(page);
  const { installabilityErrors } = await cdp.send('Page.getInstallabilityErrors');
  if (installabilityErrors.length) throw new Error(`installability errors: ${JSON.stringify(installabilityErrors)}`);
  const manifest = await cdp.send('Page.getAppManifest');
  if (manifest.errors.length) throw new Error(`manifest errors: ${JSON.stringify(manifest.errors)}`);
  const data = JSON.parse(manifest.data);
  if (manifest.url !== `${login}/_gw/static/manifest.webmanifest`) throw new Error(`manifest at ${manifest.url}`);
  if (data.display !== 'standalone' || data.start_url !== '/' || data.short_name !== 'OpenCode') {
    throw new Error(`manifest ${manifest.data}`);
  }
  const sizes = data.icons.map((i) => i.sizes);
  for (const s of ['192x192', '512x512']) if (!sizes.includes(s)) throw new Error(`no ${s} icon: ${sizes}`);
  console.log(`installable: manifest ${manifest.url}, icons ${sizes.join(' ')}`);

  step = 'the portal offers push notifications on this device';
  await page.locator('#push-on').waitFor({ state: 'visible', timeout: 10000 });
  await shot('portal');

  step = "a push message shows a notification that names project and tool (the worker's push handler)";
  await phone.grantPermissions(['notifications'], { origin: login });
  const registrations = [];
  const versions = new Map();
  cdp.on('ServiceWorker.workerRegistrationUpdated', (e) => registrations.push(...e.registrations));
  cdp.on('ServiceWorker.workerVersionUpdated', (e) => e.versions.forEach((v) => versions.set(v.versionId, v)));
  await cdp.send('ServiceWorker.enable');
  const reg = await bounded('the worker registration', 10000, () => registrations.find((r) => r.scopeURL === `${login}/` && !r.isDeleted));
  // One delivery, to a worker that is activated and running, on a page whose permission is
  // granted: then exactly one notification must show.
  await cdp.send('ServiceWorker.startWorker', { scopeURL: reg.scopeURL });
  await bounded('an activated, running worker', 10000, () => [...versions.values()]
    .find((v) => v.registrationId === reg.registrationId && v.status === 'activated' && v.runningStatus === 'running'));
  await bounded('the notification permission', 5000, () => page.evaluate(() => Notification.permission === 'granted'));
  const notifications = () => page.evaluate(() => navigator.serviceWorker.ready
    .then((r) => r.getNotifications()).then((all) => all.map((n) => ({ title: n.title, body: n.body, url: n.data && n.data.url }))));
  // A second delivery only when the first showed nothing in 10 s: Chromium dropped one now and
  // then on a loaded machine (CI, and 2 of 6 runs beside other builds), the worker's handler
  // untouched. Both carry the same tag, so a slow first one and the second still make one; a
  // worker that shows nothing still fails.
  let shown = null;
  for (let delivery = 1; delivery <= 2 && !shown; delivery += 1) {
    await cdp.send('ServiceWorker.deliverPushMessage', {
      origin: login, registrationId: reg.registrationId,
      data: JSON.stringify({ title: 'demo waits for you', body: 'demo: permission to use bash', url: 'https://evil.example/' }),
    });
    shown = await bounded('a notification', 10000, async () => {
      const ns = await notifications();
      return ns.length ? ns : null;
    }).catch((e) => { if (delivery === 2) throw e; console.log(`delivery ${delivery}: no notification within 10 s`); return null; });
  }
  if (shown.length !== 1) throw new Error(`one delivery, ${shown.length} notifications: ${JSON.stringify(shown)}`);
  const n = shown[0];
  if (n.title !== 'OpenCode: demo waits for you' || n.body !== 'demo: permission to use bash') throw new Error(`shown: ${JSON.stringify(shown)}`);
  // Whatever the message says, a tap opens the gateway's own inbox.
  if (n.url !== '/inbox') throw new Error(`the notification opens ${n.url}`);
  console.log(`notification: ${n.title} / ${n.body}`);

  step = 'offline: the control room and the inbox open the offline page';
  await phone.setOffline(true);
  for (const path of ['/', '/inbox']) {
    const r = await page.goto(`${login}${path}`);
    if (!(await page.locator('#offline').count())) throw new Error(`${path} offline shows ${await page.locator('h1').first().textContent()} (${r && r.status()})`);
    // It says why, in words, within seconds (issue 38: "Offline, reconnecting" forever). An
    // emulated offline network leaves `navigator.onLine` true in Chromium, and every connection
    // fails at once, the plain-HTTP port's too: as for a gateway that is not running.
    const state = await bounded(`${path}: the reason in words`, 5000, () => page.locator('#state').textContent()
      .then((t) => (/This device is offline|Cannot reach the gateway: nothing answered/.test(t) ? t : null)));
    console.log(`offline page: ${state}`);
  }
  await shot('offline');

  step = 'the cache holds the app shell and no page';
  const cached = await page.evaluate(async () => {
    const out = [];
    for (const k of await caches.keys()) {
      for (const r of await (await caches.open(k)).keys()) out.push(new URL(r.url).pathname);
    }
    return out.sort();
  });
  if (!cached.length || cached.some((p) => !p.startsWith('/_gw/static/'))) throw new Error(`cached: ${cached}`);
  console.log(`cached: ${cached.join(' ')}`);

  step = 'back online, the offline page returns to the page asked for';
  await phone.setOffline(false);
  await bounded('the inbox again', 30000, () => page.evaluate(() => !document.getElementById('offline') && location.pathname === '/inbox')
    .catch(() => false));
  if (!(await page.content()).includes('/_gw/static/app.js')) throw new Error('not the inbox page');
  await shot('back');

  step = 'notifications blocked for the site: the portal says how to allow them on iOS and Android';
  await cdp.send('Browser.setPermission', { origin: login, permission: { name: 'notifications' }, setting: 'denied' });
  await page.goto(`${login}/`);
  const blocked = await bounded('the steps to allow notifications', 5000, () => page.locator('#push-state').textContent()
    .then((t) => (/blocked/.test(t) && /iPhone or iPad/.test(t) && /Android/.test(t) ? t : null)));
  console.log(`blocked: ${blocked}`);
  await cdp.send('Browser.setPermission', { origin: login, permission: { name: 'notifications' }, setting: 'granted' });

  step = '"Notify me on this device" where the browser has no push service ends with a message';
  await page.goto(`${login}/`);
  await page.locator('#push-on').waitFor({ state: 'visible', timeout: 10000 });
  await page.locator('#push-on').click();
  const pushSaid = await bounded('a message about push', 15000, () => page.locator('#push-state').textContent()
    .then((t) => (/has no push service here/.test(t) ? t : null)));
  console.log(`push without a push service: ${pushSaid}`);

  step = 'logged out: the offline page says so, not "reconnecting"';
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.waitForURL((u) => u.pathname === '/login');
  await page.goto(`${login}/_gw/static/offline.html`);
  const out = await bounded('"logged out" on the offline page', 5000, () => page.locator('#state').textContent()
    .then((t) => (/logged out/i.test(t) ? t : null)).catch(() => null));
  console.log(`logged out: ${out}`);

  step = 'the certificate no longer trusted: the installed app names the certificate and the CA page';
  await phone.close();
  phone = await launchPersistentUntrusting(profile, device);
  page = phone.pages()[0] || await phone.newPage();
  await page.goto(`${login}/`).catch((e) => { throw new Error(`not the offline page: ${e.message}`); });
  const cert = await bounded('the certificate named on the offline page', 8000, () => page.locator('#state').textContent()
    .then((t) => (/certificate is not trusted here/.test(t) ? t : null)).catch(() => null));
  if (!/http:\/\/gw\.localhost:\d+\/ca/.test(cert)) throw new Error(`no CA page address in: ${cert}`);
  console.log(`certificate: ${cert}`);
  await shot('certificate');

  step = 'the gateway stopped: the same app says it cannot reach the gateway';
  process.kill(Number(gwPid), 'SIGTERM');
  const refuses = () => new Promise((done) => {
    const s = net.connect(Number(port), '127.0.0.1');
    s.on('connect', () => { s.destroy(); done(false); });
    s.on('error', () => done(true));
  });
  await bounded('the gateway to stop listening', 30000, refuses);
  await page.goto(`${login}/`);
  const stopped = await bounded('"cannot reach" on the offline page', 8000, () => page.locator('#state').textContent()
    .then((t) => (/Cannot reach the gateway: nothing answered/.test(t) ? t : null)).catch(() => null));
  console.log(`stopped: ${stopped}`);

  console.log('ok: every step passed');
} catch (e) {
  console.error(`failed at step "${step}": ${e.stack || e}`);
  await shot('failure').catch(() => {});
  process.exitCode = 1;
} finally {
  await phone.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
