import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { SimDevice, type DeviceStatus } from '../../simulator/device.ts';
import { createManualClock, type Clock } from '../../src/platform/clock.ts';
import { API, createMosque, joinMosque, member, setStatus, type Person } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import {
  closed, connectDevice, connectOnce, getDevice, mosqueWithOwner, nextMessage, registerPlayer, registerTransmitter, settle, subscribeCode,
  waitFor, waitForStatus, type Registered,
} from '../support/devices.ts';

// Entitlement (docs/api.md, "Devices, from the app's side") and the stream player's status
// (docs/firmware.md, "3.1 Status"): a player hears its mosque's azaan only
// while bound, its owner approved there, and enabled; the lease rides in the retained config.

const STREAM = 'https://radio.example/noor/live';
const TTL_HOURS = 2;
const nowS = (clock: Clock) => Math.floor(clock() / 1000);

async function world(t: TestContext, opts: { clock?: Clock; ttlHours?: number } = {}) {
  const ts = await startTestService(t, { env: { LEASE_TTL_HOURS: String(opts.ttlHours ?? TTL_HOURS) }, logLevel: 'warn', ...(opts.clock && { clock: opts.clock }) });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM });
  return { ts, root, owner, mosque };
}
type World = Awaited<ReturnType<typeof world>>;

/** A member who joined the mosque (pending) and registered a player bound to it; approved when asked. */
async function playerOf(w: World, email: string, approve: boolean, mosqueId = w.mosque.id) {
  const person = await member(w.ts, email);
  const membership = await joinMosque(w.ts, person, mosqueId);
  assert.equal(membership.status, 'pending');
  if (approve) await setStatus(w.ts, w.owner.token, membership.id, 'approved');
  const player = await registerPlayer(w.ts, person, mosqueId);
  return { person, membership, player };
}

interface Seen {
  at: number;
  body: Record<string, any>;
}

/** A raw device connection that records every config it receives on its own config topic. */
async function rawPlayer(t: TestContext, reg: Registered, opts: mqtt.IClientOptions = {}) {
  const client = await connectDevice(t, reg.credentials, opts);
  const configs: Seen[] = [];
  const topic = `devices/${reg.device.id}/config`;
  client.on('message', (tp, payload) => {
    if (tp === topic && payload.length > 0) configs.push({ at: performance.now(), body: JSON.parse(payload.toString('utf8')) });
  });
  assert.equal(await subscribeCode(client, topic), 1);
  await waitFor('the retained config', () => configs.length > 0);
  /** The first config newer than `version` (and matching `match`), waited for up to `timeoutMs`. */
  const after = (version: number, timeoutMs = 1000, match: (c: Record<string, any>) => boolean = () => true) =>
    waitFor(`a config after v${version}`, () => configs.find((c) => c.body.config_version > version && match(c.body)), timeoutMs);
  return { client, configs, latest: () => configs.at(-1)!.body, after };
}

async function leaseKeys(ts: TestService) {
  const res = await ts.http.get(`${API}/devices/lease-keys`);
  assert.equal(res.status, 200);
  return createLocalJWKSet(res.body);
}

function unleased(config: Record<string, any>) {
  assert.equal(config.stream_url, undefined, `config still carries stream_url: ${JSON.stringify(config)}`);
  assert.equal(config.lease, undefined, `config still carries a lease: ${JSON.stringify(config)}`);
}

function sim(t: TestContext, ts: TestService, reg: Registered) {
  const dev = new SimDevice({ kind: reg.device.kind as 'stream_player', id: reg.device.id, password: reg.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 3000 });
  t.after(() => dev.stop({ graceful: false }));
  return dev;
}

function simStatus(dev: SimDevice, status: DeviceStatus, timeoutMs = 2000) {
  return waitFor(`sim ${dev.id} ${status}`, () => dev.status === status, timeoutMs);
}

/** Waits until the client's connection has closed. */
function awaitClose(client: mqtt.MqttClient, timeoutMs = 1000) {
  return client.connected ? closed(client, timeoutMs) : Promise.resolve();
}

