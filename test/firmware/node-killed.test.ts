import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import pg from 'pg';
import { API, createMosque, joinMosque, member, signInSuperadmin } from '../support/people.ts';
import { durableFiles, httpClient, startTestService, TEST_JWT_SECRET } from '../support/service.ts';
import { registerPlayer, waitFor } from '../support/devices.ts';
import { baseEnv, listening, startProcess } from '../support/process.ts';
import { redisInstalled, startRedis } from '../support/redis.ts';
import { postgresInstalled, startPostgres } from '../platform/postgres.ts';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { simPlayer, type SimPlayer } from './sim-fleet.ts';

// docs/api.md, "Firmware updates" on several hosts (docs/operator.md, "Several hosts"): the runner is a duty of the
// deployment, each 5 s tick claimed by one node in duty_runs. Two service processes on one PostgreSQL and one Redis;
// the node that ran the rollout's latest tick dies with SIGKILL mid-way; the other goes on to done, and each device,
// counting on its own side, was sent `update` once (an offer is written before its command, in one conditional move).

const skip = !postgresInstalled() ? 'PostgreSQL 15 or newer is not installed (.ci/run installs it)' : !redisInstalled() ? 'redis-server is not installed' : false;
const DUTY = 'firmware rollouts';
const PLAYERS = 6;

test('a node killed mid-rollout on PostgreSQL: the rollout goes on from the other node to done, and no device is asked twice', { skip, timeout: 300_000 }, async (t) => {
  const cluster = await startPostgres();
  t.after(() => cluster.stop());
  const redis = await startRedis();
  t.after(() => redis.stop());
  const files = durableFiles(t, 'fw-node-killed');
  const keys = newKeyPair();
  const shared = { DATABASE_URL: await cluster.database(), REDIS_URL: redis.url, DATA_DIR: files.dir, DATABASE_PATH: files.env.DATABASE_PATH, FIRMWARE_PUBLIC_KEY: keys.publicRaw };

  // Accounts, the players and the image, made through a service in this process on the same stores, then stopped.
  const setup = await startTestService(t, { env: shared, logLevel: 'warn' });
  const root = await signInSuperadmin(setup);
  const person = await member(setup, 'owner@fw-killed.test');
  const mosque = await createMosque(setup, root.token, null, { auto_approve_members: true });
  await joinMosque(setup, person, mosque.id);
  const registered = [];
  for (let i = 0; i < PLAYERS; i++) registered.push(await registerPlayer(setup, person, mosque.id, `room ${i}`));
  const bytes = crypto.randomBytes(200_000);
  const image = await setup.http.request('PUT', `${API}/firmware/images/stream_player/sp-rev-b/1.1.0`, {
    token: root.token, raw: bytes, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signDigest(keys.privatePem, digestOf(bytes).raw) },
  });
  assert.equal(image.status, 201, JSON.stringify(image.body));
  await setup.service.close();

  const db = new pg.Client(shared.DATABASE_URL);
  db.on('error', () => undefined);
  await db.connect();
  t.after(() => Promise.race([db.end().catch(() => undefined), new Promise((r) => setTimeout(r, 3000))]));
  const claims = async () => (await db.query('SELECT period, node, done FROM duty_runs WHERE duty = $1 ORDER BY period', [DUTY])).rows as Array<{ period: number; node: string; done: number }>;
  const env = (dir: string) => baseEnv(dir, { ...shared, JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'warn' });

  // A alone first: the claims it makes name its node, so the test knows which rows are A's.
  const nodeA = startProcess(t, env(files.dir));
  await listening(nodeA).catch(() => assert.fail(`node A did not start: ${nodeA.stderr()}`));
  const nodeOfA = (await waitFor('A claims a tick', async () => (await claims()).at(-1)?.node, 20_000))!;
  const nodeB = startProcess(t, env(files.dir));
  const portsB = await listening(nodeB).catch(() => assert.fail(`node B did not start: ${nodeB.stderr()}`));
  const b = httpClient(`http://127.0.0.1:${portsB.http_port}`);

  // Every player on B (the node that lives), its hw_rev learned through get_state.
  const players: SimPlayer[] = [];
  for (const reg of registered) {
    players.push(await simPlayer(t, reg.credentials, { key: keys.publicRaw, mqttUrl: `mqtt://127.0.0.1:${portsB.mqtt_port}` }));
    const asked = await b.post(`${API}/devices/${reg.device.id}/commands`, { name: 'get_state' }, person.token);
    assert.equal(asked.status, 200, JSON.stringify(asked.body));
  }

  // One device at a time: the rollout spans several ticks, and both nodes take some of them.
  const made = await b.post(`${API}/firmware/rollouts`, { image_id: image.body.id, groups: [{ percent: 100 }], max_concurrent: 1, timeout_s: 60 }, root.token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const since = Math.floor(Date.now() / 5000);
  const offered = () => players.filter((p) => p.updates > 0).length;
  // A runs a tick of the rollout while it is under way: then it dies, without a goodbye.
  const killedIn = await waitFor('A runs a tick mid-rollout', async () => {
    const mine = (await claims()).filter((c) => c.node === nodeOfA && c.period >= since);
    return mine.length > 0 && offered() >= 1 && offered() < PLAYERS - 1 ? mine.at(-1)!.period : null;
  }, 150_000);
  nodeA.child.kill('SIGKILL');
  assert.equal((await nodeA.exited).signal, 'SIGKILL');
  const atKill = offered();

  const done = await waitFor('the rollout done from B', async () => {
    const r = (await b.get(`${API}/firmware/rollouts/${made.body.id}`, root.token)).body;
    return r.status === 'done' ? r : null;
  }, 200_000);
  assert.ok(atKill < PLAYERS, `killed mid-way (${atKill} of ${PLAYERS} offered)`);
  assert.equal(done.groups[0].succeeded, PLAYERS, JSON.stringify(done.groups));
  for (const p of players) {
    assert.equal(p.updates, 1, `${p.id} was sent update exactly once`);
    assert.equal(p.device.fw, '1.1.0');
  }
  const after = (await claims()).filter((c) => c.period > killedIn);
  assert.ok(after.length > 0 && after.every((c) => c.node !== nodeOfA), 'every tick after the kill ran on B');
});
