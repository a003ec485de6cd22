import { test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import pg from 'pg';
import type { Host } from './hosts.ts';
import { startBalancer } from './balancer.ts';
import { backend, deploymentSkip, nodeEnv, startDeployment } from './deployment.ts';
import { startTestService, httpClient } from '../support/service.ts';
import { mosqueWithOwner, publish, registerTransmitter, settle, statusPayload, subscribeCode, waitFor } from '../support/devices.ts';
import { ensureBuilt, listening, withTimeout } from '../support/process.ts';

// docs/operator.md, "Several hosts": two nodes on PostgreSQL and Redis behind HAProxy, each a host of its own
// (test/platform/hosts.ts). One is cut off from the network (its link down: every packet dropped, nothing
// refused) shortly before a mosque's azaan with auto_start, while its transmitter is connected to it. Its device
// goes through the balancer to the other node; the other node starts the azaan (the duty claimed per slot in
// PostgreSQL, src/schedule/schedule-store.ts); the cut-off node, whose queries hang until the link is back, does
// not crash, and once restored serves again without starting that azaan a second time.

const skip = deploymentSkip();

/**
 * From the clock's reading to the azaan: the nodes' start, the balancer, the device and the cut (about 10 s here).
 * Prayer times are whole minutes, so the nodes' clocks (and the setup service's) run shifted by under half a
 * minute, the same for all, to put a minute's start this far ahead instead of waiting up to a minute for the
 * next one. A setup slower than that (a loaded machine) takes the next minute instead: the azaan is set once
 * the device is placed.
 */
const BEFORE_AZAAN_MS = 30_000;
/** Cut this long before the azaan: the balancer marks the node down in about 2 s and the device reconnects every 0.5 s. */
const CUT_BEFORE_MS = 10_000;
/** Restored this long after the azaan: past the second start event (the takeover, AUTO_START_CLAIM_S after it). */
const RESTORE_AFTER_MS = 18_000;

/** node's Date.now shifted (src/platform/clock.ts reads the time through it alone), loaded before the service. */
const shiftedClock = (offsetMs: number) =>
  `data:text/javascript,${encodeURIComponent(`const now = Date.now; Date.now = () => now() + ${offsetMs};`)}`;

const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
const HOUR = 3_600_000;


/** True while the host has an MQTT connection open for longer than HAProxy's health checks keep theirs (5 looks over 0.4 s). */
async function holdsAConnection(host: Host): Promise<boolean> {
  for (let i = 0; i < 5; i++) {
    if (host.exec('ss', ['-Htn', 'state', 'established', '( sport = :1883 )']).trim() === '') return false;
    await settle(100);
  }
  return true;
}

test('a node cut off from the network: its device reconnects to the other node, which starts the azaan once; the cut-off one does not crash and rejoins without starting it again', { skip, timeout: 150_000 }, async (t) => {
  const { hosts, files, shared, localDatabaseUrl } = await startDeployment(t, 'partition');
  const db = new pg.Client(localDatabaseUrl); // this side's own way in: the bridge goes first at the end
  db.on('error', () => undefined);
  await db.connect();
  t.after(() => db.end());
  const rows = async (text: string, values: unknown[]) => (await db.query(text, values)).rows;

  const began = Date.now();
  const at = (what: string) => t.diagnostic(`${what}: ${((Date.now() - began) / 1000).toFixed(1)} s`);
  const wanted = Date.now() + BEFORE_AZAAN_MS;
  const minute = Math.round(wanted / 60_000) * 60_000;
  const offset = minute - wanted;
  const clock = () => Date.now() + offset;

  // A mosque (UTC) with auto_start, its azaans hours away for now: Fajr's is moved near once the device is placed.
  const setup = await startTestService(t, { env: shared, logLevel: 'warn', clock });
  const fixed = (hours: number) => ({ fixed: hhmm(minute + hours * HOUR) });
  const { owner, mosque } = await mosqueWithOwner(setup, {
    timezone: 'UTC', latitude: 21.4225, longitude: 39.8262, prayer_times: { method: 'umm_al_qura', madhab: 'shafi' }, auto_start: true,
    azaan: { fajr: fixed(3), dhuhr: fixed(7), asr: fixed(11), maghrib: fixed(15), isha: fixed(19) },
  });
  const tx = await registerTransmitter(setup, owner.token, mosque.id);
  await setup.service.close();

  ensureBuilt();
  const runs = hosts.map((host) => host.start(nodeEnv(host, files.dir, shared), ['--import', shiftedClock(offset), 'dist/src/main.js']));
  await Promise.all(runs.map((run, i) => listening(run).catch(() => assert.fail(`node ${i} did not start: ${run.stderr()}\n${run.stdout()}`))));
  const lb = await startBalancer(t, backend(hosts[0]!), backend(hosts[1]!));

  const device = mqtt.connect(lb.mqttUrl, {
    clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password,
    protocolVersion: 4, clean: false, reconnectPeriod: 500, connectTimeout: 3000, keepalive: 5,
  });
  t.after(() => new Promise<void>((resolve) => device.end(true, {}, () => resolve())));
  device.on('error', () => undefined);
  const commands: Array<Record<string, any>> = [];
  device.on('message', (topic, payload) => {
    if (topic === `devices/${tx.device.id}/cmd`) commands.push(JSON.parse(payload.toString('utf8')) as Record<string, any>);
  });
  await withTimeout(new Promise((resolve) => device.once('connect', resolve)), 10_000, 'the device to connect through the balancer');
  assert.equal(await subscribeCode(device, `devices/${tx.device.id}/cmd`), 1);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1 });

  // The node that holds the device is the one cut off.
  const held = await waitFor('a node to hold the device', async () => {
    for (const [i, host] of hosts.entries()) if (await holdsAConnection(host)) return { i };
    return null;
  }, 10_000);
  const [cut, live] = held.i === 0 ? [hosts[0]!, hosts[1]!] : [hosts[1]!, hosts[0]!];
  const cutRun = runs[held.i]!;
  // Fajr at the first minute's start far enough ahead for the cut (a schedule change reaches the other node's
  // scheduler through the change feed).
  const azaanAt = minute + 60_000 * Math.max(0, Math.ceil((clock() + CUT_BEFORE_MS + 5000 - minute) / 60_000));
  at(`the device placed; the azaan ${((azaanAt - clock()) / 1000).toFixed(1)} s ahead`);
  const moved = await lb.http.patch(`/api/v1/mosques/${mosque.id}`, { azaan: { fajr: { fixed: hhmm(azaanAt) } } }, owner.token);
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  await settle(Math.max(0, azaanAt - CUT_BEFORE_MS - clock()));

  const reconnected = new Promise<mqtt.IConnackPacket>((resolve) => device.once('connect', resolve));
  cut.cut();
  at('cut');
  const connack = await withTimeout(reconnected, 20_000, 'the device to reconnect through the balancer');
  assert.equal(connack.sessionPresent, true, 'its session waited in Redis');
  await waitFor('the live node holds the device', () => holdsAConnection(live), 10_000);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE', { fw: 'on-the-live-node/1' }), { qos: 1 });
  assert.equal((await rows('SELECT fw FROM devices WHERE id = $1', [tx.device.id]))[0].fw, 'on-the-live-node/1', 'acknowledged by the live node: in PostgreSQL');

  // The azaan: started by the live node (at its time, or at the takeover AUTO_START_CLAIM_S later).
  const start = await waitFor('the azaan started by the live node', () => commands.find((c) => c.name === 'broadcast_start'),
    azaanAt + 15_000 + 15_000 - clock());
  at(`the azaan started, ${((clock() - azaanAt) / 1000).toFixed(1)} s after its time`);
  const broadcasts = await rows('SELECT id, kind, prayer FROM broadcasts WHERE mosque_id = $1', [mosque.id]);
  assert.deepEqual(broadcasts.map((b) => [b.kind, b.prayer]), [['azaan', 'fajr']]);
  assert.ok(JSON.stringify(start).includes(broadcasts[0].id), JSON.stringify(start));
  const [slot] = await rows('SELECT status, auto_started, broadcast_id FROM schedule_slots WHERE mosque_id = $1', [mosque.id]);
  assert.deepEqual([slot.status, Number(slot.auto_started), slot.broadcast_id], ['live', 1, broadcasts[0].id]);
  assert.equal(cutRun.child.exitCode, null, `the cut-off node is still running: ${cutRun.stderr()}`);

  // Both of the cut-off node's start events (the azaan's time and the takeover's) fall while it is cut off.
  await settle(Math.max(0, azaanAt + RESTORE_AFTER_MS - clock()));
  assert.equal(cutRun.child.exitCode, null, `the cut-off node is still running: ${cutRun.stderr()}`);
  cut.restore();
  at('restored');

  // It rejoins: healthy, and serving from PostgreSQL (its connections resume when TCP retransmits, which backs
  // off while the link is down: seconds to tens of seconds after the restore).
  const cutHttp = httpClient(`http://${cut.address}:8080`);
  await waitFor('the rejoined node is healthy', async () => (await cutHttp.get('/healthz').catch(() => ({ status: 0 }))).status === 200, 45_000);
  await waitFor('the rejoined node serves from PostgreSQL', async () => {
    const res = await cutHttp.get(`/api/v1/mosques/${mosque.id}/broadcasts`, owner.token).catch(() => ({ status: 0, body: null }));
    return res.status === 200 && res.body.length === 1;
  }, 45_000);
  at('the rejoined node serves');
  // Its device connection from before the cut is gone (keepalive 5 s), and that end did not mark the device, now
  // on the live node, offline.
  await waitFor('the rejoined node dropped its stale connection', async () => !(await holdsAConnection(cut)), 30_000);
  // The azaan stopped and an announcement started, both through the rejoined node: its commands reach the
  // device on the live node (through Redis).
  const stopped = await cutHttp.post(`/api/v1/mosques/${mosque.id}/broadcasts/${broadcasts[0].id}/stop`, undefined, owner.token);
  assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
  const announced = await cutHttp.post(`/api/v1/mosques/${mosque.id}/broadcasts`, { kind: 'announcement' }, owner.token);
  assert.equal(announced.status, 201, JSON.stringify(announced.body));
  await waitFor('the announcement reaches the device', () => commands.some((c) => c.name === 'broadcast_start' && JSON.stringify(c).includes(announced.body.id)), 30_000);

  at('the announcement reached the device');
  await settle(2000); // a late start of the azaan by the rejoined node would be in by now
  assert.equal(cutRun.child.exitCode, null, `the rejoined node is still running: ${cutRun.stderr()}`);
  assert.deepEqual((await rows('SELECT kind FROM broadcasts WHERE mosque_id = $1 ORDER BY started_at', [mosque.id])).map((b) => b.kind), ['azaan', 'announcement'],
    'the azaan was started once, by one node');
  assert.equal(commands.filter((c) => c.name === 'broadcast_start').length, 2, JSON.stringify(commands));
  const [row] = await rows('SELECT status FROM devices WHERE id = $1', [tx.device.id]);
  assert.equal(row.status, 'ONLINE', 'the device stays online on the live node');
});
