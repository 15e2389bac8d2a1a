// OpenCode 2's web UI in headless Chromium as a phone (390 x 844) through the gateway: open a
// session on the project's host, log in once on the gateway's login form (OpenCode's own
// "Connect to a server" page never shows), and use it with the gateway's cookie. An operator
// sends a prompt and sees the fake model's answer; a viewer sees that answer, and the prompt she
// tries is refused by the gateway (403 on its first write) without breaking the page.
// Run by tests/integration/opencode_v2_web.rs; exits non-zero with the failed step's name.
// Env: GW_URL (the project's host), SESSION_PATH (the UI's route to a session), GW_USER, GW_PASS,
// ROLE (operator | viewer), EXPECT (the answer's text), CERT, SHOT_DIR.
import { env, launch } from './chromium.mjs';

const [url, sessionPath, user, pass, role, expect, certPath, shots] =
  ['GW_URL', 'SESSION_PATH', 'GW_USER', 'GW_PASS', 'ROLE', 'EXPECT', 'CERT', 'SHOT_DIR'].map(env);
let step = 'launch';
const browser = await launch(certPath);
const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
const page = await context.newPage();
const shot = (name) => page.screenshot({ path: `${shots}/${role}-${name}.png` });
const refused = [];
page.on('response', (r) => {
  const u = new URL(r.url());
  if (u.pathname.startsWith('/api/') && r.status() >= 400) refused.push(`${r.request().method()} ${u.pathname} ${r.status()}`);
});
const projectHost = new URL(url).hostname;
// Type into the composer and press Send until the prompt goes out (the button does nothing until
// the page has loaded its agents and models): bounded, 3 tries of 10 s.
const send = async (text) => {
  const composer = page.locator('[data-component=composer-editor]');
  await composer.click();
  await page.keyboard.type(text);
  for (let i = 0; i < 3; i++) {
    const sent = page.waitForRequest((r) => r.method() === 'POST' && new URL(r.url()).pathname.endsWith('/prompt'), { timeout: 10000 });
    await page.getByRole('button', { name: 'Send' }).click();
    if (await sent.then(() => true, () => false)) return;
  }
  throw new Error('the prompt never went out');
};
const failIfBroken = async () => {
  const text = await page.locator('body').innerText();
  if (/Connect to a server|Server request failed/i.test(text)) throw new Error(`OpenCode's connect or error page: ${text.slice(0, 300)}`);
};
try {
  step = 'open the session: the login form comes first';
  await page.goto(`${url}${sessionPath}`);
  if (new URL(page.url()).pathname !== '/login') throw new Error(`expected the gateway's login form, got ${page.url()}`);
  await page.locator('input[name=user]').fill(user);
  await page.locator('input[name=password]').fill(pass);
  await page.getByRole('button', { name: 'Log in' }).click();
  step = 'back on the session, logged in';
  await page.waitForURL((u) => u.hostname === projectHost && u.pathname === sessionPath, { timeout: 30000 });
  const composer = page.locator('[data-component=composer-editor]');
  await composer.waitFor({ timeout: 30000 });
  await failIfBroken();
  await shot('1-session');
  if (role === 'operator') {
    step = 'send a prompt';
    await send('hello from the phone');
    step = "see the model's answer";
    await page.getByText(expect).first().waitFor({ timeout: 60000 });
    await shot('2-answered');
  } else {
    step = "see the operator's answer";
    await page.getByText(expect).first().waitFor({ timeout: 30000 });
    step = 'a prompt is refused, the page stays';
    await page.locator('[data-component=composer-editor]').click();
    await page.keyboard.type('a viewer tries');
    // Sending first sets the session's model, a write: the gateway refuses it (403) and the
    // prompt never goes out.
    const refusedWrite = () => refused.some((r) => /^POST \/api\/session\/[^/]+\/(model|agent|prompt) 403$/.test(r));
    for (let i = 0; i < 3 && !refusedWrite(); i++) {
      await page.getByRole('button', { name: 'Send' }).click();
      const deadline = Date.now() + 5000;
      while (!refusedWrite() && Date.now() < deadline) await page.waitForTimeout(200);
    }
    if (!refusedWrite()) throw new Error(`no refused write: ${JSON.stringify(refused)}`);
    await failIfBroken();
    await page.getByText(expect).first().waitFor({ timeout: 5000 });
    await shot('2-refused');
  }
  console.log(`refused: ${JSON.stringify(refused)}`);
  console.log('ok: every step passed');
} catch (e) {
  await shot('failed').catch(() => {});
  console.error(`FAILED at step "${step}": ${e.message}; refused: ${JSON.stringify(refused)}`);
  await browser.close();
  process.exit(1);
}
await browser.close();
