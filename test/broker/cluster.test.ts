import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { sha256, startTestService } from '../support/service.ts';
import { createRedisChangeFeed, CHANGES_CHANNEL } from '../../src/platform/net/redis-changes.ts';
import { silentLogger } from '../../src/platform/log.ts';
import type { Change, ChangeOrigin } from '../../src/platform/changes.ts';
import { redisInstalled, startRedis, REDIS_SERVER } from '../support/redis.ts';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import {
  closed, connectDevice, connectOnce, mosqueWithOwner, nextMessage, registerPlayer, registerTransmitter, settle, subscribeCode, waitFor,
} from '../support/devices.ts';

// docs/decisions.md, "Several processes": several processes (REDIS_URL) agree within a second, through the change feed
// (src/platform/changes.ts). Two services run in this one test process, each with its own ports, stores,
// caches and broker, and nothing in memory shared: what they share is exactly what two processes share, the
// SQLite file, the data folder and Redis. (Child processes would add minutes of start-up on this busy host
// and hide a failure's stack; nothing in the service is a module-level singleton that could make them agree
// behind the feed's back.) The poll is set to an hour, so only the feed can explain an effect within 1.5 s.

const WITHIN_MS = 1500;
const STREAM = 'https://radio.example/noor/live';

async function cluster(t: TestContext, env: Record<string, string> = {}) {
  const redis = await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-cluster-'));
  const shared = { REDIS_URL: redis.url, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir, SHARED_CACHE_RELOAD_S: '3600', ...env };
  const a = await startTestService(t, { env: shared, logLevel: 'warn' });
  const b = await startTestService(t, { env: shared, logLevel: 'warn' });
  // After the services' own hooks (after hooks run in the order registered): Redis goes last.
  t.after(() => {
    redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { a, b, redis };
}

const skipWithoutRedis = (t: TestContext) => {
  if (redisInstalled()) return false;
  t.skip(`redis-server is not installed at ${REDIS_SERVER}; the Redis mode is untested here`);
  return true;
};

/** Runs `act`, then waits for `effect`; returns the milliseconds from the end of `act` to the effect. */
async function timed(act: () => Promise<unknown>, effect: () => Promise<unknown>): Promise<number> {
  await act();
  const started = performance.now();
  await effect();
  return performance.now() - started;
}

test('a device connected to process B is cut off within 1.5 s of its credentials being rotated, or of its deletion, through process A', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b } = await cluster(t);
  const { owner, mosque } = await mosqueWithOwner(a);
  const rotated = await registerTransmitter(a, owner.token, mosque.id, 'rotated');
  const deleted = await registerTransmitter(a, owner.token, mosque.id, 'deleted');
  const onB = { ...rotated.credentials, mqtt_url: b.service.mqttUrl };
  const rotatedClient = await connectDevice(t, onB);
  const deletedClient = await connectDevice(t, { ...deleted.credentials, mqtt_url: b.service.mqttUrl });

  let fresh = '';
  const rotation = await timed(async () => {
    const res = await a.http.post(`${API}/devices/${rotated.device.id}/credentials`, {}, owner.token);
    assert.equal(res.status, 200);
    fresh = res.body.credentials?.password ?? res.body.password;
  }, () => closed(rotatedClient, WITHIN_MS));
  assert.ok(rotation < WITHIN_MS, `cut off after ${rotation} ms`);
  assert.equal(typeof fresh, 'string');
  assert.equal(await connectOnce(b.service.mqttUrl, { clientId: onB.client_id, username: onB.username, password: onB.password }), 4, 'the old password no longer opens B');
  assert.equal(await connectOnce(b.service.mqttUrl, { clientId: onB.client_id, username: onB.username, password: fresh }), 'connected', 'the new one does');

  const deletion = await timed(async () => {
    assert.equal((await a.http.delete(`${API}/devices/${deleted.device.id}`, owner.token)).status, 204);
  }, () => closed(deletedClient, WITHIN_MS));
  assert.ok(deletion < WITHIN_MS, `cut off after ${deletion} ms`);
  assert.equal(await connectOnce(b.service.mqttUrl, { clientId: deleted.credentials.client_id, username: deleted.credentials.username, password: deleted.credentials.password }), 4);
});

test('a player rotated through process A reconnects to process B and finds a config with a fresh lease retained there', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b } = await cluster(t);
  const { mosque } = await mosqueWithOwner(a, { auto_approve_members: true });
  const listener = await member(a, 'rotating@example.com');
  const player = await registerPlayer(a, listener, mosque.id);
  const topic = `devices/${player.device.id}/config`;
  const old = await connectDevice(t, { ...player.credentials, mqtt_url: b.service.mqttUrl });
  const first = nextMessage(old, topic, 5000, (c) => Boolean(c?.lease));
  assert.equal(await subscribeCode(old, topic), 1);
  const before = (await first).body.lease.token as string;
  const gone = closed(old, WITHIN_MS);
  const res = await a.http.post(`${API}/devices/${player.device.id}/credentials`, {}, listener.token);
  assert.equal(res.status, 200);
  await gone; // B has read the rotation from the feed

  const again = await connectDevice(t, { ...player.credentials, password: res.body.credentials.password, mqtt_url: b.service.mqttUrl });
  const seen: Array<{ body: any; retain: boolean }> = [];
  again.on('message', (tp, payload, packet) => {
    if (tp === topic) seen.push({ body: payload.length ? JSON.parse(payload.toString('utf8')) : null, retain: packet.retain });
  });
  assert.equal(await subscribeCode(again, topic), 1);
  await waitFor('a config on B', () => seen.length > 0);
  assert.equal(seen[0]!.retain, true, 'retained before the CONNACK');
  assert.ok(seen[0]!.body?.lease?.token, `a lease in the first config: ${JSON.stringify(seen[0]!.body)}`);
  assert.notEqual(seen[0]!.body.lease.token, before, 'not the superseded lease');
});

