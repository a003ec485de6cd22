import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API, createMosque, joinMosque, member, setStatus, signInSuperadmin, type Person } from '../../support/people.ts';
import { registerPlayer, registerTransmitter } from '../../support/devices.ts';
import { startTestService, type TestService } from '../../support/service.ts';
import { bodyFor, bodyText, fuzzSettings, hostileString, hostileValue, iterationRng, replayHint, type JsonSchema, type Rng } from '../../support/fuzz.ts';

// SECURITY.md, "Tested from outside": hostile JSON to every operation the OpenAPI document lists, as nobody, a member, a
// mosque admin and a superadmin. Never a 5xx; every answer that is not 2xx carries the contract's error body.

const FILE = 'test/hostile/http/fuzz.test.ts';
// ~20 s on an idle 2-core machine, well under a minute when the other engineers' suites share it.
const settings = fuzzSettings(4000);

interface Operation {
  method: string;
  /** OpenAPI path (`/api/v1/mosques/{id}`). */
  path: string;
  body: JsonSchema | undefined;
  query: Array<{ name: string; schema: JsonSchema }>;
}

interface Fixtures {
  tokens: Record<'none' | 'member' | 'admin' | 'superadmin', string | undefined>;
  ids: Record<'user' | 'mosque' | 'device' | 'membership' | 'broadcast', string[]>;
}

async function operationsOf(ts: TestService): Promise<Operation[]> {
  const res = await ts.http.get(`${API}/openapi.json`);
  assert.equal(res.status, 200);
  const ops: Operation[] = [];
  // Paths are relative to the document's server (`/api/v1`), except where an operation names its own (`/healthz`).
  const base = (res.body.servers?.[0]?.url ?? '') as string;
  for (const [path, methods] of Object.entries(res.body.paths as Record<string, Record<string, any>>)) {
    for (const [method, op] of Object.entries(methods)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue; // `servers`, `parameters`
      const server = (op.servers?.[0]?.url ?? methods.servers?.[0]?.url ?? base) as string;
      ops.push({
        method: method.toUpperCase(),
        path: `${server.replace(/\/$/, '')}${path}`,
        body: op.requestBody?.content?.['application/json']?.schema,
        query: (op.parameters ?? []).filter((p: any) => p.in === 'query').map((p: any) => ({ name: p.name, schema: p.schema })),
      });
    }
  }
  return ops;
}

/**
 * A mosque with an owner (the admin caller), an approved member owning a player, a transmitter, a
 * bystander user and a live broadcast: real ids for the path parameters, so hostile bodies reach the
 * handlers and not only the 404s. Built again whenever the fuzzer has deleted a part of it.
 */
async function buildFixtures(ts: TestService, round: number, root: { token: string; id: string }): Promise<Fixtures> {
  const owner = await member(ts, `owner${round}@example.com`);
  const person: Person = await member(ts, `member${round}@example.com`);
  const bystander = await member(ts, `bystander${round}@example.com`);
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: false });
  const membership = await joinMosque(ts, person, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  const player = await registerPlayer(ts, person, mosque.id);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const started = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, owner.token);
  return {
    tokens: { none: undefined, member: person.token, admin: owner.token, superadmin: root.token },
    ids: {
      user: [bystander.id, person.id],
      mosque: [mosque.id],
      device: [player.device.id, tx.device.id],
      membership: [membership.id],
      broadcast: started.status === 201 ? [started.body.id] : [],
    },
  };
}

/** Whether the fixtures still stand (a fuzzed DELETE may have removed the mosque, a device or a membership). */
async function fixturesStand(ts: TestService, f: Fixtures): Promise<boolean> {
  const checks = [
    ts.http.get(`${API}/mosques/${f.ids.mosque[0]}`, f.tokens.admin),
    ...f.ids.device.map((id) => ts.http.get(`${API}/devices/${id}`, f.tokens.superadmin)),
    ts.http.get(`${API}/me`, f.tokens.member),
  ];
  return (await Promise.all(checks)).every((r) => r.status === 200);
}

function safeSegment(s: string): string {
  try {
    return encodeURIComponent(s);
  } catch {
    return 'x'; // a lone surrogate cannot be percent-encoded
  }
}

function pathParam(rng: Rng, route: string, name: string, f: Fixtures): string {
  const pool =
    name === 'user_id' ? f.ids.user
    : name === 'bid' ? f.ids.broadcast
    : route.startsWith('/api/v1/users/') ? f.ids.user
    : route.startsWith('/api/v1/mosques/') ? f.ids.mosque
    : route.startsWith('/api/v1/devices/') ? f.ids.device
    : route.startsWith('/api/v1/memberships/') ? f.ids.membership
    : [];
  if (pool.length && rng.chance(0.75)) return pool[rng.int(pool.length)]!;
  return safeSegment(rng.pick([hostileString(rng), '..', '%2e%2e', 'null', '0', '-1', 'd'.repeat(17), 'x'.repeat(3000)]));
}

