import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API } from '../support/people.ts';
import { createManualClock, startTestService } from '../support/service.ts';
import {
  closed, connectDevice, deviceEvents, getDevice, heartbeatPayload, logPayload, mosqueWithOwner, nextMessage, publish,
  registerPlayer, registerTransmitter, settle, statusPayload, subscribeCode, waitFor,
} from '../support/devices.ts';

// docs/firmware.md, "3. Device → backend" and "2. What the broker refuses, and why": what devices publish, what the backend makes of it, and what it refuses.

test('a status transition is written at once: GET /devices/{id} and its events show it right after the PUBACK', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  assert.equal(tx.device.status, 'UNKNOWN');
  const client = await connectDevice(t, tx.credentials);

  await publish(client, `devices/${id}/status`, statusPayload('CONNECTING', { reason: 'boot', detail: { attempt: 1 } }), { retain: true });
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE', {
    prev: 'CONNECTING', reason: 'connected', fw: '1.4.2', mac: 'AA:BB:CC:DD:EE:FF', ssid: 'masjid-wifi', ip: '10.0.0.7',
    rssi: -61, temp_c: 41.5, uptime_s: 12, config_version: tx.device.config_version,
  }), { retain: true });
  // No polling: the transition is written before the PUBACK, long before the 2 s flush.
  const device = await getDevice(ts, owner.token, id);
  assert.equal(device.status, 'ONLINE');
  assert.equal(device.fw, '1.4.2');
  assert.equal(device.mac, 'AA:BB:CC:DD:EE:FF');
  assert.equal(device.ssid, 'masjid-wifi');
  assert.equal(device.ip, '10.0.0.7');
  assert.equal(device.rssi, -61);
  assert.equal(device.temp_c, 41.5);
  assert.equal(device.uptime_s, 12);
  assert.equal(typeof device.last_seen_at, 'string');
  assert.equal(device.counters.status_messages, 2);

  const statusEvents = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'status');
  assert.deepEqual(statusEvents.map((e) => [e.from, e.to, e.reason]), [['CONNECTING', 'ONLINE', 'connected'], ['UNKNOWN', 'CONNECTING', 'boot']]);
  assert.equal(statusEvents[0]!.device_id, id);
  assert.equal(statusEvents[0]!.mosque_id, mosque.id);

  // The same status again (the once-after-connect republish) is no transition.
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });
  assert.equal((await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'status').length, 2);
});

