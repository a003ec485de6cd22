import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import { startTestService, type TestService } from '../../support/service.ts';
import { API } from '../../support/people.ts';
import {
  endClient, mosqueWithOwner, publish, registerTransmitter, statusPayload, waitFor, type Credentials,
} from '../../support/devices.ts';
import { redisInstalled, startRedis } from '../../support/redis.ts';

// SECURITY.md, "Authorization from memory": persistent sessions (clean: false) that cannot be abused, in memory and Redis mode.

interface Session {
  client: mqtt.MqttClient;
  sessionPresent: boolean;
  /** Every message received since CONNECT, in order. */
  received: Array<{ topic: string; body: any }>;
}

/** Connects with clean: false; messages are recorded from the first byte, queued ones included. */
function connectPersistent(t: TestContext, creds: Credentials, password = creds.password): Promise<Session> {
  const client = mqtt.connect(creds.mqtt_url, {
    clientId: creds.client_id, username: creds.username, password, clean: false, reconnectPeriod: 0, connectTimeout: 3000, protocolVersion: 4,
  });
  t.after(() => endClient(client));
  const received: Session['received'] = [];
  client.on('message', (topic, payload) => received.push({ topic, body: payload.length ? JSON.parse(payload.toString('utf8')) : null }));
  return new Promise((resolve, reject) => {
    client.once('connect', (connack) => resolve({ client, sessionPresent: connack.sessionPresent, received }));
    client.once('error', reject);
  });
}