test('a player goes from UNBOUND to ONLINE within a second of its owner\'s approval, with a lease that verifies', async (t) => {
  const w = await world(t);
  const { person, membership, player } = await playerOf(w, 'ayesha@example.com', false);
  const dev = sim(t, w.ts, player);
  await dev.start();
  await simStatus(dev, 'UNBOUND');
  await waitFor('the retained config', () => dev.config !== null);
  assert.equal(dev.config?.unbound_reason, 'awaiting_approval');
  assert.equal(dev.config?.stream_url, undefined);
  assert.equal(dev.transitions.at(-1)?.reason, 'awaiting_approval');
  await waitForStatus(w.ts, person.token, player.device.id, 'UNBOUND');
  const before = await getDevice(w.ts, person.token, player.device.id);
  assert.deepEqual(before.entitlement, { entitled: false, reason: 'awaiting_approval', mosque_id: w.mosque.id, lease_expires_at: null });

  const started = performance.now();
  const approvedAt = nowS(w.ts.clock);
  await setStatus(w.ts, w.owner.token, membership.id, 'approved');
  await simStatus(dev, 'ONLINE', 1000);
  assert.ok(performance.now() - started <= 1000, `ONLINE after ${performance.now() - started} ms`);

  const config = dev.config!;
  assert.equal(config.stream_url, STREAM);
  assert.equal(config.mosque_id, w.mosque.id);
  assert.equal(config.unbound_reason, undefined);
  const { payload, protectedHeader } = await jwtVerify(config.lease!.token, await leaseKeys(w.ts), { algorithms: ['EdDSA'] });
  assert.equal(protectedHeader.alg, 'EdDSA');
  assert.equal(payload.sub, player.device.id);
  assert.equal(payload.mosque_id, w.mosque.id);
  assert.ok(Math.abs(payload.exp! - (approvedAt + TTL_HOURS * 3600)) <= 2, `exp ${payload.exp} vs approval at ${approvedAt}`);
  assert.equal(config.lease!.expires_at, payload.exp);

  const after = await waitForStatus(w.ts, person.token, player.device.id, 'ONLINE');
  assert.deepEqual(after.entitlement, { entitled: true, reason: null, mosque_id: w.mosque.id, lease_expires_at: new Date(payload.exp! * 1000).toISOString() });
});

test('ban, rejection and membership removal each push a config without stream_url and lease within a second', async (t) => {
  const w = await world(t);
  const { membership, player } = await playerOf(w, 'bilal@example.com', true);
  const raw = await rawPlayer(t, player);
  assert.equal(raw.latest().stream_url, STREAM);
  assert.ok(raw.latest().lease);

  const steps: Array<{ what: string; act: () => Promise<unknown>; reasons: string[] }> = [
    { what: 'ban', act: () => setStatus(w.ts, w.owner.token, membership.id, 'banned'), reasons: ['membership_lapsed'] },
    { what: 'rejection', act: () => setStatus(w.ts, w.owner.token, membership.id, 'rejected'), reasons: ['membership_lapsed'] },
    {
      what: 'removal',
      act: async () => assert.equal((await w.ts.http.delete(`${API}/memberships/${membership.id}`, w.owner.token)).status, 204),
      // A removed membership leaves no row, but the removal is in the activity feed: it has lapsed.
      reasons: ['membership_lapsed'],
    },
  ];
  for (const step of steps) {
    // Entitled again first (the removal step re-approves the same membership before deleting it).
    if (raw.latest().lease === undefined) {
      const v0 = raw.latest().config_version;
      await setStatus(w.ts, w.owner.token, membership.id, 'approved');
      await raw.after(v0, 1000, (c) => c.lease !== undefined);
    }
    const version = raw.latest().config_version;
    const started = performance.now();
    await step.act();
    const seen = await raw.after(version, 1000);
    assert.ok(seen.at - started <= 1000, `${step.what}: config after ${seen.at - started} ms`);
    unleased(seen.body);
    assert.equal(seen.body.mosque_id, w.mosque.id, step.what);
    assert.ok(step.reasons.includes(seen.body.unbound_reason), `${step.what}: unbound_reason ${seen.body.unbound_reason}`);
    const device = await getDevice(w.ts, w.owner.token, player.device.id);
    assert.equal(device.entitlement.entitled, false, step.what);
    assert.equal(device.entitlement.lease_expires_at, null, step.what);
  }
});