test('an access token revoked through process A (a password reset) is refused by process B within 1.5 s', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b } = await cluster(t);
  const person = await member(a, 'amina@example.com');
  // B has checked the token once, so its version and the verified token sit in B's memory.
  assert.equal((await b.http.get(`${API}/me`, person.token)).status, 200);

  assert.equal((await a.http.post(`${API}/auth/forgot-password`, { identifier_hash: sha256('amina@example.com') })).status, 202);
  await a.service.notifier.idle();
  const token = a.messages.filter((m) => m.purpose === 'password_reset').at(-1)!.token!;
  const refused = await timed(async () => {
    assert.equal((await a.http.post(`${API}/auth/reset-password`, { token, password_hash: sha256('a new password') })).status, 200);
  }, () => waitFor('B refuses the old token', async () => (await b.http.get(`${API}/me`, person.token)).status === 401, WITHIN_MS));
  assert.ok(refused < WITHIN_MS, `refused after ${refused} ms`);
  assert.equal((await a.http.get(`${API}/me`, person.token)).status, 401, 'A refuses it too');
});

test('GET /me on process B shows a membership approved through process A within 1.5 s, though B had cached the body', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b } = await cluster(t);
  const { owner, mosque } = await mosqueWithOwner(a);
  const person = await member(a, 'bilal@example.com');
  const membership = await joinMosque(a, person, mosque.id);
  const before = await b.http.get(`${API}/me`, person.token);
  assert.deepEqual(before.body.memberships.map((m: { status: string }) => m.status), ['pending']);
  assert.deepEqual((await b.http.get(`${API}/me`, person.token)).body, before.body, 'served again as it was');

  const seen = await timed(() => setStatus(a, owner.token, membership.id, 'approved'), () =>
    waitFor('B shows the approval', async () => (await b.http.get(`${API}/me`, person.token)).body.memberships[0]?.status === 'approved', WITHIN_MS));
  assert.ok(seen < WITHIN_MS, `seen after ${seen} ms`);
  // And an admin row given through A.
  const given = await a.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: person.id, can_trigger: true }, owner.token);
  assert.equal(given.status, 201);
  await waitFor('B shows the admin row', async () => (await b.http.get(`${API}/me`, person.token)).body.admin_of.length === 1, WITHIN_MS);
});

test('a membership rejected through process A cuts its player on process B: a config without stream_url, and no broadcast, within 1.5 s', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b } = await cluster(t);
  const { owner, mosque } = await mosqueWithOwner(a, { stream_url: STREAM });
  const players = [];
  for (const email of ['rejected@example.com', 'kept@example.com']) {
    const person = await member(a, email);
    const membership = await joinMosque(a, person, mosque.id);
    await setStatus(a, owner.token, membership.id, 'approved');
    const player = await registerPlayer(a, person, mosque.id);
    const client = await connectDevice(t, { ...player.credentials, mqtt_url: b.service.mqttUrl });
    const config = nextMessage(client, `devices/${player.device.id}/config`);
    assert.equal(await subscribeCode(client, `devices/${player.device.id}/config`), 1);
    assert.equal((await config).body.stream_url, STREAM, 'entitled to begin with');
    assert.equal(await subscribeCode(client, `mosques/${mosque.id}/broadcast`), 1);
    players.push({ membership, player, client });
  }
  const [rejected, kept] = players as [typeof players[0], typeof players[0]];
  const heardByRejected: unknown[] = [];
  rejected.client.on('message', (topic, payload) => topic === `mosques/${mosque.id}/broadcast` && heardByRejected.push(payload.toString('utf8')));

  const unleasedConfig = nextMessage(rejected.client, `devices/${rejected.player.device.id}/config`, WITHIN_MS, (c) => c.stream_url === undefined);
  const cut = await timed(() => setStatus(a, owner.token, rejected.membership.id, 'rejected'), () => unleasedConfig);
  assert.ok(cut < WITHIN_MS, `new config after ${cut} ms`);
  const config = (await unleasedConfig).body;
  assert.equal(config.lease, undefined);
  assert.equal(config.unbound_reason, 'membership_lapsed');

  // B's broker decides what its clients receive: its lease map must have dropped the player already.
  const toKept = nextMessage(kept.client, `mosques/${mosque.id}/broadcast`, WITHIN_MS);
  const started = await a.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, owner.token);
  assert.equal(started.status, 201);
  assert.equal((await toKept).body.broadcast_id, started.body.id, 'the entitled player on B hears it');
  await settle(500);
  assert.deepEqual(heardByRejected, [], 'the rejected player on B heard the broadcast');
});

