import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createManualClock, durableFiles, startTestService, type TestService } from '../support/service.ts';
import { redisInstalled, startRedis } from '../support/redis.ts';
import { API, createMosque, makeAdmin, member, mosqueActivity, signInSuperadmin } from '../support/people.ts';
import { connectDevice, getDevice, nowTs, publish, registerTransmitter, settle, statusPayload, waitFor } from '../support/devices.ts';
import { browserKeys, decryptPush, deliveringTo, startPushService, type PushService } from '../support/push-service.ts';
import { SimDevice } from '../../simulator/device.ts';
import { followSchedule } from '../../simulator/follow-schedule.ts';
import { storeOf } from '../support/database.ts';
import { createScheduleStore } from '../../src/schedule/schedule-store.ts';
import { createMosqueStore } from '../../src/mosques/mosques.ts';
import { createBroadcasts } from '../../src/broadcasts/broadcasts.ts';
import { createActivityLog } from '../../src/mosques/activity.ts';
import type { Slot } from '../../src/schedule/slots.ts';

// Wednesday 10 June 2026 in London (BST): Dhuhr's azaan is fixed at 13:00 local = 12:00 UTC.
// Ready check at 11:50 UTC (lead 10 min), missed check at 12:05 UTC (grace 5 min).
const T = (hhmm: string) => Date.parse(`2026-06-10T${hhmm}:00Z`);
const SCHEDULE = {
  timezone: 'Europe/London', latitude: 51.5072, longitude: -0.1276,
  prayer_times: { method: 'muslim_world_league', madhab: 'shafi' }, azaan: { dhuhr: { fixed: '13:00' } },
};

async function world(t: TestContext, extra: Record<string, unknown> = {}, env: Record<string, string> = {}, push?: PushService) {
  const clock = createManualClock(T('11:40'));
  const ts = await startTestService(t, { clock, logLevel: 'warn', env, ...(push && { pushNetwork: deliveringTo(push) }) });
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@schedule.test');
  const plain = await member(ts, 'plain-admin@schedule.test');
  const mosque = await createMosque(ts, root.token, owner, { ...SCHEDULE, ...extra });
  await makeAdmin(ts, root.token, mosque.id, plain); // no can_trigger: never alerted
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  return { ts, clock, root, owner, plain, mosque, tx };
}

