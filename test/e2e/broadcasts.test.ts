import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import type mqtt from 'mqtt';
import Database from 'better-sqlite3';
import { decodeJwt, decodeProtectedHeader, importJWK, jwtVerify } from 'jose';
import { SimDevice, type BroadcastMessage, type DeviceStatus } from '../../simulator/device.ts';
import { pino } from 'pino';
import { createManualClock, systemClock, type Clock } from '../../src/platform/clock.ts';
import { migrate, openDatabase } from '../../src/platform/db.ts';
import { sqliteStore } from '../../src/platform/store/store.ts';
import { createActivityLog } from '../../src/mosques/activity.ts';
import { createMosqueStore } from '../../src/mosques/mosques.ts';
import { createDeviceStore } from '../../src/devices/devices.ts';
import { createCommands } from '../../src/devices/commands.ts';
import { createTimeline } from '../../src/devices/timeline.ts';
import type { DeviceLink } from '../../src/devices/device-link.ts';
import { createBroadcasts } from '../../src/broadcasts/broadcasts.ts';
import { createFanout } from '../../src/broadcasts/broadcast-fanout.ts';
import { createPushOutbox } from '../../src/broadcasts/push-outbox.ts';
import { createPushSubscriptions } from '../../src/broadcasts/push-subscriptions.ts';
import { API, joinMosque, makeAdmin, member, setStatus, type Person } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { browserKeys, decryptPush, deliveringTo, startPushService, type PushService } from '../support/push-service.ts';
import {
  connectDevice, mosqueWithOwner, nextMessage, publish, registerPlayer, registerTransmitter, settle, statusPayload, subscribeCode, waitFor,
  waitForStatus, type Registered,
} from '../support/devices.ts';

// docs/api.md, "Broadcasts and their delivery report", and docs/firmware.md, "4.2 Commands" and "4.3 Broadcast
// events": a broadcast reaches transmitters, leased players and members' browsers (Web Push, VAPID).

const STREAM = 'https://radio.example/noor/live';

// The push service is a local https stand-in (test/support/push-service.ts) the service reaches by name.

async function subscribe(ts: TestService, person: Person, endpoint: string, browser = browserKeys()) {
  const res = await ts.http.post(`${API}/me/push-subscriptions`, { endpoint, keys: browser.keys }, person.token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return browser;
}

// ---- the mosque, its people and devices ----

async function world(t: TestContext, clock?: Clock, push?: PushService) {
  const ts = await startTestService(t, { logLevel: 'warn', ...(clock && { clock }), ...(push && { pushNetwork: deliveringTo(push) }) });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM });
  const trigger = await member(ts, 'muezzin@example.com');
  await makeAdmin(ts, root.token, mosque.id, trigger, { can_trigger: true });
  return { ts, root, owner, mosque, trigger };
}
type World = Awaited<ReturnType<typeof world>>;

/** A member of the mosque with the status asked (via pending, and approved first for a ban). */
async function memberAs(w: World, email: string, status: 'approved' | 'pending' | 'banned' | 'rejected') {
  const person = await member(w.ts, email);
  const membership = await joinMosque(w.ts, person, w.mosque.id);
  if (status !== 'pending') await setStatus(w.ts, w.owner.token, membership.id, 'approved');
  if (status === 'banned' || status === 'rejected') await setStatus(w.ts, w.owner.token, membership.id, status);
  return { person, membership };
}

async function playerOf(w: World, email: string, status: 'approved' | 'pending') {
  const m = await memberAs(w, email, status);
  return { ...m, player: await registerPlayer(w.ts, m.person, w.mosque.id) };
}

function sim(t: TestContext, ts: TestService, reg: Registered) {
  const dev = new SimDevice({ kind: reg.device.kind as 'stream_player' | 'transmitter', id: reg.device.id, password: reg.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 3000 });
  t.after(() => dev.stop({ graceful: false }));
  return dev;
}

const simStatus = (dev: SimDevice, status: DeviceStatus, timeoutMs = 2000) => waitFor(`sim ${dev.id} ${status}`, () => dev.status === status, timeoutMs);

async function startBroadcast(w: World, body: Record<string, unknown>, token = w.trigger.token) {
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, body, token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body as Record<string, any> & { id: string };
}

