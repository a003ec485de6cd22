import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import WebSocket from 'ws';
import { API, joinMosque, member, setStatus } from '../../support/people.ts';
import {
  connectDevice, mosqueWithOwner, publish, registerPlayer, registerTransmitter, statusPayload, waitForStatus, wsUrlOf, type Registered,
} from '../../support/devices.ts';
import { startTestService, type TestService } from '../../support/service.ts';
import { fuzzSettings, iterationRng, mutatePacket, randomPacket, replayHint, type MqttTargets, type Rng } from '../../support/fuzz.ts';

// SECURITY.md, "Tested from outside": thousands of random and mutated MQTT packets, anonymous (raw TCP and WebSocket) and
// signed in as devices, in bounded batches. Afterwards the service still answers /healthz, a device the
// fuzzer never touched still connects and its status lands, and nothing was logged at error level.

const FILE = 'test/hostile/mqtt/fuzz.test.ts';
const settings = fuzzSettings(3000);
const BATCH = 100;
/** Anonymous connections open at once: far below any per-address handshake cap. */
const ANON_PARALLEL = 8;
/** How long a hostile connection is given to be answered or closed before the fuzzer drops it. */
const LINGER_MS = 150;

type Lane = 'anon-tcp' | 'anon-ws' | 'transmitter' | 'player';

interface Target {
  reg: Registered;
  targets: MqttTargets;
}

/** A raw connection: TCP socket or WebSocket, written byte for byte, with a promise of its close. */
interface RawConn {
  write(b: Buffer): void;
  closed: Promise<void>;
  isClosed(): boolean;
  /** Everything the broker sent back so far. */
  received(): Buffer;
  destroy(): void;
}

function openTcp(port: number): Promise<RawConn> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    let done = false;
    const closed = new Promise<void>((r) => socket.once('close', () => ((done = true), r())));
    socket.on('data', (d) => chunks.push(d));
    socket.on('error', () => undefined);
    const conn: RawConn = {
      write: (b) => void (!done && socket.writable && socket.write(b)),
      closed,
      isClosed: () => done,
      received: () => Buffer.concat(chunks),
      destroy: () => socket.destroy(),
    };
    socket.once('connect', () => resolve(conn));
    socket.once('close', () => resolve(conn));
  });
}

function openWs(url: string): Promise<RawConn> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, 'mqtt');
    const chunks: Buffer[] = [];
    let done = false;
    const closed = new Promise<void>((r) => ws.once('close', () => ((done = true), r())));
    ws.on('message', (d) => chunks.push(Buffer.isBuffer(d) ? d : Buffer.from(d as ArrayBuffer)));
    ws.on('error', () => undefined);
    const conn: RawConn = {
      write: (b) => void (!done && ws.readyState === WebSocket.OPEN && ws.send(b)),
      closed,
      isClosed: () => done,
      received: () => Buffer.concat(chunks),
      destroy: () => ws.terminate(),
    };
    ws.once('open', () => resolve(conn));
    ws.once('close', () => resolve(conn));
  });
}

const linger = (conn: RawConn, ms = LINGER_MS) => Promise.race([conn.closed, new Promise((r) => setTimeout(r, ms))]);

/** One anonymous iteration: a fresh connection, maybe a (mutated) CONNECT, then one to three mutated packets. */
async function anonymous(rng: Rng, lane: Lane, ts: TestService, targets: MqttTargets): Promise<void> {
  const conn = lane === 'anon-ws' ? await openWs(wsUrlOf(ts)) : await openTcp(ts.service.mqttPort);
  try {
    if (rng.chance(0.6)) conn.write(mutatePacket(rng, randomPacket(rng, targets, { clientId: rng.pick([...targets.otherDeviceIds, 'anon']), username: rng.pick([...targets.otherDeviceIds, 'anon']), password: rng.bytes(32) })));
    for (let n = rng.range(1, 3); n > 0; n--) conn.write(mutatePacket(rng, randomPacket(rng, targets)));
    await linger(conn);
  } finally {
    conn.destroy();
  }
}

/** Reads CONNACK from what a connection has received: its return code, or null when none came. */
function connackCode(bytes: Buffer): number | null {
  return bytes.length >= 4 && bytes[0] === 0x20 && bytes[1] === 0x02 ? bytes[3]! : null;
}

/** A device connection signed in with its real credentials over a raw socket; null when the broker refuses it. */
async function signIn(ts: TestService, t: Target, rng: Rng): Promise<RawConn | null> {
  const conn = await openTcp(ts.service.mqttPort);
  const { client_id, username, password } = t.reg.credentials;
  conn.write(mqttPacket.generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: rng.chance(0.5), keepalive: 60, clientId: client_id, username, password: Buffer.from(password) }));
  const deadline = Date.now() + 2000;
  while (connackCode(conn.received()) === null && !conn.isClosed() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  if (connackCode(conn.received()) !== 0) {
    conn.destroy();
    return null;
  }
  return conn;
}