test('the auth rate limit and the wrong-guess budget are one budget across both processes', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b, redis } = await cluster(t, { AUTH_MAX_WRONG_GUESSES_PER_HOUR: '4' });
  // Wrong login codes spread over both processes: the fifth try, with the right code, is refused.
  await member(a, 'guessed@example.com');
  const identifier = sha256('guessed@example.com');
  assert.equal((await a.http.post(`${API}/auth/login-code`, { identifier_hash: identifier })).status, 202);
  await a.service.notifier.idle();
  const code = a.messages.filter((m) => m.purpose === 'login_code').at(-1)!.code!;
  const wrong = code === '000000' ? '000001' : '000000';
  for (const ts of [a, b, a, b]) {
    assert.equal((await ts.http.post(`${API}/auth/login-code/verify`, { identifier_hash: identifier, code: wrong })).body.error.code, 'invalid_code');
  }
  const locked = await b.http.post(`${API}/auth/login-code/verify`, { identifier_hash: identifier, code });
  assert.equal(locked.status, 429, 'four wrong guesses over two processes spend the budget of four');

  // The per-address limit, counted in Redis: its keys are there, and a tight limit holds across processes.
  assert.ok((await redis.client.keys('minaret:rl:auth-address*')).length > 0, 'the address limit is counted in Redis');
  const tight = await cluster(t, { AUTH_RATE_LIMIT: '4' });
  const statuses: number[] = [];
  for (const ts of [tight.a, tight.b, tight.a, tight.b, tight.a, tight.b]) {
    statuses.push((await ts.http.post(`${API}/auth/login-code`, { identifier_hash: identifier })).status);
  }
  assert.deepEqual(statuses, [202, 202, 202, 202, 429, 429]);
});

test('with Redis gone for a while, process B catches up when it is back: a rotation made meanwhile through A cuts its device off', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b, redis } = await cluster(t);
  const { owner, mosque } = await mosqueWithOwner(a);
  const tx = await registerTransmitter(a, owner.token, mosque.id);
  const creds = { clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password };
  const client = await connectDevice(t, { ...tx.credentials, mqtt_url: b.service.mqttUrl });

  const cutOff = closed(client, 10_000);
  redis.stop();
  await settle(300);
  // Made while no message can travel: A cannot publish it, B could not receive it.
  assert.equal((await a.http.post(`${API}/devices/${tx.device.id}/credentials`, {}, owner.token)).status, 200);
  await settle(700);

  const back = await startRedis(Number(new URL(redis.url).port));
  t.after(() => back.stop());
  await cutOff;
  // Without the catch-up B's registry would keep the old secret for the hour until its poll.
  await waitFor('B refuses the old password', async () => (await connectOnce(b.service.mqttUrl, creds)) === 4, 8000);
});

test('the Redis feed sends one turn\'s changes as one message, without duplicates; the other process hears them as remote, the sender only as local', { timeout: 30_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const redis = await startRedis();
  const conns = [new Redis(redis.url, { enableOfflineQueue: false }), new Redis(redis.url, { enableOfflineQueue: false })];
  const errors: unknown[] = [];
  const [one, two] = await Promise.all(conns.map((conn) => createRedisChangeFeed({ conn, logger: silentLogger, onError: (_w, err) => errors.push(err) })));
  const tap = redis.client.duplicate();
  const raw: string[] = [];
  await tap.subscribe(CHANGES_CHANNEL);
  tap.on('message', (_c: string, text: string) => raw.push(text));
  t.after(async () => {
    await one!.close();
    await two!.close();
    tap.disconnect();
    for (const conn of conns) conn.disconnect();
    redis.stop();
  });
  const heard = (feed: typeof one) => {
    const seen: Array<[Change, ChangeOrigin]> = [];
    feed!.subscribe({ changed: (c, origin) => void seen.push([c, origin]), resync: () => void seen.push([{ kind: 'user', id: 'RESYNC' }, 'remote']) });
    feed!.start();
    return seen;
  };
  const atOne = heard(one);
  const atTwo = heard(two);
  for (const id of ['d1', 'd2', 'd1']) one!.publish({ kind: 'device', id });
  await waitFor('the other process hears them', () => atTwo.length === 2);
  assert.deepEqual(atTwo, [[{ kind: 'device', id: 'd1' }, 'remote'], [{ kind: 'device', id: 'd2' }, 'remote']]);
  assert.equal(atOne.length, 3, 'the sender heard each publish at once');
  assert.ok(atOne.every(([, origin]) => origin === 'local'), 'and never its own message back');
  await waitFor('the tap sees the message', () => raw.length >= 1);
  await settle(100);
  assert.equal(raw.length, 1, 'one message for the turn');
  assert.doesNotMatch(raw[0]!, /secret|password/);
  assert.equal(one!.state(), 'ok');
  assert.deepEqual(errors, []);
});