test('rebinding a leased player to another mosque pushes a config without stream_url and lease within a second', async (t) => {
  const w = await world(t);
  const other = await createMosque(w.ts, w.root.token, null, { name: 'Masjid Al-Huda', stream_url: 'https://radio.example/huda' });
  const { person, player } = await playerOf(w, 'chen@example.com', true);
  const raw = await rawPlayer(t, player);
  assert.ok(raw.latest().lease);
  const topic = `mosques/${w.mosque.id}/broadcast`;
  assert.equal(await subscribeCode(raw.client, topic), 1);
  const heard: unknown[] = [];
  raw.client.on('message', (tp) => tp === topic && heard.push(tp));
  const version = raw.latest().config_version;
  // Binding takes a place in the other mosque (docs/api.md, "Devices"): a pending membership there.
  assert.equal((await w.ts.http.post(`${API}/mosques/${other.id}/join`, {}, person.token)).status, 201);
  const started = performance.now();
  const res = await w.ts.http.patch(`${API}/devices/${player.device.id}`, { mosque_id: other.id }, person.token);
  assert.equal(res.status, 200);
  const seen = await raw.after(version);
  assert.ok(seen.at - started <= 1000);
  unleased(seen.body);
  assert.equal(seen.body.mosque_id, other.id);
  assert.equal(seen.body.unbound_reason, 'awaiting_approval');
  // The subscription to the old mosque's topic, made while leased, no longer delivers.
  await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan' }, w.owner.token);
  await settle(500);
  assert.deepEqual(heard, []);
  // Unbinding altogether: no_mosque.
  await w.ts.http.patch(`${API}/devices/${player.device.id}`, { mosque_id: null }, person.token);
  const unbound = await raw.after(seen.body.config_version);
  unleased(unbound.body);
  assert.equal(unbound.body.mosque_id, undefined);
  assert.equal(unbound.body.unbound_reason, 'no_mosque');
});

test('deleting the mosque unbinds its leased players at once (no_mosque)', async (t) => {
  const w = await world(t);
  const { player } = await playerOf(w, 'esra@example.com', true);
  const raw = await rawPlayer(t, player);
  assert.ok(raw.latest().lease);
  const version = raw.latest().config_version;
  const started = performance.now();
  assert.equal((await w.ts.http.delete(`${API}/mosques/${w.mosque.id}`, w.root.token)).status, 204);
  const seen = await raw.after(version);
  assert.ok(seen.at - started <= 1000);
  unleased(seen.body);
  assert.equal(seen.body.mosque_id, undefined);
  assert.equal(seen.body.unbound_reason, 'no_mosque');
  assert.equal(raw.client.connected, true, 'a player outlives its mosque');
});

test('deleting the owner cuts the player off within a second; its credentials stop working', async (t) => {
  const w = await world(t);
  const { person, player } = await playerOf(w, 'dawud@example.com', true);
  const raw = await rawPlayer(t, player);
  assert.ok(raw.latest().lease);
  const started = performance.now();
  assert.equal((await w.ts.http.delete(`${API}/users/${person.id}`, w.root.token)).status, 204);
  await closed(raw.client, 1000);
  assert.ok(performance.now() - started <= 1000);
  const id = player.device.id;
  assert.equal(await connectOnce(w.ts.service.mqttUrl, { clientId: id, username: id, password: player.credentials.password }), 4);
  assert.equal((await w.ts.http.get(`${API}/devices/${id}`, w.root.token)).status, 404);
});

test('a player that was offline during the approval gets the current config when it reconnects', async (t) => {
  const w = await world(t);
  const { membership, player } = await playerOf(w, 'farah@example.com', false);
  const dev = sim(t, w.ts, player);
  await dev.start();
  await simStatus(dev, 'UNBOUND');
  await dev.stop({ graceful: true });
  await waitForStatus(w.ts, w.owner.token, player.device.id, 'OFFLINE');

  await setStatus(w.ts, w.owner.token, membership.id, 'approved');
  await settle(100);

  // The firmware comes back (a new SimDevice: the same unit after a reboot).
  const again = sim(t, w.ts, player);
  await again.start();
  await simStatus(again, 'ONLINE', 1000);
  assert.equal(again.config?.stream_url, STREAM);
  const { payload } = await jwtVerify(again.config!.lease!.token, await leaseKeys(w.ts), { algorithms: ['EdDSA'] });
  assert.equal(payload.sub, player.device.id);
  await waitForStatus(w.ts, w.owner.token, player.device.id, 'ONLINE');
});

