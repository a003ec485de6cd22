// The console's service worker (docs/console.md): it shows the Web Push messages Minaret sends and opens the
// console when one is clicked. Served at /sw.js so its scope is the whole console, never cached for long, and
// under the same Content-Security-Policy as the pages. It caches nothing: the console reads a live API, and a
// page kept offline would show a player or a schedule that is no longer true.

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

/** The payload notify/webpush.ts encrypts: {title, body, kind, mosque_id?, broadcast_id?, prayer?, date?}. */
function payloadOf(data) {
  if (!data) return {};
  try {
    const value = data.json();
    return value && typeof value === 'object' ? value : {};
  } catch {
    return { body: data.text() };
  }
}

/** Where a click leads: an admin's alert to the mosque's schedule, everything else to the member's home. */
function pageFor(p) {
  const mosque = typeof p.mosque_id === 'string' && /^[\w-]+$/.test(p.mosque_id) ? p.mosque_id : null;
  if (mosque && (p.kind === 'azaan_not_ready' || p.kind === 'azaan_missed')) return `/mosques/${mosque}/schedule`;
  return '/';
}

self.addEventListener('push', (event) => {
  const p = payloadOf(event.data);
  const title = typeof p.title === 'string' && p.title ? p.title : 'Minaret';
  // One notification per broadcast or slot: a retried delivery replaces the first instead of ringing twice.
  const tag = p.broadcast_id ? `broadcast:${p.broadcast_id}` : p.kind ? `${p.kind}:${p.mosque_id ?? ''}:${p.date ?? ''}:${p.prayer ?? ''}` : 'minaret';
  event.waitUntil(self.registration.showNotification(title, {
    body: typeof p.body === 'string' ? p.body : '',
    tag,
    dir: 'auto',
    data: { url: pageFor(p) },
  }));
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const path = event.notification.data?.url ?? '/';
  event.waitUntil((async () => {
    const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
    const open = windows.find((w) => new URL(w.url).origin === self.location.origin);
    if (!open) return void (await self.clients.openWindow(path));
    // The open tab holds the sign-in in memory: it moves inside itself rather than being reloaded.
    await open.focus();
    open.postMessage({ type: 'minaret.open', path });
  })());
});
