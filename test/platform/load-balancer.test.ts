import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import pg from 'pg';
import { postgresInstalled, startPostgres } from './postgres.ts';
import { durableFiles, startTestService, httpClient } from '../support/service.ts';
import { mosqueWithOwner, nextMessage, publish, registerTransmitter, statusPayload, subscribeCode, waitFor } from '../support/devices.ts';
import { baseEnv, ROOT, startProcess, listening, withTimeout } from '../support/process.ts';
import { freePort, redisInstalled, startRedis } from '../support/redis.ts';

// docs/operator.md, "Several hosts": nodes on one PostgreSQL and one Redis behind HAProxy with deploy/haproxy.cfg.
// A node killed with SIGKILL: its device reconnects through the balancer to the other node within its reconnect
// period, with its persistent session (its subscription) and its acknowledged status intact, and a broadcast
// started afterwards reaches it there.

const HAPROXY = '/usr/sbin/haproxy';
const skip = !postgresInstalled() ? 'PostgreSQL 15 or newer is not installed (.ci/run installs it)'
  : !redisInstalled() ? 'redis-server is not installed'
  : !fs.existsSync(HAPROXY) ? 'haproxy is not installed (.ci/run installs it)' : false;

test('a node killed with SIGKILL: its device reconnects through HAProxy to the other node with its session and its acknowledged status, and a broadcast reaches it there', { skip, timeout: 90_000 }, async (t) => {
  const cluster = await startPostgres();
  t.after(() => cluster.stop());
  const redis = await startRedis();
  t.after(() => redis.stop());
  const files = durableFiles(t, 'lb');
  const [aHttp, aMqtt, bHttp, bMqtt, lbHttp, lbMqtt, lbMqtts, nowhere] = await Promise.all(Array.from({ length: 8 }, () => freePort()));
  // One DATA_DIR for both nodes: the same lease key and Web Push keys, as the docs tell each node to have.
  const shared = { DATABASE_URL: await cluster.database(), REDIS_URL: redis.url, DATA_DIR: files.dir, DATABASE_PATH: files.env.DATABASE_PATH };

  // Node A, in this process (accounts and the device are made through it), then stopped for a while.
  const nodeA = { ...shared, HTTP_PORT: String(aHttp), MQTT_PORT: String(aMqtt) };
  const setup = await startTestService(t, { env: nodeA, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(setup);
  const tx = await registerTransmitter(setup, owner.token, mosque.id);
  await setup.service.close();

  // Node B, a process of its own (the one to kill), and the balancer in front of both.
  const nodeB = startProcess(t, baseEnv(files.dir, { ...shared, HTTP_PORT: String(bHttp), MQTT_PORT: String(bMqtt), LOG_LEVEL: 'info' }));
  await listening(nodeB).catch(() => assert.fail(`node B did not start: ${nodeB.stderr()}\n${nodeB.stdout()}`));
  const lbEnv = {
    ...process.env, MQTT_BIND: `127.0.0.1:${lbMqtt}`, MQTTS_BIND: `127.0.0.1:${lbMqtts}`, HTTP_BIND: `127.0.0.1:${lbHttp}`,
    NODE_A_MQTT: `127.0.0.1:${aMqtt}`, NODE_A_MQTTS: `127.0.0.1:${nowhere}`, NODE_A_HTTP: `127.0.0.1:${aHttp}`,
    NODE_B_MQTT: `127.0.0.1:${bMqtt}`, NODE_B_MQTTS: `127.0.0.1:${nowhere}`, NODE_B_HTTP: `127.0.0.1:${bHttp}`,
  };
  assert.equal(spawnSync(HAPROXY, ['-c', '-q', '-f', 'deploy/haproxy.cfg'], { cwd: ROOT, env: lbEnv }).status, 0, 'deploy/haproxy.cfg is valid');
  const lb = spawn(HAPROXY, ['-db', '-f', 'deploy/haproxy.cfg'], { cwd: ROOT, env: lbEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let lbOutput = '';
  for (const s of [lb.stdout, lb.stderr]) s.on('data', (c: Buffer) => (lbOutput += c.toString('utf8')));
  t.after(() => void lb.kill('SIGKILL'));
  const viaLb = httpClient(`http://127.0.0.1:${lbHttp}`);
  await waitFor('the balancer serves', async () => (await viaLb.get('/healthz').catch(() => ({ status: 0 }))).status === 200, 10_000)
    .catch((err: Error) => assert.fail(`${err.message}; haproxy said: ${lbOutput}`));

  // With A down, the device lands on B: a persistent session, a subscription, an acknowledged status.
  const device = mqtt.connect(`mqtt://127.0.0.1:${lbMqtt}`, {
    clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password,
    protocolVersion: 4, clean: false, reconnectPeriod: 500, connectTimeout: 3000,
  });
  t.after(() => new Promise<void>((resolve) => device.end(true, {}, () => resolve())));
  device.on('error', () => undefined);
  await withTimeout(new Promise((resolve) => device.once('connect', resolve)), 10_000, 'the device to connect through the balancer');
  assert.equal(await subscribeCode(device, `devices/${tx.device.id}/cmd`), 1);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE', { fw: 'before-the-kill/1' }), { qos: 1 });

  // A comes back; then B dies without a goodbye.
  const back = await startTestService(t, { env: nodeA, logLevel: 'warn' }); // node A again
  const reconnected = new Promise<mqtt.IConnackPacket>((resolve) => device.once('connect', resolve));
  const killedAt = Date.now();
  nodeB.child.kill('SIGKILL');
  const connack = await withTimeout(reconnected, 15_000, 'the device to reconnect through the balancer');
  const tookMs = Date.now() - killedAt;
  assert.ok(tookMs < 10_000, `reconnected after ${tookMs} ms`);
  assert.equal(connack.sessionPresent, true, 'its session waited in Redis');

  const client = new pg.Client(shared.DATABASE_URL);
  client.on('error', () => undefined); // a lost connection fails the query that needed it, not the whole file
  await client.connect();
  t.after(() => client.end());
  const [row] = (await client.query('SELECT fw FROM devices WHERE id = $1', [tx.device.id])).rows;
  assert.equal(row.fw, 'before-the-kill/1', 'the status B acknowledged is in PostgreSQL');

  // On A now: a status is acknowledged, and a broadcast started through the balancer reaches the device on its
  // restored subscription (it did not subscribe again).
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE', { fw: 'after-the-kill/1' }), { qos: 1 });
  await waitFor('A wrote it', async () => (await client.query('SELECT fw FROM devices WHERE id = $1', [tx.device.id])).rows[0].fw === 'after-the-kill/1', 3000);
  // The balancer's HTTP check (every 2 s, up after 2 passes) has taken A back in by now or within seconds.
  await waitFor('the balancer serves through A', async () => (await viaLb.get('/healthz').catch(() => ({ status: 0 }))).status === 200, 10_000)
    .catch(async (err: Error) => assert.fail(`${err.message}; A's own /healthz: ${JSON.stringify((await back.http.get('/healthz')).body)}; haproxy: ${lbOutput}`));
  const start = nextMessage(device, `devices/${tx.device.id}/cmd`, 5000, (m) => m.name === 'broadcast_start');
  const started = await viaLb.post(`/api/v1/mosques/${mosque.id}/broadcasts`, { kind: 'announcement' }, owner.token);
  assert.equal(started.status, 201, JSON.stringify(started.body));
  assert.equal((await start).body.name, 'broadcast_start');
});

