import { test } from 'node:test';
import assert from 'node:assert/strict';
import type mqtt from 'mqtt';
import { startTestService } from '../../support/service.ts';
import { connectDevice, endClient, heartbeatPayload, mosqueWithOwner, publish, registerTransmitter, waitFor, type Credentials } from '../../support/devices.ts';
import { closedWithin, mqttFrom, rawTcp, rawWebSocket, type RawConnection } from '../../support/hostile.ts';

// SECURITY.md, "Connection limits". The service listens on 127.0.0.1; 127.0.0.2 stands for another address.

const OTHER_ADDRESS = '127.0.0.2';

function connectFrom(t: Parameters<typeof startTestService>[0], address: string, port: number, creds: Credentials): Promise<mqtt.MqttClient> {
  const client = mqttFrom(address, port, { clientId: creds.client_id, username: creds.username, password: creds.password });
  t.after(() => endClient(client));
  return new Promise((resolve, reject) => {
    client.once('connect', () => resolve(client));
    client.once('error', reject);
    client.once('close', () => reject(new Error('closed before CONNACK')));
  });
}

function closeAll(t: Parameters<typeof startTestService>[0], conns: RawConnection[]) {
  t.after(() => {
    for (const c of conns) c.socket.destroy();
  });
}

test('a flood of silent sockets from one address is capped at MQTT_MAX_HANDSHAKES_PER_ADDRESS, and a device from another address still connects', { timeout: 20_000 }, async (t) => {
  const ts = await startTestService(t, { env: { MQTT_MAX_HANDSHAKES_PER_ADDRESS: '3' }, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const port = ts.service.mqttPort;

  const flood = [await rawTcp(port), await rawTcp(port), await rawWebSocket(ts.service.httpPort)];
  closeAll(t, flood);
  const extraTcp = await rawTcp(port);
  const extraWs = rawWebSocket(ts.service.httpPort);
  closeAll(t, [extraTcp]);
  assert.equal(await closedWithin(extraTcp, 1000), true, 'the 4th half-open TCP socket from one address was not refused');
  await assert.rejects(extraWs, 'the 4th half-open socket (WebSocket) from one address was upgraded');
  for (const f of flood) assert.equal(f.isClosed(), false, 'a socket within the cap was closed');
  assert.equal(ts.service.broker.counters().refused_handshakes, 2);

  const device = await connectFrom(t, OTHER_ADDRESS, port, tx.credentials);
  await publish(device, `devices/${tx.device.id}/heartbeat`, heartbeatPayload('ONLINE'));

  // A handshake slot comes back when its socket goes.
  flood[0]!.socket.destroy();
  await waitFor('the slot released', () => ts.service.broker.counters().open_connections === 3);
  const again = await rawTcp(port);
  closeAll(t, [again]);
  assert.equal(await closedWithin(again, 300), false, 'a socket was refused after a slot was released');
});

test('devices that completed CONNECT no longer count as handshakes of their address', { timeout: 20_000 }, async (t) => {
  const ts = await startTestService(t, { env: { MQTT_MAX_HANDSHAKES_PER_ADDRESS: '1' }, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const first = await registerTransmitter(ts, owner.token, mosque.id, 'first');
  const second = await registerTransmitter(ts, owner.token, mosque.id, 'second');
  const third = await registerTransmitter(ts, owner.token, mosque.id, 'third');
  for (const tx of [first, second, third]) await connectDevice(t, tx.credentials);
  assert.equal(ts.service.broker.counters().refused_handshakes, 0);
  assert.equal(ts.service.broker.counters().open_connections, 3);
});

test('MQTT_MAX_CONNECTIONS caps TCP and WebSocket connections together; the extra one is refused at once and counted', { timeout: 20_000 }, async (t) => {
  const ts = await startTestService(t, { env: { MQTT_MAX_CONNECTIONS: '3' }, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const port = ts.service.mqttPort;

  const device = await connectDevice(t, tx.credentials);
  const held = [await rawTcp(port, { localAddress: OTHER_ADDRESS }), await rawWebSocket(ts.service.httpPort)];
  closeAll(t, held);
  await waitFor('three open', () => ts.service.broker.counters().open_connections === 3);

  const extraTcp = await rawTcp(port, { localAddress: '127.0.0.3' });
  closeAll(t, [extraTcp]);
  assert.equal(await closedWithin(extraTcp, 1000), true, 'a 4th TCP connection was accepted');
  await assert.rejects(rawWebSocket(ts.service.httpPort, { localAddress: '127.0.0.4' }), 'a 4th (WebSocket) connection was upgraded');
  assert.equal(ts.service.broker.counters().refused_connections, 2);
  assert.equal(ts.service.broker.counters().open_connections, 3);

  // The connected device is untouched.
  await publish(device, `devices/${tx.device.id}/heartbeat`, heartbeatPayload('ONLINE'));
  await endClient(device);
  await waitFor('a slot freed', () => ts.service.broker.counters().open_connections === 2);
  await connectDevice(t, tx.credentials);
});
