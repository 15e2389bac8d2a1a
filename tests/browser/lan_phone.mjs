// A phone on the LAN (run inside the phone's network namespace by tests/integration/lan_phone.rs):
// headless Chromium with a phone's viewport whose only extra trust is the dev CA its NSS database
// ($HOME/.pki/nssdb) holds, which the test imported from the gateway's plain-HTTP CA page. It opens
// the URL the test decoded from the QR code `pair` printed, pairs, sees the portal list the
// project, opens the project's web UI from the portal's link without a second login, sends a
// prompt that asks for bash, and answers the permission from /inbox with "Allow once". Then
// (issue 38) the portal names where passkeys work, and the same phone, now resolving that name
// (Chromium's rule MAP <host>.local <box>: what multicast DNS does on a LAN), taps the portal's
// button, is logged in there without a password and adds a passkey (virtual authenticator).
// Exits non-zero naming the failed step. Env: PAIR_URL, PROJECT, PROJECT_DIR, SHOT_DIR, NAMED
// (https://<host>.local:<port>; unset: the passkey steps are left out, as the newcomer's timed
// chain in tests/integration/newcomer_phone.rs ends at the first "Allow once"); or UNTRUSTED_URL
// alone: before the import, the same Chromium must refuse that URL's certificate.
// Prints `allowed once at <ms since the epoch>` when the inbox confirms "Allow once" (its timing).
import { env, launchTrustingNss, sendPrompt } from './chromium.mjs';

if (process.env.UNTRUSTED_URL) {
  const browser = await launchTrustingNss();
  try {
    const page = await browser.newPage();
    const error = await page.goto(process.env.UNTRUSTED_URL, { timeout: 30000 }).then(() => null, (e) => e.message.split('\n')[0]);
    if (!error || !error.includes('ERR_CERT_AUTHORITY_INVALID')) {
      throw new Error(`before the dev CA is imported, ${process.env.UNTRUSTED_URL} gave ${error || 'a page'}, not ERR_CERT_AUTHORITY_INVALID`);
    }
    console.log(`before the import: ${error}`);
    console.log('ok: every step passed');
  } catch (e) {
    console.error(`FAILED at step "the phone does not trust the gateway yet": ${e.message}`);
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
  process.exit();
}

const [pairUrl, project, projectDir, shots] = ['PAIR_URL', 'PROJECT', 'PROJECT_DIR', 'SHOT_DIR'].map(env);
const named = process.env.NAMED;
const login = new URL(pairUrl).origin;

const phoneProfile = {
  viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true,
  userAgent: 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36',
};

let step = 'launch Chromium';
const browser = await launchTrustingNss();
const phone = await browser.newContext(phoneProfile);
const page = await phone.newPage();
const shot = (name, p = page) => p.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
// Any Basic challenge would be a pop-up on a phone, and a second login form a second login.
let challenges = 0;
const logins = [];
phone.on('response', (r) => {
  if (r.status() === 401 && r.headers()['www-authenticate']) challenges++;
});
page.on('framenavigated', (f) => { if (f === page.mainFrame() && new URL(f.url()).pathname === '/login') logins.push(f.url()); });

/// The same phone (its cookies), now resolving the named host: the portal's button logs it in
/// there without a password, and a passkey is added there.
async function namedPasskey(storageState) {
  const name = new URL(named).hostname;
  step = `the phone resolving ${name} opens the portal's button`;
  const resolving = await launchTrustingNss([`--host-resolver-rules=MAP ${name} ${new URL(pairUrl).hostname}`]);
  try {
    const context = await resolving.newContext({ ...phoneProfile, storageState });
    const p = await context.newPage();
    const seenLogins = [];
    p.on('framenavigated', (f) => { if (f === p.mainFrame() && new URL(f.url()).pathname === '/login') seenLogins.push(f.url()); });
    const cdp = await context.newCDPSession(p);
    await cdp.send('WebAuthn.enable');
    const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
      options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
    });
    await p.goto(`${login}/`);
    await p.locator('#passkey-elsewhere').tap();
    await p.waitForURL((u) => u.origin === named && u.pathname === '/', { timeout: 30000 });
    if (seenLogins.length) throw new Error(`a login form was shown: ${seenLogins.join(', ')}`);
    step = `add a passkey at ${named}`;
    await p.locator('#passkey-label').fill('lan phone');
    await p.getByRole('button', { name: 'Add a passkey' }).click();
    await p.waitForURL((u) => u.searchParams.get('done') === 'passkey_added', { timeout: 15000 });
    const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId });
    if (credentials.length !== 1 || credentials[0].rpId !== name) throw new Error(`credentials: ${JSON.stringify(credentials)}`);
    await shot('6-passkey-added', p);
    console.log(`a passkey for ${name} was added at ${p.url()}`);
  } finally {
    await resolving.close();
  }
}

