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

// "Notify me on this device": Web Push. The browser subscribes with the gateway's VAPID key and
// the subscription is posted to the gateway (`/_gw/push`), which sends one message per new
// pending request this user may answer (the project and the tool; never the command). Shown
// only where the browser can do it.
(() => {
  const box = document.getElementById('push');
  if (!box || !('serviceWorker' in navigator) || !('PushManager' in window) || !('Notification' in window)) return;
  const state = document.getElementById('push-state');
  const on = document.getElementById('push-on');
  const off = document.getElementById('push-off');
  const key = Uint8Array.from(atob(box.dataset.key.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
  const post = (fields) => fetch('/_gw/push', {
    method: 'POST', credentials: 'same-origin', body: new URLSearchParams(fields),
  }).then((r) => { if (!r.ok) throw new Error(`the gateway answered ${r.status}`); });
  const show = (sub) => {
    on.hidden = !!sub;
    off.hidden = !sub;
    state.textContent = sub ? 'This device is told when an agent waits for you.'
      : 'This device is not told when an agent waits for you.';
  };
  const NO_SERVICE = 'this browser has no push service here (it did not give a subscription within 8 s), so the gateway cannot reach this device';
  const BLOCKED = 'Notifications are blocked for this site. To allow them: on iPhone or iPad (iOS 16.4 or later, only for the app '
    + 'added to the Home Screen) Settings › Notifications › OpenCode › Allow Notifications; on Android, Chrome › ⋮ › Settings › '
    + 'Site settings › Notifications, then this site › Allow. Then tap "Notify me on this device" again.';
  navigator.serviceWorker.ready.then(async (reg) => {
    box.hidden = false;
    show(await reg.pushManager.getSubscription());
    if (Notification.permission === 'denied') state.textContent = BLOCKED;
    on.addEventListener('click', async () => {
      try {
        if (await Notification.requestPermission() !== 'granted') { state.textContent = BLOCKED; return; }
        state.textContent = 'Asking this browser\'s push service…';
        // A browser with no push service (no Google services, some privacy builds, headless)
        // may never answer: give up after a few seconds and say so.
        const sub = await Promise.race([
          reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }),
          new Promise((_, no) => setTimeout(() => no(new Error(NO_SERVICE)), 8000)),
        ]).catch((e) => {
          if (e.message === NO_SERVICE) throw e;
          throw new Error(`this browser's push service refused a subscription (${e.message}), so the gateway cannot reach this device`);
        });
        const j = sub.toJSON();
        await post({ do: 'subscribe', endpoint: j.endpoint, p256dh: j.keys.p256dh, auth: j.keys.auth });
        show(sub);
      } catch (e) { state.textContent = `Notifications are not on: ${e.message}`; }
    });
    off.addEventListener('click', async () => {
      const sub = await reg.pushManager.getSubscription();
      if (sub) { await post({ do: 'remove', endpoint: sub.endpoint }).catch(() => {}); await sub.unsubscribe(); }
      show(null);
    });
  });
})();