async function dhuhr(ts: TestService, token: string, mosqueId: string) {
  const res = await ts.http.get(`${API}/mosques/${mosqueId}/schedule?date=2026-06-10`, token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.find((s: any) => s.prayer === 'dhuhr');
}

/**
 * Another process's schedule store: a connection of its own to the service's store (its file, or its
 * PostgreSQL), as processes sharing it have.
 */
async function otherProcessStore(t: TestContext, ts: TestService) {
  const { store, close } = await storeOf(ts);
  t.after(close);
  return createScheduleStore(store, createMosqueStore(store, Date.now));
}

/** Dhuhr on 10 June 2026 (azaan 12:00 UTC), as the scheduler derives it for SCHEDULE. */
const dhuhrSlot = (mosqueId: string): Slot => ({
  mosqueId, date: '2026-06-10', prayer: 'dhuhr', index: 0, startsAt: T('11:55'), azaanAt: T('12:00'),
  iqamahAt: null, azaanLocal: '13:00', source: 'calculated',
});

const alerts = (ts: TestService, purpose: string) => ts.messages.filter((m) => m.purpose === purpose);

test('with the transmitter offline the trigger admins hear "not ready" at the lead time and "missed" after the grace, once each', async (t) => {
  const { ts, clock, owner, mosque } = await world(t);
  assert.equal((await dhuhr(ts, owner.token, mosque.id)).status, 'upcoming');

  clock.set(T('11:50'));
  await ts.service.schedule.runDue();
  await ts.service.schedule.runDue();
  await ts.service.notifier.idle();
  const notReady = await dhuhr(ts, owner.token, mosque.id);
  assert.equal(notReady.status, 'not_ready');
  assert.equal(notReady.reason, 'transmitter_offline');
  assert.deepEqual(alerts(ts, 'azaan_not_ready').map((m) => m.to), ['owner@schedule.test']);
  assert.match(alerts(ts, 'azaan_not_ready')[0]!.text, /Dhuhr azaan at 13:00/);

  clock.set(T('12:05'));
  await ts.service.schedule.runDue();
  await ts.service.schedule.runDue();
  await ts.service.notifier.idle();
  const missed = await dhuhr(ts, owner.token, mosque.id);
  assert.equal(missed.status, 'missed');
  assert.equal(missed.reason, 'transmitter_offline');
  assert.equal(missed.broadcast_id, null);
  assert.deepEqual(alerts(ts, 'azaan_missed').map((m) => m.to), ['owner@schedule.test']);
  assert.equal(alerts(ts, 'azaan_not_ready').length, 1);
  const feed = await mosqueActivity(ts, owner.token, mosque.id);
  assert.ok(feed.some((e: any) => e.kind === 'schedule.azaan_missed' && e.data.prayer === 'dhuhr' && e.data.reason === 'transmitter_offline'));
});

test('the alerts also go by Web Push to the trigger admins\' subscriptions, once per slot and kind, and to nobody else', async (t) => {
  const push = await startPushService(t);
  const { ts, clock, owner, plain, mosque } = await world(t, {}, {}, push);
  const ownerBrowser = browserKeys();
  for (const [person, name, browser] of [[owner, 'owner', ownerBrowser], [plain, 'plain', browserKeys()]] as const) {
    const res = await ts.http.post(`${API}/me/push-subscriptions`, { endpoint: `${push.origin}/push/${name}`, keys: browser.keys }, person.token);
    assert.equal(res.status, 201);
  }

  clock.set(T('11:50'));
  await ts.service.schedule.runDue();
  await ts.service.schedule.runDue();
  await waitFor('the not-ready push', () => push.to('/push/owner').length === 1, 15_000); // generous: a loaded CI host; the outbox drains every second
  clock.set(T('12:05'));
  await ts.service.schedule.runDue();
  await ts.service.schedule.runDue();
  await waitFor('the missed push', () => push.to('/push/owner').length === 2, 15_000);
  await settle(1500); // the outbox drains every second: give a duplicate its chance

  assert.equal(push.to('/push/owner').length, 2);
  assert.deepEqual(push.to('/push/plain'), [], 'an admin without can_trigger is never alerted');
  const payloads = push.to('/push/owner').map((r) => decryptPush(r.body, ownerBrowser) as Record<string, unknown>);
  assert.deepEqual(payloads.map((p) => [p.kind, p.prayer, p.mosque_id, p.date]), [
    ['azaan_not_ready', 'dhuhr', mosque.id, '2026-06-10'],
    ['azaan_missed', 'dhuhr', mosque.id, '2026-06-10'],
  ]);
});

test('an azaan started over HTTP inside the window serves the slot: live, then done with its broadcast and report', async (t) => {
  const { ts, clock, owner, mosque, tx } = await world(t);
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  await waitFor('transmitter online', async () => (await ts.http.get(`${API}/devices/${tx.device.id}`, owner.token)).body.status === 'ONLINE');

  clock.set(T('11:50'));
  await ts.service.schedule.runDue();
  assert.equal((await dhuhr(ts, owner.token, mosque.id)).status, 'ready');

  clock.set(T('11:58'));
  const started = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token);
  assert.equal(started.status, 201);
  const live = await dhuhr(ts, owner.token, mosque.id);
  assert.equal(live.status, 'live');
  assert.equal(live.broadcast_id, started.body.id);

  clock.set(T('12:02'));
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${started.body.id}/stop`, undefined, owner.token)).status, 200);
  clock.set(T('12:06'));
  await ts.service.schedule.runDue();
  await ts.service.notifier.idle();
  const done = await dhuhr(ts, owner.token, mosque.id);
  assert.equal(done.status, 'done');
  assert.equal(done.broadcast_id, started.body.id);
  assert.equal(typeof done.report.playing, 'number');
  assert.deepEqual(Object.keys(done.report.push).sort(), ['failed', 'queued', 'sent']);
  assert.equal(alerts(ts, 'azaan_missed').length + alerts(ts, 'azaan_not_ready').length, 0);
});

test("the transmitter's own broadcast event on its mosque topic serves the slot", async (t) => {
  const { ts, clock, owner, mosque, tx } = await world(t);
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  clock.set(T('12:01'));
  await publish(device, `mosques/${mosque.id}/broadcast`, JSON.stringify({ v: '1.0', broadcast_id: 'tx-local-1', kind: 'azaan', action: 'start', ts: nowTs() }), { qos: 1 });
  const live = await waitFor('slot live', async () => {
    const s = await dhuhr(ts, owner.token, mosque.id);
    return s.status === 'live' ? s : null;
  });
  assert.equal(live.broadcast_id, 'tx-local-1');
  assert.equal(live.report, null); // a transmitter's own broadcast has no record to report on
  clock.set(T('12:06'));
  await ts.service.schedule.runDue();
  await ts.service.notifier.idle();
  assert.equal((await dhuhr(ts, owner.token, mosque.id)).status, 'live');
  assert.equal(alerts(ts, 'azaan_missed').length, 0);
});

test('with auto_start the service starts the azaan itself at azaan_at, once, and the slot says so', async (t) => {
  const { ts, clock, owner, mosque, tx } = await world(t, { auto_start: true });
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  clock.set(T('12:00'));
  await ts.service.schedule.runDue();
  await ts.service.schedule.runDue();
  const list = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body;
  assert.equal(list.length, 1);
  assert.equal(list[0].kind, 'azaan');
  assert.equal(list[0].prayer, 'dhuhr');
  assert.equal(list[0].started_by, null);
  const slot = await dhuhr(ts, owner.token, mosque.id);
  assert.equal(slot.status, 'live');
  assert.equal(slot.auto_started, true);
  assert.equal(slot.broadcast_id, list[0].id);
});

test('an auto_start claimed by a process that died before starting is started by this one 15 s after the azaan time', async (t) => {
  const { ts, clock, owner, mosque, tx } = await world(t, { auto_start: true });
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  // The other process's claim, through a connection of its own; then that process is gone.
  const otherStore = await otherProcessStore(t, ts);
  assert.equal(await otherStore.claimAutoStart(dhuhrSlot(mosque.id), T('12:00')), true);
  clock.set(T('12:00'));
  await ts.service.schedule.runDue();
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body.length, 0, 'the claim is the other process\'s');
  clock.set(T('12:00') + 15_000);
  await ts.service.schedule.runDue();
  const list = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body;
  assert.equal(list.length, 1, 'taken over');
  assert.equal((await dhuhr(ts, owner.token, mosque.id)).status, 'live');
});

test('a process whose start comes after another took its auto_start claim over starts nothing: one azaan, not a second once the first ended', async (t) => {
  const { ts, clock, owner, mosque, tx } = await world(t, { auto_start: true });
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  // Process A claims through a connection of its own; its start then waits (cut off from the network, say).
  const { store: connA, close } = await storeOf(ts);
  t.after(close);
  const storeA = await createScheduleStore(connA, createMosqueStore(connA, Date.now));
  const slot = dhuhrSlot(mosque.id);
  assert.equal(await storeA.claimAutoStart(slot, T('12:00')), true);
  // This process takes the claim over after 15 s, starts the azaan, and the azaan ends.
  clock.set(T('12:00') + 15_000);
  await ts.service.schedule.runDue();
  const list = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body;
  assert.equal(list.length, 1, 'taken over');
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${list[0].id}/stop`, {}, owner.token)).status, 200);
  // A's start finally runs, guarded as the scheduler guards it: refused, nothing written.
  const broadcastsA = createBroadcasts({ store: connA, clock, activity: createActivityLog(connA, clock) });
  const late = await broadcastsA.start(mosque.id, { kind: 'azaan', prayer: 'dhuhr', title: null, guard: (q) => storeA.holdsAutoStart(slot, T('12:00'), q) }, null);
  assert.equal(late.ok, false);
  assert.equal(!late.ok && late.failure, 'conflict');
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body.length, 1, 'no second azaan');
  // Unguarded, the same late start would have gone through: the one-live-broadcast rule alone does not stop it.
  const unguarded = await broadcastsA.start(mosque.id, { kind: 'azaan', prayer: 'dhuhr', title: null }, null);
  assert.equal(unguarded.ok, true);
});