async function report(w: World, id: string) {
  const res = await w.ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts/${id}`, w.owner.token);
  assert.equal(res.status, 200);
  return res.body.report as Record<string, any>;
}

/** A raw device connection subscribed to its own cmd topic (what a transmitter's firmware listens on). */
async function rawTransmitter(t: TestContext, reg: Registered) {
  const client = await connectDevice(t, reg.credentials);
  assert.equal(await subscribeCode(client, `devices/${reg.device.id}/cmd`), 1);
  return client;
}

/**
 * Timeline times are whole seconds and a status in the stop's own second counts as the reaction to the
 * stop: a test that reads the report after a stop lets the second of the last status pass first.
 */
async function nextSecond() {
  const now = Math.floor(Date.now() / 1000);
  await waitFor('the next second', () => Math.floor(Date.now() / 1000) > now, 1500);
}

const nextCmd = (client: mqtt.MqttClient, id: string, name: string, timeoutMs = 1500) =>
  nextMessage(client, `devices/${id}/cmd`, timeoutMs, (m) => m.name === name).then((m) => m.body as Record<string, any>);

/** Whether this process has loaded the web-push package (a CommonJS module: it sits in require's cache). */
const webPushLoaded = () => Object.keys(createRequire(import.meta.url).cache).some((file) => file.includes(`${path.sep}node_modules${path.sep}web-push${path.sep}`));

// ---- tests ----

// First in the file: no test before it may have sent a push in this process.
test('web-push loads with the first push, not at start, and that first push still goes out signed with the key the service generated', async (t) => {
  const push = await startPushService(t);
  const w = await world(t, undefined, push);
  const vapid = (await w.ts.http.get(`${API}/push/vapid-public-key`)).body.public_key as string;
  assert.equal(Buffer.from(vapid, 'base64url').length, 65, 'an uncompressed P-256 point');
  const approved = (await memberAs(w, 'first-push@example.com', 'approved')).person;
  const browser = await subscribe(w.ts, approved, `${push.origin}/push/first`);
  assert.equal(webPushLoaded(), false, 'a service that has sent no push has not loaded web-push');
  const b = await startBroadcast(w, { kind: 'azaan', prayer: 'isha' });
  await waitFor('the first push', () => push.received.length >= 1, 5000);
  assert.equal(webPushLoaded(), true);
  assert.match(String(push.received[0]!.headers.authorization), new RegExp(`^vapid t=[\\w-]+\\.[\\w-]+\\.[\\w-]+, k=${vapid}$`));
  assert.equal((decryptPush(push.received[0]!.body, browser) as Record<string, unknown>).broadcast_id, b.id);
});


test('a broadcast start reaches the transmitter (broadcast_start), leased players (retained start event) and no unleased player', async (t) => {
  const w = await world(t);
  const tx = await registerTransmitter(w.ts, w.owner.token, w.mosque.id);
  const txClient = await rawTransmitter(t, tx);
  const leased = sim(t, w.ts, (await playerOf(w, 'leased@example.com', 'approved')).player);
  const unleased = sim(t, w.ts, (await playerOf(w, 'unleased@example.com', 'pending')).player);
  await Promise.all([leased.start(), unleased.start()]);
  await simStatus(leased, 'ONLINE');
  await simStatus(unleased, 'UNBOUND');
  const heard: Array<[string, BroadcastMessage]> = [];
  leased.on('broadcast', (m: BroadcastMessage) => heard.push(['leased', m]));
  unleased.on('broadcast', (m: BroadcastMessage) => heard.push(['unleased', m]));

  const cmd = nextCmd(txClient, tx.device.id, 'broadcast_start');
  const started = performance.now();
  const b = await startBroadcast(w, { kind: 'azaan', prayer: 'isha' });
  assert.equal(b.status, 'live');
  assert.equal(b.kind, 'azaan');
  assert.equal(b.prayer, 'isha');

  const start = await cmd;
  assert.deepEqual(start.args, { broadcast_id: b.id, kind: 'azaan', prayer: 'isha' });
  assert.equal(start.v, '1.0');
  assert.equal(typeof start.id, 'string');
  assert.ok(start.expires_at > start.ts);
  await simStatus(leased, 'PLAYING', 1000);
  assert.ok(performance.now() - started <= 1000);
  const event = heard.find(([who]) => who === 'leased')![1];
  assert.deepEqual({ ...event, ts: 0 }, { v: '1.0', broadcast_id: b.id, kind: 'azaan', action: 'start', stream_url: STREAM, ts: 0 });

  // Retained: a leased player that subscribes during the broadcast learns it is on.
  const late = await playerOf(w, 'late@example.com', 'approved');
  const lateClient = await connectDevice(t, late.player.credentials);
  const topic = `mosques/${w.mosque.id}/broadcast`;
  const retained = nextMessage(lateClient, topic, 1500);
  assert.equal(await subscribeCode(lateClient, topic), 1);
  const got = await retained;
  assert.equal(got.retain, true);
  assert.equal(got.body.broadcast_id, b.id);
  assert.equal(got.body.action, 'start');

  // Stop: broadcast_stop to the transmitter, a stop event on the topic, the player back ONLINE.
  const stopCmd = nextCmd(txClient, tx.device.id, 'broadcast_stop');
  const stopEvent = nextMessage(lateClient, topic, 1500, (m) => m.action === 'stop');
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, {}, w.trigger.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.status, 'stopped');
  assert.deepEqual((await stopCmd).args, { broadcast_id: b.id, kind: 'azaan', prayer: 'isha' });
  const stop = (await stopEvent).body;
  assert.equal(stop.broadcast_id, b.id);
  assert.equal(stop.stream_url, undefined);
  await simStatus(leased, 'ONLINE', 1000);

  await settle(200);
  assert.deepEqual(heard.filter(([who]) => who === 'unleased'), [], 'an unleased player heard the broadcast');
  assert.equal(unleased.status, 'UNBOUND');
});

// docs/decisions.md, "The start's `201` carries a pending report": the start event goes to the broker first and the POST answers at once; nothing the 201
// acknowledges may be missing when it arrives.
test('when the POST answers 201, the broadcast row is on disk, the retained start is with the broker and the transmitter gets its command', async (t) => {
  const w = await world(t);
  const tx = await registerTransmitter(w.ts, w.owner.token, w.mosque.id);
  const txClient = await rawTransmitter(t, tx);
  const cmd = nextCmd(txClient, tx.device.id, 'broadcast_start');
  const late = await playerOf(w, 'late@example.com', 'approved');
  const lateClient = await connectDevice(t, late.player.credentials);

  const b = await startBroadcast(w, { kind: 'announcement', title: 'Eid' });
  const disk = new Database(w.ts.config.databasePath, { readonly: true, fileMustExist: true });
  t.after(() => disk.close());
  const row = disk.prepare('SELECT status, started_by FROM broadcasts WHERE id = ?').get(b.id);
  assert.deepEqual({ ...(row as object) }, { status: 'live', started_by: w.trigger.id });
  assert.equal(b.report.pending, true);

  const topic = `mosques/${w.mosque.id}/broadcast`;
  const retained = nextMessage(lateClient, topic, 1500);
  assert.equal(await subscribeCode(lateClient, topic), 1);
  const got = await retained;
  assert.equal(got.retain, true);
  assert.deepEqual({ broadcast_id: got.body.broadcast_id, action: got.body.action }, { broadcast_id: b.id, action: 'start' });
  assert.deepEqual((await cmd).args, { broadcast_id: b.id, kind: 'announcement' });
});

// The POST does not wait for the report. Its 201 carries the report's usual shape marked pending
// (no counts read, so no player is guessed as playing); GET of the broadcast has the report.
test('the 201 carries a pending report, and GET of the broadcast then has the full report', async (t) => {
  const push = await startPushService(t);
  const w = await world(t, undefined, push);
  const listener = await playerOf(w, 'listener@example.com', 'approved');
  await subscribe(w.ts, listener.person, `${push.origin}/push/listener`);
  const unbound = await playerOf(w, 'unbound@example.com', 'pending');
  await playerOf(w, 'never-connected@example.com', 'approved');
  const [listenerSim, unboundSim] = [listener, unbound].map((p) => sim(t, w.ts, p.player));
  await Promise.all([listenerSim!.start(), unboundSim!.start()]);
  await simStatus(listenerSim!, 'ONLINE');
  await simStatus(unboundSim!, 'UNBOUND');
  await waitForStatus(w.ts, w.owner.token, unbound.player.device.id, 'UNBOUND');

  const b = await startBroadcast(w, { kind: 'azaan', prayer: 'isha' });
  assert.equal(b.status, 'live');
  assert.deepEqual(b.report, { playing: 0, unbound: 0, muted: 0, offline: 0, stream_error: 0, other: 0, covered_locally: 0, push: { queued: 0, sent: 0, failed: 0 }, pending: true });

  await simStatus(listenerSim!, 'PLAYING', 2000);
  await waitFor('the push sent', async () => (await report(w, b.id)).push.sent === 1, 3000);
  await waitFor('the report counts the player', async () => (await report(w, b.id)).playing === 1, 3000);
  assert.deepEqual(await report(w, b.id), { playing: 1, unbound: 1, muted: 0, offline: 1, stream_error: 0, other: 0, covered_locally: 0, push: { queued: 0, sent: 1, failed: 0 } });
});

/**
 * The POST answers before the start's transmitter commands go out (they wait behind the fan-out's
 * writes), so a stop can come first. Over HTTP in one process the stop always arrives later, so the fan-out
 * runs here on its own real stores and SQLite file, with the broker port recording what it is handed.
 */
test('a stop that comes before the start\'s transmitter commands went out cancels them: broadcast_stop stays the last word', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' }); // only for its temp folder and settings
  const db = openDatabase(`${ts.dir}/fanout.db`);
  t.after(() => db.close());
  migrate(db);
  const clock = systemClock;
  const logger = pino({ level: 'silent' });
  const mosques = createMosqueStore(sqliteStore(db), clock);
  const mosque = await mosques.create(undefined, { name: 'Noor', timezone: 'UTC', autoApproveMembers: false, streamUrl: STREAM });
  const devices = await createDeviceStore(sqliteStore(db), clock);
  const tx = (await devices.create(sqliteStore(db), { kind: 'transmitter', name: null, mosqueId: mosque.id, ownerUserId: null })).row;
  const sent: Array<{ topic: string; name: unknown; action: unknown }> = [];
  const link: DeviceLink = {
    publish: async (topic, payload) => void sent.push({ topic, name: (payload as Record<string, unknown>)['name'], action: (payload as Record<string, unknown>)['action'] }),
    disconnect: () => undefined,
    forgetSession: () => undefined,
    isConnected: () => true,
  };
  const store = sqliteStore(db);
  const commands = createCommands({ link: () => link, timeline: createTimeline(store, clock), clock, logger, mosqueOf: () => mosque.id });
  const outbox = createPushOutbox({ store, clock, logger, subscriptions: createPushSubscriptions(store, clock, 5), concurrency: 1, sender: { send: async () => ({ ok: true }) } });
  const fanout = createFanout({ store, clock, logger, devices, mosques, memberships: { notifiedMembers: async () => [] }, commands, outbox, link: () => link });
  const broadcasts = createBroadcasts({ store, clock, activity: createActivityLog(store, clock) });
  broadcasts.listen({ started: (b) => (fanout.publishStart(b), fanout.afterStart(b)), stopped: () => undefined });
  const cmds = () => sent.filter((s) => s.topic === `devices/${tx.id}/cmd`).map((s) => s.name);
  const afterWrites = () => new Promise<void>((resolve) => setImmediate(() => setImmediate(() => setImmediate(resolve))));

  // Left alone, a start reaches the transmitter once the writes are done.
  const first = await broadcasts.start(mosque.id, { kind: 'azaan', prayer: 'isha', title: null }, null);
  assert.ok(first.ok);
  assert.deepEqual(cmds(), []);
  await afterWrites();
  assert.deepEqual(cmds(), ['broadcast_start']);
  fanout.onStop(first.value);
  db.prepare("UPDATE broadcasts SET status = 'stopped' WHERE id = ?").run(first.value.id);
  sent.length = 0;

  // Stopped in the same turn: the stop's command is the only one, and stays so.
  const second = await broadcasts.start(mosque.id, { kind: 'announcement', prayer: null, title: null }, null);
  assert.ok(second.ok);
  fanout.onStop(second.value);
  await afterWrites();
  assert.deepEqual(cmds(), ['broadcast_stop']);
  assert.deepEqual(sent.filter((s) => s.topic === `mosques/${mosque.id}/broadcast`).map((s) => s.action), ['start', 'stop']);
});

test('starting and stopping need the trigger flag', async (t) => {
  const w = await world(t);
  const manager = await member(w.ts, 'manager@example.com');
  await makeAdmin(w.ts, w.root.token, w.mosque.id, manager, { can_manage: true });
  const plain = (await memberAs(w, 'plain@example.com', 'approved')).person;
  for (const token of [manager.token, plain.token]) {
    const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan' }, token);
    assert.ok(res.status === 403 || res.status === 404, `start answered ${res.status}`);
  }
  const b = await startBroadcast(w, { kind: 'waaz' });
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, {}, manager.token);
  assert.equal(res.status, 403);
  assert.equal((await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan' }, w.owner.token)).status, 409, 'one live broadcast at a time');
});

test('Web Push: one message per subscription of each approved member with the toggle on, none for anyone else', async (t) => {
  const push = await startPushService(t);
  const w = await world(t, undefined, push);
  const vapid = (await w.ts.http.get(`${API}/push/vapid-public-key`)).body.public_key as string;
  assert.match(vapid, /^[A-Za-z0-9_-]{87}$/);

  const approved = (await memberAs(w, 'approved@example.com', 'approved')).person;
  const phone = await subscribe(w.ts, approved, `${push.origin}/push/approved-phone`);
  await subscribe(w.ts, approved, `${push.origin}/push/approved-laptop`);
  const quiet = await memberAs(w, 'quiet@example.com', 'approved');
  assert.equal((await w.ts.http.patch(`${API}/memberships/${quiet.membership.id}`, { notify_azaan: false }, quiet.person.token)).status, 200);
  await subscribe(w.ts, quiet.person, `${push.origin}/push/quiet`);
  await subscribe(w.ts, (await memberAs(w, 'pending@example.com', 'pending')).person, `${push.origin}/push/pending`);
  await subscribe(w.ts, (await memberAs(w, 'banned@example.com', 'banned')).person, `${push.origin}/push/banned`);
  await subscribe(w.ts, (await memberAs(w, 'rejected@example.com', 'rejected')).person, `${push.origin}/push/rejected`);
  await subscribe(w.ts, await member(w.ts, 'outsider@example.com'), `${push.origin}/push/outsider`);

  const b = await startBroadcast(w, { kind: 'azaan', prayer: 'fajr' });
  await waitFor('both pushes of the approved member', () => push.received.length >= 2, 3000);
  await settle(1500); // the outbox drains every second: give a duplicate its chance
  assert.deepEqual(push.received.map((r) => r.path).sort(), ['/push/approved-laptop', '/push/approved-phone']);

  for (const r of push.received) {
    assert.match(String(r.headers.authorization), /^vapid t=[\w-]+\.[\w-]+\.[\w-]+, k=[\w-]+$/);
    assert.equal(r.headers['content-encoding'], 'aes128gcm');
    assert.equal(r.headers.ttl, '300');
    assert.equal(r.headers.urgency, 'high');
    assert.equal(r.headers['content-type'], 'application/octet-stream');
    // The VAPID JWT: ES256 by the key the service publishes, for this push service's origin.
    const [, jwt, k] = /^vapid t=([^,]+), k=(.+)$/.exec(String(r.headers.authorization))!;
    assert.equal(k, vapid);
    const raw = Buffer.from(vapid, 'base64url');
    const key = await importJWK({ kty: 'EC', crv: 'P-256', x: raw.subarray(1, 33).toString('base64url'), y: raw.subarray(33, 65).toString('base64url') }, 'ES256');
    await jwtVerify(jwt!, key, { algorithms: ['ES256'], audience: push.origin });
    assert.equal(decodeProtectedHeader(jwt!).alg, 'ES256');
    assert.equal(decodeJwt(jwt!).sub, 'mailto:minaret@localhost');
  }
  const payload = decryptPush(push.to('/push/approved-phone')[0]!.body, phone) as Record<string, unknown>;
  assert.equal(payload.broadcast_id, b.id);
  assert.equal(payload.mosque_id, w.mosque.id);
  assert.equal(payload.kind, 'azaan');
  assert.equal(payload.prayer, 'fajr');
  assert.equal(typeof payload.title, 'string');
  assert.deepEqual((await report(w, b.id)).push, { queued: 0, sent: 2, failed: 0 });

  // The quiet member's jummah toggle is still on: a jummah broadcast reaches them (and the approved member).
  await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, {}, w.trigger.token);
  const jummah = await startBroadcast(w, { kind: 'jummah', title: 'Jumu\'ah khutbah' });
  await waitFor('the jummah pushes', () => push.received.length >= 5, 3000);
  await settle(300);
  assert.deepEqual(push.received.slice(2).map((r) => r.path).sort(), ['/push/approved-laptop', '/push/approved-phone', '/push/quiet']);
  assert.equal((decryptPush(push.to('/push/approved-phone')[1]!.body, phone) as Record<string, unknown>).title, 'Jumu\'ah khutbah');
  assert.deepEqual((await report(w, jummah.id)).push, { queued: 0, sent: 3, failed: 0 });
});

test('Web Push: a 410 answer removes the subscription; a 500 answer is retried after the backoff', async (t) => {
  const push = await startPushService(t, (path, nth) => (path === '/push/gone' ? 410 : path === '/push/flaky' && nth === 1 ? 500 : 201));
  const w = await world(t, undefined, push);
  const a = (await memberAs(w, 'gone@example.com', 'approved')).person;
  const b = (await memberAs(w, 'flaky@example.com', 'approved')).person;
  await subscribe(w.ts, a, `${push.origin}/push/gone`);
  await subscribe(w.ts, b, `${push.origin}/push/flaky`);

  const first = await startBroadcast(w, { kind: 'announcement', title: 'Eid prayer at 8' });
  await waitFor('one attempt each', () => push.to('/push/gone').length === 1 && push.to('/push/flaky').length === 1, 3000);
  await waitFor('the 410 settled', async () => (await report(w, first.id)).push.failed === 1);
  assert.deepEqual((await report(w, first.id)).push, { queued: 1, sent: 0, failed: 1 }, 'the 500 stays queued for a retry');
  // The subscription is gone: its owner can no longer remove it.
  const del = await w.ts.http.request('DELETE', `${API}/me/push-subscriptions`, { body: { endpoint: `${push.origin}/push/gone` }, token: a.token });
  assert.equal(del.status, 404);

  // The outbox backs off 5 s before the second attempt.
  const failedAt = performance.now();
  await waitFor('the retry', () => push.to('/push/flaky').length === 2, 9000);
  assert.ok(performance.now() - failedAt >= 3000, 'retried without backing off');
  await waitFor('the retry settled', async () => (await report(w, first.id)).push.sent === 1);
  assert.deepEqual((await report(w, first.id)).push, { queued: 0, sent: 1, failed: 1 });

  // A later broadcast no longer tries the removed subscription.
  await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${first.id}/stop`, {}, w.trigger.token);
  const second = await startBroadcast(w, { kind: 'announcement' });
  await waitFor('the second push', () => push.to('/push/flaky').length === 3, 3000);
  await settle(300);
  assert.equal(push.to('/push/gone').length, 1);
  assert.deepEqual((await report(w, second.id)).push, { queued: 0, sent: 1, failed: 0 });
});

