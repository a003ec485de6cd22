import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AUTH, assertError, emailId } from '../support/api.ts';
import { makeAdmin, member } from '../support/people.ts';
import { mosqueWithOwner } from '../support/devices.ts';
import { redisInstalled, startRedis, REDIS_SERVER } from '../support/redis.ts';
import { sha256, startTestService, type TestService } from '../support/service.ts';

// REDIS_URL: two services on one SQLite file and one real redis-server, each with its own memory, as two
// processes are (test/broker/cluster.test.ts says why they share this test process). The poll is set to an
// hour, so only the change feed (src/platform/changes.ts) can explain an effect within a second.

const WITHIN_MS = 1000;

async function cluster(t: TestContext) {
  const redis = await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-sessions-'));
  const shared = { REDIS_URL: redis.url, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir, SHARED_CACHE_RELOAD_S: '3600' };
  const a = await startTestService(t, { env: shared, logLevel: 'warn' });
  const b = await startTestService(t, { env: shared, logLevel: 'warn' });
  t.after(() => {
    redis.stop(); // after the services' own hooks, registered before this one
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { a, b, redis };
}

const skipWithoutRedis = (t: TestContext) => {
  if (redisInstalled()) return false;
  t.skip(`redis-server is not installed at ${REDIS_SERVER}; the Redis mode is untested here`);
  return true;
};

/** Milliseconds until `check` holds, polled every 20 ms; fails past `limitMs`. */
async function msUntil(check: () => Promise<boolean>, limitMs: number, what: string): Promise<number> {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > limitMs) assert.fail(`${what}: not within ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return performance.now() - started;
}

const status = async (ts: TestService, token: string) => (await ts.http.get('/api/v1/me', token)).status;

test(`a token signed out on process A stops working on process B within ${WITHIN_MS} ms; the account's other token goes on`, { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b } = await cluster(t);
  const gone = (await a.http.post(`${AUTH}/signup`, { email: 'amina@cluster.test', password_hash: sha256('pw') })).body.access_token as string;
  const kept = (await b.http.post(`${AUTH}/login`, { identifier_hash: emailId('amina@cluster.test'), password_hash: sha256('pw') })).body.access_token as string;
  assert.equal(await status(b, gone), 200, 'B knows the token (and caches its verification)');

  assert.equal((await a.http.post(`${AUTH}/logout`, undefined, gone)).status, 204);
  const took = await msUntil(async () => (await status(b, gone)) === 401, WITHIN_MS, 'refused on B');
  assert.ok(took < WITHIN_MS, `refused on B after ${took} ms`);
  assertError(await b.http.get('/api/v1/me', gone), 401, 'unauthorized');
  assert.equal(await status(b, kept), 200);
  assert.equal(await status(a, kept), 200);

  // logout-all through B ends the token A still accepts, by the token version (kind `user` on the feed).
  assert.equal((await b.http.post(`${AUTH}/logout-all`, undefined, kept)).status, 204);
  await msUntil(async () => (await status(a, kept)) === 401, WITHIN_MS, 'logout-all seen on A');
});

test(`an admin removed through process A loses the event stream open on process B within ${WITHIN_MS} ms`, { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b } = await cluster(t);
  const { root, mosque } = await mosqueWithOwner(a, {}, 'owner@cluster-stream.test');
  const helper = await member(a, 'helper@cluster-stream.test');
  await makeAdmin(a, root.token, mosque.id, helper);
  const ticket = await b.http.post(`/api/v1/mosques/${mosque.id}/events/ticket`, undefined, helper.token);
  assert.equal(ticket.status, 201);
  const controller = new AbortController();
  t.after(() => controller.abort());
  const res = await fetch(`${b.url}/api/v1/mosques/${mosque.id}/events/stream?ticket=${ticket.body.ticket}`, { signal: controller.signal });
  assert.equal(res.status, 200);
  const ended = (async () => {
    for await (const _ of res.body as unknown as AsyncIterable<Uint8Array>) { /* heartbeats */ }
    return performance.now();
  })();

  assert.equal((await a.http.delete(`/api/v1/mosques/${mosque.id}/admins/${helper.id}`, root.token)).status, 204);
  const removedAt = performance.now();
  const timeout = new Promise<number>((_, reject) => setTimeout(() => reject(new Error(`still open ${WITHIN_MS} ms later`)), WITHIN_MS).unref());
  const took = (await Promise.race([ended, timeout])) - removedAt;
  assert.ok(took < WITHIN_MS, `ended after ${took} ms`);
});

test('with REDIS_URL the invitation budgets are shared by every process, and Redis holds the address only as its SHA-256', { timeout: 60_000 }, async (t) => {
  if (skipWithoutRedis(t)) return;
  const { a, b, redis } = await cluster(t);
  const { root, owner, mosque } = await mosqueWithOwner(a, {}, 'owner@cluster-invites.test');
  const other = (await a.http.post('/api/v1/mosques', { name: 'Other' }, root.token)).body as { id: string };
  const to = { email: 'target@cluster-invites.test' };
  assert.equal((await a.http.post('/api/v1/invites', { mosque_id: mosque.id, ...to }, owner.token)).status, 201);
  assert.equal((await b.http.post('/api/v1/invites', { mosque_id: other.id, ...to }, root.token)).status, 201);
  assert.equal((await a.http.post('/api/v1/invites', { mosque_id: other.id, ...to }, root.token)).status, 201);
  assertError(await b.http.post('/api/v1/invites', { mosque_id: mosque.id, ...to }, owner.token), 429, 'rate_limited');

  const keys = await redis.client.keys('minaret:rl:invites-*');
  assert.ok(keys.includes(`minaret:rl:invites-address:${sha256(to.email)}`), `keys: ${keys.join(', ')}`);
  assert.ok(keys.includes(`minaret:rl:invites-mosque:${mosque.id}`));
  assert.equal(keys.some((k) => k.includes('@') || k.includes('target')), false, 'no address in clear');
  assert.equal(await redis.client.get(`minaret:rl:invites-mosque:${mosque.id}`), '2', 'both processes counted against one budget');
});
