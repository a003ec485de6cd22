import { test } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import type { Page } from 'playwright-core';
import { API, member } from '../support/people.ts';
import { waitFor } from '../support/devices.ts';
import { browserKeys, decryptPush, deliveringTo, startPushService } from '../support/push-service.ts';
import { startTestService } from '../support/service.ts';
import { assertAccessible, launchBrowser, phonePage, shot, signIn } from './browser.ts';

interface ShownNotification { title: string; body: string; tag: string; url: string | null }
interface Worker { state: string; scriptURL: string; addEventListener(type: 'statechange', listener: () => void): void }
interface Registration { scope: string; active: Worker | null; getNotifications(): Promise<Array<{ title: string; body: string; tag: string; data: unknown }>> }
/** The page's globals this file reads (the tests compile without the DOM typings). */
type PageGlobals = { navigator: { serviceWorker: { ready: Promise<Registration>; getRegistration(scope: string): Promise<Registration | undefined> } } };

/** The notifications the page's service worker registration shows, read in the page. */
function shownNotifications(page: Page): Promise<ShownNotification[]> {
  return page.evaluate(async () => {
    const registration = await (globalThis as unknown as PageGlobals).navigator.serviceWorker.getRegistration('/');
    const list = (await registration?.getNotifications()) ?? [];
    return list.map((n) => ({ title: n.title, body: n.body, tag: n.tag, url: (n.data as { url?: string } | null)?.url ?? null }));
  });
}

test('a member enables notifications: the service worker is active at /, a push of the server\'s shape shows a notification, and the test notification travels the whole way', async (t) => {
  const push = await startPushService(t);
  const ts = await startTestService(t, { logLevel: 'warn', pushNetwork: deliveringTo(push) });
  const amina = await member(ts, 'amina@push.test'); // password: support's default
  const browser = await launchBrowser(t);
  const { page, context, problems } = await phonePage(browser, t);
  await context.grantPermissions(['notifications'], { origin: ts.url });

  await page.goto(`${ts.url}/`);
  await signIn(page, amina.email);
  const section = page.getByRole('region', { name: 'Notifications on this device' });
  await section.getByText('Notifications are off on this device.').waitFor();

  // The worker is served from the root with no long cache, under the console's CSP.
  const sw = await fetch(`${ts.url}/sw.js`);
  assert.equal(sw.status, 200);
  assert.match(sw.headers.get('content-type') ?? '', /^text\/javascript/);
  assert.equal(sw.headers.get('cache-control'), 'no-cache');
  assert.match(sw.headers.get('content-security-policy') ?? '', /script-src 'self'/);

  await section.getByRole('button', { name: 'Enable notifications on this device' }).click();
  // The worker's registration, install and activation are the slow part on a loaded machine: waited for in the
  // page, by its own events, rather than under a locator's fixed timeout. `ready` resolves once a worker is
  // active, which may still be 'activating' (Service Workers, "ready"): its statechange says when it is done.
  const registration = await page.evaluate(async () => {
    const r = await (globalThis as unknown as PageGlobals).navigator.serviceWorker.ready;
    const worker = r.active!;
    if (worker.state !== 'activated') await new Promise<void>((done) => worker.addEventListener('statechange', () => worker.state === 'activated' && done()));
    return { scope: r.scope, state: worker.state, script: worker.scriptURL };
  });
  assert.deepEqual(registration, { scope: `${ts.url}/`, state: 'activated', script: `${ts.url}/sw.js` });
  // What is left of the page's answer: the VAPID key's GET and the browser's subscribe, which fails here.
  const status = section.locator('[data-push-status]');
  await status.filter({ hasText: /could not reach its push service|Notifications are on for this device/ }).waitFor();
  // Headless Chromium has no push service to reach: the page says so plainly and keeps working. Should a
  // browser here ever subscribe, the subscription must then be in the API.
  const db = new Database(ts.config.databasePath, { readonly: true });
  t.after(() => db.close());
  const stored = db.prepare('SELECT count(*) AS n FROM push_subscriptions WHERE user_id = ?').get(amina.id) as { n: number };
  const subscribed = /Notifications are on/.test((await status.textContent()) ?? '');
  assert.equal(stored.n, subscribed ? 1 : 0);
  await shot(page, 'member-push');

  // A push of the shape the server sends (a broadcast), delivered through the DevTools protocol.
  const cdp = await context.newCDPSession(page);
  const registrationIds: string[] = [];
  cdp.on('ServiceWorker.workerRegistrationUpdated', (e: { registrations: Array<{ registrationId: string; scopeURL: string; isDeleted: boolean }> }) => {
    for (const r of e.registrations) if (r.scopeURL === `${ts.url}/` && !r.isDeleted) registrationIds.push(r.registrationId);
  });
  // Each version of the worker as DevTools reports it: whether it is activated, and whether it runs now.
  const versions = new Map<string, { registrationId: string; status: string; runningStatus: string }>();
  cdp.on('ServiceWorker.workerVersionUpdated', (e: { versions: Array<{ versionId: string; registrationId: string; status: string; runningStatus: string }> }) => {
    for (const v of e.versions) versions.set(v.versionId, v);
  });
  await cdp.send('ServiceWorker.enable');
  const registrationId = await waitFor('the registration id', () => registrationIds[0], 10_000);
  const running = () => [...versions.values()].some((v) => v.registrationId === registrationId && v.status === 'activated' && v.runningStatus === 'running');
  // A push goes to a running worker only: the DevTools protocol can drop one sent while the worker is still
  // starting (a full CI run on a loaded machine lost one), so a stopped worker is started first and the push
  // sent once DevTools says it runs. Sent again every 2 s until shown, should the worker stop in between; each
  // notification has its own tag, so a second delivery replaces the first instead of adding one.
  const shownOnce = async (what: string, payload: { title: string; [key: string]: unknown }) => {
    let [startedAt, sentAt] = [0, 0];
    return waitFor(what, async () => {
      const shown = (await shownNotifications(page)).find((n) => n.title === payload.title);
      if (shown) return shown;
      if (!running()) {
        if (Date.now() - startedAt >= 2000) {
          startedAt = Date.now();
          await cdp.send('ServiceWorker.startWorker', { scopeURL: `${ts.url}/` });
        }
      } else if (Date.now() - sentAt >= 2000) {
        sentAt = Date.now();
        await cdp.send('ServiceWorker.deliverPushMessage', { origin: ts.url, registrationId, data: JSON.stringify(payload) });
      }
      return undefined;
    }, 15_000);
  };
  const first = await shownOnce('the broadcast notification', { title: 'Azaan (maghrib)', body: 'Masjid An-Nur', broadcast_id: 'b-1', mosque_id: 'm-1', kind: 'azaan', prayer: 'maghrib' });
  assert.deepEqual(first, { title: 'Azaan (maghrib)', body: 'Masjid An-Nur', tag: 'broadcast:b-1', url: '/' });
  // An admin's alert opens the mosque's schedule when clicked.
  const alert = await shownOnce('the alert notification', { title: 'Missed azaan: Isha', body: 'Missed: ...', mosque_id: 'm-1', kind: 'azaan_missed', prayer: 'isha', date: '2026-06-10' });
  assert.equal(alert.url, '/mosques/m-1/schedule');

  // The chain: the test route -> the outbox -> Web Push encryption -> the (local) push service. The browser
  // cannot hold a subscription here, so the subscription's keys are the test's own; the test decrypts the
  // message as the browser's push stack would and hands the plaintext to this worker.
  const keys = browserKeys();
  const saved = await ts.http.post(`${API}/me/push-subscriptions`, { endpoint: `${push.origin}/push/amina`, keys: keys.keys }, amina.token);
  assert.equal(saved.status, 201);
  await section.getByRole('button', { name: 'Send me a test notification' }).click();
  await status.filter({ hasText: `A test notification is on its way to ${subscribed ? 2 : 1} of your devices.` }).waitFor();
  await waitFor('the encrypted test message', () => push.to('/push/amina').length === 1, 10_000);
  const payload = decryptPush(push.to('/push/amina')[0]!.body, keys) as Record<string, unknown>;
  assert.equal(payload.kind, 'test');
  const shown = await shownOnce('the test notification', payload as { title: string });
  assert.equal(shown.body, payload.body);

  await assertAccessible(page, 'member home with notifications');
  assert.deepEqual(problems, []);
});

