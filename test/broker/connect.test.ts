import { test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import { startTestService, signupMember } from '../support/service.ts';

/** Connects once and reports the CONNACK outcome: the return code of a refusal, or 'connected'. */
function connectOnce(url: string, opts: mqtt.IClientOptions): Promise<number | 'connected'> {
  return new Promise((resolve) => {
    const client = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 3000, protocolVersion: 4, ...opts });
    client.once('connect', () => {
      client.end(true);
      resolve('connected');
    });
    client.once('error', (err: Error & { code?: number }) => {
      client.end(true);
      resolve(typeof err.code === 'number' ? err.code : -1);
    });
  });
}

test('until devices exist, every MQTT CONNECT over TCP is refused with return code 5', async (t) => {
  const ts = await startTestService(t);
  assert.equal(await connectOnce(ts.service.mqttUrl, { clientId: 'anyone', username: 'anyone', password: 'x' }), 5);
  assert.equal(await connectOnce(ts.service.mqttUrl, { clientId: 'anonymous' }), 5);
});

test('MQTT over WebSocket is served at /mqtt on the HTTP port, and refuses the same way', async (t) => {
  const ts = await startTestService(t);
  const wsUrl = ts.url.replace('http://', 'ws://') + '/mqtt';
  assert.equal(await connectOnce(wsUrl, { clientId: 'anyone', username: 'anyone', password: 'x' }), 5);
});

test('a person\'s access token never opens an MQTT connection', async (t) => {
  const ts = await startTestService(t);
  const member = await signupMember(ts.http, 'member@example.com');
  const outcome = await connectOnce(ts.service.mqttUrl, { clientId: member.user.id, username: member.user.id, password: member.access_token });
  assert.notEqual(outcome, 'connected');
  assert.ok(outcome === 4 || outcome === 5);
});

test('MQTT 3.1 clients get the same answer as 3.1.1 clients', async (t) => {
  const ts = await startTestService(t);
  assert.equal(await connectOnce(ts.service.mqttUrl, { clientId: 'old', username: 'old', password: 'x', protocolVersion: 3, protocolId: 'MQIsdp' }), 5);
});

test('a refused device leaves the HTTP API and the broker healthy', async (t) => {
  const ts = await startTestService(t);
  await Promise.all(Array.from({ length: 20 }, (_, i) => connectOnce(ts.service.mqttUrl, { clientId: `c${i}`, username: `c${i}`, password: 'x' })));
  const health = await ts.http.get('/healthz');
  assert.equal(health.status, 200);
  assert.deepEqual(health.body, { status: 'ok', db: 'ok', broker: 'ok' });
});
