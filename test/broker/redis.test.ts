import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { Aedes } from 'aedes';
import redisPersistence from 'aedes-persistence-redis';
import mqtt from 'mqtt';
import { createIndexedRedisPersistence } from '../../broker/delivery/retained-index.ts';
import { startTestService, type TestService } from '../support/service.ts';
import {
  connectDevice, getDevice, heartbeatPayload, mosqueWithOwner, nextMessage, publish, registerTransmitter, statusPayload, statusWill, subscribeCode, waitFor,
} from '../support/devices.ts';
import { REDIS_SERVER, redisInstalled, startRedis as startRedisServer } from '../support/redis.ts';

// docs/settings.md, `REDIS_URL`: broker persistence and pub/sub go through Redis. A real redis-server, on a free port.

test('with REDIS_URL, retained state lives in Redis and outlives the process: a second service serves the retained config', { timeout: 30_000 }, async (t) => {
  if (!redisInstalled()) {
    t.skip(`redis-server is not installed at ${REDIS_SERVER}; the Redis mode is untested here`);
    return;
  }
  // test/support's server, whose readiness probe listens for its refused connects: this file's own copy did
  // not, and ioredis's unhandled error (then a rejected "Connection is closed.") once failed this test.
  const server = await startRedisServer();
  const port = Number(new URL(server.url).port);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-redis-'));
  const services: TestService[] = [];
  const redis = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
  // Registered first, so it runs before startTestService's own hooks (which then close nothing twice).
  t.after(async () => {
    for (const s of services) await s.service.close();
    redis.disconnect();
    server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const env = { REDIS_URL: `redis://127.0.0.1:${port}`, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir };

  // --- first process ---
  const first = await startTestService(t, { env, logLevel: 'warn' });
  services.push(first);
  const { owner, mosque } = await mosqueWithOwner(first, { stream_url: 'https://icecast.example.org/noor' });
  const tx = await registerTransmitter(first, owner.token, mosque.id);
  const id = tx.device.id;
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${id}/status`, statusPayload('ONLINE', { fw: '2.0.1' }), { retain: true });
  // A bad retained status and a retained heartbeat must not become retained state.
  await publish(device, `devices/${id}/status`, '{"v":"1.0","status":"BROKEN"', { retain: true });
  await publish(device, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE'), { qos: 1, retain: true });
  assert.equal((await getDevice(first, owner.token, id)).status, 'ONLINE');

  const retainedStatus = await redis.hgetBuffer('retained', `devices/${id}/status`);
  assert.ok(retainedStatus, 'the status is retained in Redis');
  assert.ok(retainedStatus.includes('"status":"ONLINE"'), 'the good status, not the bad one');
  assert.equal(retainedStatus.includes('BROKEN'), false);
  assert.equal(await redis.hexists('retained', `devices/${id}/heartbeat`), 0, 'heartbeats are never retained');
  assert.equal(await redis.hexists('retained', `$dropped/${id}`), 0);
  const retainedConfig = await redis.hgetBuffer('retained', `devices/${id}/config`);
  assert.ok(retainedConfig?.includes(`"config_version":${tx.device.config_version}`), 'the config is retained in Redis');

  device.end(true);
  const closing = Date.now();
  await first.service.close();
  assert.ok(Date.now() - closing < 3000, 'the first service closes promptly');
  assert.equal(await redis.hexists('retained', `devices/${id}/config`), 1, 'the retained config outlives the process');

  // --- second process: same database, same Redis ---
  const second = await startTestService(t, { env, logLevel: 'warn' });
  services.push(second);
  const health = await second.http.get('/healthz');
  assert.equal(health.status, 200);
  assert.deepEqual(health.body, { status: 'ok', db: 'ok', broker: 'ok' });

  const again = await connectDevice(t, { ...tx.credentials, mqtt_url: second.service.mqttUrl });
  const config = nextMessage(again, `devices/${id}/config`);
  assert.equal(await subscribeCode(again, `devices/${id}/config`), 1);
  const { body, retain } = await config;
  assert.equal(retain, true);
  assert.deepEqual(body, {
    v: '1.0', config_version: tx.device.config_version, heartbeat_secs: 60, log_enabled: false,
    mosque_id: mosque.id, stream_url: 'https://icecast.example.org/noor',
  });
  // The device record came back from SQLite; the second process hears the device.
  await publish(again, `devices/${id}/status`, statusPayload('PLAYING', { detail: { source: 'stream' } }), { retain: true });
  const seen = await getDevice(second, owner.token, id);
  assert.equal(seen.status, 'PLAYING');
  assert.equal(seen.fw, '2.0.1');
  assert.equal(seen.connected, true);
  assert.ok((await redis.hgetBuffer('retained', `devices/${id}/status`))?.includes('"status":"PLAYING"'));

  again.end(true);
  const closingSecond = Date.now();
  await second.service.close();
  assert.ok(Date.now() - closingSecond < 3000, 'the second service closes promptly');
});

/**
 * A plain aedes broker on the Redis persistence with the retained index, as one more process would run it:
 * Minaret's own broker refuses wildcard filters, so this one stands for any client that may send them.
 */
async function indexedBroker(t: import('node:test').TestContext, url: string, indexed = true) {
  const conn = new Redis(url, { maxRetriesPerRequest: 1 });
  const plain = redisPersistence({ conn });
  const persistence = (indexed ? createIndexedRedisPersistence(plain, conn, (err) => assert.fail(err)) : Object.assign(plain as object, { retainedIndexReady: Promise.resolve(true) })) as {
    retainedIndexReady: Promise<boolean>;
  };
  const aedes = await Aedes.createBroker({ persistence: persistence as never });
  const server = net.createServer((socket) => aedes.handle(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(async () => {
    await new Promise<void>((resolve) => aedes.close(() => resolve()));
    await new Promise<void>((resolve) => server.close(() => resolve()));
    conn.disconnect();
  });
  assert.equal(await persistence.retainedIndexReady, true, 'the index is in use');
  return `mqtt://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
}

/** Subscribes to one filter and collects the retained messages that come, until none has come for 400 ms. */
async function retainedFor(url: string, filter: string): Promise<Record<string, string>> {
  const client = await mqtt.connectAsync(url, { clientId: `watcher-${Math.random().toString(36).slice(2)}`, reconnectPeriod: 0 });
  const got: Record<string, string> = {};
  let last = Date.now();
  client.on('message', (topic, payload, packet) => {
    last = Date.now();
    if (packet.retain) got[topic] = payload.toString();
  });
  await client.subscribeAsync(filter, { qos: 1 });
  last = Date.now();
  while (Date.now() - last < 400) await new Promise((r) => setTimeout(r, 50));
  await client.endAsync();
  return got;
}

const hscanCalls = async (redis: Redis) => Number(/cmdstat_hscan:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);

test('in Redis mode a wildcard subscriber gets exactly the retained messages its filter matches, stored through either process, without scanning every retained message', { timeout: 30_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const redis = await startRedisServer();
  // Retained by a process without the index (before an upgrade): found all the same.
  const older = await indexedBroker(t, redis.url, false);
  const before = await mqtt.connectAsync(older, { clientId: 'publisher-before', reconnectPeriod: 0 });
  await before.publishAsync('mosques/m1/older', 'on mosques/m1/older', { qos: 1, retain: true });
  await before.endAsync();
  const a = await indexedBroker(t, redis.url);
  const b = await indexedBroker(t, redis.url);
  t.after(redis.stop);

  const publisher = await mqtt.connectAsync(a, { clientId: 'publisher-a', reconnectPeriod: 0 });
  for (const topic of ['mosques/m1', 'mosques/m1/broadcast', 'mosques/m1/notice/a', 'mosques/m10/broadcast', 'mosques/m2/broadcast', 'devices/d1/status', 'devices/d2/status', 'devices/d1/config']) {
    await publisher.publishAsync(topic, `on ${topic}`, { qos: 1, retain: true });
  }
  await publisher.endAsync();
  const other = await mqtt.connectAsync(b, { clientId: 'publisher-b', reconnectPeriod: 0 });
  await other.publishAsync('mosques/m1/extra', 'on mosques/m1/extra', { qos: 1, retain: true });
  await other.publishAsync('mosques/m1/notice/a', '', { qos: 1, retain: true }); // cleared through the other process
  await other.endAsync();

  const scansBefore = await hscanCalls(redis.client);
  assert.deepEqual(await retainedFor(b, 'mosques/m1/#'), {
    'mosques/m1': 'on mosques/m1', 'mosques/m1/broadcast': 'on mosques/m1/broadcast', 'mosques/m1/extra': 'on mosques/m1/extra', 'mosques/m1/older': 'on mosques/m1/older',
  }, 'the parent level and every level below, not the sibling m10 nor the cleared notice');
  assert.deepEqual(await retainedFor(a, 'devices/+/status'), { 'devices/d1/status': 'on devices/d1/status', 'devices/d2/status': 'on devices/d2/status' });
  assert.deepEqual(await retainedFor(a, 'mosques/+/broadcast'), {
    'mosques/m1/broadcast': 'on mosques/m1/broadcast', 'mosques/m10/broadcast': 'on mosques/m10/broadcast', 'mosques/m2/broadcast': 'on mosques/m2/broadcast',
  });
  assert.deepEqual(await retainedFor(b, 'mosques/m1/notice/a'), {}, 'the cleared message is gone for an exact filter too');
  assert.equal(await hscanCalls(redis.client), scansBefore, 'no lookup with a fixed prefix scanned the retained hash');
  assert.deepEqual(await redis.client.zrange('minaret:retained-topics', 0, -1), [
    'devices/d1/config', 'devices/d1/status', 'devices/d2/status', 'mosques/m1', 'mosques/m1/broadcast', 'mosques/m1/extra', 'mosques/m1/older', 'mosques/m10/broadcast', 'mosques/m2/broadcast',
  ], 'the index holds the live topics only');

  // A filter whose first level is a wildcard has no range to read: the library's scan answers, correctly.
  assert.deepEqual(await retainedFor(b, '+/d1/#'), { 'devices/d1/config': 'on devices/d1/config', 'devices/d1/status': 'on devices/d1/status' });
  assert.ok((await hscanCalls(redis.client)) > scansBefore);
});

test('in Redis mode the retained statuses of devices connected to two service processes are indexed, and a deleted device leaves none behind', { timeout: 40_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const redis = await startRedisServer();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-redis-index-'));
  const env = { REDIS_URL: redis.url, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir };
  const first = await startTestService(t, { env, logLevel: 'warn' });
  const second = await startTestService(t, { env, logLevel: 'warn' });
  const watcher = await indexedBroker(t, redis.url);
  t.after(() => {
    redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const { owner, mosque } = await mosqueWithOwner(first);
  const kept = await registerTransmitter(first, owner.token, mosque.id, 'kept');
  const gone = await registerTransmitter(first, owner.token, mosque.id, 'gone');
  const onFirst = await connectDevice(t, kept.credentials);
  const onSecond = await connectDevice(t, { ...gone.credentials, mqtt_url: second.service.mqttUrl });
  await publish(onFirst, `devices/${kept.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  await publish(onSecond, `devices/${gone.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  const both = await retainedFor(watcher, 'devices/#');
  assert.deepEqual(Object.keys(both).sort(), [
    `devices/${kept.device.id}/config`, `devices/${kept.device.id}/status`, `devices/${gone.device.id}/config`, `devices/${gone.device.id}/status`,
  ].sort(), "each device's config and status, whichever process stored them");

  onSecond.end(true);
  assert.equal((await first.http.delete(`/api/v1/devices/${gone.device.id}`, owner.token)).status, 204);
  const deadline = Date.now() + 5000;
  let after = await retainedFor(watcher, 'devices/#');
  while (Object.keys(after).length !== 2 && Date.now() < deadline) after = await retainedFor(watcher, 'devices/#');
  assert.deepEqual(Object.keys(after).sort(), [`devices/${kept.device.id}/config`, `devices/${kept.device.id}/status`].sort());
  assert.equal(await redis.client.zscore('minaret:retained-topics', `devices/${gone.device.id}/status`), null);
  onFirst.end(true);
});

test('in Redis mode a retained lookup that fails because Redis went away is reported, and the process goes on', { timeout: 30_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const redis = await startRedisServer();
  const conn = new Redis(redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  conn.on('error', () => undefined);
  t.after(() => conn.disconnect());
  const reported: Error[] = [];
  const persistence = createIndexedRedisPersistence(redisPersistence({ conn }), conn, (err) => reported.push(err)) as {
    retainedIndexReady: Promise<boolean>;
    createRetainedStreamCombi(patterns: string[]): import('node:stream').Readable;
  };
  assert.equal(await persistence.retainedIndexReady, true);
  redis.stop();
  await waitFor('the connection to notice', () => conn.status === 'end' || conn.status === 'close', 5000);
  for (const filters of [['mosques/m1/#'], ['+/m1/status'], ['devices/d1/config']]) {
    // No 'error' listener here, as in aedes: an unreported stream error would end this test's process.
    const stream = persistence.createRetainedStreamCombi(filters);
    stream.resume();
    await new Promise((resolve) => stream.once('close', resolve));
  }
  assert.equal(reported.length, 3, 'each failed lookup is reported once');
});


/** A Redis-mode service on its own redis-server, and every rejection left unhandled while the test runs. */
async function redisModeWatched(t: TestContext) {
  const server = await startRedisServer();
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => unhandled.push(err);
  process.on('unhandledRejection', onUnhandled);
  const ts = await startTestService(t, { env: { REDIS_URL: server.url }, logLevel: 'silent' });
  t.after(() => {
    process.off('unhandledRejection', onUnhandled);
    server.stop();
  });
  return { server, ts, unhandled, ...(await mosqueWithOwner(ts)) };
}

test('in Redis mode a stop waits for the goodbyes of its connected devices while Redis is slow to answer, and nothing is left to fail unhandled', { timeout: 40_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const { server, ts, unhandled, owner, mosque } = await redisModeWatched(t);
  // Each device subscribes, so its goodbye on the stop is Redis work (its subscriptions, its will).
  const devices = await Promise.all(Array.from({ length: 5 }, () => registerTransmitter(ts, owner.token, mosque.id)));
  for (const d of devices) {
    const client = await connectDevice(t, d.credentials);
    assert.equal(await subscribeCode(client, `devices/${d.device.id}/cmd`), 1);
  }
  // Redis holds every command for 3 s (as a busy or distant Redis would): the stop used to give up after 2 s
  // and disconnect with the goodbyes still waiting for their answers.
  assert.equal(await server.client.call('CLIENT', 'PAUSE', '3000', 'ALL'), 'OK');
  const started = Date.now();
  await ts.service.close();
  const took = Date.now() - started;
  await new Promise((resolve) => setTimeout(resolve, 500)); // a rejection left behind surfaces within a turn or two
  assert.deepEqual(unhandled.map(String), []);
  assert.ok(took >= 2500, `the stop waited for Redis to answer (${took} ms)`);
});

test('in Redis mode a stop during which Redis dies ends without an unhandled failure and without waiting for the Redis that is gone', { timeout: 40_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const { server, ts, unhandled, owner, mosque } = await redisModeWatched(t);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const client = await connectDevice(t, tx.credentials);
  assert.equal(await subscribeCode(client, `devices/${tx.device.id}/cmd`), 1);
  // Redis holds every command, the stop's goodbyes and QUITs among them, and then dies with them unanswered.
  assert.equal(await server.client.call('CLIENT', 'PAUSE', '10000', 'ALL'), 'OK');
  const started = Date.now();
  const closing = ts.service.close();
  await new Promise((resolve) => setTimeout(resolve, 500));
  server.stop();
  await closing;
  const took = Date.now() - started;
  await new Promise((resolve) => setTimeout(resolve, 500)); // a rejection left behind surfaces within a turn or two
  assert.deepEqual(unhandled.map(String), []);
  assert.ok(took < 8000, `the stop did not wait out Redis's pause once Redis was gone (${took} ms)`);
});

test('in Redis mode a device that connects with a will while Redis stops answering writes, and then dies, leaves no unhandled failure: the process serves on', { timeout: 40_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const { server, ts, unhandled, owner, mosque } = await redisModeWatched(t);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  // Reads answer, writes wait: the connect gets as far as storing its will (LREM, RPUSH, SET) and waits there.
  assert.equal(await server.client.call('CLIENT', 'PAUSE', '10000', 'WRITE'), 'OK');
  const client = mqtt.connect(tx.credentials.mqtt_url, {
    clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password,
    protocolVersion: 4, clean: false, reconnectPeriod: 0, connectTimeout: 20_000, will: statusWill(tx.device.id),
  });
  client.on('error', () => undefined);
  t.after(() => client.end(true));
  await new Promise((resolve) => setTimeout(resolve, 500));
  server.stop();
  // The reconnects fail, and the commands waiting for them are failed after the retries (maxRetriesPerRequest).
  await new Promise((resolve) => setTimeout(resolve, 2500));
  assert.deepEqual(unhandled.map(String), []);
  const health = await ts.http.get('/healthz');
  assert.equal(health.body.broker, 'ok', 'the broker still serves');
});

test('in Redis mode the pub/sub connection closed just as it came back (its subscriptions being renewed) leaves no unhandled failure', { timeout: 30_000 }, async (t) => {
  if (!redisInstalled()) return t.skip('redis-server is not installed; the Redis mode is untested here');
  const { redisParts } = await import('../../broker/redis-parts.ts');
  let server = await startRedisServer();
  const port = Number(new URL(server.url).port);
  // Between the connections and Redis, a relay that can hold back Redis's answers: a Redis slow to answer.
  const relay = { mute: false };
  const proxy = net.createServer((down) => {
    const up = net.connect(port, '127.0.0.1');
    down.pipe(up);
    up.on('data', (chunk: Buffer) => void (relay.mute || down.write(chunk)));
    for (const [a, b] of [[down, up], [up, down]] as const) {
      a.on('error', () => undefined);
      a.on('close', () => b.destroy());
    }
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => unhandled.push(err);
  process.on('unhandledRejection', onUnhandled);
  const parts = await redisParts(`redis://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`, () => undefined);
  t.after(async () => {
    process.off('unhandledRejection', onUnhandled);
    await parts.close();
    proxy.close();
    server.stop();
  });
  // A wildcard and an exact subscription: the emitter holds them with PSUBSCRIBE and SUBSCRIBE.
  const mq = parts.mq as unknown as { on(topic: string, fn: (m: unknown, cb: () => void) => void, done: () => void): void; subConn: Redis };
  await new Promise<void>((resolve) => mq.on('mosques/+/broadcast', (_m, cb) => cb(), resolve));
  await new Promise<void>((resolve) => mq.on('devices/d1/config', (_m, cb) => cb(), resolve));

  server.stop();
  await new Promise((resolve) => setTimeout(resolve, 300));
  // Back: ioredis sends the renewals as it becomes ready; they go unanswered, and the connection is closed.
  const cut = new Promise<void>((resolve) => mq.subConn.once('ready', () => {
    relay.mute = true;
    mq.subConn.disconnect();
    resolve();
  }));
  server = await startRedisServer(port);
  await cut;
  await new Promise((resolve) => setTimeout(resolve, 500)); // a rejection left behind surfaces within a turn or two
  assert.deepEqual(unhandled.map(String), []);
});
