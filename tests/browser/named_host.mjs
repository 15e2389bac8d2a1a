// Passkeys at the named host (issue 38, item 7) in headless Chromium with a phone's viewport and
// its virtual authenticator, the gateway reached by address (no base domain) and `<host>.local`
// resolved by Chromium's own rule (MAP <host>.local 127.0.0.1: what multicast DNS does on a LAN):
// A. a phone that reaches the name: the pairing link (at the address, as the QR code has it)
//    moves to the name, pairs there, and the portal there adds a passkey;
// B. a phone whose probe of the name fails (the probe is aborted): it pairs at the address, the
//    portal names the host and its button logs the phone in there without a password (the
//    handoff), where it adds a passkey.
// Neither visits a login form. Exits non-zero naming the failed step.
// Env: PAIR_A, PAIR_B (pairing URLs at the address), NAMED (https://<host>.local:<port>), CERT,
// SHOT_DIR.
import { env, launch } from './chromium.mjs';

const [pairA, pairB, named, certPath, shots] = ['PAIR_A', 'PAIR_B', 'NAMED', 'CERT', 'SHOT_DIR'].map(env);
const address = new URL(pairA).origin;
const name = new URL(named).hostname;

let step = 'launch';
const browser = await launch(certPath, [`--host-resolver-rules=MAP ${name} 127.0.0.1`]);
const phoneProfile = { viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true };

/// A fresh phone: its page, a virtual authenticator, and the login forms it is shown.
const phone = async () => {
  const context = await browser.newContext(phoneProfile);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });
  const logins = [];
  page.on('framenavigated', (f) => { if (f === page.mainFrame() && new URL(f.url()).pathname === '/login') logins.push(f.url()); });
  return { context, page, cdp, authenticatorId, logins };
};

/// On the named host's portal: add a passkey labelled `label`; its credential's RP ID.
const addPasskey = async ({ page, cdp, authenticatorId }, label) => {
  await page.locator('#passkey-label').fill(label);
  await page.getByRole('button', { name: 'Add a passkey' }).click();
  await page.waitForURL((u) => u.searchParams.get('done') === 'passkey_added', { timeout: 15000 });
  await page.locator('.passkey-list li', { hasText: label }).waitFor();
  const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId });
  if (credentials.length !== 1) throw new Error(`credentials: ${JSON.stringify(credentials)}`);
  return credentials[0].rpId;
};

try {
  step = 'A: the pairing link at the address moves to the name and pairs there';
  const a = await phone();
  await a.page.goto(pairA, { timeout: 30000 });
  await a.page.waitForURL((u) => u.origin === named && u.pathname === '/', { timeout: 30000 });
  const paired = await a.page.locator('p[role=status]').first().innerText();
  if (!paired.includes('This device is paired')) throw new Error(`no pairing confirmation at ${a.page.url()}: ${paired}`);
  await a.page.screenshot({ path: `${shots}/a-paired-at-the-name.png`, fullPage: true });

  step = 'A: a passkey is added at the name';
  const rpA = await addPasskey(a, 'phone A');
  if (rpA !== name) throw new Error(`the passkey's RP ID is ${rpA}, not ${name}`);
  if (a.logins.length) throw new Error(`a login form was shown: ${a.logins.join(', ')}`);
  console.log(`A: paired at ${named}, passkey for ${rpA}`);

  step = 'B: the probe of the name fails, so the phone pairs at the address';
  const b = await phone();
  let probed = 0;
  await b.context.route(`${named}/_gw/static/icon.svg`, (r) => { probed++; return r.abort('namenotresolved'); });
  await b.page.goto(pairB, { timeout: 30000 });
  await b.page.waitForURL((u) => u.origin === address && u.pathname === '/', { timeout: 30000 });
  if (probed !== 1) throw new Error(`the pairing page probed the name ${probed} times, not once`);
  const pairedB = await b.page.locator('p[role=status]').first().innerText();
  if (!pairedB.includes('This device is paired')) throw new Error(`no pairing confirmation: ${pairedB}`);

  step = 'B: the portal at the address names the host and offers the button';
  const button = b.page.locator('#passkey-elsewhere');
  const text = await button.innerText();
  if (text !== `Add a passkey at ${named}`) throw new Error(`the button says ${JSON.stringify(text)}`);
  await b.page.screenshot({ path: `${shots}/b-portal-at-the-address.png`, fullPage: true });

  step = 'B: the button logs the phone in at the name without a password';
  await button.tap();
  await b.page.waitForURL((u) => u.origin === named && u.pathname === '/', { timeout: 30000 });
  await b.page.locator('#passkey-add').waitFor({ state: 'visible', timeout: 15000 });
  if (b.logins.length) throw new Error(`a login form was shown: ${b.logins.join(', ')}`);

  step = 'B: a passkey is added at the name';
  const rpB = await addPasskey(b, 'phone B');
  if (rpB !== name) throw new Error(`the passkey's RP ID is ${rpB}, not ${name}`);
  await b.page.screenshot({ path: `${shots}/b-passkey-at-the-name.png`, fullPage: true });
  console.log(`B: paired at ${address}, handed off to ${named}, passkey for ${rpB}`);
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
