// What every browser test shares: its environment, and Debian's Chromium launched headless,
// trusting exactly the gateway's key (the dev CA is not in Chromium's store).
import { createRequire } from 'node:module';
import crypto from 'node:crypto';
import fs from 'node:fs';

const require = createRequire(import.meta.url);
export const playwright = require('playwright-core');

export const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };

/// The base64 SHA-256 of the leaf certificate's public key (Chromium's SPKI pin format).
const spkiOf = (certPath) => {
  const leaf = fs.readFileSync(certPath, 'utf8').split('-----END CERTIFICATE-----')[0] + '-----END CERTIFICATE-----\n';
  return crypto.createHash('sha256')
    .update(new crypto.X509Certificate(leaf).publicKey.export({ type: 'spki', format: 'der' }))
    .digest('base64');
};

// Headless, quiet (no background fetches, no sync or updates), without the sandbox (root in CI).
const baseArgs = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync'];

export const launch = (certPath, extraArgs = []) => playwright.chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: [...baseArgs, `--ignore-certificate-errors-spki-list=${spkiOf(certPath)}`, ...extraArgs],
});

/// Chromium trusting what its user's NSS database ($HOME/.pki/nssdb) trusts, and nothing else
/// beyond the system's roots: no pin, no exception (the LAN phone test imports the dev CA there).
export const launchTrustingNss = (extraArgs = []) => playwright.chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: [...baseArgs, ...extraArgs],
});

/// A persistent (not incognito) context, in a fresh profile in `userDataDir`: Chromium says an
/// incognito context's pages are never installable (`in-incognito`).
export const launchPersistent = (certPath, userDataDir, contextOptions = {}) => playwright.chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: [...baseArgs, `--ignore-certificate-errors-spki-list=${spkiOf(certPath)}`],
  ...contextOptions,
});

/// The same, trusting nothing of the gateway's (no pin): a device that installed the app and
/// then stopped trusting the gateway's certificate (its dev CA made again).
export const launchPersistentUntrusting = (userDataDir, contextOptions = {}) => playwright.chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: baseArgs,
  ...contextOptions,
});

/// How a WebSocket to `url` opened from `page` ends: 'open', 'error' or 'timeout' (10 s).
export const wsFrom = (page, url) => page.evaluate((u) => new Promise((done) => {
  const s = new WebSocket(u);
  s.onopen = () => { done('open'); s.close(); };
  s.onerror = () => done('error');
  setTimeout(() => done('timeout'), 10000);
}), url);

/// A real terminal in `dir` (`POST /pty` through `base` with `api`'s credentials): its id, so a
/// refused WebSocket is refused for who asks, not because no such terminal exists.
export const realTerminal = async (api, base, dir) => {
  const r = await api.post(`${base}/pty?directory=${encodeURIComponent(dir)}`, { data: { command: '/bin/sh' } });
  if (r.status() !== 200) throw new Error(`POST /pty: ${r.status()} ${await r.text()}`);
  const id = (await r.json()).id;
  if (!/^pty_/.test(id || '')) throw new Error(`POST /pty gave no terminal id: ${await r.text()}`);
  return id;
};

// Type `text` into OpenCode's prompt, send it, and wait (15 s at most) until the web UI took it:
// it empties the input when it sends. Seen in suite runs on a loaded machine (issue 43): after
// slow loads (its /agent and /command answered in 12 s), the web UI left the prompt typed and
// made no request at all on Send (the gateway logged none, not even one left unanswered). Then it
// is cleared and sent once more, saying so, with a screenshot (`send-ignored`) of the page that
// kept it; a second refusal fails the step. Returns the attempts it took.
export const sendPrompt = async (page, text, shot) => {
  const prompt = page.locator('[data-component=prompt-input]');
  const send = page.getByRole('button', { name: 'Send' });
  for (let attempt = 1; ; attempt++) {
    await prompt.click();
    await page.keyboard.type(text);
    for (let i = 0; i < 300 && !(await send.isEnabled()); i++) await page.waitForTimeout(100);
    await send.click();
    for (let i = 0; i < 150; i++) {
      if (!(await prompt.innerText()).includes(text)) return attempt;
      await page.waitForTimeout(100);
    }
    if (attempt === 2) throw new Error('the web UI kept the prompt after Send, twice');
    if (shot) await shot('send-ignored').catch(() => {});
    console.log('the web UI did not take the prompt within 15 s of Send; clearing it and sending again');
    await prompt.click();
    await page.keyboard.press('Control+A');
    await page.keyboard.press('Delete');
  }
};
