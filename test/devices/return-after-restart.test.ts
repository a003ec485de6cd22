import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { Aedes } from 'aedes';
import redisPersistence from 'aedes-persistence-redis';
import { Redis } from 'ioredis';
import { storedLease, storeOf } from '../support/database.ts';
import { joinMosque, member, setStatus } from '../support/people.ts';
import { durableFiles, startTestService, type TestService } from '../support/service.ts';
import { configsOnConnect, mosqueWithOwner, registerPlayer, registerTransmitter, settle } from '../support/devices.ts';
import { REDIS_SERVER, redisInstalled, startRedis } from '../support/redis.ts';

// docs/decisions.md, "Device configs are rebuilt at start, not on connect": with REDIS_URL the retained configs
// outlive a process, and a device's return to a restarted one republishes its config only when what Redis
// retains is not what the device would be given now. Each config published goes through the shared pub/sub on a
// channel named by its topic (mqemitter-redis), which a plain Redis subscriber here counts.

const STREAM = 'https://radio.example/noor/live';

async function redisWorld(t: TestContext) {
  const redis = await startRedis();
  const files = durableFiles(t, 'return');
  const env = { ...files.env, REDIS_URL: redis.url, SHARED_CACHE_RELOAD_S: '3600' };
  const running: TestService[] = [];
  const listener = new Redis(redis.url);
  // Registered first, so it runs before the services' own hooks (which then close nothing twice): Redis goes last.
  t.after(async () => {
    for (const s of running) await s.service.close();
    listener.disconnect();
    redis.stop();
  });
  const published = new Map<string, number>();
  listener.on('message', (channel: string) => void published.set(channel, (published.get(channel) ?? 0) + 1));
  return {
    redis,
    /** A process on the shared files and Redis; `restart` closes the previous one first (its memory is gone). */
    async restart(): Promise<TestService> {
      const last = running.pop();
      if (last) await last.service.close();
      const ts = await startTestService(t, { env, logLevel: 'warn' });
      running.push(ts);
      return ts;
    },
    /** Counts from now on the configs published on `topic`, across every process. */
    async count(topic: string): Promise<() => number> {
      await listener.subscribe(topic);
      published.set(topic, 0);
      return () => published.get(topic) ?? 0;
    },
  };
}

async function approvedPlayer(ts: TestService) {
  const { owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM });
  const person = await member(ts, 'imran@example.com');
  const membership = await joinMosque(ts, person, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  return { owner, mosque, player: await registerPlayer(ts, person, mosque.id) };
}

const skipWithoutRedis = (t: TestContext) => {
  if (redisInstalled()) return false;
  t.skip(`redis-server is not installed at ${REDIS_SERVER}; the Redis mode is untested here`);
  return true;
};

test('in Redis mode a device returning to a restarted process finds its retained config as it was, and nothing is published again', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const world = await redisWorld(t);
  let ts = await world.restart();
  const { owner, mosque, player } = await approvedPlayer(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const [first] = await configsOnConnect(t, ts, player);
  const retainedBefore = await world.redis.client.hgetBuffer('retained', `devices/${player.device.id}/config`);
  assert.ok(first?.lease, 'the player holds a lease');

  ts = await world.restart();
  const playerConfigs = await world.count(`devices/${player.device.id}/config`);
  const txConfigs = await world.count(`devices/${tx.device.id}/config`);
  const [again, ...more] = await configsOnConnect(t, ts, player);
  const [txConfig] = await configsOnConnect(t, ts, tx);
  await settle(300); // an arrival's publish, were there one, goes out after the CONNACK
  assert.deepEqual(again, first, 'the same config, lease and all');
  assert.equal(more.length, 0);
  assert.equal(txConfig!.stream_url, STREAM);
  assert.equal(playerConfigs(), 0, 'the player\'s config was not published again');
  assert.equal(txConfigs(), 0, 'nor the transmitter\'s');
  assert.deepEqual(await world.redis.client.hgetBuffer('retained', `devices/${player.device.id}/config`), retainedBefore);
  // The arrival still judged the player's entitlement: its lease stands and its mosque's broadcasts reach it.
  assert.equal((await storedLease(ts, player.device.id)).lease_token, first!.lease.token);
});

test('in Redis mode a returning device whose retained config is not its current one (changed, or lost by Redis) is given the current one', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const world = await redisWorld(t);
  let ts = await world.restart();
  const { player } = await approvedPlayer(ts);
  const [first] = await configsOnConnect(t, ts, player);
  const topic = `devices/${player.device.id}/config`;

  // A change committed by a process that stopped before publishing it: the row is newer than what Redis retains.
  const { store, close } = await storeOf(ts);
  await store.updateTable('devices').set({ config: JSON.stringify({ heartbeat_secs: 600 }), config_version: first!.config_version + 1 })
    .where('id', '=', player.device.id).execute();
  await close();
  ts = await world.restart();
  let configs = await world.count(topic);
  const changed = await configsOnConnect(t, ts, player);
  assert.equal(changed.at(-1)!.config_version, first!.config_version + 1, JSON.stringify(changed));
  assert.equal(changed.at(-1)!.heartbeat_secs, 600);
  assert.deepEqual(changed.at(-1)!.lease, first!.lease, 'the lease it holds, not a new one');
  assert.equal(configs(), 1, 'published once');

  // Redis lost it (or an operator cleared it): brought back on the next return.
  await world.redis.client.hdel('retained', topic);
  ts = await world.restart();
  configs = await world.count(topic);
  const [back] = await configsOnConnect(t, ts, player);
  assert.equal(back!.config_version, first!.config_version + 1);
  assert.equal(configs(), 1);

  // A retained config that is not the one it would be given (another lease) is replaced too.
  await sneakRetained(world.redis.url, topic, { ...back, lease: { token: 'eyJ.not-ours.sig', expires_at: back!.lease.expires_at } });
  ts = await world.restart();
  configs = await world.count(topic);
  assert.ok((await world.redis.client.hgetBuffer('retained', topic))?.includes('not-ours'), 'Redis holds the other one');
  const mended = await configsOnConnect(t, ts, player);
  assert.deepEqual(mended.at(-1)!.lease, first!.lease, JSON.stringify(mended));
  assert.equal(configs(), 1, 'the right one published over it');
  assert.equal((await world.redis.client.hgetBuffer('retained', topic))?.includes('not-ours'), false);
});

/** A retained message stored as another broker on the same Redis stores it (aedes-persistence-redis). */
async function sneakRetained(url: string, topic: string, body: unknown): Promise<void> {
  const conn = new Redis(url);
  const aedes = await Aedes.createBroker({ persistence: redisPersistence({ conn }) as never });
  try {
    await new Promise<void>((resolve, reject) => aedes.publish({ cmd: 'publish', topic, payload: Buffer.from(JSON.stringify(body)), qos: 1, retain: true, dup: false }, (err) => (err ? reject(err) : resolve())));
  } finally {
    await new Promise<void>((resolve) => aedes.close(() => resolve()));
    conn.disconnect();
  }
}
