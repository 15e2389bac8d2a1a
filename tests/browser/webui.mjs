// Drives OpenCode's web UI in headless Chromium through the gateway, as a person would:
// open the project's host, log in once on the gateway's login form (no Basic pop-up: the
// project host gets its own cookie through the handoff), send a prompt, answer "Permission
// required", see the run finish, open a terminal and see a command's output; then read the
// cookies from the browser and log out, which ends the project host's cookie too.
// Run by tests/integration/browser.rs, which starts the gateway and OpenCode; exits non-zero
// with the failed step's name. Env: GW_URL, GW_USER, GW_PASS, PROJECT_DIR, CERT, SHOT_DIR.
import { env, launch, sendPrompt } from './chromium.mjs';
import fs from 'node:fs';

const [url, user, pass, dir, certPath, shots] = ['GW_URL', 'GW_USER', 'GW_PASS', 'PROJECT_DIR', 'CERT', 'SHOT_DIR'].map(env);

// Trust exactly the gateway's key (the dev CA is not in Chromium's store).

let step = 'launch';
const browser = await launch(certPath);
const shot = (name) => page.screenshot({ path: `${shots}/${name}.png` });
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const projectHost = new URL(url).hostname;
const loginUrl = new URL(url);
loginUrl.hostname = projectHost.split('.').slice(1).join('.');
// Any Basic challenge would be a pop-up for a person: count them.
let challenges = 0;
context.on('response', (r) => { if (r.status() === 401 && r.headers()['www-authenticate']) challenges++; });
const page = await context.newPage();
let terminalText = '';
page.on('websocket', (ws) => {
  console.log(`websocket ${ws.url().replace(/ticket=[^&]+/, 'ticket=<redacted>')}`);
  ws.on('framereceived', (f) => { terminalText += typeof f.payload === 'string' ? f.payload : f.payload.toString('utf8'); });
});
try {
  step = 'open the project: the login form comes first';
  const sessionPath = `/${Buffer.from(dir).toString('base64url')}/session`;
  await page.goto(`${url}${sessionPath}`);
  if (new URL(page.url()).hostname !== loginUrl.hostname || new URL(page.url()).pathname !== '/login') {
    throw new Error(`expected the gateway's login form, got ${page.url()}`);
  }
  await page.locator('input[name=user]').fill(user);
  await page.locator('input[name=password]').fill(pass);
  await page.getByRole('button', { name: 'Log in' }).click();
  step = 'back on the project host, logged in';
  await page.waitForURL((u) => u.hostname === projectHost && u.pathname === sessionPath, { timeout: 30000 });
  const prompt = page.locator('[data-component=prompt-input]');
  await prompt.waitFor({ timeout: 30000 });
  await shot('1-project');

  step = 'send a prompt';
  // The UI loads its providers and agents first; sending waits until the model is chosen.
  await page.getByRole('button', { name: 'Fake' }).waitFor({ timeout: 60000 });
  await sendPrompt(page, 'please RUNBASH for the browser test', shot);

  step = 'see "Permission required"';
  await page.getByText('Permission required').waitFor({ timeout: 60000 });
  await shot('2-permission');

  step = 'allow it';
  await page.getByRole('button', { name: 'Allow once' }).click();

  step = 'see the run finish';
  await page.getByText(process.env.EXPECT_ANSWER || 'TOOL-FINISHED-7').first().waitFor({ timeout: 60000 });
  await page.getByText('Permission required').waitFor({ state: 'detached', timeout: 30000 });
  await shot('3-finished');

  step = 'open a terminal';
  await page.keyboard.press('Control+Backquote');
  const input = page.locator('[data-component=terminal] textarea');
  await input.waitFor({ timeout: 30000 });
  await page.waitForTimeout(1000);
  await input.focus();
  await page.keyboard.type('echo BROWSER$((6*7))OK');
  await page.keyboard.press('Enter');

  step = "see the command's output";
  const deadline = Date.now() + 20000;
  while (!terminalText.includes('BROWSER42OK') && Date.now() < deadline) await page.waitForTimeout(200);
  await shot('4-terminal');
  if (!terminalText.includes('BROWSER42OK')) throw new Error(`terminal output never showed BROWSER42OK: ${JSON.stringify(terminalText.slice(-500))}`);
  step = 'the cookies, as the browser keeps them';
  const cookies = await context.cookies();
  const ours = cookies.filter((c) => c.name.startsWith('__Host-'));
  const hosts = ours.map((c) => c.domain).sort();
  if (JSON.stringify(hosts) !== JSON.stringify([loginUrl.hostname, projectHost].sort())) {
    throw new Error(`expected one host-only cookie per host, got ${JSON.stringify(ours)}`);
  }
  for (const c of ours) {
    if (c.name !== '__Host-ocgw' || !c.secure || !c.httpOnly || c.sameSite !== 'Lax' || c.path !== '/' || c.domain.startsWith('.')) {
      throw new Error(`cookie attributes: ${JSON.stringify({ ...c, value: '<redacted>' })}`);
    }
  }
  if (challenges !== 0) throw new Error(`${challenges} Basic challenges reached the browser`);

  step = 'log out on the login host';
  await page.goto(`${loginUrl.origin}/login`);
  await page.evaluate(() => fetch('/logout', { method: 'POST' }));
  step = 'the project host asks for the login again';
  await page.goto(`${url}${sessionPath}`);
  if (new URL(page.url()).pathname !== '/login') throw new Error(`after logout the project host still served ${page.url()}`);
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  await shot('failed').catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