test('the delivery report counts playing, unbound, muted, offline and stream errors; unbound and muted are not failures', async (t) => {
  const push = await startPushService(t);
  const w = await world(t, undefined, push);
  const playing = await playerOf(w, 'playing@example.com', 'approved');
  await subscribe(w.ts, playing.person, `${push.origin}/push/playing`);
  const unbound = await playerOf(w, 'unbound@example.com', 'pending');
  const muted = await playerOf(w, 'muted@example.com', 'approved');
  const offline = await playerOf(w, 'offline@example.com', 'approved');
  const failing = await playerOf(w, 'failing@example.com', 'approved');

  const [playingSim, unboundSim, offlineSim] = [playing, unbound, offline].map((p) => sim(t, w.ts, p.player));
  await Promise.all([playingSim!.start(), unboundSim!.start(), offlineSim!.start()]);
  await simStatus(playingSim!, 'ONLINE');
  await simStatus(unboundSim!, 'UNBOUND');
  await simStatus(offlineSim!, 'ONLINE');
  await offlineSim!.stop({ graceful: true });
  // The muted player (raw firmware): silenced by its user before the broadcast.
  const mutedClient = await connectDevice(t, muted.player.credentials);
  await publish(mutedClient, `devices/${muted.player.device.id}/status`, statusPayload('MUTED', { prev: 'ONLINE', reason: 'manual_mute', detail: { reason: 'manual_mute' } }), { retain: true });
  // This one is ONLINE at the start and fails its stream afterwards.
  const failingClient = await connectDevice(t, failing.player.credentials);
  await publish(failingClient, `devices/${failing.player.device.id}/status`, statusPayload('ONLINE', { prev: 'UNBOUND', reason: 'entitled' }), { retain: true });
  for (const [reg, status] of [[offline.player, 'OFFLINE'], [muted.player, 'MUTED'], [unbound.player, 'UNBOUND'], [failing.player, 'ONLINE']] as const) {
    await waitForStatus(w.ts, w.owner.token, reg.device.id, status);
  }

  const b = await startBroadcast(w, { kind: 'azaan', prayer: 'asr' });
  // At the start, what is already known counts at once (the 201's own report is pending).
  const atStart = await report(w, b.id);
  assert.equal(atStart.unbound, 1);
  assert.equal(atStart.muted, 1);
  assert.equal(atStart.offline, 1);
  await simStatus(playingSim!, 'PLAYING', 1000);
  await publish(failingClient, `devices/${failing.player.device.id}/status`, statusPayload('STREAM_ERROR', { prev: 'PLAYING', reason: 'retries_exhausted', detail: { stream_url: STREAM, error: 'connection refused' } }), { retain: true });
  await waitForStatus(w.ts, w.owner.token, playing.player.device.id, 'PLAYING');
  await waitForStatus(w.ts, w.owner.token, failing.player.device.id, 'STREAM_ERROR');
  await waitFor('the push sent', async () => (await report(w, b.id)).push.sent === 1, 3000);

  const live = await report(w, b.id);
  assert.deepEqual(live, { playing: 1, unbound: 1, muted: 1, offline: 1, stream_error: 1, other: 0, covered_locally: 0, push: { queued: 0, sent: 1, failed: 0 } });
  // The list shows the same report.
  const list = await w.ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts`, w.owner.token);
  assert.deepEqual(list.body.find((x: { id: string }) => x.id === b.id).report, live);

  // After the stop the report still says what happened while it was live.
  await nextSecond();
  const stopped = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, {}, w.trigger.token);
  assert.equal(stopped.status, 200);
  await simStatus(playingSim!, 'ONLINE', 1000);
  await waitForStatus(w.ts, w.owner.token, playing.player.device.id, 'ONLINE');
  assert.deepEqual(await report(w, b.id), live);
});

test('the transmitter playing the broadcast counts as a transmitter that played it, apart from the players; its return to ONLINE after the stop does not undo that', async (t) => {
  const w = await world(t);
  const tx = await registerTransmitter(w.ts, w.owner.token, w.mosque.id);
  const txSim = sim(t, w.ts, tx);
  await txSim.start();
  await simStatus(txSim, 'ONLINE');
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'ONLINE');
  const b = await startBroadcast(w, { kind: 'azaan', prayer: 'dhuhr' });
  await simStatus(txSim, 'PLAYING', 1000);
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'PLAYING');
  // docs/api.md, "Broadcasts and their delivery report": a transmitter is not a home that heard it.
  const during = await report(w, b.id);
  assert.deepEqual(during.transmitters, { playing: 1, not_playing: 0 });
  assert.equal(during.playing, 0);
  assert.ok(txSim.counters.acks >= 1, 'the transmitter acknowledged broadcast_start');
  await nextSecond();
  await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, {}, w.trigger.token);
  await simStatus(txSim, 'ONLINE', 1000);
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'ONLINE');
  const after = await report(w, b.id);
  assert.deepEqual(after.transmitters, { playing: 1, not_playing: 0 }, `report after the stop: ${JSON.stringify(after)}`);
  assert.equal(after.playing, 0);
  assert.equal(after.other, 0);
});

test('the report window: statuses up to 120 s after the start count, and not what follows the stop or the window', async (t) => {
  // A manual clock that starts at the real time (the simulated firmware checks its lease against the real one).
  const clock = createManualClock(Date.now());
  const w = await world(t, clock);
  const tx = await registerTransmitter(w.ts, w.owner.token, w.mosque.id);
  const txSim = sim(t, w.ts, tx);
  const late = await playerOf(w, 'late@example.com', 'approved');
  const lateClient = await connectDevice(t, late.player.credentials);
  await txSim.start();
  await publish(lateClient, `devices/${late.player.device.id}/status`, statusPayload('ONLINE', { prev: 'UNBOUND' }), { retain: true });
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'ONLINE');
  await waitForStatus(w.ts, w.owner.token, late.player.device.id, 'ONLINE');

  clock.advance(10_000);
  const b = await startBroadcast(w, { kind: 'azaan', prayer: 'fajr' });
  await simStatus(txSim, 'PLAYING', 1000);
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'PLAYING');
  // 130 s later (past the window) the player fails: too late to be this broadcast's outcome.
  clock.advance(130_000);
  await publish(lateClient, `devices/${late.player.device.id}/status`, statusPayload('STREAM_ERROR', { prev: 'ONLINE', detail: { error: 'timeout' } }), { retain: true });
  await waitForStatus(w.ts, w.owner.token, late.player.device.id, 'STREAM_ERROR');
  assert.deepEqual({ ...(await report(w, b.id)), push: null }, { playing: 0, unbound: 0, muted: 0, offline: 0, stream_error: 0, other: 1, covered_locally: 0, push: null, transmitters: { playing: 1, not_playing: 0 } });

  // The stop sends the transmitter back to ONLINE in the stop's own second: still a broadcast it played.
  clock.advance(5_000);
  await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, {}, w.trigger.token);
  await simStatus(txSim, 'ONLINE', 1000);
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'ONLINE');
  assert.equal((await report(w, b.id)).transmitters.playing, 1);

  // A broadcast stopped before the window ends: the window ends with it.
  clock.advance(60_000);
  const short = await startBroadcast(w, { kind: 'announcement' });
  await simStatus(txSim, 'PLAYING', 1000);
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'PLAYING');
  clock.advance(20_000);
  await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${short.id}/stop`, {}, w.trigger.token);
  await waitForStatus(w.ts, w.owner.token, tx.device.id, 'ONLINE');
  clock.advance(20_000);
  await publish(lateClient, `devices/${late.player.device.id}/status`, statusPayload('PLAYING', { prev: 'STREAM_ERROR' }), { retain: true });
  await waitForStatus(w.ts, w.owner.token, late.player.device.id, 'PLAYING');
  const shortReport = await report(w, short.id);
  assert.equal(shortReport.transmitters.playing, 1, JSON.stringify(shortReport));
  assert.equal(shortReport.stream_error, 1, 'the player was in STREAM_ERROR all through the short broadcast');
});

