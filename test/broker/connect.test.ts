import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API, member } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import {
  closed, connectDevice, connectOnce, deviceEvents, getDevice, mosqueWithOwner, publish, registerPlayer, registerTransmitter,
  settle, statusPayload, statusWill, waitFor, waitForStatus, wsUrlOf,
} from '../support/devices.ts';

// docs/firmware.md, "1. Credentials and connecting": clientId = username = device id, password = device password; anything else is refused.

test('a registered device connects with its credentials over TCP and over WebSocket at /mqtt', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  assert.equal(tx.credentials.mqtt_url, ts.service.mqttUrl);
  assert.equal(tx.credentials.ws_url, wsUrlOf(ts));

  const overTcp = await connectDevice(t, tx.credentials);
  await waitFor('connected over TCP', async () => (await getDevice(ts, owner.token, tx.device.id)).connected === true);
  overTcp.end(true);
  await closed(overTcp);
  await waitFor('disconnected', async () => (await getDevice(ts, owner.token, tx.device.id)).connected === false);

  const overWs = await connectDevice(t, tx.credentials, { url: tx.credentials.ws_url });
  await publish(overWs, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  const seen = await waitForStatus(ts, owner.token, tx.device.id, 'ONLINE');
  assert.equal(seen.connected, true);
  const kinds = (await deviceEvents(ts, owner.token, tx.device.id)).map((e) => e.kind);
  assert.equal(kinds.filter((k) => k === 'connected').length, 2);
});

test('a wrong password or an unknown device id is refused with return code 4', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const url = ts.service.mqttUrl;
  const id = tx.device.id;
  assert.equal(await connectOnce(url, { clientId: id, username: id, password: tx.credentials.password + 'x' }), 4);
  assert.equal(await connectOnce(url, { clientId: id, username: id, password: '' }), 4);
  assert.equal(await connectOnce(url, { clientId: id, username: id }), 4);
  assert.equal(await connectOnce(url, { clientId: 'dunknownunknown12', username: 'dunknownunknown12', password: tx.credentials.password }), 4);
  // The same refusals over WebSocket.
  assert.equal(await connectOnce(wsUrlOf(ts), { clientId: id, username: id, password: 'nope' }), 4);
  assert.equal((await getDevice(ts, owner.token, id)).connected, false);
});

