import { test } from 'node:test';
import assert from 'node:assert/strict';
import type mqtt from 'mqtt';
import { startTestService } from '../../support/service.ts';
import {
  closed, connectDevice, connectOnce, deviceEvents, getDevice, heartbeatPayload, mosqueWithOwner, publish, registerTransmitter, settle, statusPayload,
  waitFor,
} from '../../support/devices.ts';

// SECURITY.md, "Per-device budgets": a token bucket per device and channel. Over budget: dropped, counted, noted at most once
// a minute, never written; the connection stays. 10x over budget for the flood window: cut off and banned.

/** Publishes `n` statuses at QoS 0 as fast as the socket takes them, alternating so each is a transition. */
function floodStatuses(client: mqtt.MqttClient, id: string, n: number): void {
  const bodies = [statusPayload('ONLINE'), statusPayload('PLAYING', { detail: { source: 'local' } })];
  for (let i = 0; i < n; i++) client.publish(`devices/${id}/status`, bodies[i % 2]!, { qos: 0 });
}

test('2,000 statuses from one transmitter in a burst: at most 20 timeline entries, the rest counted, the device still connected, a neighbour still heard', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const flooder = await registerTransmitter(ts, owner.token, mosque.id, 'flooder');
  const neighbour = await registerTransmitter(ts, owner.token, mosque.id, 'neighbour');
  const id = flooder.device.id;
  const client = await connectDevice(t, flooder.credentials);
  const other = await connectDevice(t, neighbour.credentials);

  const started = Date.now();
  floodStatuses(client, id, 2000);
  // The neighbour speaks in the middle of the flood: its status is written as soon as it arrives.
  const sent = Date.now();
  await publish(other, `devices/${neighbour.device.id}/status`, statusPayload('ONLINE', { reason: 'neighbour' }), { retain: true });
  await waitFor('the neighbour\'s status', async () => (await getDevice(ts, owner.token, neighbour.device.id)).status === 'ONLINE', 1500);
  const neighbourMs = Date.now() - sent;
  // A QoS 1 fence: aedes handles one connection's packets in order, so the flood is behind us at its PUBACK.
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE'), { qos: 1 });
  const elapsedS = (Date.now() - started) / 1000;

  const device = await getDevice(ts, owner.token, id);
  assert.equal(client.connected, true, 'over budget is not a reason to disconnect');
  assert.equal(device.connected, true);
  const { status_messages: accepted, status_dropped: dropped } = device.counters;
  assert.equal(accepted + dropped, 2001, JSON.stringify(device.counters));
  assert.ok(accepted <= 10 + 2 * Math.ceil(elapsedS) + 1, `${accepted} accepted in ${elapsedS} s: burst 10 plus 2 a second`);

  const events = await deviceEvents(ts, owner.token, id, '?limit=100');
  const statusEvents = events.filter((e) => e.kind === 'status');
  assert.ok(statusEvents.length <= accepted);
  assert.ok(events.length <= 20, `${events.length} timeline entries after ${elapsedS} s of flood: ${events.map((e) => e.kind).join(', ')}`);
  const notes = events.filter((e) => e.kind === 'over_budget');
  assert.equal(notes.length, 1, 'noted once a minute at most');
  assert.equal(notes[0]!.reason, 'status');
  assert.ok(neighbourMs < 1500, `the neighbour's status landed after ${neighbourMs} ms`);

  // A dropped status never changes state: the device holds the last status the timeline shows.
  assert.ok(statusEvents.length > 0);
  assert.equal(device.status, statusEvents[0]!.to);
});

test('heartbeats and acks over budget are dropped and counted, not rejected, and the connection stays', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });

  for (let i = 0; i < 30; i++) client.publish(`devices/${id}/heartbeat`, heartbeatPayload('ONLINE', { uptime_s: i }), { qos: 0 });
  for (let i = 0; i < 60; i++) client.publish(`devices/${id}/ack`, JSON.stringify({ v: '1.0', id: `c${i}`, name: 'ping', ok: true, ts: 1 }), { qos: 0 });
  await publish(client, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE'), { qos: 1 });

  const { counters } = await getDevice(ts, owner.token, id);
  // Burst 5 (a token may come back during the burst): the rest of the 31 are dropped.
  assert.ok(counters.heartbeats >= 5 && counters.heartbeats <= 7, JSON.stringify(counters));
  assert.equal(counters.heartbeats + counters.heartbeats_dropped, 31);
  assert.ok(counters.acks_dropped >= 60 - 20 - 10, JSON.stringify(counters));
  assert.equal(counters.payloads_rejected, 0, 'over budget is not a bad payload');
  assert.equal(client.connected, true);
  const notes = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'over_budget');
  assert.equal(notes.length, 1, 'one note a minute whatever the channel');
});

test('a device 10x over its status budget for the whole flood window is disconnected, banned with CONNACK 3, and noted once', async (t) => {
  // A 2 s flood window instead of 30 s; the rule is the same (test/unit/budgets.test.ts holds the 30 s one).
  const ts = await startTestService(t, { logLevel: 'warn', env: { DEVICE_FLOOD_WINDOW_S: '2' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  const gone = closed(client, 8000);

  // 10 statuses every 50 ms: 200 a second against 20 (10x the rate of 2), for up to 6 s.
  const timer = setInterval(() => {
    if (client.connected) floodStatuses(client, id, 10);
  }, 50);
  t.after(() => clearInterval(timer));
  await gone;
  clearInterval(timer);

  const refused = await connectOnce(ts.service.mqttUrl, { clientId: id, username: id, password: tx.credentials.password });
  assert.equal(refused, 3, 'server unavailable while banned');
  const device = await waitFor('disconnected', async () => {
    const d = await getDevice(ts, owner.token, id);
    return d.connected === false ? d : null;
  });
  assert.equal(device.counters.connects_refused, 1);
  await settle(200);
  const bans = (await deviceEvents(ts, owner.token, id, '?limit=100')).filter((e) => e.kind === 'flapping');
  assert.equal(bans.length, 1, 'noted once');
  assert.equal(bans[0]!.reason, 'flood');
  assert.equal(bans[0]!.detail.channel, 'status');
});
