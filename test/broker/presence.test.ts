import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API, member } from '../support/people.ts';
import { createManualClock, startTestService } from '../support/service.ts';
import {
  closed, connectDevice, connectOnce, deviceEvents, getDevice, heartbeatPayload, mosqueWithOwner, nextMessage, publish,
  registerPlayer, registerTransmitter, settle, statusPayload, statusWill, subscribeCode, waitFor, waitForStatus,
} from '../support/devices.ts';

// docs/firmware.md, "3.2 Heartbeat" (the cadence and the stale rule) and every way to OFFLINE; what PATCH and
// DELETE of a device do to its connection.

/** Longer than one run of the 1 s sweep timer, so a sweep has certainly read the moved clock. */
const SWEEP_WAIT_MS = 1300;

test('stale sweep: 3 missed heartbeats of heartbeat_secs mark the device OFFLINE (stale); fewer do not', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  assert.equal((await ts.http.patch(`${API}/devices/${id}`, { config: { heartbeat_secs: 15 } }, owner.token)).status, 200);
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });

  clock.advance(44_000);
  await settle(SWEEP_WAIT_MS);
  assert.equal((await getDevice(ts, owner.token, id)).status, 'ONLINE', '44 s < 3 x 15 s');

  // A heartbeat restarts the count.
  await publish(client, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE'), { qos: 1 });
  clock.advance(44_000);
  await settle(SWEEP_WAIT_MS);
  assert.equal((await getDevice(ts, owner.token, id)).status, 'ONLINE', '44 s after the heartbeat');

  clock.advance(2_000);
  const stale = await waitForStatus(ts, owner.token, id, 'OFFLINE', 1600);
  assert.equal(stale.connected, true, 'stale is about silence, not the socket');
  const [event] = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'status');
  assert.deepEqual([event!.from, event!.to, event!.reason], ['ONLINE', 'OFFLINE', 'stale']);

  // The device speaks again: its heartbeat carries its true state.
  await publish(client, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE'), { qos: 1 });
  assert.equal((await getDevice(ts, owner.token, id)).status, 'ONLINE');
});

test('stale sweep follows the kind default: a stream player (300 s) survives 899 s, not 901 s', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock });
  const { owner } = await mosqueWithOwner(ts);
  const player = await registerPlayer(ts, owner);
  const id = player.device.id;
  const client = await connectDevice(t, player.credentials);
  await publish(client, `devices/${id}/status`, statusPayload('UNBOUND', { detail: { reason: 'no_mosque' } }), { retain: true });
  clock.advance(899_000);
  await settle(SWEEP_WAIT_MS);
  assert.equal((await getDevice(ts, owner.token, id)).status, 'UNBOUND');
  clock.advance(2_000);
  await waitForStatus(ts, owner.token, id, 'OFFLINE', 1600);
});

test('an abnormal disconnect publishes the will: OFFLINE with the will\'s reason (lwt)', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials, { will: statusWill(id, 'lwt') });
  await publish(client, `devices/${id}/status`, statusPayload('PLAYING', { detail: { source: 'local' } }), { retain: true });
  (client as unknown as { stream: { destroy(): void } }).stream.destroy();

  const offline = await waitForStatus(ts, owner.token, id, 'OFFLINE');
  assert.equal(offline.status_detail.reason, 'lwt');
  await waitFor('disconnected', async () => (await getDevice(ts, owner.token, id)).connected === false);
  const events = await deviceEvents(ts, owner.token, id);
  const status = events.filter((e) => e.kind === 'status');
  assert.deepEqual([status[0]!.from, status[0]!.to, status[0]!.reason], ['PLAYING', 'OFFLINE', 'lwt']);
  assert.ok(events.some((e) => e.kind === 'disconnected'));
});