test('bad payloads on the device\'s own topics are acknowledged, change nothing, are counted and noted once; the device stays connected', async (t) => {
  // Twelve statuses at once: more than the default burst of 10 (test/hostile/mqtt/budgets.test.ts holds that one).
  const ts = await startTestService(t, { env: { DEVICE_STATUS_BURST: '20' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  let disconnected = false;
  client.on('close', () => (disconnected = true));
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE', { fw: '1.0.0', rssi: -50 }), { retain: true });
  const before = await getDevice(ts, owner.token, id);

  const oversized = statusPayload('PLAYING', { fw: '9.9.9', detail: { pad: 'x'.repeat(5 * 1024) } });
  assert.ok(Buffer.byteLength(oversized) > 4096);
  const bad: Array<[string, string]> = [
    ['not JSON', '{"v":"1.0","status":"PLAYING"'],
    ['wrong v', statusPayload('PLAYING', { v: '2.0', fw: '9.9.9' })],
    ['no v', JSON.stringify({ status: 'PLAYING', ts: 1_767_225_600 })],
    ['UNBOUND from a transmitter', statusPayload('UNBOUND', { fw: '9.9.9' })],
    ['UNKNOWN is backend-only', statusPayload('UNKNOWN')],
    ['rssi not an integer', statusPayload('PLAYING', { rssi: -61.5 })],
    ['rssi a string', statusPayload('PLAYING', { rssi: '-61' })],
    ['no ts', JSON.stringify({ v: '1.0', status: 'PLAYING' })],
    ['an array', '[]'],
    ['over 4 KiB', oversized],
  ];
  for (const [, payload] of bad) await publish(client, `devices/${id}/status`, payload, { retain: true });
  // A bad heartbeat and a bad ack count the same way.
  await publish(client, `devices/${id}/heartbeat`, heartbeatPayload('PLAYING', { rssi: 5 }), { qos: 1 });
  await publish(client, `devices/${id}/ack`, JSON.stringify({ v: '1.0', id: 'c1', ok: 'yes', ts: 1 }), { qos: 1 });

  const after = await getDevice(ts, owner.token, id);
  assert.equal(disconnected, false);
  assert.equal(after.status, 'ONLINE');
  assert.equal(after.fw, '1.0.0');
  assert.equal(after.rssi, -50);
  assert.deepEqual(after.status_detail, before.status_detail);
  assert.equal(after.counters.payloads_rejected, bad.length + 2);
  assert.equal(after.counters.status_messages, 1);
  assert.equal(after.counters.publishes_refused, 0);

  const events = await deviceEvents(ts, owner.token, id);
  assert.equal(events.filter((e) => e.kind === 'status').length, 1, 'no transition from a bad payload');
  const notes = events.filter((e) => e.kind === 'payload_rejected');
  assert.equal(notes.length, 1, 'noted at most once a minute');
  assert.equal(notes[0]!.detail.channel, 'status');
  assert.equal(notes[0]!.reason, 'not_json');

  // Still connected and heard: a good status afterwards moves the device.
  await publish(client, `devices/${id}/status`, statusPayload('PLAYING', { detail: { source: 'local', position_s: 0 } }), { retain: true });
  assert.equal((await getDevice(ts, owner.token, id)).status, 'PLAYING');
  assert.equal(client.connected, true);
});

test('the timeline note of rejected payloads repeats after a minute, not before', async (t) => {
  const clock = createManualClock(Date.now());
  const ts = await startTestService(t, { clock });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  const notes = async () => (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'payload_rejected').length;
  await publish(client, `devices/${id}/status`, 'nope');
  clock.advance(59_000);
  await publish(client, `devices/${id}/status`, 'nope');
  assert.equal(await notes(), 1);
  clock.advance(2_000);
  await publish(client, `devices/${id}/status`, 'nope');
  assert.equal(await notes(), 2);
  assert.equal((await getDevice(ts, owner.token, id)).counters.payloads_rejected, 3);
});

test('a stream player\'s status is checked against the player states (UNBOUND, MUTED yes; temp_c no)', async (t) => {
  const ts = await startTestService(t);
  const { owner } = await mosqueWithOwner(ts);
  const player = await registerPlayer(ts, owner);
  const id = player.device.id;
  const client = await connectDevice(t, player.credentials);
  await publish(client, `devices/${id}/status`, statusPayload('UNBOUND', { detail: { reason: 'no_mosque' } }), { retain: true });
  assert.equal((await getDevice(ts, owner.token, id)).status, 'UNBOUND');
  await publish(client, `devices/${id}/status`, statusPayload('MUTED', { temp_c: 30 }), { retain: true });
  const device = await getDevice(ts, owner.token, id);
  assert.equal(device.status, 'UNBOUND');
  assert.equal(device.counters.payloads_rejected, 1);
});

test('publishing on a foreign topic disconnects the device and is counted; it can reconnect', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const a = await registerTransmitter(ts, owner.token, mosque.id, 'a');
  const b = await registerTransmitter(ts, owner.token, mosque.id, 'b');
  const id = a.device.id;

  for (const topic of [`devices/${b.device.id}/status`, `devices/${id}/config`, 'devices/x/y/z', '$SYS/hack']) {
    const client = await connectDevice(t, a.credentials);
    const gone = closed(client, 1500);
    client.publish(topic, statusPayload('ONLINE'), { qos: 0 });
    await gone;
  }
  const device = await getDevice(ts, owner.token, id);
  assert.equal(device.counters.publishes_refused, 4);
  assert.equal(device.counters.payloads_rejected, 0);
  assert.equal((await getDevice(ts, owner.token, b.device.id)).status, 'UNKNOWN', 'the other device is untouched');
  const refusals = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'publish_refused');
  assert.equal(refusals.length, 1);

  const again = await connectDevice(t, a.credentials);
  await publish(again, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });
  assert.equal((await getDevice(ts, owner.token, id)).status, 'ONLINE');
});

