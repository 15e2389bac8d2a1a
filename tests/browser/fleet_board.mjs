// The fleet board (issue 41) in headless Chromium at a phone's width (390 px), as bob (an
// operator of project set app, whose acceptance test is `cat fixed.txt`):
// - New task "Fix it" makes its project; the time from the click to the agent's first words on
//   its card is measured; its test fails; Review shows the diff; "Ask for changes" makes the
//   model write fixed.txt; the test passes (ready for review).
// - New task "Half done" ends with a failing test; New task "Fan out" runs with a subagent
//   nested under its session.
// - Screenshots of the board and of the review; "Remove" refuses with uncommitted changes, then
//   works when confirmed; "Stop" on the parent stops the child too.
// Run by tests/integration/fleet_board.rs; exits non-zero naming the failed step.
// Env: GW_PORT, CERT, SHOT_DIR.
import { env, launch } from './chromium.mjs';

const [port, certPath, shots] = ['GW_PORT', 'CERT', 'SHOT_DIR'].map(env);
const login = `https://gw.localhost:${port}`;
const WAIT = 90000;

let step = 'launch';
const browser = await launch(certPath);
const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
const page = await context.newPage();
const card = (project) => page.locator(`#project-${project}`);

// The board swaps its content in when something changes: a card's screenshot is taken again if
// the card was replaced while it was taken.
const shot = async (locator, path) => {
  for (let i = 0; ; i++) {
    try { return await locator.screenshot({ path }); } catch (e) { if (i >= 4) throw e; }
  }
};

const newTask = async (title, prompt) => {
  await page.goto(`${login}/`);
  await page.locator('#new-task input[name=title]').fill(title);
  await page.locator('#new-task textarea[name=prompt]').fill(prompt);
  const clicked = Date.now();
  await page.locator('#new-task-button').click();
  await page.waitForURL((u) => u.pathname === '/' && u.search.includes('done=task_created'), { timeout: WAIT });
  return clicked;
};

try {
  step = 'bob logs in with his password';
  await page.goto(`${login}/login`);
  await page.locator('input[name=user]').fill('bob');
  await page.locator('input[name=password]').fill('bob-password-12');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL((u) => u.pathname === '/');

  step = 'New task "Fix it": its card, and the agent\'s first words on it (timed)';
  const clicked = await newTask('Fix it', 'RUNCMD: echo wip > wip.txt');
  const made = Date.now() - clicked;
  await card('app-fix-it').locator('.last-words').first().waitFor({ timeout: WAIT });
  console.log(`new task to its page back (branch, worktree, server, session, prompt sent): ${made} ms`);
  console.log(`new task to the agent's first words on its card: ${Date.now() - clicked} ms`);

  step = 'its acceptance test fails';
  await card('app-fix-it').locator('[data-accept=failed]').waitFor({ timeout: WAIT });

  step = 'New task "Half done": its test fails too';
  await newTask('Half done', 'RUNCMD: echo half > half.txt');
  await card('app-half-done').locator('[data-accept=failed]').waitFor({ timeout: WAIT });

  step = 'New task "Fan out": a subagent nested under its session';
  await newTask('Fan out', 'SPAWNTASK SPAWNHANG');
  await card('app-fan-out').locator('li.session.nested[data-depth="1"]').waitFor({ timeout: WAIT });

  step = 'Review "Fix it": the diff, then Ask for changes';
  await card('app-fix-it').getByRole('link', { name: 'Review' }).click();
  await page.locator('details.file[data-file="wip.txt"]').waitFor();
  await page.locator('#ask-text').fill('RUNCMD: echo fixed > fixed.txt');
  await page.locator('#ask').click();
  await page.waitForURL((u) => u.search.includes('done=asked'));

  step = 'its test passes: ready for review';
  await page.goto(`${login}/`);
  await card('app-fix-it').locator('[data-accept=passed]').waitFor({ timeout: WAIT });
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  if (width > 390) throw new Error(`the board is ${width} px wide at 390`);

  step = 'screenshots of the board';
  await page.screenshot({ path: `${shots}/board.png`, fullPage: true });
  for (const p of ['app-fix-it', 'app-half-done', 'app-fan-out']) {
    await shot(card(p), `${shots}/card-${p}.png`);
    console.log(`${p}: ${(await card(p).innerText()).replace(/\s+/g, ' ').slice(0, 400)}`);
  }

  step = 'the review: both files in the diff';
  await card('app-fix-it').getByRole('link', { name: 'Review' }).click();
  await page.locator('details.file[data-file="fixed.txt"]').waitFor();
  await page.screenshot({ path: `${shots}/review.png`, fullPage: true });

  step = 'Remove refuses while the worktree holds uncommitted changes';
  await page.locator('details.remove summary').click();
  await page.locator('#remove').click();
  await page.getByText('holds uncommitted changes').waitFor();
  await page.screenshot({ path: `${shots}/remove-refused.png`, fullPage: true });

  step = 'Remove, confirmed: the task goes from the board';
  await page.goBack();
  await page.locator('details.remove summary').click();
  await page.locator('input[name=confirm]').check();
  await page.locator('#remove').click();
  await page.waitForURL((u) => u.pathname === '/' && u.search.includes('done=removed'));
  if (await card('app-fix-it').count() !== 0) throw new Error('the removed task is still on the board');

  step = 'Stop on "Fan out": its session and the subagent under it go idle';
  const fan = card('app-fan-out');
  await fan.locator('li.session[data-depth="0"] button[value=abort]').click();
  await page.waitForURL((u) => u.pathname === '/');
  await page.waitForFunction(() => {
    const items = document.querySelectorAll('#project-app-fan-out li.session');
    return items.length >= 2 && [...items].every((li) => li.querySelector('.badge.idle'));
  }, null, { timeout: WAIT });
  await shot(fan, `${shots}/stopped-tree.png`);
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  await page.screenshot({ path: `${shots}/failed.png`, fullPage: true }).catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