test('a restart neither repeats an alert already sent nor skips the missed check that falls due', async (t) => {
  const first = await world(t);
  first.clock.set(T('11:50'));
  await first.ts.service.schedule.runDue();
  await first.ts.service.notifier.idle();
  assert.equal(alerts(first.ts, 'azaan_not_ready').length, 1);
  await first.ts.service.close();

  const clock = createManualClock(T('11:51'));
  const again = await startTestService(t, { clock, logLevel: 'warn', env: { DATABASE_PATH: path.join(first.ts.dir, 'minaret.db'), DATA_DIR: first.ts.dir } });
  await again.service.schedule.runDue();
  clock.set(T('12:05'));
  await again.service.schedule.runDue();
  await again.service.notifier.idle();
  assert.equal(alerts(again, 'azaan_not_ready').length, 0);
  assert.deepEqual(alerts(again, 'azaan_missed').map((m) => m.to), ['owner@schedule.test']);
});

/** The simulator's transmitter, following the schedule on a clock that reaches 12:00 UTC two seconds from now. */
async function simulatedTransmitter(t: TestContext, ts: TestService, token: string, tx: Awaited<ReturnType<typeof registerTransmitter>>) {
  const sim = new SimDevice({ kind: 'transmitter', id: tx.device.id, password: tx.credentials.password, mqttUrl: tx.credentials.mqtt_url, startTimeoutMs: 5000 });
  await sim.start();
  t.after(() => sim.stop({ graceful: false }));
  await waitFor('transmitter online', async () => (await ts.http.get(`${API}/devices/${tx.device.id}`, token)).body.status === 'ONLINE');
  const offset = T('12:00') - 2000 - Date.now();
  return { sim, now: () => Date.now() + offset };
}