test('the broadcast topic: an entitled player may subscribe; an unentitled one and a player of another mosque get SUBACK 128', async (t) => {
  const w = await world(t);
  const other = await createMosque(w.ts, w.root.token, null, { name: 'Masjid Al-Huda', stream_url: 'https://radio.example/huda' });
  const entitled = await rawPlayer(t, (await playerOf(w, 'entitled@example.com', true)).player);
  const pending = await rawPlayer(t, (await playerOf(w, 'pending@example.com', false)).player);
  const elsewhere = await playerOf(w, 'elsewhere@example.com', false, other.id);
  await setStatus(w.ts, w.root.token, elsewhere.membership.id, 'approved');
  const foreign = await rawPlayer(t, elsewhere.player);
  await waitFor('the foreign player leased', () => foreign.latest().lease !== undefined);

  const topic = `mosques/${w.mosque.id}/broadcast`;
  assert.equal(await subscribeCode(entitled.client, topic), 1);
  assert.equal(await subscribeCode(pending.client, topic), 128);
  assert.equal(await subscribeCode(foreign.client, topic), 128, 'a player leased for another mosque');
  assert.equal(await subscribeCode(foreign.client, `mosques/${other.id}/broadcast`), 1, 'its own mosque is fine');
  // The refusal keeps the connection up.
  await settle(100);
  assert.equal(pending.client.connected, true);
  assert.equal(foreign.client.connected, true);
});

