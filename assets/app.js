// Live updates for the control room: the gateway's own event stream says "change" whenever what
// this user may see changed; the page then fetches its content again (the same HTML the server
// renders without script) and swaps it in. No framework, no state of its own.
// It also registers the service worker that makes the control room an installable app (it
// keeps the app shell only: assets/sw.js).
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register('/_gw/static/sw.js', { scope: '/' }).catch(() => {});
}
(() => {
  const live = document.getElementById('live');
  if (!live || !window.EventSource) return;
  let busy = false;
  let again = false;
  const refresh = async () => {
    if (busy) { again = true; return; }
    busy = true;
    try {
      // Not while a person is typing into a form on the page.
      const typing = live.contains(document.activeElement) && /INPUT|TEXTAREA/.test(document.activeElement.tagName);
      const open = live.querySelector('details[open]');
      if (!typing && !open) {
        const r = await fetch(live.dataset.src, { credentials: 'same-origin' });
        if (r.status === 200) live.innerHTML = await r.text();
        else if (r.status === 401 || r.redirected) location.reload();
      } else {
        again = true;
      }
    } finally {
      busy = false;
      if (again) { again = false; setTimeout(refresh, 1000); }
    }
  };
  const source = new EventSource('/_gw/events');
  source.addEventListener('change', refresh);
  // After a reconnect, what changed in between is unknown: refresh once.
  source.addEventListener('open', refresh);
})();

// Ages that count: every element with `data-since` (ms since the epoch) shows how long ago that
// was, in the server's words ("5 s", "3 min", "2 h", "1 d"). Without script the server's text stays.
(() => {
  const ago = (ms) => {
    const s = Math.max(0, Math.floor((Date.now() - ms) / 1000));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 86400) return `${Math.floor(s / 3600)} h`;
    return `${Math.floor(s / 86400)} d`;
  };
  const tick = () => {
    for (const el of document.querySelectorAll('[data-since]')) {
      const since = Number(el.dataset.since);
      if (since > 0) el.textContent = ago(since);
    }
  };
  setInterval(tick, 1000);
})();
