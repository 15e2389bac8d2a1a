// The control room's service worker (scope `/` on the login host, allowed by the gateway's
// `Service-Worker-Allowed` header). It keeps only the app shell: the gateway's own static files
// (styles, scripts, icons, the offline page), served from the network while there is one and
// from its cache offline. It never stores a page or an API answer: the
// control room, the inbox and every card come from the network each time (they are `no-store`,
// and may hold what an agent asked). When the network is gone, a navigation to a control-room
// page gets the offline page, which reconnects on its own. Anything else (a project's web UI
// under /p/…, OpenCode's API, the gateway's event stream) is not touched.
const SHELL = 'ocgw-shell-v3';
const FILES = ['/_gw/static/app.css', '/_gw/static/app.js', '/_gw/static/icon.svg', '/_gw/static/icon-192.png',
  '/_gw/static/offline.html', '/_gw/static/offline.js'];
const PAGES = ['/', '/inbox', '/pair', '/login'];

self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(SHELL).then((c) => c.addAll(FILES)).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== SHELL).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET') return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin) return;
  if (req.mode === 'navigate' && PAGES.includes(url.pathname)) {
    // The page from the network, always; the offline page when there is none, or when the
    // network gives no answer within a few seconds (a dead link made the page spin ~50 s). The
    // offline page then says why, as well as a page can tell.
    event.respondWith(new Promise((resolve) => {
      const offline = () => resolve(caches.match('/_gw/static/offline.html'));
      const timer = setTimeout(offline, 5000);
      fetch(req).then((r) => { clearTimeout(timer); resolve(r); }, () => { clearTimeout(timer); offline(); });
    }));
  } else if (FILES.includes(url.pathname)) {
    // The network's copy while there is one (a gateway upgraded since the install serves new
    // styles and scripts at once), kept for offline; the kept copy only offline.
    event.respondWith(fetch(req)
      .then((fresh) => {
        const copy = fresh.clone();
        if (fresh.ok) caches.open(SHELL).then((c) => c.put(req, copy));
        return fresh;
      })
      .catch(() => caches.match(req)));
  }
});

// A push from the gateway (Web Push, encrypted for this device): a new pending request. The
// notification names the project and the tool, and opens the inbox; it carries no answer.
self.addEventListener('push', (event) => {
  let m = {};
  try { m = event.data ? event.data.json() : {}; } catch (_) { /* not ours */ }
  const title = m.title ? `OpenCode: ${m.title}` : 'OpenCode: a request waits for you';
  event.waitUntil(self.registration.showNotification(title, {
    body: m.body || 'Open the inbox to answer it.',
    tag: 'ocgw-inbox',
    renotify: true,
    icon: '/_gw/static/icon-192.png',
    data: { url: '/inbox' },
  }));
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  event.waitUntil((async () => {
    for (const c of await self.clients.matchAll({ type: 'window' })) {
      if (new URL(c.url).origin === self.location.origin) { await c.navigate('/inbox'); return c.focus(); }
    }
    return self.clients.openWindow('/inbox');
  })());
});

