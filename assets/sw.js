// The control room's service worker (scope `/` on the login host, allowed by the gateway's
// `Service-Worker-Allowed` header). It keeps only the app shell: the gateway's own static files
// (styles, scripts, icons, the offline page). It never stores a page or an API answer: the
// control room, the inbox and every card come from the network each time (they are `no-store`,
// and may hold what an agent asked). When the network is gone, a navigation to a control-room
// page gets the offline page, which reconnects on its own. Anything else (a project's web UI
// under /p/…, OpenCode's API, the gateway's event stream) is not touched.
const SHELL = 'ocgw-shell-v1';
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
    // The page from the network, always; the offline page when there is none.
    event.respondWith(fetch(req).catch(() => caches.match('/_gw/static/offline.html')));
  } else if (FILES.includes(url.pathname)) {
    event.respondWith(caches.match(req).then((hit) => hit || fetch(req)));
  }
});