function queryString(rng: Rng, op: Operation): string {
  const pairs: string[] = [];
  for (const q of op.query) {
    if (!rng.chance(0.6)) continue;
    const value = rng.chance(0.5) ? String(rng.pick([0, -1, 1, 50, 1e21, 2 ** 53, 'NaN', 'Infinity', '1e999', '', 'pending', 'x'])) : String(JSON.stringify(hostileValue(rng)));
    pairs.push(`${safeSegment(q.name)}=${safeSegment(value)}`);
    if (rng.chance(0.1)) pairs.push(`${safeSegment(q.name)}=again`); // the same key twice
  }
  if (rng.chance(0.1)) pairs.push(`${safeSegment(hostileString(rng).slice(0, 20))}=1`);
  return pairs.length ? `?${pairs.join('&')}` : '';
}

/** One request of iteration `i`: operation, caller, path, query, headers and body all drawn from its generator. */
function requestOf(i: number, ops: Operation[], f: Fixtures) {
  const rng = iterationRng(settings.seed, i);
  const op = rng.pick(ops);
  const caller = rng.pick(['none', 'member', 'admin', 'superadmin'] as const);
  const path = op.path.replace(/\{(\w+)\}/g, (_m, name: string) => pathParam(rng, op.path, name, f)) + queryString(rng, op);
  const headers: Record<string, string> = {};
  const token = f.tokens[caller];
  if (token) headers.authorization = `Bearer ${token}`;
  let raw: string | undefined;
  if (op.method !== 'GET' && (op.body || rng.chance(0.15))) {
    raw = bodyText(rng, bodyFor(rng, op.body));
    if (rng.chance(0.05)) raw = raw.replace(/\d+(?=[,}\]])/, '1e400'); // a number JSON.parse turns into Infinity
    headers['content-type'] = rng.chance(0.9) ? 'application/json' : rng.pick(['text/plain', 'application/json; charset=utf-16', 'application/x-www-form-urlencoded', 'application/merge-patch+json']);
  }
  return { method: op.method, path, caller, headers, raw };
}

test('hostile JSON to every operation of the OpenAPI document never gets a 5xx, and every refusal is in the error shape', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const ops = await operationsOf(ts);
  assert.ok(ops.length >= 50, `the OpenAPI document lists every operation (got ${ops.length})`);
  let root = await signInSuperadmin(ts);
  let round = 0;
  let fixtures = await buildFixtures(ts, round, root);
  const statuses = new Map<number, number>();

  const first = settings.only ?? 0;
  const last = settings.only ?? settings.iterations - 1;
  for (let i = first; i <= last; i++) {
    if (i % 100 === 0 && i > first && !(await fixturesStand(ts, fixtures))) {
      // The fuzzer may have changed the superadmin's own email or signed it out (PATCH /me, /auth/logout-all).
      if ((await ts.http.get(`${API}/me`, root.token)).status !== 200) root = await signInSuperadmin(ts, `root${round + 1}@example.com`);
      fixtures = await buildFixtures(ts, ++round, root);
    }
    const req = requestOf(i, ops, fixtures);
    const res = await ts.http.request(req.method, req.path, { headers: req.headers, ...(req.raw !== undefined ? { raw: req.raw } : {}) });
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    const what = () =>
      `iteration ${i}: ${req.method} ${req.path.slice(0, 200)} as ${req.caller} -> ${res.status} ${JSON.stringify(res.body).slice(0, 300)}\n` +
      `body sent: ${(req.raw ?? '').slice(0, 300)}\n${replayHint(FILE, settings.seed, i)}`;
    assert.ok(res.status < 500, `a 5xx answer: ${what()}`);
    if (res.status >= 300) {
      assert.equal(typeof res.body?.error?.code, 'string', `not the error shape: ${what()}`);
      assert.match(res.body.error.code, /^[a-z_]+$/, what());
      assert.equal(typeof res.body.error.message, 'string', what());
      assert.deepEqual(Object.keys(res.body).filter((k) => k !== 'error'), [], `keys beside "error": ${what()}`);
    }
  }

  const unhandled = ts.logs.filter((line) => JSON.parse(line).level >= 50);
  assert.deepEqual(unhandled, [], `error-level log lines (seed ${settings.seed})`);
  const health = await ts.http.get('/healthz');
  assert.equal(health.status, 200);
  // A run that only ever met 401s and 404s would prove little: the fixtures must have let some through.
  const ok = [...statuses].filter(([s]) => s < 300).reduce((n, [, c]) => n + c, 0);
  if (settings.only === null) assert.ok(ok > settings.iterations / 50, `too few 2xx answers (${ok}): ${JSON.stringify([...statuses])}`);
  t.diagnostic(`seed ${settings.seed}, ${last - first + 1} requests over ${ops.length} operations, fixtures built ${round + 1}×; statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
});