try {
  step = 'open the QR code\'s URL: TLS to the gateway verifies with the imported dev CA alone';
  const posted = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/pair', { timeout: 30000 });
  try {
    await page.goto(pairUrl, { timeout: 30000 });
  } catch (e) {
    // net::ERR_CERT_AUTHORITY_INVALID, ERR_CERT_COMMON_NAME_INVALID… name what the phone saw.
    throw new Error(`${e.message.split('\n')[0]} (is ${new URL(pairUrl).hostname} in the dev certificate and permitted by the CA's name constraints?)`);
  }

  step = 'the page posts the code from the fragment and pairs the phone';
  const resp = await posted;
  if (resp.status() !== 303) throw new Error(`POST /pair answered ${resp.status()}: ${await resp.text().catch(() => '')}`);
  await page.waitForURL((u) => u.origin === login && u.pathname === '/', { timeout: 30000 });
  const paired = await page.locator('p[role=status]').first().innerText();
  if (!paired.includes('This device is paired')) throw new Error(`no pairing confirmation: ${paired}`);
  const cookie = (await phone.cookies()).find((c) => c.name === '__Host-ocgw');
  if (!cookie || !cookie.secure) throw new Error(`no secure __Host-ocgw cookie: ${JSON.stringify((await phone.cookies()).map((c) => c.name))}`);

  step = `the portal lists project ${project}`;
  await page.locator(`[data-project=${project}]`).first().waitFor({ timeout: 15000 });
  await shot('1-portal');
  console.log(`paired; the portal at ${page.url()} lists ${project}`);

  step = `the portal links ${project}'s web UI`;
  const link = page.locator(`[data-project=${project}] h2 a`).first();
  if (!(await link.count())) {
    throw new Error(`no web UI link for ${project} on the portal: ${await page.locator(`[data-project=${project}]`).first().innerHTML()}`);
  }
  const href = new URL(await link.getAttribute('href'), page.url());
  console.log(`web UI link: ${href.href}`);
  // The project's own sessions in OpenCode's web UI (issue 22), not its empty home.
  const sessions = `/${Buffer.from(projectDir).toString('base64url')}/session`;
  if (href.pathname !== sessions) throw new Error(`the link opens ${href.pathname}, not the project's sessions ${sessions}`);

  step = `open ${project}'s web UI from the portal without a second login`;
  const loginsBefore = logins.length;
  await link.tap();
  await page.waitForURL((u) => u.origin === href.origin && !u.pathname.startsWith('/_gw') && u.pathname !== '/login', { timeout: 30000 });
  if (logins.length !== loginsBefore) throw new Error(`a login form was shown: ${logins.slice(loginsBefore).join(', ')}`);
  const prompt = page.locator('[data-component=prompt-input]');
  // OpenCode's app, on the project host (its own markup, not a gateway page).
  await page.locator('[data-component]').first().waitFor({ timeout: 60000 });
  await shot('2-webui');
  // The link lands in the project, ready for a prompt, with no detour.
  await prompt.waitFor({ timeout: 60000 });
  if (logins.length !== loginsBefore) throw new Error(`a login form was shown: ${logins.slice(loginsBefore).join(', ')}`);
  // OpenCode 1.18.33 answers the project's session list with a new-session page for it (its
  // home, "/", is the empty page the issue saw); the tool's run in the project's folder, checked
  // by the host, shows the prompt went to this project.
  // Not any page ready for a prompt: this project's session path, or the new-session draft that
  // OpenCode 1.18.33 opens from it (seen: `/new-session?draftId=<uuid>`); the tool's run in the
  // project's folder, checked by the host, shows the prompt went to this project.
  const landed = new URL(page.url());
  const underSessions = landed.pathname === sessions || landed.pathname.startsWith(`${sessions}/`);
  const draft = landed.pathname === '/new-session' && /^[0-9a-f-]{36}$/.test(landed.searchParams.get('draftId') || '');
  if (!underSessions && !draft) throw new Error(`the link landed on ${page.url()}, neither under ${sessions} nor its new-session draft`);
  console.log(`the portal's link opened ${page.url()} with a prompt`);

  step = 'send a prompt in the web UI';
  await page.getByRole('button', { name: 'Fake' }).first().waitFor({ timeout: 60000 });
  await sendPrompt(page, 'please RUNBASH from the LAN phone', shot);

  step = 'the permission waits in /inbox';
  const inbox = await phone.newPage();
  await inbox.goto(`${login}/inbox`);
  const card = inbox.locator('[data-card]').first();
  await card.waitFor({ timeout: 60000 });
  const title = await card.locator('h2').innerText();
  if (!title.includes('bash')) throw new Error(`the card is not bash's: ${title}`);
  await shot('3-inbox', inbox);

  step = 'tap "Allow once" in /inbox';
  await card.locator('button[value=once]').tap();
  await inbox.waitForURL((u) => u.searchParams.get('done') === 'once', { timeout: 15000 });
  const told = await inbox.locator('#flash').innerText();
  if (!told.startsWith('Allowed once')) throw new Error(`the notice does not say what was answered: ${told}`);
  console.log(`allowed once at ${Date.now()}`);

  step = 'the web UI sees the run finish';
  await page.getByText('TOOL-FINISHED-7').first().waitFor({ timeout: 60000 });
  await shot('4-finished');

  if (named) {
    step = 'the portal at the address names where passkeys work';
    await page.goto(`${login}/`);
    const elsewhere = page.locator('#passkey-elsewhere');
    const offer = await elsewhere.innerText();
    if (offer !== `Add a passkey at ${named}`) throw new Error(`the portal's passkey button says ${JSON.stringify(offer)}`);
    await shot('5-passkeys-named');
    await namedPasskey(await phone.storageState());
  }

  step = 'no Basic challenge reached the phone';
  if (challenges !== 0) throw new Error(`${challenges} Basic challenges`);
  console.log('ok: every step passed');
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.message}`);
  await shot('failed').catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
