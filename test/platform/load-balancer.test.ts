import { test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import pg from 'pg';
import { startBalancer } from './balancer.ts';
import { backend, deploymentSkip, nodeEnv, startDeployment } from './deployment.ts';
import { startTestService, httpClient } from '../support/service.ts';
import { mosqueWithOwner, nextMessage, publish, registerTransmitter, statusPayload, subscribeCode, waitFor } from '../support/devices.ts';
import { listening, withTimeout } from '../support/process.ts';

// docs/operator.md, "Several hosts": nodes on one PostgreSQL and one Redis behind HAProxy with deploy/haproxy.cfg,
// each node a host of its own (a network namespace, test/platform/hosts.ts) reaching PostgreSQL, Redis and the
// balancer over the network. A node killed with SIGKILL: its device reconnects through the balancer to the other
// node within its reconnect period, with its persistent session (its subscription) and its acknowledged status
// intact, and a broadcast started afterwards reaches it there.

const skip = deploymentSkip();

test('a node killed with SIGKILL: its device reconnects through HAProxy to the other node with its session and its acknowledged status, and a broadcast reaches it there', { skip, timeout: 90_000 }, async (t) => {
  const { hosts: [hostA, hostB], files, shared, localDatabaseUrl } = await startDeployment(t, 'lb');

  // Accounts and the device, made through a service in this process on the same PostgreSQL and Redis, then stopped.
  const setup = await startTestService(t, { env: shared, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(setup);
  const tx = await registerTransmitter(setup, owner.token, mosque.id);
  await setup.service.close();

  // Node B on its host (the one to kill), and the balancer in front of both while A is still down.
  const nodeB = hostB.start(nodeEnv(hostB, files.dir, shared));
  await listening(nodeB).catch(() => assert.fail(`node B did not start: ${nodeB.stderr()}\n${nodeB.stdout()}`));
  const lb = await startBalancer(t, backend(hostA), backend(hostB));

  // With A down, the device lands on B: a persistent session, a subscription, an acknowledged status.
  const device = mqtt.connect(lb.mqttUrl, {
    clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password,
    protocolVersion: 4, clean: false, reconnectPeriod: 500, connectTimeout: 3000,
  });
  t.after(() => new Promise<void>((resolve) => device.end(true, {}, () => resolve())));
  device.on('error', () => undefined);
  await withTimeout(new Promise((resolve) => device.once('connect', resolve)), 10_000, 'the device to connect through the balancer');
  assert.equal(await subscribeCode(device, `devices/${tx.device.id}/cmd`), 1);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE', { fw: 'before-the-kill/1' }), { qos: 1 });

  // A comes up on its host; then B dies without a goodbye.
  const nodeA = hostA.start(nodeEnv(hostA, files.dir, shared));
  await listening(nodeA).catch(() => assert.fail(`node A did not start: ${nodeA.stderr()}\n${nodeA.stdout()}`));
  const reconnected = new Promise<mqtt.IConnackPacket>((resolve) => device.once('connect', resolve));
  const killedAt = Date.now();
  nodeB.child.kill('SIGKILL');
  const connack = await withTimeout(reconnected, 15_000, 'the device to reconnect through the balancer');
  const tookMs = Date.now() - killedAt;
  assert.ok(tookMs < 10_000, `reconnected after ${tookMs} ms`);
  assert.equal(connack.sessionPresent, true, 'its session waited in Redis');
  assert.equal((await nodeB.exited).signal, 'SIGKILL');

  const client = new pg.Client(localDatabaseUrl); // this side's own way in: the bridge goes first at the end
  client.on('error', () => undefined); // a lost connection fails the query that needed it, not the whole file
  await client.connect();
  t.after(() => client.end());
  const [row] = (await client.query('SELECT fw FROM devices WHERE id = $1', [tx.device.id])).rows;
  assert.equal(row.fw, 'before-the-kill/1', 'the status B acknowledged is in PostgreSQL');

  // On A now: a status is acknowledged, and a broadcast started through the balancer reaches the device on its
  // restored subscription (it did not subscribe again).
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE', { fw: 'after-the-kill/1' }), { qos: 1 });
  await waitFor('A wrote it', async () => (await client.query('SELECT fw FROM devices WHERE id = $1', [tx.device.id])).rows[0].fw === 'after-the-kill/1', 5000);
  // The balancer's HTTP check (every 2 s, up after 2 passes) has taken A back in by now or within seconds.
  const nodeAHttp = httpClient(`http://${hostA.address}:8080`);
  await waitFor('the balancer serves through A', async () => (await lb.http.get('/healthz').catch(() => ({ status: 0 }))).status === 200, 10_000)
    .catch(async (err: Error) => assert.fail(`${err.message}; A's own /healthz: ${JSON.stringify((await nodeAHttp.get('/healthz')).body)}; haproxy: ${lb.output()}`));
  const start = nextMessage(device, `devices/${tx.device.id}/cmd`, 5000, (m) => m.name === 'broadcast_start');
  const started = await lb.http.post(`/api/v1/mosques/${mosque.id}/broadcasts`, { kind: 'announcement' }, owner.token);
  assert.equal(started.status, 201, JSON.stringify(started.body));
  assert.equal((await start).body.name, 'broadcast_start');
});

// docs/operator.md, "Health": the audio server is an optional part. With Icecast down on every node, /healthz names it
// with 200, so HAProxy (deploy/haproxy.cfg checks /healthz every 2 s, out after 2 failures) keeps both nodes in and
// the API works through it; before, every node answered 503 and the balancer served nothing at all.
test('with Icecast down, both nodes stay in HAProxy and the API answers through it, /healthz naming audio down', { skip, timeout: 90_000 }, async (t) => {
  const { hosts: [hostA, hostB], files, shared } = await startDeployment(t, 'lb-audio');
  // Nothing listens on port 9 of the nodes' own loopback: the admin API never answers.
  const audio = { ICECAST_URL: 'http://127.0.0.1:9', ICECAST_ADMIN_PASSWORD: 'a-long-admin-password', ICECAST_HOOK_SECRET: 'h'.repeat(40) };
  const nodes = [hostA, hostB].map((host) => host.start(nodeEnv(host, files.dir, { ...shared, ...audio })));
  for (const [i, node] of nodes.entries()) await listening(node).catch(() => assert.fail(`node ${i} did not start: ${node.stderr()}\n${node.stdout()}`));
  const lb = await startBalancer(t, backend(hostA), backend(hostB));
  for (const host of [hostA, hostB]) {
    const own = httpClient(`http://${host.address}:8080`);
    await waitFor(`${host.address} names audio down`, async () => (await own.get('/healthz')).body.audio === 'down', 10_000);
    const health = await own.get('/healthz');
    assert.equal(health.status, 200);
    assert.deepEqual(health.body, { status: 'degraded', db: 'ok', broker: 'ok', audio: 'down' });
  }
  // Past HAProxy's fall (2 checks 2 s apart): still in, and each request through it is served.
  await new Promise((resolve) => setTimeout(resolve, 5000));
  for (let i = 0; i < 6; i++) {
    assert.equal((await lb.http.get('/healthz')).status, 200, lb.output());
    const spec = await lb.http.get('/api/v1/openapi.json');
    assert.equal(spec.status, 200, 'the API answers through the balancer');
  }
  // (The MQTTS backend is down here: these nodes have no MQTTS_PORT.)
  assert.doesNotMatch(lb.output(), /Server (http|mqtt)_nodes\/\w+ is DOWN/, 'HAProxy took no node out of HTTP or MQTT');
});