test('a graceful shutdown: OFFLINE (shutdown) then DISCONNECT; the will is not published', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials, { will: statusWill(id, 'lwt') });
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });
  await publish(client, `devices/${id}/status`, statusPayload('OFFLINE', { prev: 'ONLINE', reason: 'shutdown' }), { retain: true });
  await new Promise<void>((resolve) => client.end(false, {}, () => resolve()));
  await waitFor('disconnected', async () => (await getDevice(ts, owner.token, id)).connected === false);
  await settle();

  const device = await getDevice(ts, owner.token, id);
  assert.equal(device.status, 'OFFLINE');
  assert.equal(device.status_detail.reason, 'shutdown');
  const status = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'status');
  assert.deepEqual(status.map((e) => [e.from, e.to, e.reason]), [['ONLINE', 'OFFLINE', 'shutdown'], ['UNKNOWN', 'ONLINE', null]]);
});

test('a clean DISCONNECT without a status marks the device OFFLINE (disconnect) at once, not minutes later as stale', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials, { will: statusWill(id) });
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });
  await new Promise<void>((resolve) => client.end(false, {}, () => resolve()));
  const device = await waitForStatus(ts, owner.token, id, 'OFFLINE');
  assert.equal(device.connected, false);
  const [event] = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'status');
  assert.deepEqual([event!.from, event!.to, event!.reason], ['ONLINE', 'OFFLINE', 'disconnect']);
});

