// The offline page: says why the control room did not open, in words, within seconds, and tries
// again a bounded number of times (issue 38: it said "reconnecting" forever, even when the cause
// was a certificate the device no longer trusts, or a logout).
// What a page can tell apart (a fetch never says why TLS failed):
// - the device itself says it is offline (`navigator.onLine`);
// - no answer within a few seconds: the gateway cannot be reached (a dead link, a firewall);
// - a failure at once while online: the gateway's plain-HTTP port is asked (see `refused`): the
//   gateway runs there, so the certificate is likely not trusted any more (said as likely), or
//   nothing runs there;
// - an answer that sends to the login page (or 401): logged out.
(() => {
  const state = document.getElementById('state');
  const title = document.querySelector('#offline h1');
  const TIMEOUT = 4000;
  const TRIES = 6;
  let tries = 0;
  let wait = 2000;
  const say = (h, text) => { title.textContent = h; state.textContent = text; };
  const check = async () => {
    if (!navigator.onLine) return ['offline', 'This device is offline: it has no network.'];
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), TIMEOUT);
    try {
      const r = await fetch('/', { cache: 'no-store', credentials: 'same-origin', redirect: 'manual', signal: stop.signal });
      if (r.type === 'opaqueredirect' || r.status === 401) return ['out', 'You are logged out on this device. Log in again.'];
      if (r.status < 500) return ['ok'];
      return ['down', `The gateway answered ${r.status}: it is up but cannot serve the control room right now.`];
    } catch (_) {
      if (stop.signal.aborted) return ['unreachable', `Cannot reach the gateway: no answer within ${TIMEOUT / 1000} s (no route to it from this network, or it is down).`];
      return refused();
    } finally {
      clearTimeout(timer);
    }
  };
  // The secure connection failed at once. The gateway's plain-HTTP port holds a TLS hello
  // unanswered (front/acme/http.rs), so an HTTPS fetch there hangs when the gateway runs on this
  // host and fails at once when nothing does; any other way to ask it is blocked as mixed content.
  const port = document.getElementById('offline').dataset.http;
  const caPage = port ? `http://${location.hostname}:${port}/ca` : null;
  const refused = async () => {
    if (!port) {
      return ['refused', 'The gateway did not accept a secure connection from this device. Either it is not running at this address, '
        + 'or this device no longer trusts its certificate (install its CA again from its /ca page).'];
    }
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 1500);
    try {
      await fetch(`https://${location.hostname}:${port}/`, { mode: 'no-cors', cache: 'no-store', signal: stop.signal });
    } catch (_) { /* judged below */ } finally { clearTimeout(timer); }
    if (stop.signal.aborted) {
      return ['certificate', 'The gateway is running, but this device did not accept its secure connection: most likely its '
        + `certificate is not trusted here any more (its development CA was made again). Install the CA again from ${caPage}, then try again.`];
    }
    return ['unreachable', 'Cannot reach the gateway: nothing answered at this address (it is not running, or this network blocks it).'];
  };
  const attempt = async () => {
    tries += 1;
    const [kind, text] = await check();
    if (kind === 'ok') { location.replace(location.pathname === '/_gw/static/offline.html' ? '/' : location.href); return; }
    if (kind === 'out') { say('Logged out', text); document.getElementById('retry').setAttribute('href', '/login'); return; }
    const heads = { offline: 'Offline', unreachable: 'Cannot reach the gateway', refused: 'No secure connection', certificate: 'Certificate not trusted', down: 'The gateway has a problem' };
    if (tries >= TRIES) { say(heads[kind], `${text} Stopped trying after ${tries} tries: tap "Try again now".`); return; }
    wait = Math.min(wait * 2, 30000);
    say(heads[kind], `${text} Next try in ${Math.round(wait / 1000)} s (${tries} of ${TRIES}).`);
    setTimeout(attempt, wait);
  };
  window.addEventListener('online', () => { tries = 0; attempt(); });
  attempt();
})();
