// The phone control room in headless Chromium with a phone's viewport and touch, against two
// real OpenCode servers the gateway runs (projects alpha and beta) and the fake model:
// pair with a code from `opencode-gateway pair` → the portal lists both projects → a prompt asks
// for bash → the card comes to the open /inbox by itself → "Allow once" (tapped) runs the tool → a
// request answered through the API instead disappears as "answered elsewhere" → a viewer sees a
// card but may not answer it, a user of beta never sees alpha → pages on a sibling host and on
// another site cannot act with the phone's cookie (form post, WebSocket) → a revoked device gets
// the login page. Run by tests/integration/phone.rs; exits non-zero naming the failed step.
// Env: GW_PORT, BASE_DOMAIN, CERT, BIN, CONFIG, ALPHA_DIR, SHOT_DIR. The base domain is under a real
// public suffix (gw.example.com, mapped to 127.0.0.1 in Chromium), so that sibling hosts are the same
// *site* as they are in production (Chromium treats *.localhost names as sites of their own).
import { env, launch, playwright, realTerminal, wsFrom } from './chromium.mjs';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';

const { request } = playwright;
const [port, domain, certPath, bin, config, alphaDir, shots] = ['GW_PORT', 'BASE_DOMAIN', 'CERT', 'BIN', 'CONFIG', 'ALPHA_DIR', 'SHOT_DIR'].map(env);
const login = `https://${domain}:${port}`;
const alphaHost = `https://alpha.${domain}:${port}`;

// Node does not resolve *.localhost names: scripts reach the gateway by its address.
const direct = `https://127.0.0.1:${port}`;
const basic = (u, p) => `Basic ${Buffer.from(`${u}:${p}`).toString('base64')}`;
const cli = (...args) => execFileSync(bin, [...args, '-c', config], { encoding: 'utf8' });


// A sibling host an attacker controls (as OpenCode's web UI on another project's host would be):
// served from this machine, like every project host, with the gateway's own wildcard certificate.
const attack = (id) => `<!doctype html><form id=f method=post action="${login}/_gw/act">
  <input name=project value=alpha><input name=id value="${id}"><input name=do value=once></form>
  <script>document.getElementById('f').submit()</script>`;
// The same, for the portal's restart button.
const attackRestart = `<!doctype html><form id=f method=post action="${login}/_gw/restart">
  <input name=project value=alpha></form><script>document.getElementById('f').submit()</script>`;
// Where the portal's project link goes: the project's sessions in OpenCode's web UI.
const alphaSessions = `${alphaHost}/${Buffer.from(alphaDir).toString('base64url')}/session`;
let attackId = '';
const sibling = https.createServer({ key: fs.readFileSync(env('KEY')), cert: fs.readFileSync(certPath) }, (req, res) => {
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end(req.url === '/ws' ? '<!doctype html><p>ws</p>' : attack(attackId));
});
await new Promise((r) => sibling.listen(0, '127.0.0.1', r));
const evilSibling = `https://evil.${domain}:${sibling.address().port}`;

const phoneProfile = {
  viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true,
  userAgent: 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36',
};