test('clientId must equal username: even the right password of the username\'s device is refused, and live sessions are untouched', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const a = await registerTransmitter(ts, owner.token, mosque.id, 'a');
  const b = await registerTransmitter(ts, owner.token, mosque.id, 'b');
  const clientA = await connectDevice(t, a.credentials);
  const clientB = await connectDevice(t, b.credentials);
  let aClosed = false;
  let bClosed = false;
  clientA.on('close', () => (aClosed = true));
  clientB.on('close', () => (bClosed = true));

  const url = ts.service.mqttUrl;
  // A made-up clientId with A's username and password.
  const intruder = await connectOnce(url, { clientId: 'intruder', username: a.device.id, password: a.credentials.password });
  assert.ok(intruder === 5 || intruder === 4, `expected a refusal, got ${intruder}`);
  // B's clientId with A's username and password: this must not take over B's session.
  const hijack = await connectOnce(url, { clientId: b.device.id, username: a.device.id, password: a.credentials.password });
  assert.ok(hijack === 5 || hijack === 4, `expected a refusal, got ${hijack}`);
  // A's clientId with B's valid credentials: must not take over A's session either.
  const hijackA = await connectOnce(url, { clientId: a.device.id, username: b.device.id, password: b.credentials.password });
  assert.ok(hijackA === 5 || hijackA === 4, `expected a refusal, got ${hijackA}`);

  await settle();
  assert.equal(aClosed, false, 'device A was disconnected');
  assert.equal(bClosed, false, 'device B was disconnected');
  await publish(clientA, `devices/${a.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await publish(clientB, `devices/${b.device.id}/status`, statusPayload('PLAYING'), { retain: true });
  await waitForStatus(ts, owner.token, a.device.id, 'ONLINE');
  await waitForStatus(ts, owner.token, b.device.id, 'PLAYING');
  for (const d of [a, b]) {
    const events = await deviceEvents(ts, owner.token, d.device.id);
    assert.equal(events.filter((e) => e.kind === 'connected').length, 1);
    assert.equal(events.filter((e) => e.kind === 'disconnected').length, 0);
  }
});

test('a person\'s access token never opens an MQTT connection, and a device password never opens the HTTP API', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const person = await member(ts, 'person@example.com');
  const url = ts.service.mqttUrl;
  for (const outcome of [
    await connectOnce(url, { clientId: person.id, username: person.id, password: person.token }),
    await connectOnce(url, { clientId: person.email, username: person.email, password: person.token }),
    await connectOnce(url, { clientId: tx.device.id, username: tx.device.id, password: owner.token }),
  ]) {
    assert.ok(outcome === 4 || outcome === 5, `expected a refusal, got ${outcome}`);
  }
  const withDevicePassword = await ts.http.get(`${API}/me`, tx.credentials.password);
  assert.equal(withDevicePassword.status, 401);
  const devices = await ts.http.get(`${API}/devices/${tx.device.id}`, tx.credentials.password);
  assert.equal(devices.status, 401);
});

test('a will anywhere but the device\'s own status topic is refused with 5; on the own status topic it is accepted', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const a = await registerTransmitter(ts, owner.token, mosque.id, 'a');
  const b = await registerTransmitter(ts, owner.token, mosque.id, 'b');
  const id = a.device.id;
  const creds = { clientId: id, username: id, password: a.credentials.password };
  const will = (topic: string) => ({ topic, payload: Buffer.from(JSON.stringify({ v: '1.0', status: 'OFFLINE', ts: 1 })), qos: 1 as const, retain: true });
  for (const topic of [`devices/${id}/heartbeat`, `devices/${id}/config`, `devices/${b.device.id}/status`, `mosques/${mosque.id}/broadcast`, 'anything', `devices/${id}/status/x`]) {
    assert.equal(await connectOnce(ts.service.mqttUrl, { ...creds, will: will(topic) }), 5, `will on ${topic}`);
  }
  assert.equal(await connectOnce(ts.service.mqttUrl, { ...creds, will: statusWill(id) }), 'connected');
});

test('an MQTT 3.1 (MQIsdp) client connects like a 3.1.1 one', async (t) => {
  const ts = await startTestService(t);
  const { owner } = await mosqueWithOwner(ts);
  const player = await registerPlayer(ts, owner);
  const client = await connectDevice(t, player.credentials, { protocolVersion: 3, protocolId: 'MQIsdp' });
  await publish(client, `devices/${player.device.id}/status`, statusPayload('UNBOUND', { detail: { reason: 'no_mosque' } }), { retain: true });
  await waitForStatus(ts, owner.token, player.device.id, 'UNBOUND');
  assert.equal(await connectOnce(ts.service.mqttUrl, { protocolVersion: 3, protocolId: 'MQIsdp', clientId: player.device.id, username: player.device.id, password: 'bad' }), 4);
});

test('a second connection with the same credentials takes over; the old connection\'s will does not mark the device OFFLINE', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const first = await connectDevice(t, tx.credentials, { will: statusWill(id) });
  await publish(first, `devices/${id}/status`, statusPayload('ONLINE'), { retain: true });
  await waitForStatus(ts, owner.token, id, 'ONLINE');

  const second = await connectDevice(t, tx.credentials, { will: statusWill(id) });
  await closed(first);
  await settle(300);
  const device = await getDevice(ts, owner.token, id);
  assert.equal(device.status, 'ONLINE');
  assert.equal(device.connected, true);
  const events = await deviceEvents(ts, owner.token, id);
  assert.equal(events.filter((e) => e.kind === 'status' && e.to === 'OFFLINE').length, 0, JSON.stringify(events));
  assert.equal(events.filter((e) => e.kind === 'disconnected').length, 0, 'the taken-over connection\'s goodbye is ignored');
  assert.equal(events.filter((e) => e.kind === 'connected').length, 2);

  // The new connection is the live one: what it sends counts, and its own will still works.
  await publish(second, `devices/${id}/status`, statusPayload('PLAYING', { detail: { source: 'local' } }), { retain: true });
  await waitForStatus(ts, owner.token, id, 'PLAYING');
  (second as unknown as { stream: { destroy(): void } }).stream.destroy();
  const offline = await waitForStatus(ts, owner.token, id, 'OFFLINE');
  assert.equal(offline.connected, false);
});

test('after rotation the live connection is closed at once and the old password is refused', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials);
  const gone = closed(client, 1000);
  const rotated = await ts.http.post(`${API}/devices/${id}/credentials`, {}, owner.token);
  assert.equal(rotated.status, 200);
  assert.notEqual(rotated.body.credentials.password, tx.credentials.password);
  assert.equal(rotated.body.credentials.client_id, id);
  await gone;

  assert.equal(await connectOnce(ts.service.mqttUrl, { clientId: id, username: id, password: tx.credentials.password }), 4);
  const fresh = await connectDevice(t, rotated.body.credentials);
  assert.equal(fresh.connected, true);
  const kinds = (await deviceEvents(ts, owner.token, id)).map((e) => e.kind);
  assert.ok(kinds.includes('credentials_rotated'), kinds.join());
});

test('after DELETE the device is cut off at once and refused from then on', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const client = await connectDevice(t, tx.credentials, { will: statusWill(id) });
  const gone = closed(client, 1000);
  assert.equal((await ts.http.delete(`${API}/devices/${id}`, owner.token)).status, 204);
  await gone;
  assert.equal(await connectOnce(ts.service.mqttUrl, { clientId: id, username: id, password: tx.credentials.password }), 4);
  assert.equal((await ts.http.get(`${API}/devices/${id}`, owner.token)).status, 404);
});

test('refused and accepted connections leave the service healthy', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const url = ts.service.mqttUrl;
  await Promise.all(Array.from({ length: 20 }, (_, i) => connectOnce(url, { clientId: `c${i}`, username: `c${i}`, password: 'x' })));
  await connectDevice(t, tx.credentials);
  const health = await ts.http.get('/healthz');
  assert.equal(health.status, 200);
  assert.deepEqual(health.body, { status: 'ok', db: 'ok', broker: 'ok' });
});

test('MQTT 5 is not offered: a v5 CONNECT with valid credentials is refused, and v3.1.1 still works', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const creds = { clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password };
  const v5 = await connectOnce(ts.service.mqttUrl, { ...creds, protocolVersion: 5 });
  assert.notEqual(v5, 'connected');
  assert.equal(await connectOnce(ts.service.mqttUrl, { ...creds, protocolVersion: 4 }), 'connected');
});
