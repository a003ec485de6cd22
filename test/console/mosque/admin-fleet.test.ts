import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';
import { SimDevice } from '../../../simulator/device.ts';
import { API } from '../../support/people.ts';
import { createManualClock, startTestService, type TestService } from '../../support/service.ts';
import { connectDevice, endClient, mosqueWithOwner, publish, registerPlayer, registerTransmitter, statusPayload, waitForStatus } from '../../support/devices.ts';
import { WAIT_MS, assertAccessible, shot, signedInAdminPage } from '../browser.ts';

const OFFLINE_FOR_MS = (3 * 3600 + 12 * 60) * 1000;

const shownIds = (page: Page) => page.locator('li[data-device]').evaluateAll((els) => els.map((e) => e.getAttribute('data-device')!).sort());

async function apiDevices(ts: TestService, token: string, mosqueId: string) {
  const res = await ts.http.get(`${API}/devices?mosque_id=${mosqueId}`, token);
  assert.equal(res.status, 200);
  return res.body as Array<{ id: string; status: string; status_detail: { reason?: string } }>;
}

test('the fleet filter shows exactly the devices the API reports in that state, keeps it across Back and a reload, and ticks "offline for"', async (t) => {
  // The service's clock starts 3 h 12 min in the past, so two devices last heard then are "offline for 3 h 12 min" now.
  const clock = createManualClock(Date.now() - OFFLINE_FOR_MS - 20_000);
  const ts = await startTestService(t, { clock, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid An-Nur' });
  const [online, stale, gone, never, broken] = await Promise.all(['Minbar', 'Courtyard', 'Library', 'Spare', 'Basement']
    .map((name) => registerTransmitter(ts, owner.token, mosque.id, name)));

  const staleClient = await connectDevice(t, stale!.credentials);
  await publish(staleClient, `devices/${stale!.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  const goneClient = await connectDevice(t, gone!.credentials);
  await publish(goneClient, `devices/${gone!.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await new Promise<void>((resolve) => goneClient.end(false, {}, () => resolve()));
  await waitForStatus(ts, owner.token, gone!.device.id, 'OFFLINE', WAIT_MS);
  clock.advance(OFFLINE_FOR_MS); // the silent one misses far more than 3 heartbeats: the sweep marks it stale
  await waitForStatus(ts, owner.token, stale!.device.id, 'OFFLINE', WAIT_MS);
  const onlineClient = await connectDevice(t, online!.credentials);
  await publish(onlineClient, `devices/${online!.device.id}/status`, statusPayload('ONLINE', { fw: '1.4.2', rssi: -61 }), { retain: true });
  const brokenClient = await connectDevice(t, broken!.credentials);
  await publish(brokenClient, `devices/${broken!.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await publish(brokenClient, `devices/${broken!.device.id}/status`, statusPayload('CONFIG_ERROR', { detail: { keys: ['volume'] } }), { retain: true });
  await waitForStatus(ts, owner.token, online!.device.id, 'ONLINE', WAIT_MS);
  await waitForStatus(ts, owner.token, broken!.device.id, 'CONFIG_ERROR', WAIT_MS);

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/devices` });
  await page.getByRole('heading', { name: 'Masjid An-Nur' }).waitFor();
  await page.getByText('Updating live').waitFor();
  const filter = page.getByLabel('Show');

  // Every filter against the API's own answer (the statuses of docs/firmware.md, "3.1 Status"; stale is OFFLINE with reason stale).
  const devices = await apiDevices(ts, owner.token, mosque.id);
  const ids = (pick: (d: (typeof devices)[number]) => boolean) => devices.filter(pick).map((d) => d.id).sort();
  const expected: Record<string, string[]> = {
    all: ids(() => true),
    offline: ids((d) => d.status === 'OFFLINE'),
    stale: ids((d) => d.status === 'OFFLINE' && d.status_detail.reason === 'stale'),
    online: ids((d) => d.status === 'ONLINE'),
    error: ids((d) => d.status === 'CONFIG_ERROR'),
    never: ids((d) => d.status === 'UNKNOWN'),
  };
  assert.deepEqual(expected.offline, [stale!.device.id, gone!.device.id].sort(), 'the setup made two offline devices');
  assert.deepEqual(expected.stale, [stale!.device.id]);
  assert.deepEqual(expected.never, [never!.device.id]);
  for (const [state, want] of Object.entries(expected)) {
    await filter.selectOption(state);
    await page.waitForFunction((n) => (globalThis as any).document.querySelectorAll('li[data-device]').length === n, want.length);
    assert.deepEqual(await shownIds(page), want, `filter ${state}`);
    assert.equal(new URL(page.url()).searchParams.get('state'), state === 'all' ? null : state, 'the filter is in the URL');
  }

  // Offline devices say for how long, and the durations tick without a reload.
  await filter.selectOption('offline');
  const staleCard = page.locator(`li[data-device="${stale!.device.id}"]`);
  assert.match(await staleCard.locator('dd [data-since]').innerText(), /^3 h 1[2-5] min$/);
  await staleCard.locator('.badge', { hasText: 'Stopped answering' }).waitFor();
  await filter.selectOption('online');
  const onlineCard = page.locator(`li[data-device="${online!.device.id}"]`);
  assert.equal(await onlineCard.locator('[data-fw]').innerText(), '1.4.2');
  assert.equal(await onlineCard.locator('[data-rssi]').innerText(), 'Good', 'the card says the signal in a word');
  assert.equal(await onlineCard.locator('[data-rssi]').getAttribute('data-rssi'), '-61');
  const before = await onlineCard.locator('[data-since]').innerText();
  assert.match(before, /^\d+ (s|min) ago$/);
  await page.waitForFunction(([sel, text]) => (globalThis as any).document.querySelector(sel!)?.textContent !== text, [`li[data-device="${online!.device.id}"] [data-since]`, before]);
  await shot(page, 'admin-fleet');
  await assertAccessible(page, 'fleet page');

  // Live: with the filter on offline, a device that drops appears without a reload.
  await filter.selectOption('offline');
  await endClient(onlineClient);
  await page.locator(`li[data-device="${online!.device.id}"]`).waitFor({ timeout: WAIT_MS });
  assert.deepEqual(await shownIds(page), [online!.device.id, stale!.device.id, gone!.device.id].sort());

  // Back from a device page and a reload (the console session keeps the page signed in) keep the filter.
  await staleCard.getByRole('link', { name: 'Courtyard' }).click();
  await page.getByRole('heading', { name: 'Courtyard' }).waitFor();
  await page.goBack();
  await page.getByRole('heading', { name: 'Masjid An-Nur' }).waitFor();
  // The page draws its heading before it reads the devices and applies the filter: wait for the cards first.
  await page.waitForFunction(() => (globalThis as any).document.querySelectorAll('li[data-device]').length === 3);
  assert.equal(await filter.inputValue(), 'offline');
  await page.reload();
  await page.getByRole('heading', { name: 'Masjid An-Nur' }).waitFor();
  await page.waitForFunction(() => (globalThis as any).document.querySelectorAll('li[data-device]').length === 3);
  assert.equal(await filter.inputValue(), 'offline');
  assert.equal(new URL(page.url()).searchParams.get('state'), 'offline');
  assert.deepEqual(await shownIds(page), [online!.device.id, stale!.device.id, gone!.device.id].sort());
  assert.deepEqual(problems, []);
});

test('a device that comes online while the fleet page is opening its live stream is shown online once the stream opens (nothing it missed stays stale)', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid An-Nur' });
  const tx = await registerTransmitter(ts, owner.token, mosque.id, 'Minbar');
  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}` });
  await page.getByText('Updating live').waitFor();
  // The fleet page's stream ticket is held until the device's change is committed: the page has read the
  // list (device never seen) and its stream is not open yet, so no event of that change can reach it.
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  await page.route('**/events/ticket', async (route) => {
    await held;
    await route.continue();
  });
  await page.getByRole('link', { name: 'Devices' }).click();
  const card = page.locator(`li[data-device="${tx.device.id}"]`);
  await card.waitFor();
  assert.equal(await card.locator('.badge', { hasText: 'Online' }).count(), 0, 'read before the device connected');
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await waitForStatus(ts, owner.token, tx.device.id, 'ONLINE', WAIT_MS);
  release();
  await page.getByText('Updating live').waitFor();
  await card.locator('.badge', { hasText: 'Online' }).waitFor({ timeout: WAIT_MS });
  assert.deepEqual(problems, []);
});

test('a page that loses its live stream says it is reconnecting, then catches up with what it missed', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid An-Nur' });
  const tx = await registerTransmitter(ts, owner.token, mosque.id, 'Minbar');
  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/devices` });
  const live = page.locator('[data-live]');
  await live.filter({ hasText: 'Updating live' }).waitFor();
  assert.equal(await live.getAttribute('data-live'), 'on');

  // The link drops: every stream the page opens from now on fails (a dropped stream is reopened afresh).
  await page.route('**/events/stream**', (route) => route.abort('connectionreset'));
  await page.getByRole('link', { name: 'Overview' }).click();
  await page.getByRole('link', { name: 'Devices' }).click();
  await live.filter({ hasText: 'Reconnecting' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await live.getAttribute('data-live'), 'off', 'the reconnecting state is styled apart, not only worded');
  const client = await connectDevice(t, tx.credentials); // meanwhile the transmitter comes online
  await publish(client, `devices/${tx.device.id}/status`, statusPayload('ONLINE', { rssi: -80 }), { retain: true });
  await waitForStatus(ts, owner.token, tx.device.id, 'ONLINE', WAIT_MS);
  const card = page.locator(`li[data-device="${tx.device.id}"]`);
  assert.equal(await card.locator('.badge', { hasText: 'Online' }).count(), 0, 'nothing reached the page while it was offline');

  await page.unroute('**/events/stream**');
  await live.filter({ hasText: 'Updating live' }).waitFor({ timeout: WAIT_MS });
  await card.locator('.badge', { hasText: 'Online' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await card.locator('[data-rssi]').innerText(), 'Weak');
  await card.getByRole('link', { name: 'Minbar' }).click();
  await page.getByRole('heading', { name: 'Minbar' }).waitFor();
  await page.getByText('Weak (-80 dBm)').waitFor(); // the device page gives the figure too
  assert.deepEqual(problems, []);
});

test('a stream player\'s log level is set from its page, and a ttl over an hour is refused by the page and by the API', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Al-Iman' });
  const reg = await registerPlayer(ts, owner, mosque.id, 'Kitchen speaker');
  const sim = new SimDevice({ kind: 'stream_player', id: reg.device.id, password: reg.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 15_000 });
  await sim.start();
  t.after(() => sim.stop().catch(() => {}));

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/devices/${reg.device.id}` });
  const commands: string[] = []; // only the form's buttons post to /commands
  page.on('request', (r) => { if (r.url().endsWith('/commands')) commands.push(r.postData() ?? ''); });
  await page.getByRole('heading', { name: 'Kitchen speaker' }).waitFor();
  const logForm = page.locator('form', { has: page.getByRole('heading', { name: 'Send log lines for a while' }) });

  await logForm.getByLabel('Level').selectOption('debug');
  await logForm.getByLabel('For how many seconds (1 to 3600)').fill('5000');
  await logForm.getByRole('button', { name: 'Turn on logging' }).click();
  await logForm.getByRole('alert').filter({ hasText: 'Enter a whole number of seconds from 1 to 3600.' }).waitFor();
  assert.deepEqual(commands, [], 'the page refused it without asking the API');
  const refused = await ts.http.post(`${API}/devices/${reg.device.id}/commands`, { name: 'set_log_level', args: { level: 'debug', ttl_s: 5000 } }, owner.token);
  assert.equal(refused.status, 400);
  assert.equal(refused.body.error.code, 'validation_failed');

  await logForm.getByLabel('For how many seconds (1 to 3600)').fill('600');
  await logForm.getByRole('button', { name: 'Turn on logging' }).click();
  await page.getByRole('status').filter({ hasText: /^Change the log level: done\. \(\d+ ms\)/ }).waitFor({ timeout: WAIT_MS });
  assert.equal(commands.length, 1);
  assert.deepEqual(JSON.parse(commands[0]!).args, { level: 'debug', ttl_s: 600 });
  const events = (await ts.http.get(`${API}/devices/${reg.device.id}/events`, owner.token)).body as Array<{ kind: string; detail: { level?: string } }>;
  assert.equal(events.find((e) => e.kind === 'log_level_set')?.detail.level, 'debug');
  await shot(page, 'admin-device-log-level');
  await assertAccessible(page, 'device page with the log level form');
  assert.deepEqual(problems, []);
});

test('a live broadcast\'s report on the page shows the transmitter sending, apart from the players, as the API does, and Stop ends it with the API\'s final report', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Al-Fajr' });
  const reg = await registerTransmitter(ts, owner.token, mosque.id, 'Minaret speaker');
  const sim = new SimDevice({ kind: 'transmitter', id: reg.device.id, password: reg.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 15_000 });
  await sim.start();
  t.after(() => sim.stop().catch(() => {}));
  await waitForStatus(ts, owner.token, reg.device.id, 'ONLINE', WAIT_MS);

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}` });
  await page.getByLabel('What').selectOption('azaan');
  // An azaan is a prayer's call: without the prayer the page refuses and nothing starts.
  await page.getByRole('button', { name: 'Start broadcast' }).click();
  await page.getByRole('alert').filter({ hasText: 'Choose the prayer' }).waitFor();
  assert.equal(((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body as unknown[]).length, 0, 'no broadcast started');
  await page.getByLabel('Prayer').selectOption('maghrib');
  await page.getByRole('button', { name: 'Start broadcast' }).click();
  const live = page.locator('li[data-broadcast]').filter({ has: page.locator('.badge', { hasText: 'Live' }) });
  // The transmitter starts playing after the start: the page reads the report again while the broadcast is live.
  // It is counted apart from the players (docs/api.md, "Broadcasts and their delivery report").
  await live.locator('dd[data-report="transmitter"]', { hasText: /^Sent it$/ }).waitFor({ timeout: WAIT_MS });
  const [started] = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body as Array<{ id: string; report: Record<string, number> & { transmitters: { playing: number } } }>;
  assert.equal(started!.report.transmitters.playing, 1, 'the API says the same');
  assert.equal(started!.report.playing, 0, 'a transmitter is no player');
  assert.equal(await live.locator('dd[data-report="playing"]').innerText(), '0');

  await live.getByRole('button', { name: 'Stop broadcast' }).click();
  const stopped = page.locator(`li[data-broadcast="${started!.id}"]`);
  await stopped.locator('.badge', { hasText: 'Stopped' }).waitFor();
  await page.locator('#flash', { hasText: 'Broadcast stopped.' }).waitFor();
  // The transmitter's answer to the stop lands after the stop itself: let the report settle, then open the
  // page again so it reads the same final report as the API.
  await new Promise((r) => setTimeout(r, 1500));
  await page.getByRole('link', { name: 'Overview' }).click();
  await stopped.locator('.badge', { hasText: 'Stopped' }).waitFor();
  const final = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${started!.id}`, owner.token)).body as { status: string; report: Record<string, number> };
  assert.equal(final.status, 'stopped');
  for (const part of ['playing', 'unbound', 'muted', 'offline', 'stream_error', 'other']) {
    assert.equal(await stopped.locator(`dd[data-report="${part}"]`).innerText(), String(final.report[part]), `report.${part}`);
  }
  assert.equal(await page.getByRole('button', { name: 'Stop broadcast' }).count(), 0);
  assert.deepEqual(problems, []);
});