test('a subscription made while entitled stops delivering at once after a ban', async (t) => {
  const w = await world(t);
  const banned = await playerOf(w, 'banned@example.com', true);
  const kept = await playerOf(w, 'kept@example.com', true);
  const a = await rawPlayer(t, banned.player);
  const b = await rawPlayer(t, kept.player);
  const topic = `mosques/${w.mosque.id}/broadcast`;
  assert.equal(await subscribeCode(a.client, topic), 1);
  assert.equal(await subscribeCode(b.client, topic), 1);
  const onA: unknown[] = [];
  a.client.on('message', (tp, payload) => tp === topic && onA.push(JSON.parse(payload.toString('utf8'))));

  await setStatus(w.ts, w.owner.token, banned.membership.id, 'banned');
  // The raw client ignores its new config and keeps its subscription: only the broker stands in the way.
  const toB = nextMessage(b.client, topic, 1500);
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, w.owner.token);
  assert.equal(res.status, 201);
  const got = await toB;
  assert.equal(got.body.action, 'start');
  assert.equal(got.body.broadcast_id, res.body.id);
  assert.equal(got.body.stream_url, STREAM);
  await settle(1000);
  assert.deepEqual(onA, [], 'the banned player received the broadcast');
  const stop = nextMessage(b.client, topic, 1500, (m) => m.action === 'stop');
  await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${res.body.id}/stop`, {}, w.owner.token);
  await stop;
  await settle(200);
  assert.deepEqual(onA, []);
});

test('only the mosque\'s own transmitter may publish on its broadcast topic; any other device is disconnected', async (t) => {
  const w = await world(t);
  const other = await createMosque(w.ts, w.root.token, null, { name: 'Masjid Al-Huda' });
  const listener = await rawPlayer(t, (await playerOf(w, 'listener@example.com', true)).player);
  const topic = `mosques/${w.mosque.id}/broadcast`;
  assert.equal(await subscribeCode(listener.client, topic), 1);
  const event = (id: string) => JSON.stringify({ v: '1.0', broadcast_id: id, kind: 'announcement', action: 'start', ts: Math.floor(Date.now() / 1000) });

  // The mosque's transmitter: forwarded to leased players, and it stays connected.
  const tx = await registerTransmitter(w.ts, w.owner.token, w.mosque.id);
  const txClient = await connectDevice(t, tx.credentials);
  const heard = nextMessage(listener.client, topic, 1500, (m) => m.broadcast_id === 'from-tx');
  txClient.publish(topic, event('from-tx'), { qos: 1 });
  await heard;
  await settle(100);
  assert.equal(txClient.connected, true);

  const intruders: Array<[string, Registered]> = [
    ['an entitled player of the mosque', (await playerOf(w, 'loud@example.com', true)).player],
    ['a transmitter of another mosque', await registerTransmitter(w.ts, w.root.token, other.id)],
  ];
  const leaked: unknown[] = [];
  listener.client.on('message', (tp, payload) => tp === topic && JSON.parse(payload.toString('utf8')).broadcast_id === 'intruder' && leaked.push(tp));
  for (const [who, reg] of intruders) {
    const client = await connectDevice(t, reg.credentials);
    client.publish(topic, event('intruder'), { qos: 1 });
    await closed(client, 1000).catch(() => assert.fail(`${who} was not disconnected`));
  }
  await settle(200);
  assert.deepEqual(leaked, [], 'an intruder\'s publish was forwarded');
});

test('lease renewal: past half its life a connected player gets a new lease from the 30 s renewal timer', async (t) => {
  // The renewal timer runs every 30 s: it is a mocked setInterval here (enabled before the service
  // starts), so the test moves it on instead of waiting. Timeouts stay real.
  t.mock.timers.enable({ apis: ['setInterval'] });
  const clock = createManualClock(Date.now());
  const w = await world(t, { clock, ttlHours: 1 });
  const { player } = await playerOf(w, 'hamza@example.com', true);
  const raw = await rawPlayer(t, player, { keepalive: 0 });
  const first = raw.latest();
  assert.equal(first.lease.expires_at, nowS(clock) + 3600);

  clock.advance(29 * 60_000);
  t.mock.timers.tick(30_000);
  await settle(200);
  assert.equal(raw.latest().config_version, first.config_version, 'renewed before half life');

  clock.advance(2 * 60_000); // 31 minutes in: past half of one hour
  t.mock.timers.tick(30_000);
  const renewed = await raw.after(first.config_version, 1000);
  assert.equal(renewed.body.stream_url, STREAM);
  assert.equal(renewed.body.lease.expires_at, nowS(clock) + 3600);
  assert.notEqual(renewed.body.lease.token, first.lease.token);
  const { payload } = await jwtVerify(renewed.body.lease.token, await leaseKeys(w.ts), { algorithms: ['EdDSA'], currentDate: new Date(clock()) });
  assert.equal(payload.exp, nowS(clock) + 3600);
  const device = await getDevice(w.ts, w.owner.token, player.device.id);
  assert.equal(device.entitlement.lease_expires_at, new Date(payload.exp! * 1000).toISOString());

  // Renewed once: the next tick leaves it alone.
  t.mock.timers.tick(30_000);
  await settle(200);
  assert.equal(raw.latest().config_version, renewed.body.config_version);
});

test('lease renewal on reconnect: a player back past half its lease gets a new one at once', async (t) => {
  const clock = createManualClock(Date.now());
  const w = await world(t, { clock, ttlHours: 1 });
  const { player } = await playerOf(w, 'imran@example.com', true);
  const first = await rawPlayer(t, player);
  const lease = first.latest().lease;
  first.client.end(true);
  await awaitClose(first.client);

  // Back after 10 minutes: the lease is still fresh, the retained config is delivered as it was.
  clock.advance(10 * 60_000);
  const early = await rawPlayer(t, player);
  await settle(200);
  assert.equal(early.latest().lease.token, lease.token);
  assert.equal(early.configs.length, 1);
  early.client.end(true);
  await awaitClose(early.client);

  clock.advance(21 * 60_000);
  const late = await rawPlayer(t, player);
  const renewed = await late.after(first.latest().config_version, 1000, (c) => c.lease?.token !== lease.token);
  assert.equal(renewed.body.lease.expires_at, nowS(clock) + 3600);
});

test('a lease that ran out while the player was offline: why says lease_expired; reconnecting brings a fresh lease', async (t) => {
  const clock = createManualClock(Date.now());
  const w = await world(t, { clock, ttlHours: 1 });
  const { player } = await playerOf(w, 'jamal@example.com', true);
  const raw = await rawPlayer(t, player);
  const version = raw.latest().config_version;
  raw.client.end(true);
  await awaitClose(raw.client);
  clock.advance(61 * 60_000);

  const why = await w.ts.http.get(`${API}/devices/${player.device.id}/why`, w.owner.token);
  assert.equal(why.status, 200);
  assert.equal(why.body.effective_playback_state, 'unbound');
  assert.equal(why.body.deciding_field, 'lease.expires_at');
  assert.equal(why.body.reason, 'lease_expired');

  // An expired lease no longer opens the broadcast topic...
  const back = await rawPlayer(t, player);
  const fresh = await back.after(version, 1000, (c) => c.lease !== undefined);
  assert.equal(fresh.body.lease.expires_at, nowS(clock) + 3600);
  // ...and the fresh one does.
  assert.equal(await subscribeCode(back.client, `mosques/${w.mosque.id}/broadcast`), 1);
});

test('a new stream_url for the mosque reaches its leased players at once, and not unleased ones', async (t) => {
  const w = await world(t);
  const leased = await rawPlayer(t, (await playerOf(w, 'khalid@example.com', true)).player);
  const waiting = await rawPlayer(t, (await playerOf(w, 'layla@example.com', false)).player);
  const v0 = leased.latest().config_version;
  const w0 = waiting.latest().config_version;
  const res = await w.ts.http.patch(`${API}/mosques/${w.mosque.id}`, { stream_url: 'https://radio.example/noor/hq' }, w.owner.token);
  assert.equal(res.status, 200);
  const seen = await leased.after(v0);
  assert.equal(seen.body.stream_url, 'https://radio.example/noor/hq');
  assert.ok(seen.body.lease);
  await settle(200);
  assert.equal(waiting.latest().config_version, w0);
  unleased(waiting.latest());
});

test('why answers for an UNBOUND, an offline and a playing player', async (t) => {
  const w = await world(t);
  const unboundReg = (await playerOf(w, 'unbound@example.com', false)).player;
  const offlineReg = (await playerOf(w, 'offline@example.com', true)).player;
  const playingReg = (await playerOf(w, 'playing@example.com', true)).player;
  const [unbound, offline, playing] = [unboundReg, offlineReg, playingReg].map((r) => sim(t, w.ts, r));
  await Promise.all([unbound!.start(), offline!.start(), playing!.start()]);
  await simStatus(unbound!, 'UNBOUND');
  await simStatus(offline!, 'ONLINE');
  await simStatus(playing!, 'ONLINE');
  await offline!.stop({ graceful: true });
  await waitForStatus(w.ts, w.owner.token, offlineReg.device.id, 'OFFLINE');
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'maghrib' }, w.owner.token);
  assert.equal(res.status, 201);
  await simStatus(playing!, 'PLAYING', 1000);
  await waitForStatus(w.ts, w.owner.token, playingReg.device.id, 'PLAYING');

  const why = async (reg: Registered, token: string) => {
    const r = await w.ts.http.get(`${API}/devices/${reg.device.id}/why`, token);
    assert.equal(r.status, 200);
    assert.equal(r.body.device_id, reg.device.id);
    assert.ok(!Number.isNaN(Date.parse(r.body.checked_at)));
    return r.body as Record<string, any>;
  };
  const u = await why(unboundReg, w.owner.token);
  assert.deepEqual([u.status, u.effective_playback_state, u.deciding_field, u.reason], ['UNBOUND', 'unbound', 'membership.status', 'awaiting_approval']);
  assert.equal(u.detail.membership_status, 'pending');
  const o = await why(offlineReg, w.owner.token);
  assert.deepEqual([o.status, o.effective_playback_state, o.deciding_field, o.reason], ['OFFLINE', 'offline', 'device.last_seen_at', 'shutdown']);
  assert.equal(o.detail.connected, false);
  const p = await why(playingReg, w.owner.token);
  assert.deepEqual([p.status, p.effective_playback_state, p.deciding_field, p.reason], ['PLAYING', 'playing', 'device.status', 'broadcast_start']);
  assert.equal(p.detail.connected, true);
  assert.ok(!Number.isNaN(Date.parse(p.detail.lease_expires_at)), 'an ISO-8601 time, like every time in an HTTP body');
});

test('why is answered to the owner, an admin of the mosque and a superadmin only', async (t) => {
  const w = await world(t);
  const { person, player } = await playerOf(w, 'nadia@example.com', false);
  const stranger: Person = await member(w.ts, 'stranger@example.com');
  for (const token of [person.token, w.owner.token, w.root.token]) {
    assert.equal((await w.ts.http.get(`${API}/devices/${player.device.id}/why`, token)).status, 200);
  }
  assert.equal((await w.ts.http.get(`${API}/devices/${player.device.id}/why`, stranger.token)).status, 404);
  assert.equal((await w.ts.http.get(`${API}/devices/${player.device.id}/why`)).status, 401);
  // Never seen: the membership still decides first.
  const body = (await w.ts.http.get(`${API}/devices/${player.device.id}/why`, person.token)).body;
  assert.equal(body.deciding_field, 'membership.status');
  assert.equal(body.reason, 'awaiting_approval');
});