test('the simulator with --follow-schedule starts the azaan from the transmitter at azaan_at, and the slot is served', async (t) => {
  const { ts, clock, owner, mosque, tx } = await world(t);
  const { sim, now } = await simulatedTransmitter(t, ts, owner.token, tx);
  clock.set(T('11:59'));
  const lines: string[] = [];
  const follower = followSchedule({ url: ts.url, token: owner.token, mosqueId: mosque.id, transmitter: sim, miss: new Set(), azaanSecs: 1, log: (l) => lines.push(l), now });
  t.after(() => follower.stop());
  const live = await waitFor('slot served by the simulator', async () => {
    const s = await dhuhr(ts, owner.token, mosque.id);
    return s.status === 'done' ? s : null;
  }, 8000);
  assert.match(live.broadcast_id, /^sim-2026-06-10-dhuhr-/);
  assert.ok(lines.some((l) => /dhuhr 2026-06-10 13:00: broadcast sim-.* started/.test(l)), lines.join('\n'));
});

test('the simulator with --miss dhuhr leaves it out, and the service reports it missed with reason not_started', async (t) => {
  const { ts, clock, owner, mosque, tx } = await world(t);
  const { sim, now } = await simulatedTransmitter(t, ts, owner.token, tx);
  clock.set(T('11:59'));
  const lines: string[] = [];
  const follower = followSchedule({ url: ts.url, token: owner.token, mosqueId: mosque.id, transmitter: sim, miss: new Set(['dhuhr']), azaanSecs: 1, log: (l) => lines.push(l), now });
  t.after(() => follower.stop());
  await waitFor('left out', () => lines.some((l) => l.includes('leaving out dhuhr')), 8000);
  clock.set(T('12:05'));
  await ts.service.schedule.runDue();
  await ts.service.notifier.idle();
  const missed = await dhuhr(ts, owner.token, mosque.id);
  assert.equal(missed.status, 'missed');
  assert.equal(missed.reason, 'not_started');
  assert.equal(alerts(ts, 'azaan_missed').length, 1);
  assert.match(alerts(ts, 'azaan_missed')[0]!.text, /no azaan broadcast was started/);
});

test('of two processes whose schedulers reach the same auto_start together, exactly one claims the slot; a failed start gives it back', async (t) => {
  const { ts, mosque } = await world(t, { auto_start: true });
  // Two connections to the one file, as two service processes sharing it under REDIS_URL have.
  const [storeA, storeB] = [await otherProcessStore(t, ts), await otherProcessStore(t, ts)];
  const slot = dhuhrSlot(mosque.id);
  assert.equal(await storeA.claimAutoStart(slot, T('12:00')), true, 'the first claim wins');
  assert.equal(await storeB.claimAutoStart(slot, T('12:00')), false, 'the other process loses and starts nothing');
  assert.equal(await storeA.claimAutoStart(slot, T('12:00')), false, 'nor does the winner claim twice');
  await storeA.releaseAutoStart(slot); // its start failed (say the mosque has no transmitter yet)
  assert.equal(await storeB.claimAutoStart(slot, T('12:01')), true, 'the next pass, in either process, may try again');
  await storeB.record(slot, { status: 'live', broadcastId: 'b1', autoStarted: true }, T('12:01'));
  await storeB.releaseAutoStart(slot); // a late release never reopens a slot that has its broadcast
  assert.equal(await storeA.claimAutoStart(slot, T('12:02')), false);
  assert.equal((await storeA.outcome(slot))?.broadcast_id, 'b1');
});

