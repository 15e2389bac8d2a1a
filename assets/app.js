// Live updates for the control room: the gateway's own event stream says "change" whenever what
// this user may see changed; the page then fetches its content again (the same HTML the server
// renders without script) and swaps it in. No framework, no state of its own.
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