test('forbidden subscriptions get SUBACK 0x80 and the connection stays; the own config arrives retained with the contract fields', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts, { stream_url: 'https://icecast.example.org/noor' });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const other = await registerTransmitter(ts, owner.token, mosque.id, 'other');
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);

  for (const filter of ['#', '+/x', '$SYS/#', `devices/${other.device.id}/config`, `devices/${other.device.id}/cmd`, `devices/${id}/status`, `devices/${id}/#`, 'devices/+/config', `mosques/${mosque.id}/broadcast`]) {
    assert.equal(await subscribeCode(client, filter), 128, filter);
    assert.equal(client.connected, true, `still connected after ${filter}`);
  }
  assert.equal((await getDevice(ts, owner.token, id)).counters.publishes_refused, 9);

  const config = nextMessage(client, `devices/${id}/config`);
  assert.equal(await subscribeCode(client, `devices/${id}/config`), 1);
  const { body, retain } = await config;
  assert.equal(retain, true);
  assert.deepEqual(body, {
    v: '1.0',
    config_version: tx.device.config_version,
    heartbeat_secs: 60,
    log_enabled: false,
    mosque_id: mosque.id,
    stream_url: 'https://icecast.example.org/noor',
  });
  assert.equal(await subscribeCode(client, `devices/${id}/cmd`), 1);
});

test('a stream player without a mosque gets a config without mosque_id and stream_url, with the unbound reason', async (t) => {
  const ts = await startTestService(t);
  const { owner } = await mosqueWithOwner(ts);
  const player = await registerPlayer(ts, owner);
  const client = await connectDevice(t, player.credentials);
  const config = nextMessage(client, `devices/${player.device.id}/config`);
  assert.equal(await subscribeCode(client, `devices/${player.device.id}/config`), 1);
  const { body } = await config;
  assert.equal(body.v, '1.0');
  assert.equal(body.heartbeat_secs, 300);
  assert.equal(body.log_enabled, false);
  assert.equal(body.config_version, player.device.config_version);
  assert.equal('mosque_id' in body, false);
  assert.equal('stream_url' in body, false);
  assert.equal('lease' in body, false);
  assert.equal(body.unbound_reason, 'no_mosque');
});

test('a heartbeat updates rssi and last_seen_at at once (in-memory overlay), and a different status in it moves the status', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE', { rssi: -70, ip: '10.0.0.2' }), { retain: true });
  assert.equal((await getDevice(ts, owner.token, id)).last_seen_at, '2026-01-01T12:00:00.000Z');

  clock.advance(30_000);
  await publish(client, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE', { rssi: -42, ip: '10.0.0.9', uptime_s: 99, free_heap: 12345, volume: 55, config_version: 1 }), { qos: 0 });
  const seen = await waitFor('heartbeat rssi', async () => {
    const d = await getDevice(ts, owner.token, id);
    return d.rssi === -42 ? d : null;
  });
  assert.equal(seen.ip, '10.0.0.9');
  assert.equal(seen.uptime_s, 99);
  // Every field the merge carries (live.ts overlay), not only rssi.
  assert.deepEqual([seen.free_heap, seen.volume, seen.reported_config_version], [12345, 55, 1]);
  assert.equal(seen.last_seen_at, '2026-01-01T12:00:30.000Z');
  assert.equal(seen.status, 'ONLINE');
  assert.equal(seen.counters.heartbeats, 1);
  assert.equal((await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'status').length, 1);

  // The heartbeat repeats the status; a different one means the backend missed a transition.
  await publish(client, `devices/${id}/heartbeat`, heartbeatPayload('PLAYING'), { qos: 1 });
  assert.equal((await getDevice(ts, owner.token, id)).status, 'PLAYING');
  const latest = (await deviceEvents(ts, owner.token, id)).find((e) => e.kind === 'status')!;
  assert.deepEqual([latest.from, latest.to, latest.reason], ['ONLINE', 'PLAYING', 'heartbeat']);

  // A heartbeat without rssi does not undo the rssi of the one before it.
  assert.equal((await getDevice(ts, owner.token, id)).rssi, -42);
  // A status is newer than the heartbeat held in memory.
  await publish(client, `devices/${id}/status`, statusPayload('PLAYING', { rssi: -30 }), { retain: true });
  assert.equal((await getDevice(ts, owner.token, id)).rssi, -30);

  // After the flush the values stay (now from the row).
  await new Promise((r) => setTimeout(r, 2200));
  const flushed = await getDevice(ts, owner.token, id);
  assert.equal(flushed.rssi, -30);
  assert.equal(flushed.ip, '10.0.0.9');
  assert.equal(flushed.uptime_s, 99);
  assert.deepEqual([flushed.free_heap, flushed.volume, flushed.reported_config_version], [12345, 55, 1]);
  assert.equal(flushed.last_seen_at, '2026-01-01T12:00:30.000Z');
});