/** SUBSCRIBE with several filters in one packet; resolves with the SUBACK codes. */
function subscribeMany(client: mqtt.MqttClient, filters: string[]): Promise<number[]> {
  return new Promise((resolve, reject) => {
    client.subscribe(filters, { qos: 1 }, (err, granted) => {
      const refused = (err as (Error & { packet?: { granted?: number[] } }) | null)?.packet?.granted;
      if (refused) return resolve(refused);
      if (err) return reject(err);
      resolve((granted ?? []).map((g) => g.qos));
    });
  });
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function setup(t: TestContext, mode: 'memory' | 'redis', env: Record<string, string> = {}) {
  let redisEnv: Record<string, string> = {};
  let stopRedis = () => undefined as void;
  if (mode === 'redis') {
    const redis = await startRedis();
    redisEnv = { REDIS_URL: redis.url };
    stopRedis = redis.stop;
  }
  const ts = await startTestService(t, { env: { ...env, ...redisEnv }, logLevel: 'warn' });
  t.after(stopRedis);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const a = await registerTransmitter(ts, owner.token, mosque.id, 'a');
  const b = await registerTransmitter(ts, owner.token, mosque.id, 'b');
  return { ts, owner, a, b };
}

/** The device goes away; its session stays on the broker (clean: false). */
async function leave(s: Session) {
  await endClient(s.client);
  await pause(100); // the broker has seen the close
}

const pushConfig = async (ts: TestService, token: string, id: string, heartbeatSecs: number) =>
  assert.equal((await ts.http.patch(`${API}/devices/${id}`, { config: { heartbeat_secs: heartbeatSecs } }, token)).status, 200);

for (const mode of ['memory', 'redis'] as const) {
  const skip = mode === 'redis' && !redisInstalled() ? 'redis-server is not installed' : false;

  test(`(${mode}) a SUBSCRIBE mixing the own config topic with # stores only the own filter, so nothing foreign is queued`, { timeout: 30_000, skip }, async (t) => {
    const { ts, a, b } = await setup(t, mode);
    const own = `devices/${a.device.id}/config`;
    const first = await connectPersistent(t, a.credentials);
    assert.deepEqual(await subscribeMany(first.client, [own, '#']), [1, 128]);
    await leave(first);
    assert.deepEqual((await ts.service.broker.session(a.device.id)).filters, [own]);

    const other = await connectPersistent(t, b.credentials);
    for (let i = 0; i < 10; i++) await publish(other.client, `devices/${b.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
    assert.equal((await ts.service.broker.session(a.device.id)).queued, 0, 'another device\'s messages were queued for this session');

    const again = await connectPersistent(t, a.credentials);
    assert.equal(again.sessionPresent, true);
    await pause(500);
    assert.deepEqual(again.received.filter((m) => !m.topic.startsWith(`devices/${a.device.id}/`)), []);
  });

  test(`(${mode}) the offline queue of a session holds at most MQTT_MAX_QUEUED_MESSAGES, the oldest dropped and counted`, { timeout: 30_000, skip }, async (t) => {
    const { ts, owner, a } = await setup(t, mode, { MQTT_MAX_QUEUED_MESSAGES: '3' });
    const first = await connectPersistent(t, a.credentials);
    assert.deepEqual(await subscribeMany(first.client, [`devices/${a.device.id}/config`, `devices/${a.device.id}/cmd`]), [1, 1]);
    await pause(200); // the retained config delivered and acknowledged
    await leave(first);

    for (const secs of [20, 21, 22, 23, 24]) await pushConfig(ts, owner.token, a.device.id, secs);
    // The HTTP answer comes before the broker's (asynchronous, in Redis mode) enqueue: wait for all five.
    await waitFor('2 dropped', () => ts.service.broker.counters().queued_messages_dropped >= 2);
    await pause(200);
    assert.equal(ts.service.broker.counters().queued_messages_dropped, 2);
    assert.equal((await ts.service.broker.session(a.device.id)).queued, 3);

    const again = await connectPersistent(t, a.credentials);
    assert.equal(again.sessionPresent, true);
    await waitFor('the queued configs', () => again.received.some((m) => m.body?.heartbeat_secs === 24));
    const delivered = again.received.map((m) => m.body?.heartbeat_secs);
    assert.ok(!delivered.includes(20) && !delivered.includes(21), `the two oldest were delivered: ${delivered.join(',')}`);
    assert.ok(delivered.includes(22) && delivered.includes(23), `a kept message was lost: ${delivered.join(',')}`);
  });

  test(`(${mode}) rotating a device's credentials clears its persistent session`, { timeout: 30_000, skip }, async (t) => {
    const { ts, owner, a } = await setup(t, mode);
    const first = await connectPersistent(t, a.credentials);
    await subscribeMany(first.client, [`devices/${a.device.id}/config`]);
    await pause(200);
    await leave(first);
    await pushConfig(ts, owner.token, a.device.id, 30);
    await waitFor('a queued config', async () => (await ts.service.broker.session(a.device.id)).queued === 1);

    const rotated = await ts.http.post(`${API}/devices/${a.device.id}/credentials`, {}, owner.token);
    assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
    const password = (rotated.body.credentials?.password ?? rotated.body.password) as string;
    await waitFor('the session cleared', async () => {
      const s = await ts.service.broker.session(a.device.id);
      return s.filters.length === 0 && s.queued === 0;
    });
    const again = await connectPersistent(t, a.credentials, password);
    assert.equal(again.sessionPresent, false);
    await pause(300);
    assert.deepEqual(again.received, [], 'a message of the old session was delivered');
  });

  test(`(${mode}) deleting a device clears its persistent session`, { timeout: 30_000, skip }, async (t) => {
    const { ts, owner, a } = await setup(t, mode);
    const first = await connectPersistent(t, a.credentials);
    await subscribeMany(first.client, [`devices/${a.device.id}/config`, `devices/${a.device.id}/cmd`]);
    await pause(200);
    await leave(first);
    await pushConfig(ts, owner.token, a.device.id, 30);
    await waitFor('a queued config', async () => (await ts.service.broker.session(a.device.id)).queued === 1);

    assert.equal((await ts.http.delete(`${API}/devices/${a.device.id}`, owner.token)).status, 204);
    await waitFor('the session cleared', async () => {
      const s = await ts.service.broker.session(a.device.id);
      return s.filters.length === 0 && s.queued === 0;
    });
  });
}