test('thousands of random and mutated MQTT packets leave the service healthy and an untouched device working', async (t) => {
  const ts = await startTestService(t, {
    logLevel: 'warn',
    // A fuzzer that reconnects after every refused publish would be banned as flapping within a minute,
    // and everything after that would test the ban only.
    env: { MQTT_FLAP_MAX_CONNECTS: '10000' },
  });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const fan = await member(ts, 'fan@example.com');
  await setStatus(ts, owner.token, (await joinMosque(ts, fan, mosque.id)).id, 'approved');
  const tx = await registerTransmitter(ts, owner.token, mosque.id, 'fuzzed transmitter');
  const player = await registerPlayer(ts, fan, mosque.id, 'fuzzed player');
  const bystander = await registerTransmitter(ts, owner.token, mosque.id, 'bystander');
  const ids = [tx.device.id, player.device.id, bystander.device.id];
  const targetOf = (reg: Registered): Target => ({ reg, targets: { deviceId: reg.device.id, otherDeviceIds: ids.filter((i) => i !== reg.device.id), mosqueIds: [mosque.id, 'mNOPE'] } });
  const signedIn: Record<'transmitter' | 'player', Target> = { transmitter: targetOf(tx), player: targetOf(player) };
  const anonTargets: MqttTargets = { deviceId: null, otherDeviceIds: ids, mosqueIds: [mosque.id] };

  const first = settings.only === null ? 0 : settings.only - (settings.only % BATCH);
  const end = settings.only === null ? settings.iterations : first + BATCH;
  const lanes: Record<Lane, number> = { 'anon-tcp': 0, 'anon-ws': 0, transmitter: 0, player: 0 };
  let refusedSignIns = 0;
  let signIns = 0;

  for (let start = first; start < end; start += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, end - start) }, (_, k) => {
      const rng = iterationRng(settings.seed, start + k);
      return { rng, lane: rng.pick<Lane>(['anon-tcp', 'anon-tcp', 'anon-tcp', 'anon-ws', 'transmitter', 'transmitter', 'player', 'player']) };
    });
    for (const it of batch) lanes[it.lane]++;

    // Anonymous iterations, a few connections at a time.
    const anon = batch.filter((it) => it.lane === 'anon-tcp' || it.lane === 'anon-ws');
    for (let k = 0; k < anon.length; k += ANON_PARALLEL) {
      await Promise.all(anon.slice(k, k + ANON_PARALLEL).map((it) => anonymous(it.rng, it.lane, ts, anonTargets)));
    }
    // Signed-in iterations, one connection per device, reopened when the broker cuts it (a foreign topic, a broken packet).
    await Promise.all((['transmitter', 'player'] as const).map(async (lane) => {
      const target = signedIn[lane];
      let conn: RawConn | null = null;
      for (const it of batch.filter((b) => b.lane === lane)) {
        if (!conn || conn.isClosed()) {
          conn = await signIn(ts, target, it.rng);
          if (!conn) {
            refusedSignIns++;
            continue;
          }
          signIns++;
        }
        const packet = randomPacket(it.rng, target.targets);
        conn.write(it.rng.chance(0.2) ? mutatePacket(it.rng, packet) : packet);
        if (it.rng.chance(0.1)) await linger(conn, 20);
      }
      if (conn) {
        await linger(conn, 50);
        conn.destroy();
      }
    }));

    const health = await ts.http.get('/healthz');
    const range = `iterations ${start}..${start + batch.length - 1}`;
    assert.equal(health.status, 200, `/healthz after ${range}: ${JSON.stringify(health.body)}\n${replayHint(FILE, settings.seed, start)}`);
  }

  // The device the fuzzer never signed in as still connects, and its status lands where people read it.
  const client = await connectDevice(t, bystander.credentials);
  await publish(client, `devices/${bystander.device.id}/status`, statusPayload('ONLINE', { reason: 'connected' }), { retain: true });
  const seen = await waitForStatus(ts, owner.token, bystander.device.id, 'ONLINE', 5000);
  assert.equal(seen.id, bystander.device.id);
  const res = await ts.http.get(`${API}/devices/${bystander.device.id}`, owner.token);
  assert.equal(res.status, 200);

  // The signed-in packets reached the hooks: the fuzzed devices' counters moved.
  for (const reg of [tx, player]) {
    const { counters } = (await ts.http.get(`${API}/devices/${reg.device.id}`, owner.token)).body;
    const seenByHooks = counters.status_messages + counters.heartbeats + counters.payloads_rejected + counters.publishes_refused;
    assert.ok(seenByHooks > 0, `no packet of ${reg.device.id} reached the hooks: ${JSON.stringify(counters)}`);
  }

  const errors = ts.logs.filter((line) => JSON.parse(line).level >= 50);
  assert.deepEqual(errors, [], `error-level log lines after seed ${settings.seed}, iterations ${first}..${end - 1}`);
  // A run whose signed-in lanes were all refused would not have fuzzed the hooks at all.
  assert.ok(signIns > 0, `every signed-in connection was refused (${refusedSignIns})`);
  t.diagnostic(`seed ${settings.seed}, iterations ${first}..${end - 1}: ${JSON.stringify(lanes)}; sign-ins ${signIns}, refused ${refusedSignIns}`);
});
