import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import pg from 'pg';
import { API, createMosque, joinMosque, member, signInSuperadmin } from '../support/people.ts';
import { durableFiles, httpClient, startTestService, TEST_JWT_SECRET, type TestService } from '../support/service.ts';
import { registerPlayer, waitFor } from '../support/devices.ts';
import { freshPostgresUrl } from '../support/database.ts';
import { baseEnv, listening, startProcess, withTimeout, type Run } from '../support/process.ts';
import { redisInstalled, startRedis } from '../support/redis.ts';
import { postgresInstalled } from '../platform/postgres.ts';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { ROLLOUT_TICK_MS } from '../../src/firmware/runner.ts';
import { cuttingHop, simPlayer, type SimPlayer } from './sim-fleet.ts';

// docs/api.md, "Firmware updates" on several hosts (docs/operator.md, "Several hosts"): the runner is a duty of the
// deployment, each ROLLOUT_TICK_MS period's tick claimed by one node in duty_runs (src/platform/store/duties.ts), and
// every move of an offer is one conditional write. Two service processes (`npm start`'s dist/src/main.js) on one
// PostgreSQL and one Redis. Node A takes the rollout and offers its first devices; then it dies with SIGKILL while
// the rollout is under way; node B's ticks finish what A offered and offer the rest, to done. Each simulated player
// counts, on its own side of the wire, the update commands it got: one each.

const skip = !postgresInstalled() ? 'PostgreSQL 15 or newer is not installed (.ci/run installs it)' : !redisInstalled() ? 'redis-server is not installed' : false;
const DUTY = 'firmware rollouts';
const PLAYERS = 6;
const MINUTE = 60_000;
const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);

/** Resolves when `promise` settles or after `ms`, whichever is first, never rejecting: a clean-up step that cannot hang. */
const bounded = (promise: Promise<unknown> | undefined, ms: number, what: string) =>
  withTimeout(Promise.resolve(promise), ms, what).catch(() => undefined);

