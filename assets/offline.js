// The offline page: try the control room again when the device says it is online, and every
// few seconds (a gateway that was down comes back without the device noticing); then go back.
(() => {
  const state = document.getElementById('state');
  let wait = 2000;
  const attempt = async () => {
    try {
      const r = await fetch('/', { method: 'HEAD', cache: 'no-store', credentials: 'same-origin' });
      if (r.status < 500) { location.replace(location.pathname === '/_gw/static/offline.html' ? '/' : location.href); return; }
    } catch (_) { /* still offline */ }
    wait = Math.min(wait * 2, 30000);
    state.textContent = `Reconnecting (next try in ${Math.round(wait / 1000)} s)…`;
    setTimeout(attempt, wait);
  };
  window.addEventListener('online', attempt);
  setTimeout(attempt, wait);
})();