test('a broadcast stopped within its first second still counts unbound and muted players as such, not offline', async (t) => {
  const clock = createManualClock(Date.now()); // never advanced: everything happens in one second
  const w = await world(t, clock);
  const unbound = await playerOf(w, 'unbound@example.com', 'pending');
  const muted = await playerOf(w, 'muted@example.com', 'approved');
  const unboundSim = sim(t, w.ts, unbound.player);
  await unboundSim.start();
  const mutedClient = await connectDevice(t, muted.player.credentials);
  await publish(mutedClient, `devices/${muted.player.device.id}/status`, statusPayload('MUTED', { prev: 'ONLINE', detail: { reason: 'quiet_hours' } }), { retain: true });
  await waitForStatus(w.ts, w.owner.token, unbound.player.device.id, 'UNBOUND');
  await waitForStatus(w.ts, w.owner.token, muted.player.device.id, 'MUTED');

  const b = await startBroadcast(w, { kind: 'announcement' });
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, {}, w.trigger.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.started_at, res.body.stopped_at);
  assert.deepEqual({ ...res.body.report, push: null }, { playing: 0, unbound: 1, muted: 1, offline: 0, stream_error: 0, other: 0, covered_locally: 0, push: null });
});

test('a short announcement heard by three players reports three playing, though each went back to ONLINE within its second', async (t) => {
  const w = await world(t);
  const clients = [];
  for (const email of ['a@short.test', 'b@short.test', 'c@short.test']) {
    const { player } = await playerOf(w, email, 'approved');
    const client = await connectDevice(t, player.credentials);
    const topic = `devices/${player.device.id}/status`;
    await publish(client, topic, statusPayload('ONLINE'), { retain: true });
    await waitForStatus(w.ts, w.owner.token, player.device.id, 'ONLINE');
    clients.push({ client, topic, id: player.device.id });
  }
  await nextSecond();
  // Start, play, stop and back to ONLINE in one second: the report must still say each of them played it.
  const b = await startBroadcast(w, { kind: 'announcement' });
  for (const c of clients) await publish(c.client, c.topic, statusPayload('PLAYING', { prev: 'ONLINE', reason: 'broadcast_start' }), { retain: true });
  for (const c of clients) await waitForStatus(w.ts, w.owner.token, c.id, 'PLAYING');
  assert.equal((await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${b.id}/stop`, undefined, w.trigger.token)).status, 200);
  for (const c of clients) await publish(c.client, c.topic, statusPayload('ONLINE', { prev: 'PLAYING', reason: 'broadcast_stop' }), { retain: true });
  for (const c of clients) await waitForStatus(w.ts, w.owner.token, c.id, 'ONLINE');
  await nextSecond();
  const after = await report(w, b.id);
  assert.equal(after.playing, 3, JSON.stringify(after));
  assert.equal(after.other, 0, 'ONLINE after the stop is not what the broadcast got');
});