test('a socket that drops without a will (no DISCONNECT) marks the device OFFLINE (disconnect) at once', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${id}/status`, statusPayload('PLAYING'), { retain: true });
  client.stream.destroy();
  await waitForStatus(ts, owner.token, id, 'OFFLINE');
  const [event] = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'status');
  assert.deepEqual([event!.from, event!.to, event!.reason], ['PLAYING', 'OFFLINE', 'disconnect']);
});

test('last_seen_at stays the time of the last packet when the backend marks the device stale or disconnected', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  assert.equal((await ts.http.patch(`${API}/devices/${id}`, { config: { heartbeat_secs: 15 } }, owner.token)).status, 200);
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });
  const seen = (await getDevice(ts, owner.token, id)).last_seen_at;
  assert.equal(seen, '2026-01-01T12:00:00.000Z');
  clock.advance(46_000);
  const stale = await waitForStatus(ts, owner.token, id, 'OFFLINE', 1600);
  assert.equal(stale.last_seen_at, seen, 'marking stale is not a sign of life');
  const why = await ts.http.get(`${API}/devices/${id}/why`, owner.token);
  assert.equal(why.body.detail.last_seen_at, seen, 'why speaks ISO-8601 like every other body');
});

test('PATCH config: heartbeat_secs under the kind minimum is 400; at the minimum it is taken', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const player = await registerPlayer(ts, owner);
  const patch = (id: string, config: Record<string, unknown>) => ts.http.patch(`${API}/devices/${id}`, { config }, owner.token);

  for (const [id, secs] of [[tx.device.id, 14], [player.device.id, 59], [tx.device.id, 0], [tx.device.id, -60], [tx.device.id, 20.5], [tx.device.id, 3601]] as const) {
    const res = await patch(id, { heartbeat_secs: secs });
    assert.equal(res.status, 400, `heartbeat_secs ${secs}`);
    assert.equal(res.body.error.code, 'validation_failed');
  }
  assert.equal((await getDevice(ts, owner.token, tx.device.id)).config_version, tx.device.config_version, 'nothing changed');

  const okTx = await patch(tx.device.id, { heartbeat_secs: 15 });
  assert.equal(okTx.status, 200);
  assert.equal(okTx.body.config.heartbeat_secs, 15);
  const okPlayer = await patch(player.device.id, { heartbeat_secs: 60 });
  assert.equal(okPlayer.status, 200);
  assert.equal(okPlayer.body.config.heartbeat_secs, 60);
});

test('PATCH config raises config_version and the connected device receives the new config within a second', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  const first = nextMessage(client, `devices/${id}/config`);
  assert.equal(await subscribeCode(client, `devices/${id}/config`), 1);
  const v0 = (await first).body.config_version as number;

  const pushed = nextMessage(client, `devices/${id}/config`, 1000);
  const started = Date.now();
  const res = await ts.http.patch(`${API}/devices/${id}`, { config: { heartbeat_secs: 30, volume: 70, log_enabled: true, quiet_hours: { start: '23:00', end: '05:00' } } }, owner.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.config_version, v0 + 1);
  const { body } = await pushed;
  assert.ok(Date.now() - started < 1000);
  assert.deepEqual(body, {
    v: '1.0', config_version: v0 + 1, heartbeat_secs: 30, log_enabled: true, volume: 70,
    quiet_hours: { start: '23:00', end: '05:00' }, mosque_id: mosque.id,
  });

  // A rename is not a config change: no new version, nothing pushed.
  let extra = false;
  const onMessage = (topic: string) => topic === `devices/${id}/config` && (extra = true);
  client.on('message', onMessage);
  const renamed = await ts.http.patch(`${API}/devices/${id}`, { name: 'new name' }, owner.token);
  assert.equal(renamed.status, 200);
  assert.equal(renamed.body.config_version, v0 + 1);
  await settle(200);
  assert.equal(extra, false);
  client.off('message', onMessage);

  // The change is on the device's timeline.
  assert.ok((await deviceEvents(ts, owner.token, id)).some((e) => e.kind === 'config_changed'));
});

test('the devices of a deleted user are cut off and their credentials stop working', async (t) => {
  const ts = await startTestService(t);
  const { root, mosque } = await mosqueWithOwner(ts);
  const person = await member(ts, 'leaving@example.com');
  const player = await registerPlayer(ts, person, mosque.id);
  const id = player.device.id;
  const client = await connectDevice(t, player.credentials, { will: statusWill(id) });
  const gone = closed(client, 1500);

  const res = await ts.http.delete(`${API}/users/${person.id}`, root.token);
  assert.ok(res.status === 200 || res.status === 204, `delete user: ${res.status}`);
  await gone;
  assert.equal(await connectOnce(ts.service.mqttUrl, { clientId: id, username: id, password: player.credentials.password }), 4);
  assert.equal((await ts.http.get(`${API}/devices/${id}`, root.token)).status, 404);
});

test('deleting a mosque deletes its transmitters (cut off) and unbinds its players (config without mosque_id)', async (t) => {
  const ts = await startTestService(t);
  const { root, owner, mosque } = await mosqueWithOwner(ts, { stream_url: 'https://icecast.example.org/noor' });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const listener = await member(ts, 'listener@example.com');
  const player = await registerPlayer(ts, listener, mosque.id);
  const txClient = await connectDevice(t, tx.credentials);
  const playerClient = await connectDevice(t, player.credentials);
  const configTopic = `devices/${player.device.id}/config`;
  const first = nextMessage(playerClient, configTopic);
  assert.equal(await subscribeCode(playerClient, configTopic), 1);
  const before = (await first).body;
  assert.equal(before.mosque_id, mosque.id);

  const txGone = closed(txClient, 1500);
  const unbound = nextMessage(playerClient, configTopic, 1500);
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}`, root.token)).status, 204);
  await txGone;
  const { body } = await unbound;
  assert.equal('mosque_id' in body, false, JSON.stringify(body));
  assert.equal('stream_url' in body, false);
  assert.equal('lease' in body, false);
  assert.ok(body.config_version > before.config_version);

  assert.equal(await connectOnce(ts.service.mqttUrl, { clientId: tx.device.id, username: tx.device.id, password: tx.credentials.password }), 4);
  assert.equal((await ts.http.get(`${API}/devices/${tx.device.id}`, root.token)).status, 404);
  const kept = await getDevice(ts, listener.token, player.device.id);
  assert.equal(kept.mosque_id, null);
  assert.equal(playerClient.connected, true, 'the player stays connected');
});
