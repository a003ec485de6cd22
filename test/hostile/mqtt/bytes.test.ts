import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestService, type TestService } from '../../support/service.ts';
import { connectDevice, heartbeatPayload, mosqueWithOwner, publish, registerTransmitter, type Registered } from '../../support/devices.ts';
import {
  CONNECT, PUBLISH_QOS0, closedWithin, connectPacket, fixedHeader, rawTcp, rawWebSocket, sendFiller, wsFrame, wsFrameHeader,
} from '../../support/hostile.ts';

// SECURITY.md, "Bytes before trust (MQTT)". Every attack here is bounded (a few sockets, at most 1 MiB each).

const MIB = 1024 * 1024;

async function serviceWithDevice(t: Parameters<typeof startTestService>[0], env: Record<string, string> = {}) {
  const ts = await startTestService(t, { env, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  return { ts, owner, tx };
}

/** The healthy device publishes a heartbeat and gets its PUBACK. */
async function stillWorks(t: Parameters<typeof startTestService>[0], tx: Registered) {
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${tx.device.id}/heartbeat`, heartbeatPayload('ONLINE'));
  return device;
}

const mqttPort = (ts: TestService) => ts.service.mqttPort;
const httpPort = (ts: TestService) => ts.service.httpPort;

test('a TCP socket announcing a 256 MB CONNECT is closed within 1 s of its header, and a device on the same broker keeps working', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t);
  const device = await stillWorks(t, tx);
  const hostile = await Promise.all([1, 2, 3, 4].map(() => rawTcp(mqttPort(ts))));
  const sentAt = Date.now();
  for (const h of hostile) h.socket.write(fixedHeader(CONNECT, 268_435_455));
  const filler = hostile.map((h) => sendFiller(h, MIB));
  for (const h of hostile) assert.equal(await closedWithin(h, 1000), true, 'hostile socket still open 1 s after its header');
  for (const h of hostile) assert.ok((await h.closed) - sentAt < 1000);
  await Promise.all(filler);
  assert.equal(ts.service.broker.counters().closed_too_large, 4);
  await publish(device, `devices/${tx.device.id}/heartbeat`, heartbeatPayload('ONLINE'));
  await stillWorks(t, tx);
});

test('a CONNECT over MQTT_MAX_CONNECT_BYTES is refused even though it is under the packet cap', { timeout: 20_000 }, async (t) => {
  const { ts } = await serviceWithDevice(t);
  const h = await rawTcp(mqttPort(ts));
  h.socket.write(fixedHeader(CONNECT, 8193));
  assert.equal(await closedWithin(h, 1000), true);
  assert.equal(ts.service.broker.counters().closed_too_large, 1);
});

test('a malformed remaining length (a fifth varint byte) closes the socket', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t, { MQTT_MAX_PACKET_BYTES: '268435455', MQTT_MAX_CONNECT_BYTES: '1048576' });
  const h = await rawTcp(mqttPort(ts));
  h.socket.write(Buffer.from([CONNECT, 0x80, 0x80, 0x80, 0x80, 0x01]));
  assert.equal(await closedWithin(h, 1000), true);
  assert.equal(ts.service.broker.counters().closed_malformed, 1);
  await stillWorks(t, tx);
});

test('a first packet that is not a CONNECT closes the socket at its header', { timeout: 20_000 }, async (t) => {
  const { ts } = await serviceWithDevice(t);
  const h = await rawTcp(mqttPort(ts));
  h.socket.write(fixedHeader(PUBLISH_QOS0, 100));
  assert.equal(await closedWithin(h, 1000), true);
  assert.equal(ts.service.broker.counters().closed_not_connect, 1);
});

test('a signed-in device announcing a 64 MiB PUBLISH is closed at the header, before aedes buffers it', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t);
  const c = tx.credentials;
  const h = await rawTcp(mqttPort(ts));
  const connack = new Promise<Buffer>((resolve) => h.socket.once('data', resolve));
  h.socket.write(connectPacket(c.client_id, c.username, c.password));
  assert.deepEqual([...(await connack)], [0x20, 0x02, 0x00, 0x00], 'CONNACK 0');
  const sentAt = Date.now();
  h.socket.write(fixedHeader(PUBLISH_QOS0, 64 * MIB));
  await sendFiller(h, MIB);
  assert.equal(await closedWithin(h, 1000), true);
  assert.ok((await h.closed) - sentAt < 1000);
  assert.equal(ts.service.broker.counters().closed_too_large, 1);
});

test('after CONNACK a packet between the CONNECT cap and the packet cap is accepted: the payload rule answers it, not the guard', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t);
  const device = await stillWorks(t, tx);
  // 10 KB: over MQTT_MAX_CONNECT_BYTES and the 4 KiB payload limit, under MQTT_MAX_PACKET_BYTES.
  await publish(device, `devices/${tx.device.id}/heartbeat`, Buffer.alloc(10_000, 0x20));
  assert.equal(device.connected, true);
  assert.equal(ts.service.broker.counters().closed_too_large, 0);
});

test('a WebSocket frame announcing 16 MiB is refused at its header, and a device on the same broker keeps working', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t);
  const device = await stillWorks(t, tx);
  const h = await rawWebSocket(httpPort(ts));
  const sentAt = Date.now();
  h.socket.write(wsFrameHeader(16 * MIB));
  void sendFiller(h, MIB);
  assert.equal(await closedWithin(h, 1000), true);
  assert.ok((await h.closed) - sentAt < 1000);
  await publish(device, `devices/${tx.device.id}/heartbeat`, heartbeatPayload('ONLINE'));
});

test('over WebSocket, a small frame whose CONNECT announces 256 MB is closed by the same guard as TCP', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t);
  const h = await rawWebSocket(httpPort(ts));
  h.socket.write(wsFrame(fixedHeader(CONNECT, 268_435_455)));
  assert.equal(await closedWithin(h, 1000), true);
  assert.equal(ts.service.broker.counters().closed_too_large, 1);
  await stillWorks(t, tx);
});

test('a TCP socket that never sends CONNECT is closed after MQTT_CONNECT_TIMEOUT_S', { timeout: 20_000 }, async (t) => {
  const { ts } = await serviceWithDevice(t, { MQTT_CONNECT_TIMEOUT_S: '1' });
  const h = await rawTcp(mqttPort(ts));
  const openedAt = Date.now();
  assert.equal(await closedWithin(h, 500), false, 'closed before the timeout');
  assert.equal(await closedWithin(h, 3000), true, 'still open 3.5 s after a 1 s connect timeout');
  assert.ok((await h.closed) - openedAt >= 900);
  assert.equal(ts.service.broker.counters().closed_connect_timeout, 1);
});

test('a TCP socket that sends half a CONNECT and stalls is closed after MQTT_CONNECT_TIMEOUT_S', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t, { MQTT_CONNECT_TIMEOUT_S: '1' });
  const c = tx.credentials;
  const h = await rawTcp(mqttPort(ts));
  const whole = connectPacket(c.client_id, c.username, c.password);
  h.socket.write(whole.subarray(0, whole.length - 3));
  assert.equal(await closedWithin(h, 3500), true);
  assert.equal(ts.service.broker.counters().closed_connect_timeout, 1);
});

test('a WebSocket that never sends CONNECT is closed after MQTT_CONNECT_TIMEOUT_S', { timeout: 20_000 }, async (t) => {
  const { ts } = await serviceWithDevice(t, { MQTT_CONNECT_TIMEOUT_S: '1' });
  const h = await rawWebSocket(httpPort(ts));
  assert.equal(await closedWithin(h, 500), false, 'closed before the timeout');
  assert.equal(await closedWithin(h, 3000), true, 'still open 3.5 s after a 1 s connect timeout');
  assert.equal(ts.service.broker.counters().closed_connect_timeout, 1);
});

test('a device that connects within the timeout is not cut off by it', { timeout: 20_000 }, async (t) => {
  const { ts, tx } = await serviceWithDevice(t, { MQTT_CONNECT_TIMEOUT_S: '1' });
  const device = await stillWorks(t, tx);
  await new Promise((r) => setTimeout(r, 1500));
  await publish(device, `devices/${tx.device.id}/heartbeat`, heartbeatPayload('ONLINE'));
  assert.equal(device.connected, true);
  assert.equal(ts.service.broker.counters().closed_connect_timeout, 0);
});
