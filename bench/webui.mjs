// A cold load of OpenCode's web UI in headless Chromium on a throttled mobile network (Chrome
// DevTools Protocol network emulation: 1.6 Mbps down, 750 kbps up, 150 ms RTT, no cache), for
// each target given: bytes transferred (encoded, as on the wire), the time until the prompt
// input is visible, and how the main script came (protocol, Content-Encoding). Prints one JSON
// line per target; exits non-zero if a target never shows the prompt (no number without a UI).
// Usage: node bench/webui.mjs NAME=URL[@user:pass] ...   Env: CERT (the proxies' certificate).
// Run by bench/bench.py's webui section, one target per run, so each load is a fresh browser.
import { launch } from '../tests/browser/chromium.mjs';

const cert = process.env.CERT;
const SETTLE_MS = Number(process.env.SETTLE_MS || 300000);
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
  let main = null;
  const urls = new Map();
  const finished = new Set();
  let lastFinish = 0;
  const done = [];
  cdp.on('Network.requestWillBeSent', (e) => { urls.set(e.requestId, new URL(e.request.url).pathname); });
  cdp.on('Network.loadingFinished', (e) => {
    done.push([urls.get(e.requestId), e.encodedDataLength]);
    finished.add(e.requestId);
    lastFinish = Date.now();
  });
  const streams = new Set();
  const failed = new Set();
  cdp.on('Network.loadingFailed', (e) => { failed.add(e.requestId); });
  const sum = (xs) => xs.reduce((a, [, b]) => a + b, 0);
  // The main script is the one large file: how it came says what the proxy did with it.
  cdp.on('Network.responseReceived', (e) => {
    if (e.response.mimeType === 'text/event-stream') streams.add(e.requestId);
    if (/\/assets\/index-[^/]*\.js$/.test(new URL(e.response.url).pathname)) {
      const h = Object.fromEntries(Object.entries(e.response.headers).map(([k, v]) => [k.toLowerCase(), v]));
      main = { protocol: e.response.protocol, encoding: h['content-encoding'] || 'identity', status: e.response.status };
    }
  });
  const start = Date.now();
  await page.goto(url);
  try {
    await page.locator('[data-component=prompt-input]').waitFor({ timeout: 120000 });
  } catch (e) {
    console.error(`${name}: the web UI never showed its prompt input at ${url}: ${e.message}`);
    process.exit(1);
  }
  const ms = Date.now() - start;
  // What came before the prompt showed: the document, the scripts and styles, and the API
  // answers that happened to finish first (which ones is a race; the jsonl keeps the lists).
  const api = done.filter(([p]) => !p.startsWith('/assets/') && p !== new URL(url).pathname);
  const res = {
    target: name, bytes: sum(done), api_bytes: sum(api), prompt_visible_ms: ms, requests: done.length, main,
    done: [...done],
    // Still under way (event streams, slow API answers) or failed by then.
    open: [...urls].filter(([id]) => !finished.has(id) && !failed.has(id)).map(([, p]) => p),
    failed: [...failed].map((id) => urls.get(id)),
  };
  // Then every other answer the page asked for (the largest, `/provider`, is what the model
  // picker needs): all requests but the event streams finished, and none new for 2 s.
  const pending = () => [...urls.keys()].filter((id) => !finished.has(id) && !failed.has(id) && !streams.has(id));
  let quietSince = Date.now();
  while (Date.now() - start < SETTLE_MS) {
    if (pending().length) quietSince = Date.now();
    else if (Date.now() - quietSince >= 2000) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const left = pending().map((id) => urls.get(id));
  Object.assign(res, { all_answers_ms: left.length ? null : lastFinish - start, bytes_all: sum(done), left,
    provider_requests: [...urls.values()].filter((p) => p === '/provider').length });
  console.log(JSON.stringify(res));
  await context.close();
}
await browser.close();