test('logs: only while enabled, at most one a second, at most 512 bytes; GET /devices/{id}/logs shows the accepted lines, newest first', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  const counters = async () => (await getDevice(ts, owner.token, id)).counters;

  // log_enabled is false by default: dropped.
  await publish(client, `devices/${id}/log`, logPayload('before enabling'), { qos: 1 });
  assert.equal((await counters()).logs_dropped, 1);
  assert.equal((await ts.http.patch(`${API}/devices/${id}`, { config: { log_enabled: true } }, owner.token)).status, 200);

  clock.advance(5_000);
  for (let i = 1; i <= 5; i++) await publish(client, `devices/${id}/log`, logPayload(`burst ${i}`), { qos: 1 });
  let c = await counters();
  assert.equal(c.logs_accepted, 1);
  assert.equal(c.logs_dropped, 1 + 4);

  clock.advance(1_000);
  const big = logPayload('y'.repeat(480));
  assert.ok(Buffer.byteLength(big) > 512 && JSON.parse(big).msg.length <= 512);
  await publish(client, `devices/${id}/log`, big, { qos: 1 });
  const tooLongMsg = logPayload('z'.repeat(600));
  await publish(client, `devices/${id}/log`, tooLongMsg, { qos: 1 });
  c = await counters();
  assert.equal(c.logs_accepted, 1);
  assert.equal(c.logs_dropped, 5 + 2, 'both oversized logs are dropped and counted as logs');

  // Not a log: bad level.
  await publish(client, `devices/${id}/log`, logPayload('hm', 'shout'), { qos: 1 });
  assert.equal((await counters()).payloads_rejected, 1);

  clock.advance(1_000);
  await publish(client, `devices/${id}/log`, logPayload('second line', 'warn'), { qos: 1 });
  assert.equal((await counters()).logs_accepted, 2);

  const logs = await ts.http.get(`${API}/devices/${id}/logs`, owner.token);
  assert.equal(logs.status, 200);
  assert.deepEqual(logs.body.lines.map((l: { msg: string }) => l.msg), ['second line', 'burst 1']);
  assert.equal(logs.body.lines[0].level, 'warn');
  assert.equal(typeof logs.body.lines[0].ts, 'number');
  assert.equal(logs.body.lines[0].at, '2026-01-01T12:00:07.000Z');
  assert.equal(logs.body.note, null);
  const one = await ts.http.get(`${API}/devices/${id}/logs?limit=1`, owner.token);
  assert.deepEqual(one.body.lines.map((l: { msg: string }) => l.msg), ['second line']);
});

test('acks: a well-formed ack is taken, a malformed one is rejected and counted', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  const ack = (extra: Record<string, unknown>) => JSON.stringify({ v: '1.0', id: 'cmd-1', name: 'ping', ok: true, ts: 1_767_225_600, ...extra });

  await publish(client, `devices/${id}/ack`, ack({}));
  await publish(client, `devices/${id}/ack`, ack({ ok: false, error: { code: 'busy' } }));
  await publish(client, `devices/${id}/ack`, ack({ result: { rtt: 3 } }));
  assert.equal((await getDevice(ts, owner.token, id)).counters.payloads_rejected, 0);

  const bad = [
    ack({ ok: 'yes' }),
    ack({ v: '1.1' }),
    ack({ id: 42 }),
    ack({ ts: 'now' }),
    JSON.stringify({ v: '1.0', name: 'ping', ok: true, ts: 1 }),
    JSON.stringify({ v: '1.0', id: 'x', ok: true, ts: 1 }),
    ack({ id: 'i'.repeat(65) }),
  ];
  for (const payload of bad) await publish(client, `devices/${id}/ack`, payload);
  await settle(50);
  const device = await getDevice(ts, owner.token, id);
  assert.equal(device.counters.payloads_rejected, bad.length);
  assert.equal(client.connected, true);
});