test('a node killed mid-rollout on PostgreSQL: the rollout goes on from the other node to done, and no device is asked twice', { skip, timeout: 120_000 }, async (t) => {
  // This file's own cluster (test/support/database.ts), stopped at its root after every test's hooks.
  const began = Date.now();
  const at = (what: string) => t.diagnostic(`${what}: ${((Date.now() - began) / 1000).toFixed(1)} s`);
  const databaseUrl = await freshPostgresUrl();
  const redis = await startRedis();
  let setup: TestService | null = null;
  let db: pg.Client | null = null;
  const runs: Run[] = [];
  const players: SimPlayer[] = [];
  // The whole end in one hook, registered first so it runs first (node:test runs after-hooks in the order
  // registered): the players' goodbyes while a broker still takes them, every node killed, this side's connection,
  // then Redis; each step bounded, so a failure anywhere never hangs the end. The helpers' own hooks after it
  // find their parts stopped already.
  t.after(async () => {
    await bounded(Promise.all(players.map((p) => p.device.stop({ graceful: true }))), 3000, 'the players to stop');
    await bounded(setup?.service.close(), 10_000, 'the setup service to close');
    for (const run of runs) if (run.child.exitCode === null && run.child.signalCode === null) run.child.kill('SIGKILL');
    await bounded(Promise.all(runs.map((run) => run.exited)), 5000, 'the nodes to exit');
    await bounded(db?.end(), 3000, 'the test connection to end');
    redis.stop();
  });
  const files = durableFiles(t, 'fw-node-killed');
  const keys = newKeyPair();
  const shared = { DATABASE_URL: databaseUrl, REDIS_URL: redis.url, DATA_DIR: files.dir, DATABASE_PATH: files.env.DATABASE_PATH, FIRMWARE_PUBLIC_KEY: keys.publicRaw };

  // Accounts, a mosque whose azaans are hours away (its window open throughout), the players and the image, made
  // through a service in this process on the same stores, then stopped.
  setup = await startTestService(t, { env: shared, logLevel: 'warn' });
  const root = await signInSuperadmin(setup);
  const person = await member(setup, 'owner@fw-killed.test');
  const mosque = await createMosque(setup, root.token, null, { auto_approve_members: true });
  const now = Date.now();
  const azaan = Object.fromEntries(['fajr', 'dhuhr', 'asr', 'maghrib', 'isha'].map((p, i) => [p, { fixed: hhmm(now + (3 + i) * 60 * MINUTE) }]));
  const placed = await setup.http.patch(`${API}/mosques/${mosque.id}`, { timezone: 'UTC', latitude: 21.42, longitude: 39.83, prayer_times: { method: 'umm_al_qura', madhab: 'shafi' }, azaan }, root.token);
  assert.equal(placed.status, 200, JSON.stringify(placed.body));
  await joinMosque(setup, person, mosque.id);
  const registered = [];
  for (let i = 0; i < PLAYERS; i++) registered.push(await registerPlayer(setup, person, mosque.id, `room ${i}`));
  const bytes = crypto.randomBytes(200_000);
  const image = await setup.http.request('PUT', `${API}/firmware/images/stream_player/sp-rev-b/1.1.0`, {
    token: root.token, raw: bytes, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signDigest(keys.privatePem, digestOf(bytes).raw) },
  });
  assert.equal(image.status, 201, JSON.stringify(image.body));
  await setup.service.close();
  at('the world made');

  db = new pg.Client(databaseUrl);
  db.on('error', () => undefined); // a lost connection fails the query that needed it, not the whole file
  await db.connect();
  const rows = async <R>(text: string, values: unknown[]) => (await db!.query(text, values)).rows as R[];
  const claims = () => rows<{ period: string; node: string; done: number }>('SELECT period, node, done FROM duty_runs WHERE duty = $1 ORDER BY period', [DUTY]);

  // A's offers name a download address of their own (PUBLIC_URL, where a deployment's balancer would be): an HTTP
  // hop that passes every request on to B, as a balancer does once A is gone. So each update command says which
  // node sent it, and its download outlives A. B's offers name B's own address.
  const hop = await cuttingHop(t, Number.MAX_SAFE_INTEGER);
  const env = (extra: Record<string, string>) => baseEnv(files.dir, { ...shared, JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'info', ...extra });
  const nodeA = startProcess(t, env({ PUBLIC_URL: hop.url }));
  const nodeB = startProcess(t, env({}));
  runs.push(nodeA, nodeB);
  const [portsA, portsB] = await Promise.all([nodeA, nodeB].map((run, i) =>
    listening(run).catch((err: Error) => assert.fail(`node ${'AB'[i]} did not start (${err.message}): ${run.stderr()}\n${run.stdout().slice(-2000)}`))));
  const a = httpClient(`http://127.0.0.1:${portsA!.http_port}`);
  const originB = `http://127.0.0.1:${portsB!.http_port}`;
  const b = httpClient(originB);
  hop.forwardTo(originB);
  at('both nodes listen');

  // Every player on B (the node that lives), on 1.0.0, its hw_rev learned through get_state.
  for (const reg of registered) {
    players.push(await simPlayer(t, reg.credentials, { key: keys.publicRaw, mqttUrl: `mqtt://127.0.0.1:${portsB!.mqtt_port}` }));
    const asked = await b.post(`${API}/devices/${reg.device.id}/commands`, { name: 'get_state' }, person.token);
    assert.equal(asked.status, 200, JSON.stringify(asked.body));
  }
  await waitFor('every player targetable (its hw_rev and fw written)', async () =>
    (await rows('SELECT id FROM devices WHERE hw_rev = $1 AND fw = $2', ['sp-rev-b', '1.0.0'])).length === PLAYERS, 15_000);

  at('the players connected');
  // Made through A: its own tick (the request's) offers the first two at once; two at a time, the rollout spans
  // several of the deployment's ticks.
  const made = await a.post(`${API}/firmware/rollouts`, { image_id: image.body.id, groups: [{ percent: 100 }], max_concurrent: 2, timeout_s: 60 }, root.token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(made.body.groups[0].size, PLAYERS, JSON.stringify(made.body.groups));
  const fromA = (p: SimPlayer) => p.updateUrls.some((u) => u.startsWith(hop.url));
  const asked = () => players.filter((p) => p.updates > 0).length;
  const offers = () => rows<{ device_id: string; state: string }>('SELECT device_id, state FROM firmware_offers WHERE rollout_id = $1', [made.body.id]);

  // A has offered a first round (max_concurrent), each offer written has reached its device (so none is left
  // written but unsent), and devices are still waiting: A dies now, without a goodbye.
  await waitFor('A offered its first devices and each got the command', async () => {
    const written = (await offers()).filter((o) => o.state !== 'waiting').length;
    return players.some(fromA) && written === asked() && asked() >= 2 && asked() < PLAYERS;
  }, 20_000);
  const killedAt = Date.now();
  nodeA.child.kill('SIGKILL');
  assert.equal((await nodeA.exited).signal, 'SIGKILL');
  at(`A killed, ${asked()} of ${PLAYERS} asked`);
  const byA = players.filter(fromA).map((p) => p.id);
  const atKill = await offers();
  assert.ok(atKill.some((o) => o.state === 'waiting') && atKill.some((o) => o.state === 'offered' || o.state === 'updating'),
    `killed mid-rollout, with offers of its own open: ${JSON.stringify(atKill)}`);

  const done = await waitFor('the rollout done from B', async () => {
    const r = (await b.get(`${API}/firmware/rollouts/${made.body.id}`, root.token)).body;
    return r.status === 'done' || r.status === 'paused_by_errors' ? r : null;
  }, 60_000);
  at(`the rollout ${done.status}`);
  assert.equal(done.status, 'done', JSON.stringify({ rollout: done, offers: await rows('SELECT device_id, state, error FROM firmware_offers WHERE rollout_id = $1', [made.body.id]) }));
  assert.equal(done.groups[0].succeeded, PLAYERS, JSON.stringify(done.groups));
  for (const p of players) {
    assert.equal(p.updates, 1, `${p.id} was sent update exactly once: ${JSON.stringify(p.updateUrls)}`);
    assert.equal(p.device.fw, '1.1.0');
    // What A offered, B saw through to succeeded; every other device B offered itself.
    assert.ok(byA.includes(p.id) || p.updateUrls[0]!.startsWith(originB), `${p.id} offered by B after A died: ${p.updateUrls[0]}`);
  }
  assert.ok(byA.length > 0 && byA.length < PLAYERS, `A offered ${byA.length} of ${PLAYERS}`);
  // The deployment's periodic duty went on after the kill: each period since claimed by the live node and finished.
  const after = (await claims()).filter((c) => Number(c.period) * ROLLOUT_TICK_MS > killedAt);
  assert.ok(after.some((c) => Number(c.done) === 1), `ticks ran after the kill: ${JSON.stringify(after)}`);
  assert.equal(new Set(after.map((c) => c.node)).size, 1, `one node ran them: ${JSON.stringify(after)}`);
});
