import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import type { Store } from '../../src/platform/store/store.ts';
import { createChangeLog } from '../../src/platform/store/change-log.ts';
import { createRedisChangeFeed } from '../../src/platform/net/redis-changes.ts';
import { createManualClock, systemClock, type Clock } from '../../src/platform/clock.ts';
import { silentLogger } from '../../src/platform/log.ts';
import type { Change, ChangeOrigin } from '../../src/platform/changes.ts';
import { redisInstalled, startRedis } from '../support/redis.ts';
import { startTestService } from '../support/service.ts';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { connectDevice, connectOnce, mosqueWithOwner, nextMessage, registerPlayer, registerTransmitter, settle, subscribeCode, waitFor } from '../support/devices.ts';
import { postgresInstalled } from './postgres.ts';
import { testStore } from '../support/database.ts';
import { migrate, openDatabase } from '../../src/platform/db.ts';

// docs/decisions.md, "The change log": with several processes every change the feed announces is also numbered in
// the store, so a process that missed Redis messages (pub/sub keeps nothing for a subscriber that is away) reads
// them back instead of missing them, and reads them every second while its subscription is down.

const skipRedis = redisInstalled() ? false : 'redis-server is not installed';

/** Two processes' feeds on one store and one Redis, each with what its listeners heard. */
async function twoFeeds(t: TestContext, store: Store, opts: { clock?: Clock; keepMs?: number } = {}) {
  const redis = await startRedis();
  const port = Number(new URL(redis.url).port);
  const conns = [0, 1].map(() => {
    const conn = new Redis(redis.url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    conn.on('error', () => undefined); // Redis is stopped on purpose below
    return conn;
  });
  const log = { log: createChangeLog(store), keepMs: opts.keepMs ?? 3_600_000, clock: opts.clock ?? systemClock };
  const errors: Array<[string, unknown]> = [];
  const onError = (what: string, err: unknown) => void (what.startsWith('redis') || errors.push([what, err]));
  const [one, two] = await Promise.all(conns.map((conn) => createRedisChangeFeed({ conn, logger: silentLogger, onError, log })));
  const heard = (feed: typeof one) => {
    const seen = { changes: [] as Array<[Change, ChangeOrigin]>, resyncs: 0 };
    feed!.subscribe({ changed: (c, origin) => void seen.changes.push([c, origin]), resync: () => void seen.resyncs++ });
    feed!.start();
    return seen;
  };
  const state = { redis };
  t.after(async () => {
    await one!.close();
    await two!.close();
    for (const conn of conns) conn.disconnect();
    state.redis.stop();
  });
  return {
    one: one!, two: two!, atOne: heard(one), atTwo: heard(two), errors,
    stopRedis: () => state.redis.stop(),
    startRedis: async () => void (state.redis = await startRedis(port)),
  };
}

test('while Redis is away, a change made through one process reaches the other within seconds through the change log, once, without a full reload', { skip: skipRedis, timeout: 30_000 }, async (t) => {
  const { store } = await testStore(t, 'sqlite');
  const f = await twoFeeds(t, store);
  f.one.publish({ kind: 'device', id: 'before' });
  await waitFor('heard through Redis', () => f.atTwo.changes.length === 1);

  f.stopRedis();
  await waitFor('both feeds see Redis gone', () => f.one.state() === 'down' && f.two.state() === 'down');
  f.one.publish({ kind: 'device', id: 'meanwhile' });
  f.one.publish({ kind: 'user', id: 'u1' });
  await waitFor('heard through the log', () => f.atTwo.changes.length === 3, 5000);
  assert.deepEqual(f.atTwo.changes.slice(1), [[{ kind: 'device', id: 'meanwhile' }, 'remote'], [{ kind: 'user', id: 'u1' }, 'remote']]);
  assert.equal(f.one.state(), 'down', 'Redis is still away: only the log can have carried them');

  await f.startRedis();
  await waitFor('both feeds back', () => f.one.state() === 'ok' && f.two.state() === 'ok', 10_000);
  f.one.publish({ kind: 'device', id: 'after' });
  await waitFor('heard through Redis again', () => f.atTwo.changes.length === 4);
  await settle(1500); // a catch-up on the return, and the publisher's catch-up message, have run
  assert.deepEqual(f.atTwo.changes.map(([c]) => c.id), ['before', 'meanwhile', 'u1', 'after'], 'each change applied once');
  assert.equal(f.atTwo.resyncs, 0, 'no full reload: the log covered the gap');
  assert.ok(f.atOne.changes.every(([, origin]) => origin === 'local'), 'a process never hears its own entries back');
  const logged = await createChangeLog(store).since(0, 100);
  assert.deepEqual(logged.map((e) => e.id), ['before', 'meanwhile', 'u1', 'after'], 'numbered in the order made');
  assert.deepEqual(f.errors, []);
});

test('a process away for longer than the log keeps reloads every cache instead of reading entry by entry', { skip: skipRedis, timeout: 30_000 }, async (t) => {
  const { store } = await testStore(t, 'sqlite');
  const clock = createManualClock(Date.now());
  const f = await twoFeeds(t, store, { clock, keepMs: 60_000 });
  f.stopRedis();
  await waitFor('the feed sees Redis gone', () => f.two.state() === 'down');
  clock.advance(120_000);
  f.one.publish({ kind: 'device', id: 'meanwhile' });
  await waitFor('a full reload', () => f.atTwo.resyncs >= 1, 5000);
  assert.deepEqual(f.atTwo.changes, [], 'the entries themselves were not replayed');
});

for (const dialect of ['sqlite', 'postgres'] as const) {
  const skip = dialect === 'postgres' && !postgresInstalled() ? 'PostgreSQL 15 or newer is not installed (.ci/run installs it)' : false;
  test(`the change log on ${dialect}: numbers grow and are never reused, reads page above a number, pruning deletes by age`, { skip, timeout: 60_000 }, async (t) => {
    const { store } = await testStore(t, dialect);
    const log = createChangeLog(store);
    assert.equal(await log.head(), 0);
    const first = await log.append('p1', [{ kind: 'device', id: 'd1' }, { kind: 'user', id: 'u1' }], 1000);
    const many = Array.from({ length: 1200 }, (_, i) => ({ kind: 'token' as const, id: `t${i}` }));
    const second = await log.append('p2', many, 5000);
    assert.equal(first.length, 2);
    assert.equal(second.length, 1200, 'a turn larger than one INSERT is written whole');
    const all = [...first, ...second].sort((a, b) => a - b);
    assert.equal(new Set(all).size, all.length, 'no number twice');
    assert.equal(await log.head(), all.at(-1));
    const page = await log.since(first[0]!, 3);
    assert.deepEqual(page.map((e) => e.seq), all.slice(1, 4));
    assert.deepEqual(page[0], { seq: all[1], kind: 'user', id: 'u1', origin: 'p1' });
    assert.equal(await log.prune(2000), 2, 'the entries written before the cutoff');
    assert.equal((await log.since(0, 5000)).length, 1200);
    const after = await log.append('p1', [{ kind: 'mosque', id: 'm1' }], 6000);
    assert.ok(after[0]! > all.at(-1)!, 'a number is never reused, even after pruning');
  });
}

test('Redis restarted under two processes: caches follow through the change log meanwhile, and the broadcast fan-out resumes after', { skip: skipRedis, timeout: 90_000 }, async (t) => {
  const redis = await startRedis();
  const port = Number(new URL(redis.url).port);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-changelog-'));
  // The poll is set to an hour: only the feed and its log can explain what follows.
  const shared = { REDIS_URL: redis.url, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir, SHARED_CACHE_RELOAD_S: '3600' };
  const a = await startTestService(t, { env: shared, logLevel: 'warn' });
  const b = await startTestService(t, { env: shared, logLevel: 'warn' });
  const restarted = { redis };
  t.after(() => {
    restarted.redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const { owner, mosque } = await mosqueWithOwner(a, { stream_url: 'https://radio.example/noor/live' });
  const person = await member(a, 'listener@example.com');
  await setStatus(a, owner.token, (await joinMosque(a, person, mosque.id)).id, 'approved');
  const player = await registerPlayer(a, person, mosque.id);
  const listener = await connectDevice(t, { ...player.credentials, mqtt_url: b.service.mqttUrl });
  assert.equal(await subscribeCode(listener, `mosques/${mosque.id}/broadcast`), 1);
  const tx = await registerTransmitter(a, owner.token, mosque.id);
  const txCreds = { clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password };
  assert.equal(await connectOnce(b.service.mqttUrl, txCreds), 'connected', 'B knows the transmitter');

  redis.stop();
  await settle(500);
  // Made through A while no message can travel; B's registry follows from the log, with Redis still away.
  assert.equal((await a.http.post(`${API}/devices/${tx.device.id}/credentials`, {}, owner.token)).status, 200);
  await waitFor('B refuses the old password while Redis is down', async () => (await connectOnce(b.service.mqttUrl, txCreds)) === 4, 8000);

  restarted.redis = await startRedis(port);
  assert.ok(!listener.disconnecting, 'the player on B stayed connected through the restart');
  // The fan-out between the processes resumes: a broadcast started through A reaches the player on B.
  await waitFor('the broadcast crosses the processes again', async () => {
    const heard = nextMessage(listener, `mosques/${mosque.id}/broadcast`, 1500).then(() => true, () => false);
    const started = await a.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, owner.token);
    if (started.status === 201) {
      const got = await heard;
      await a.http.post(`${API}/mosques/${mosque.id}/broadcasts/${started.body.id}/stop`, {}, owner.token);
      return got;
    }
    return false;
  }, 20_000);
});

test('with REDIS_URL the service prunes the change log past CHANGE_LOG_KEEP_S as a duty from its start, and keeps what is newer', { skip: skipRedis, timeout: 30_000 }, async (t) => {
  const redis = await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-changelog-prune-'));
  t.after(() => {
    redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const env = { REDIS_URL: redis.url, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir, CHANGE_LOG_KEEP_S: '60' };
  // Entries two hours and ten seconds old, as a process left them, in a file no service has opened since.
  const db = openDatabase(env.DATABASE_PATH);
  migrate(db);
  const insert = db.prepare('INSERT INTO change_log (kind, entity_id, origin, at) VALUES (?, ?, ?, ?)');
  for (const [id, ageMs] of [['old-1', 7_200_000], ['old-2', 7_200_000], ['new-1', 10_000]] as const) insert.run('mosque', id, 'gone', Date.now() - ageMs);
  db.close();
  const ids = () => {
    const read = openDatabase(env.DATABASE_PATH);
    try {
      return (read.prepare("SELECT entity_id FROM change_log WHERE origin = 'gone' ORDER BY entity_id").all() as Array<{ entity_id: string }>).map((r) => r.entity_id);
    } finally {
      read.close();
    }
  };
  assert.deepEqual(ids(), ['new-1', 'old-1', 'old-2']);
  await startTestService(t, { env, logLevel: 'warn' });
  await waitFor('the old entries pruned', () => ids().length === 1, 10_000);
  assert.deepEqual(ids(), ['new-1'], 'an entry younger than CHANGE_LOG_KEEP_S stays');
});
