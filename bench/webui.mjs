// A cold load of OpenCode's web UI in headless Chromium on a throttled mobile network (Chrome
// DevTools Protocol network emulation: 1.6 Mbps down, 750 kbps up, 150 ms RTT, no cache), for
// each target given: bytes transferred (encoded, as on the wire) and the time until the prompt
// input is visible. Prints one JSON line per target.
// Usage: node bench/webui.mjs NAME=URL[@user:pass] ...   Env: CERT (the gateway's certificate).
import { launch } from '../tests/browser/chromium.mjs';

const cert = process.env.CERT;
const browser = await launch(cert);
for (const arg of process.argv.slice(2)) {
  const [name, rest] = [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)];
  const [url, creds] = rest.split('@');
  const headers = creds ? { authorization: `Basic ${Buffer.from(creds).toString('base64')}` } : {};
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, extraHTTPHeaders: headers });
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false, latency: 150, downloadThroughput: 1.6e6 / 8, uploadThroughput: 750e3 / 8,
  });
  let bytes = 0;
  cdp.on('Network.loadingFinished', (e) => { bytes += e.encodedDataLength; });
  const start = Date.now();
  await page.goto(url);
  await page.locator('[data-component=prompt-input]').waitFor({ timeout: 120000 });
  const ms = Date.now() - start;
  console.log(JSON.stringify({ target: name, bytes, prompt_visible_ms: ms }));
  await context.close();
}
await browser.close();