let step = 'launch';
const browser = await launch(certPath, [`--host-resolver-rules=MAP ${domain} 127.0.0.1, MAP *.${domain} 127.0.0.1`]);
const api = await request.newContext({ ignoreHTTPSErrors: true, extraHTTPHeaders: { authorization: basic('alice', 'alice-password-1') } });
const phone = await browser.newContext(phoneProfile);
const page = await phone.newPage();
const shot = (name, p = page) => p.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
// A finger needs 44 px (issue 22: session links and disclosure rows were 19-23 px tall).
const tapTargets = async (where) => {
  const small = await page.$$eval('a, button, summary', (els) => els
    .filter((e) => e.offsetParent !== null)
    .map((e) => [e.textContent.trim().slice(0, 40), Math.round(e.getBoundingClientRect().height)])
    .filter(([, h]) => h < 44));
  if (small.length) throw new Error(`tap targets under 44 px on ${where}: ${JSON.stringify(small)}`);
  console.log(`${where}: every tap target is at least 44 px tall`);
};
// The header on one line, and nothing wider than a 360 px screen (issue 22: the header wrapped).
const fitsNarrow = async (where) => {
  await page.setViewportSize({ width: 360, height: 740 });
  const seen = await page.evaluate(() => ({
    bar: document.querySelector('.bar').getBoundingClientRect().height,
    wide: document.documentElement.scrollWidth,
  }));
  await page.setViewportSize(phoneProfile.viewport);
  if (seen.bar > 60 || seen.wide > 360) throw new Error(`${where} at 360 px: header ${seen.bar} px tall, page ${seen.wide} px wide`);
  console.log(`${where} at 360 px: header ${seen.bar} px tall, page ${seen.wide} px wide`);
};
// Looks at the tester's 390 px (issue 38): the header's name whole (not clipped by an ellipsis),
// "Log out" on one line, and every "…" that opens a choice (a summary) drawn as a button.
const looks = async (where) => {
  const seen = await page.evaluate(() => {
    const brand = document.querySelector('.bar .brand');
    const out = document.querySelector('.bar button.link');
    const r = document.createRange();
    r.selectNodeContents(out);
    const lines = new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size;
    const plain = [...document.querySelectorAll('details > summary')].filter((e) => e.offsetParent !== null)
      .filter((e) => { const c = getComputedStyle(e); return parseFloat(c.borderTopWidth) === 0 && c.backgroundColor === 'rgba(0, 0, 0, 0)'; })
      .map((e) => e.textContent.trim());
    return { brand: [brand.scrollWidth, brand.clientWidth], lines, plain };
  });
  if (seen.brand[0] > seen.brand[1]) throw new Error(`${where}: the name is clipped (${seen.brand[0]} px in ${seen.brand[1]} px)`);
  if (seen.lines !== 1) throw new Error(`${where}: "Log out" on ${seen.lines} lines`);
  if (seen.plain.length) throw new Error(`${where}: summaries drawn as plain text: ${JSON.stringify(seen.plain)}`);
  console.log(`${where} at 390 px: the name whole, "Log out" on one line, every summary a button`);
};
const until = async (what, ms, probe) => {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
};
const pending = async () => (await (await api.get(`${direct}/p/alpha/permission`)).json()).map((p) => p.id);
const idle = async (session) => {
  const s = await (await api.get(`${direct}/p/alpha/session/status`)).json();
  return !s[session] || s[session].type === 'idle';
};
const prompt = async (session, text) => {
  const r = await api.post(`${direct}/p/alpha/session/${session}/prompt_async`, { data: { parts: [{ type: 'text', text }] } });
  if (r.status() !== 204) throw new Error(`prompt_async: ${r.status()} ${await r.text()}`);
};
const ranLines = () => { try { return fs.readFileSync(`${alphaDir}/ran.txt`, 'utf8').trim().split('\n').length; } catch { return 0; } };
const pair = (user, label) => {
  const out = cli('pair', user, '--label', label);
  const code = out.match(/\b[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}\b/);
  if (!code) throw new Error(`no code in the pair output:\n${out}`);
  if (!/[▀▄█]/.test(out)) throw new Error(`no QR code in the pair output:\n${out}`);
  return code[0];
};
const loginAs = async (ctx, user, pass) => {
  const p = await ctx.newPage();
  await p.goto(`${login}/login`);
  await p.locator('input[name=user]').fill(user);
  await p.locator('input[name=password]').fill(pass);
  await p.getByRole('button', { name: 'Log in' }).click();
  await p.waitForURL((u) => u.pathname === '/');
  return p;
};

