// The portal's trigger card (issue 40) in headless Chromium at a phone's width (390 px): alice
// logs in with her password, the portal shows trigger TRIGGER of project PROJECT with its last
// run (outcome OUTCOME, a link to its session, its cost) and a Pause button; screenshots of the
// page and of the card go to SHOT_DIR. Run by tests/integration/readme_trigger.rs; exits
// non-zero naming the failed step. Env: GW_PORT, CERT, SHOT_DIR, TRIGGER, OUTCOME.
import { env, launch } from './chromium.mjs';

const [port, certPath, shots, trigger, outcome] = ['GW_PORT', 'CERT', 'SHOT_DIR', 'TRIGGER', 'OUTCOME'].map(env);
const login = `https://gw.localhost:${port}`;

let step = 'launch';
const browser = await launch(certPath);
const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
const page = await context.newPage();
try {
  step = 'alice logs in with her password';
  await page.goto(`${login}/login`);
  await page.locator('input[name=user]').fill('alice');
  await page.locator('input[name=password]').fill('alice-password-1');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL((u) => u.pathname === '/');

  step = `the portal shows trigger ${trigger}'s card with its ${outcome} run`;
  const card = page.locator(`#trigger-${trigger}`);
  await card.locator(`.run[data-outcome=${outcome}]`).first().waitFor({ timeout: 15000 });
  const run = await card.locator('.run').first().innerText();
  if (!/\$\d/.test(run)) throw new Error(`the run shows no cost: ${run}`);
  if (await card.locator('.run a').count() < 1) throw new Error('the run links no session');
  if (await card.locator('button[value=pause]').count() !== 1) throw new Error('no Pause for an operator');
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  if (width > 390) throw new Error(`the page is ${width} px wide at 390`);

  step = 'screenshots';
  await card.scrollIntoViewIfNeeded();
  await card.screenshot({ path: `${shots}/trigger-card.png` });
  await page.screenshot({ path: `${shots}/portal.png`, fullPage: true });
  console.log(`card: ${(await card.innerText()).replace(/\s+/g, ' ')}`);
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  await page.screenshot({ path: `${shots}/failed.png`, fullPage: true }).catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