test('an auto_start claimed by a process that then died is claimed again by another once the claim is 15 s old, never sooner', async (t) => {
  const { ts, mosque } = await world(t, { auto_start: true });
  const [storeA, storeB] = [await otherProcessStore(t, ts), await otherProcessStore(t, ts)];
  const slot: Slot = { ...dhuhrSlot(mosque.id), prayer: 'asr', startsAt: T('16:55'), azaanAt: T('17:00'), azaanLocal: '18:00' };
  assert.equal(await storeA.claimAutoStart(slot, T('17:00')), true);
  // A dies here: no broadcast, no release.
  assert.equal(await storeB.claimAutoStart(slot, T('17:00') + 10_000), false, 'a claim 10 s old is still its holder\'s');
  assert.equal(await storeB.claimAutoStart(slot, T('17:00') + 15_000), true, 'at 15 s another process takes it over');
  assert.equal(await storeA.claimAutoStart(slot, T('17:00') + 16_000), false, 'and holds it in turn');
});

test('a process whose start failed gives back its own auto_start claim, never one another process took over meanwhile', async (t) => {
  const { ts, mosque } = await world(t, { auto_start: true });
  const [storeA, storeB] = [await otherProcessStore(t, ts), await otherProcessStore(t, ts)];
  const slot = dhuhrSlot(mosque.id);
  assert.equal(await storeA.claimAutoStart(slot, T('12:00')), true);
  assert.equal(await storeB.claimAutoStart(slot, T('12:00') + 15_000), true, 'taken over');
  await storeA.releaseAutoStart(slot, T('12:00')); // A's late failure
  assert.equal((await storeA.outcome(slot))?.auto_started, 1, "B's claim stands");
  assert.equal(await storeA.claimAutoStart(slot, T('12:00') + 16_000), false, 'so no third process starts it beside B');
  await storeB.releaseAutoStart(slot, T('12:00') + 15_000);
  assert.equal((await storeA.outcome(slot))?.auto_started, 0, 'its own claim is given back');
});

test('with REDIS_URL a transmitter connected to the other process counts at the ready check, and its going offline there counts too', { timeout: 60_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const redis = await startRedis();
  t.after(() => redis.stop());
  const files = durableFiles(t, 'ready-cluster');
  const env = { ...files.env, REDIS_URL: redis.url, SHARED_CACHE_RELOAD_S: '3600' };
  const clock = createManualClock(T('11:40'));
  const a = await startTestService(t, { clock, env, logLevel: 'warn' });
  const b = await startTestService(t, { clock, env, logLevel: 'warn' });
  const root = await signInSuperadmin(a);
  const owner = await member(a, 'owner@schedule.test');
  const mosque = await createMosque(a, root.token, owner, SCHEDULE);
  const tx = await registerTransmitter(a, owner.token, mosque.id);
  // Connected to B only: A, which runs the check here, holds no connection of it.
  const client = await connectDevice(t, { ...tx.credentials, mqtt_url: b.service.mqttUrl });
  await publish(client, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1 });

  clock.set(T('11:50'));
  await a.service.schedule.runDue();
  await a.service.schedule.runDue();
  await a.service.notifier.idle();
  assert.equal((await dhuhr(a, owner.token, mosque.id)).status, 'ready');
  assert.equal(alerts(a, 'azaan_not_ready').length, 0);

  // Gone from B before the azaan: the missed check on A sees it offline.
  await new Promise<void>((resolve) => client.end(false, {}, () => resolve()));
  await waitFor('B released its claim', async () => (await getDevice(a, owner.token, tx.device.id)).status === 'OFFLINE', 3000);
  clock.set(T('12:05'));
  await a.service.schedule.runDue();
  await a.service.schedule.runDue();
  const missed = await dhuhr(a, owner.token, mosque.id);
  assert.equal(missed.status, 'missed');
  assert.equal(missed.reason, 'transmitter_offline');
});