test("a member sees each of their devices that gets notifications and removes one; nobody else's is listed", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const amina = await member(ts, 'amina@push.test');
  const bilal = await member(ts, 'bilal@push.test');
  // Headless Chromium cannot subscribe (no push service): the subscriptions are the API's, of a browser's shape.
  const phone = 'https://fcm.googleapis.com/fcm/send/amina-phone';
  const laptop = 'https://updates.push.services.mozilla.com/wpush/v2/amina-laptop';
  for (const [who, endpoint] of [[amina, phone], [amina, laptop], [bilal, 'https://fcm.googleapis.com/fcm/send/bilal']] as const) {
    assert.equal((await ts.http.post(`${API}/me/push-subscriptions`, { endpoint, keys: browserKeys().keys }, who.token)).status, 201);
  }
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await page.goto(`${ts.url}/`);
  await signIn(page, amina.email);

  const list = page.locator('[data-push-devices]');
  const row = (endpoint: string) => list.locator(`li[data-push-endpoint="${endpoint}"]`);
  await row(laptop).waitFor();
  assert.deepEqual(await list.locator('li').evaluateAll((els) => els.map((e) => e.getAttribute('data-push-endpoint'))), [phone, laptop]);
  assert.match((await row(phone).textContent()) ?? '', /Chrome \/ Android/);
  assert.match((await row(laptop).textContent()) ?? '', /Firefox.*Added/);
  // Neither is this browser's (it holds no subscription).
  assert.equal(await list.locator('[data-this-device]').count(), 0);
  await assertAccessible(page, 'member home with their push devices');
  await shot(page, 'member-push-devices');

  await row(laptop).getByRole('button', { name: 'Remove: Firefox' }).click();
  await page.locator('[data-push-status]').filter({ hasText: 'Notifications to Firefox are turned off.' }).waitFor();
  await row(laptop).waitFor({ state: 'detached' });
  assert.equal(await row(phone).count(), 1);
  const left = await ts.http.get(`${API}/me/push-subscriptions`, amina.token);
  assert.deepEqual(left.body.map((s: { endpoint: string }) => s.endpoint), [phone]);
  assert.equal((await ts.http.get(`${API}/me/push-subscriptions`, bilal.token)).body.length, 1, "bilal's stays");
  assert.deepEqual(problems, []);
});