try {
  step = 'pair the phone with a code from `opencode-gateway pair`';
  const code = pair('alice', "Alice's phone");
  await page.goto(`${login}/pair#${code}`);
  await page.waitForURL((u) => u.pathname === '/', { timeout: 15000 });
  if (page.url().includes(code) || page.url().includes('#')) throw new Error(`the code stayed in the URL: ${page.url()}`);
  const paired = await page.locator('p[role=status]').first().innerText();
  if (!paired.includes('This device is paired')) throw new Error(`no pairing confirmation: ${paired}`);
  const history = await page.evaluate(() => history.length);
  step = 'a pairing code works once';
  const second = await browser.newContext(phoneProfile);
  const p2 = await second.newPage();
  await p2.goto(`${login}/pair#${code}`);
  await p2.waitForLoadState('networkidle');
  if (new URL(p2.url()).pathname === '/') throw new Error('a used pairing code logged a second phone in');
  step = 'an error says its command as code, without raw backticks';
  const error = p2.locator('#error');
  const errorText = await error.innerText();
  if (errorText.includes('`')) throw new Error(`raw backticks in the error: ${errorText}`);
  if ((await error.locator('code').innerText()) !== 'opencode-gateway pair <user>') throw new Error(`the command is not code: ${await error.innerHTML()}`);
  if (await error.evaluate((e) => !!e.closest('.badge'))) throw new Error('the error sits in a badge');
  await second.close();

  step = 'the portal lists both projects';
  for (const p of ['alpha', 'beta']) await page.locator(`[data-project=${p}]`).first().waitFor({ timeout: 10000 });
  await shot('1-portal');
  step = "a project's link opens its sessions in the web UI";
  const projectLink = await page.locator('[data-project=alpha] h2 a').first().getAttribute('href');
  if (projectLink !== alphaSessions) throw new Error(`alpha's link is ${projectLink}, not ${alphaSessions}`);
  await tapTargets('the portal');
  await fitsNarrow('the portal');
  await looks('the portal');

  step = 'a prompt in alpha asks for bash';
  const created = await api.post(`${direct}/p/alpha/session`, { data: {} });
  if (created.status() !== 200) throw new Error(`POST /session: ${created.status()} ${await created.text()}`);
  const session = (await created.json()).id;
  await page.locator(`[data-session="${session}"]`).waitFor({ timeout: 30000 });
  await page.goto(`${login}/inbox`);
  await page.locator('#empty').waitFor();
  await prompt(session, 'please RUNBASH from the phone test');

  step = 'the card comes to the open /inbox by itself';
  const [first] = await until('the permission request upstream', 60000, async () => (await pending()).length ? pending() : null);
  const listed = Date.now();
  // No reload: the live list brings it. How fast is a speed goal, printed here and not asserted
  // (a timed assertion failed CI on a loaded machine); the bound only says it came at all.
  await page.locator(`[data-card="${first}"]`).waitFor({ timeout: 15000 });
  console.log(`card latency after the upstream listed it: ${Date.now() - listed} ms`);
  const card = page.locator(`[data-card="${first}"]`);
  if (!(await card.innerText()).includes('bash')) throw new Error(`the card does not name the tool: ${await card.innerText()}`);
  if (!(await card.locator('pre').innerText()).includes('ran.txt')) throw new Error('the card does not show the command');
  if (!(await card.locator('h2').innerText()).startsWith('Run a command (bash)')) throw new Error(`the card's title is not in words: ${await card.locator('h2').innerText()}`);
  step = "the card's age counts up while the page is open";
  const counted = await until('the age to change on the page', 8000, () => page.evaluate(async (id) => {
    const el = document.querySelector(`[data-card="${id}"] [data-since]`);
    if (!el) return null;
    const before = el.textContent;
    await new Promise((r) => setTimeout(r, 2200));
    // The same element (not a refreshed copy of the card) shows a later age.
    return el.isConnected && el.textContent !== before ? [before, el.textContent] : null;
  }, first));
  console.log(`the age counted from ${counted[0]} to ${counted[1]}`);
  await tapTargets('the inbox');
  await fitsNarrow('the inbox');
  await looks('the inbox');
  // The patterns as a list, one item each (they read as one command when run together).
  const patterns = await card.evaluate((c) => {
    const list = c.querySelector('ul.patterns');
    return list ? [...list.children].map((li) => li.tagName + ':' + li.textContent.trim()) : null;
  });
  if (!patterns || !patterns.length || patterns.some((p) => !p.startsWith('LI:'))) throw new Error(`the patterns are not a list: ${JSON.stringify(patterns)} in ${await card.innerHTML()}`);
  console.log(`patterns: ${patterns.join(' | ')}`);
  await shot('2-inbox');

  step = 'tap "Allow once": the tool runs and the card goes';
  await card.locator('button[value=once]').tap();
  await page.waitForURL((u) => u.searchParams.get('done') === 'once', { timeout: 15000 });
  const told = await page.locator('#flash').innerText();
  if (!told.startsWith('Allowed once: echo RAN >> ran.txt')) throw new Error(`the notice does not say what was answered: ${told}`);
  await page.locator(`[data-card="${first}"]`).waitFor({ state: 'detached', timeout: 10000 });
  step = 'one notice for the answer';
  // The live list is refreshed when the request's reply event comes: the answer is not said twice.
  // Awaited: upstream has no such request any more, and the page shows what the gateway renders
  // now (ages, which the page counts itself, left out).
  await until('the page to show the answered state', 15000, async () => {
    if ((await pending()).includes(first)) return null;
    return page.evaluate(async () => {
      const live = document.getElementById('live');
      const fresh = document.createElement('div');
      fresh.innerHTML = await (await fetch(live.dataset.src, { credentials: 'same-origin' })).text();
      const shown = live.cloneNode(true);
      const norm = (root) => { root.querySelectorAll('[data-since]').forEach((e) => { e.textContent = ''; }); return root.innerHTML; };
      return norm(shown) === norm(fresh);
    });
  });
  const notices = await page.locator('.note').allInnerTexts();
  if (notices.length !== 1 || notices.some((n) => n.includes('answered here'))) throw new Error(`notices: ${JSON.stringify(notices)}`);
  await until('the tool wrote ran.txt', 60000, async () => ranLines() === 1);
  await shot('3-allowed');

  step = 'a request answered elsewhere disappears with a note';
  await until('the session is idle', 60000, () => idle(session));
  await prompt(session, 'RUNBASH again, to be answered elsewhere');
  const [other] = await until('the second request upstream', 60000, async () => (await pending()).length ? pending() : null);
  await page.locator(`[data-card="${other}"]`).waitFor({ timeout: 5000 });
  const replied = await api.post(`${direct}/p/alpha/permission/${other}/reply`, { data: { reply: 'once' } });
  if (replied.status() !== 200) throw new Error(`reply through the API: ${replied.status()}`);
  await page.locator(`[data-card="${other}"]`).waitFor({ state: 'detached', timeout: 5000 });
  await page.getByText('answered elsewhere').first().waitFor({ timeout: 5000 });
  const elsewhere = await page.locator('.note.resolved').allInnerTexts();
  if (elsewhere.length !== 1 || !elsewhere[0].includes('echo RAN >> ran.txt') || !elsewhere[0].includes('allowed once')) {
    throw new Error(`the note does not say what was answered elsewhere: ${JSON.stringify(elsewhere)}`);
  }
  await until('the second tool run', 60000, async () => ranLines() === 2);
  await shot('4-elsewhere');

  step = 'a viewer sees a card but may not answer it';
  await until('the session is idle', 60000, () => idle(session));
  await prompt(session, 'RUNBASH a third time, for the viewer');
  const [third] = await until('the third request upstream', 60000, async () => (await pending()).length ? pending() : null);
  const viewerCtx = await browser.newContext(phoneProfile);
  const viewer = await loginAs(viewerCtx, 'vera', 'vera-password-1');
  await viewer.goto(`${login}/inbox`);
  await viewer.locator(`[data-card="${third}"]`).waitFor({ timeout: 5000 });
  if (await viewer.locator(`[data-card="${third}"] button[value=once]`).count()) throw new Error('a viewer is offered "Allow once"');
  // The form is not offered, so post what it would have posted, from the page itself.
  const refused = await viewer.evaluate(async (id) => {
    const r = await fetch('/_gw/act', { method: 'POST', body: new URLSearchParams({ project: 'alpha', id, do: 'once' }) });
    return { status: r.status, text: await r.text() };
  }, third);
  if (refused.status !== 403 || !refused.text.includes('approver')) {
    throw new Error(`a viewer's answer: ${refused.status} ${refused.text}`);
  }
  if (!(await pending()).includes(third)) throw new Error("the viewer's answer went through");
  await shot('5-viewer', viewer);
  step = 'a viewer gets no approve, new session or restart button, and the endpoints refuse her';
  await viewer.goto(`${login}/`);
  await viewer.locator(`[data-session="${session}"]`).waitFor({ timeout: 5000 });
  for (const sel of [`[data-session="${session}"] button[value=once]`, '#new-alpha', '#restart-alpha']) {
    if (await viewer.locator(sel).count()) throw new Error(`a viewer is offered ${sel}`);
  }
  for (const [path, word] of [['/_gw/restart', 'operator'], ['/_gw/new', 'operator']]) {
    const r = await viewer.evaluate(async (path) => {
      const r = await fetch(path, { method: 'POST', body: new URLSearchParams({ project: 'alpha' }) });
      return { status: r.status, text: await r.text() };
    }, path);
    if (r.status !== 403 || !r.text.includes(word)) throw new Error(`a viewer's POST ${path}: ${r.status} ${r.text}`);
  }

  step = 'a user of beta never sees alpha';
  const bobCtx = await browser.newContext(phoneProfile);
  const bob = await loginAs(bobCtx, 'bob', 'bob-password-22');
  await bob.locator('[data-project=beta]').first().waitFor();
  if (await bob.locator('[data-project=alpha]').count()) throw new Error('bob sees project alpha');
  await bob.goto(`${login}/inbox`);
  if (await bob.locator('[data-card]').count()) throw new Error('bob sees a card of alpha');
  if ((await bob.content()).includes(third)) throw new Error("alpha's request id is in bob's page");

  step = 'the phone opens alpha\'s web UI without a second login';
  await page.goto(`${alphaHost}/`);
  await page.waitForURL((u) => u.hostname === `alpha.${domain}` && !u.pathname.startsWith('/_gw'), { timeout: 15000 });

  step = 'a page on a sibling host cannot answer with the cookie';
  const evil = await phone.newPage();
  attackId = third;
  await evil.route('https://evil.example/**', (r) => r.fulfill({ contentType: 'text/html', body: attack(third) }));
  for (const origin of [`${evilSibling}/`, 'https://evil.example/']) {
    const answered = evil.waitForResponse((r) => r.url() === `${login}/_gw/act`);
    await evil.goto(origin);
    const r = await answered;
    if (r.status() !== 403) throw new Error(`a form post from ${origin}: ${r.status()}`);
  }
  if (!(await pending()).includes(third)) throw new Error('a cross-site form answered the request');
  step = 'a page on another site cannot restart a server with the cookie';
  await evil.route('https://evil.example/restart', (r) => r.fulfill({ contentType: 'text/html', body: attackRestart }));
  {
    const answered = evil.waitForResponse((r) => r.url() === `${login}/_gw/restart`);
    await evil.goto('https://evil.example/restart');
    const r = await answered;
    if (r.status() !== 403) throw new Error(`a cross-site restart: ${r.status()}`);
  }

  step = 'a WebSocket from a sibling host cannot use the project cookie';
  // A real terminal of alpha: the same URL opens from alpha's own page below.
  const pty = await realTerminal(api, `${direct}/p/alpha`, alphaDir);
  const ptyUrl = `wss://alpha.${domain}:${port}/pty/${pty}/connect?directory=${encodeURIComponent(alphaDir)}`;
  await evil.goto(`${evilSibling}/ws`);
  const ws = await wsFrom(evil, ptyUrl);
  if (ws !== 'error') throw new Error(`a cross-site WebSocket: ${ws}`);
  await evil.close();

  step = "the project link opens alpha's sessions through the handoff";
  {
    const r = await page.goto(projectLink);
    if (r.url() !== alphaSessions) throw new Error(`the project link ended at ${r.url()}`);
  }
  step = "the terminal the sibling could not open opens from alpha's own page";
  {
    const own = await wsFrom(page, ptyUrl);
    if (own !== 'open') throw new Error(`alpha's own WebSocket to its terminal: ${own}`);
  }

  step = "the portal's Approve answers the waiting request";
  await page.goto(`${login}/`);
  const row = page.locator(`[data-session="${session}"]`);
  const waitingText = await row.locator('.waiting').innerText();
  if (!waitingText.includes('Run a command (bash)') || !waitingText.includes('ran.txt')) throw new Error(`the row says ${waitingText}`);
  await row.locator('button[value=once]').tap();
  await page.waitForURL((u) => u.searchParams.get('done') === 'once', { timeout: 15000 });
  if (!(await page.locator('#flash').innerText()).startsWith('Allowed once: echo RAN')) throw new Error('no notice after Approve');
  await until('the approved tool run', 60000, async () => ranLines() === 3);
  if ((await pending()).includes(third)) throw new Error('the approved request is still pending');
  await shot('6-approved');

  step = "the portal's New session creates one upstream and opens it";
  const before = (await (await api.get(`${direct}/p/alpha/session`)).json()).map((x) => x.id);
  await page.locator('#new-alpha').tap();
  await page.waitForURL((u) => u.hostname === `alpha.${domain}` && /\/session\/ses_/.test(u.pathname), { timeout: 15000 });
  const newId = new URL(page.url()).pathname.match(/ses_[A-Za-z0-9]+/)[0];
  const after = (await (await api.get(`${direct}/p/alpha/session`)).json()).map((x) => x.id);
  if (before.includes(newId) || !after.includes(newId)) throw new Error(`${newId} is not a new session upstream: ${JSON.stringify(after)}`);
  console.log(`new session ${newId} opened at ${page.url()}`);

  step = "the portal's Restart restarts alpha's server";
  await until('the session is idle', 60000, () => idle(session));
  await page.goto(`${login}/`);
  await page.locator('[data-project=alpha] details.restart summary').tap();
  await page.locator('#restart-alpha').tap();
  await page.waitForURL((u) => u.searchParams.get('done') === 'restarting', { timeout: 15000 });
  if (!(await page.locator('#flash').innerText()).startsWith('Restarting')) throw new Error('no notice after Restart');
  await until('alpha serves again', 60000, async () => (await api.get(`${direct}/p/alpha/session`)).status() === 200);

  step = 'a revoked device gets the login page';
  const devices = cli('devices', 'alice');
  const line = devices.split('\n').find((l) => l.includes("Alice's phone"));
  const id = line && line.match(/\bdev_[A-Za-z0-9_-]+/);
  if (!id) throw new Error(`the device is not listed:\n${devices}`);
  cli('devices', 'revoke', id[0]);
  await page.goto(`${login}/inbox`);
  if (new URL(page.url()).pathname !== '/login') throw new Error(`a revoked phone still sees ${page.url()}`);
  await page.goto(`${alphaHost}/`);
  if (new URL(page.url()).pathname !== '/login') throw new Error(`a revoked phone still reaches alpha: ${page.url()}`);
  console.log(`history length after pairing: ${history}`);
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  // What the page and the upstream held at the failure (the gateway's log follows, cut in CI).
  const sessions = await page.$$eval('[data-session]', (els) => els.map((e) => e.dataset.session)).catch((x) => `? ${x}`);
  const upstream = await api.get(`${direct}/p/alpha/session`).then((r) => r.text()).catch((x) => `? ${x}`);
  console.error(`the page ${page.url()} lists sessions ${JSON.stringify(sessions)}; alpha's server lists ${upstream.slice(0, 600)}`);
  await shot('failed').catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
  await api.dispose();
  sibling.close();
}
