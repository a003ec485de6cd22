// Web Push on this device: the service worker (/sw.js), the browser's subscription with the API's VAPID key,
// and a test notification. A browser that cannot reach its push service says so and the page goes on working.
import { api } from '../api.js';
import { button, h, replace } from '../dom.js';
import { t, when } from '../i18n.js';
import { navigate } from '../nav.js';

const supported = () => 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;

// A click on a notification while the console is open: the worker asks this tab to move (a reload would
// lose the sign-in, which lives in memory only).
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.addEventListener('message', (e) => {
    const path = e.data?.type === 'minaret.open' ? e.data.path : null;
    if (typeof path === 'string' && /^\/[\w\-/]*$/.test(path)) navigate(path);
  });
  navigator.serviceWorker.startMessages();
}

/** The VAPID public key (base64url) as the bytes `applicationServerKey` takes. */
function keyBytes(base64url) {
  const b64 = base64url.replace(/-/g, '+').replace(/_/g, '/');
  const raw = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

async function currentSubscription() {
  const registration = await navigator.serviceWorker.getRegistration('/');
  return (await registration?.pushManager.getSubscription()) ?? null;
}

async function enable() {
  const permission = await Notification.requestPermission();
  if (permission !== 'granted') return { text: t(permission === 'denied' ? 'push.blocked' : 'push.not_allowed') };
  const registration = await navigator.serviceWorker.register('/sw.js', { scope: '/' });
  await navigator.serviceWorker.ready;
  const { public_key: key } = await api('GET', '/push/vapid-public-key');
  let sub;
  try {
    sub = await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
  } catch (err) {
    // Headless browsers, some privacy setups and de-Googled Chromium have no push service to reach.
    return { text: t('push.no_service', { reason: err?.message || err?.name || '?' }), failed: true };
  }
  const { endpoint, keys } = sub.toJSON();
  try {
    await api('POST', '/me/push-subscriptions', { endpoint, keys });
  } catch (err) {
    await sub.unsubscribe().catch(() => {});
    throw err;
  }
  return { text: t('push.enabled') };
}

async function disable() {
  const sub = await currentSubscription();
  if (!sub) return;
  const { endpoint } = sub;
  await sub.unsubscribe();
  await api('DELETE', '/me/push-subscriptions', { endpoint }).catch((err) => {
    if (err.status !== 404) throw err; // already gone on the server (the push service reported it dead)
  });
}

/** Push services by host, named as a person knows their browser; any other shows its host. */
const SERVICES = { 'fcm.googleapis.com': 'Chrome / Android', 'updates.push.services.mozilla.com': 'Firefox', 'web.push.apple.com': 'Safari / iPhone' };
function serviceName(endpoint) {
  const host = new URL(endpoint).host;
  return SERVICES[host] ?? (host.endsWith('.notify.windows.com') ? 'Edge / Windows' : host);
}

/**
 * Every device of the person that gets notifications (GET /me/push-subscriptions, docs/api.md, "Web Push, from a
 * browser's side"), each with a Remove. This browser's own is marked; removing it turns it off here as well.
 */
function deviceList(report, changed) {
  const list = h('ul', { class: 'list', 'aria-labelledby': 'push-dev-h', 'data-push-devices': '' });
  const load = async () => {
    const [subs, here] = await Promise.all([api('GET', '/me/push-subscriptions'), supported() ? currentSubscription().catch(() => null) : null]);
    replace(list, subs.length === 0 ? h('li', { class: 'muted' }, t('push.devices_none')) : subs.map((s) => {
      const name = serviceName(s.endpoint);
      const mine = s.endpoint === here?.endpoint;
      return h('li', { 'data-push-endpoint': s.endpoint },
        h('div', { class: 'row' }, h('strong', {}, name), mine && h('span', { class: 'badge', 'data-this-device': '' }, t('push.this_device'))),
        h('p', { class: 'muted' }, t('push.device_since', { when: when(s.created_at) })),
        button(t('push.remove'), async () => {
          if (mine) await disable();
          else await api('DELETE', '/me/push-subscriptions', { endpoint: s.endpoint });
          report(t('push.removed', { name }));
          await changed(mine);
        }, report, { class: 'secondary', 'aria-label': `${t('push.remove')}: ${name}` }));
    }));
  };
  return { el: [h('h3', { id: 'push-dev-h' }, t('push.devices_title')), list], load };
}

/** The member's "Notifications on this device" section, and their other devices that get them. */
export function pushSection() {
  const status = h('p', { role: 'status', 'data-push-status': '' });
  const controls = h('div', { class: 'row' });
  const report = (text) => { status.textContent = text; };
  const devices = deviceList(report, async (wasHere) => {
    if (wasHere) await render(t('push.disabled'));
    else await devices.load();
  });
  const section = h('section', { 'aria-labelledby': 'push-h' }, h('h2', { id: 'push-h' }, t('push.title')), status, controls, devices.el);

  const testButton = () => button(t('push.test'), async () => {
    const { queued } = await api('POST', '/me/push-subscriptions/test');
    report(queued === 0 ? t('push.test_none') : t('push.test_queued', { queued }));
  }, report, { class: 'secondary' });

  const render = async (message) => {
    void devices.load().catch((err) => report(err.message));
    if (!supported()) {
      report(t('push.unsupported'));
      return replace(controls, testButton());
    }
    const sub = await currentSubscription().catch(() => null);
    report(message ?? (sub ? t('push.on') : Notification.permission === 'denied' ? t('push.blocked') : t('push.off')));
    replace(controls,
      sub
        ? button(t('push.disable'), async () => { await disable(); await render(t('push.disabled')); }, report, { class: 'secondary' })
        : button(t('push.enable'), async () => {
          report(t('push.enabling'));
          const outcome = await enable();
          await render(outcome.text);
        }, report),
      testButton());
  };
  void render().catch((err) => report(err.message));
  return section;
}
