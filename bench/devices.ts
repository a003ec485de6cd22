/**
 * Device-plane benchmark (npm run bench): N devices connect, publish status and heartbeats, against
 * Minaret and against a bare aedes broker (no hooks, in-memory store) measured in the same run.
 *
 *   npm run bench                     (the defaults)
 *   npx tsx bench/devices.ts [--devices <n>=2000] [--messages <k>=5] [--concurrency <c>=200] [--samples <s>=200]
 *                            [--rounds <r>=3] [--quiet-wait <s>=5] [--timeout <s>] [--no-write] [--budget-cost] [--json <file>]
 *   BENCH_SERVICE_ROOT=<checkout> npx tsx bench/devices.ts ...    Minaret from another checkout (bench/compare/compare.ts)
 *
 * Writes its table into bench/RESULTS.md under "## Devices (npm run bench)", one subsection per device
 * count (--no-write: print only). The host is shared: before each phase it waits up to --quiet-wait
 * seconds for other processes to leave the CPU, and it reports how much they took during each phase.
 *
 * Each broker runs in its own child process (bench/device-server.ts, bench/bare-broker.ts), so its CPU
 * (from /proc/<pid>/stat) and memory (process.memoryUsage() after a full GC, over IPC) are its own; this
 * process is the load generator: one plain mqtt.js client per device, all on 127.0.0.1.
 *
 * Phases, the same for both brokers:
 *   connect    N clients (CONNECT with a will on the own status topic), at most C in flight: connects/s;
 *              broker RSS before and after, divided by N: RSS per connection. Then R times (--rounds) every
 *              client disconnects and connects again: the measured connects, on a warm broker.
 *   status     every device publishes K statuses (QoS 1, retained, alternating between two states valid
 *              for its kind, so each one is a transition): messages/s until the last PUBACK.
 *   heartbeat  every device publishes K heartbeats (QoS 0) and one more at QoS 1 as a fence: messages/s
 *              until the last fence PUBACK (aedes handles a connection's packets in order).
 *   storm      R times the broker is started again and every device comes back at once, C in flight
 *              (bench/world/restart-storm.ts): on Minaret each SUBSCRIBEs its config and waits for it (a
 *              player's leased), a player its mosque's broadcast topic, and publishes ONLINE (QoS 1) until the
 *              PUBACK; then every row is checked ONLINE and every player leased. On bare aedes, the CONNECT and
 *              the same SUBSCRIBEs. Broker CPU per device from its 'ready' to the last device back.
 *   latency    S devices one after the other (after 20 unmeasured warm-up ones) publish one status with a
 *              unique reason. Minaret: publish -> the row committed in SQLite, polled read-only from this
 *              process on the same file (WAL). Bare aedes has no record: publish -> delivered to a
 *              subscriber of devices/+/status. Publish -> PUBACK is measured for both.
 * Connects and each burst run 1 + R times (--rounds R): the first, on a broker not yet warm, is reported
 * apart as "cold"; the table gives the median of the R after it (a service runs for years, warm). Before
 * both brokers, the load generator warms its own code against a throwaway bare aedes, so the broker
 * measured first does not meet a colder generator than the second (see warmGenerator).
 * --budget-cost also times the publish budgets and flap bans alone (broker/budgets.ts, broker/flapping.ts with
 * the service's settings) over the same devices and publishes, and reports their share of the broker's CPU.
 * BENCH_BROKER_NODE_ARGS adds node flags to the broker children (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof").
 * For Minaret the devices are registered over the HTTP API first (a superadmin, an owner, mosques, a few
 * transmitters, mostly stream players) and the ingest is checked against the service's own counters.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import mqtt from 'mqtt';
import { CONTENDED_CORES, RESULTS_FILE, ROOT, cli, cpuPerMessageUs, fmt, hostBusySeconds, machine, openFilesLimit, percentile, pool, processCpuSeconds, ratio, serviceNodeFlags, serviceRoot, writeJson, writeSubsection } from './support.ts';
import { loadConfig } from '../src/platform/config.ts';
import { createBudgets } from '../broker/budgets.ts';
import { createFlapDetector } from '../broker/flapping.ts';
import { endStorm, restartStorm, type StormDevice } from './world/restart-storm.ts';
import { api, registerWorld, createFirstSuperadminRow, superadminToken, type DeviceKind as Kind } from './world/registration.ts';
import { Child, killChildrenSync } from './fanout/children.ts';

const SECTION = '## Devices (npm run bench)';
const HOST = '127.0.0.1';
const WARMUP_SAMPLES = 20;

// ---------------------------------------------------------------------------------------------------
// Options

interface Options {
  devices: number;
  messages: number;
  concurrency: number;
  samples: number;
  write: boolean;
  /** Whole-run budget in seconds; the run is aborted (children killed) past it. */
  timeoutS: number;
  /** Before each measured phase, wait up to this many seconds for other processes to leave the CPU (0: don't). */
  quietWaitS: number;
  /** Also run Minaret without its publish budgets and flap bans, and report their cost. */
  budgetCost: boolean;
  /** Measured rounds of connects, statuses and heartbeats per broker, after a cold first one of each; the table gives their median. */
  rounds: number;
  /** Also write the figures of both brokers as JSON to this file (bench/compare/compare.ts reads it). */
  json: string | undefined;
}

const USAGE = 'usage: npx tsx bench/devices.ts [--devices <n>=2000] [--messages <k>=5] [--concurrency <c>=200] [--samples <s>=200] [--rounds <r>=3] [--quiet-wait <s>=5] [--timeout <s>] [--no-write] [--budget-cost] [--json <file>]';

function parseOptions(argv: string[]): Options {
  const a = cli(USAGE, {
    devices: { type: 'number', default: 2000, min: 1 },
    messages: { type: 'number', default: 5, min: 1 },
    concurrency: { type: 'number', default: 200, min: 1 },
    samples: { type: 'number', default: 200, min: 1 },
    rounds: { type: 'number', default: 3, min: 1 },
    timeout: { type: 'number', min: 10 },
    'quiet-wait': { type: 'number', default: 5 },
    'no-write': { type: 'boolean' },
    'budget-cost': { type: 'boolean' },
    json: { type: 'string' },
  }, argv);
  const opts: Options = {
    devices: a.devices, messages: a.messages, concurrency: a.concurrency, samples: a.samples, rounds: a.rounds,
    write: !a['no-write'], timeoutS: a.timeout ?? 0, quietWaitS: a['quiet-wait'], budgetCost: a['budget-cost'], json: a.json,
  };
  // Two minutes of fixed cost plus ~60 ms per device covers registration, both phases and teardown.
  if (opts.timeoutS === 0) opts.timeoutS = Math.ceil(120 + opts.devices * 0.06 * (1 + opts.rounds / 3) + (4 + 4 * opts.rounds) * opts.quietWaitS);
  return opts;
}

// ---------------------------------------------------------------------------------------------------
// Host limits: every device is one socket in this process and one in the broker's.

function checkHostLimits(n: number): void {
  // This process: n client sockets + HTTP sockets + files; the broker child (same limit, inherited): n + its own.
  const needed = n + 512;
  const limit = openFilesLimit();
  if (limit && limit.soft < needed) {
    const raise = limit.hard >= needed ? `ulimit -n ${Math.min(limit.hard, Math.max(needed, 65536))}` : `raise the hard limit first (LimitNOFILE / limits.conf / docker --ulimit nofile=${Math.max(needed, 65536)}), then ulimit -n`;
    console.error(
      `Open-file limit too low for ${n.toLocaleString('en-US')} devices: ulimit -n is ${limit.soft} (hard ${limit.hard}).\n` +
        `Each device is one socket in the load generator and one in the broker, each a separate process with this limit, so each needs at least ${needed.toLocaleString('en-US')}.\n` +
        `Fix: ${raise}, then rerun; or run with --devices ${Math.max(1, limit.soft - 512)} or fewer.`,
    );
    process.exit(2);
  }
  try {
    const [lo, hi] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    const ports = (hi ?? 0) - (lo ?? 0) + 1;
    if (ports > 0 && ports < n + 2000) {
      console.warn(`warning: only ${ports} ephemeral ports (net.ipv4.ip_local_port_range ${lo}-${hi}) for ${n} client sockets; connects may fail with EADDRNOTAVAIL.`);
    }
  } catch {
    /* not Linux: nothing to check */
  }
}

// ---------------------------------------------------------------------------------------------------
// Children: a broker per phase in its own process (bench/fanout/children.ts)

interface MemReport {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  gc: boolean;
}

const mem = async (child: Child) => (await child.request('mem', 60_000)) as unknown as MemReport;

/** The run's temp folder (database, data dir); removed on any exit. */
let tempDir: string | null = null;

function cleanupSync(): void {
  killChildrenSync();
  if (tempDir) fs.rmSync(tempDir, { recursive: true, force: true });
  tempDir = null;
}

// ---------------------------------------------------------------------------------------------------
// HTTP (Minaret's setup)

interface Device {
  id: string;
  kind: Kind;
  password: string;
}

interface Registration {
  devices: Device[];
  rootToken: string;
  seconds: number;
  transmitters: number;
  mosques: number;
  members: number;
}

/** A superadmin, an owner, mosques and N devices (bench/world/registration.ts), over HTTP. */
async function registerDevices(child: Child, base: string, dbPath: string, n: number): Promise<Registration> {
  await createFirstSuperadminRow(dbPath);
  const rootToken = await superadminToken(base, async () => String((await child.next('otp', 30_000))['code']));
  const mosques = Math.max(1, Math.ceil(n / 1000));
  // Approved members of every mosque: their players are entitled, so each one's config carries a signed lease.
  const members = Math.max(1, Math.ceil(n / 500));
  // About 1 in 100 devices is a mosque's transmitter; the rest are members' stream players.
  const every = Math.ceil(n / Math.max(1, Math.round(n / 100)));
  const world = await registerWorld(base, rootToken, {
    mosques: Array.from({ length: mosques }, (_, i) => ({ name: `Bench Masjid ${i + 1}`, auto_approve_members: true })),
    members, devices: n, isTransmitter: (i) => i % every === 0, concurrency: 20,
    confirmCode: async () => String((await child.next('otp', 30_000))['code']), confirmOneAtATime: true,
  });
  const devices = world.devices.map((d) => ({ id: d.id, kind: d.kind, password: d.password }));
  return { devices, rootToken, seconds: world.deviceSeconds, transmitters: devices.filter((d) => d.kind === 'transmitter').length, mosques, members };
}

// ---------------------------------------------------------------------------------------------------
// Load generator: plain mqtt.js clients

/** The two states a device alternates between in the status burst, valid for its kind. */
const STATES: Record<Kind, readonly [string, string]> = { transmitter: ['ONLINE', 'PLAYING'], stream_player: ['ONLINE', 'PLAYING'] };
const nowS = () => Math.floor(Date.now() / 1000);

function statusBody(kind: Kind, status: string, prev: string, reason: string): Buffer {
  return Buffer.from(JSON.stringify({
    v: '1.0', status, prev, reason, fw: kind === 'transmitter' ? 'minaret-tx-bench/1.0.0' : 'minaret-sp-bench/1.0.0',
    mac: '02:00:00:be:0c:01', ssid: 'Bench-Net', ip: '10.0.0.2', rssi: -61, ...(kind === 'transmitter' ? { temp_c: 41.5 } : {}),
    uptime_s: 120, config_version: 1, detail: {}, ts: nowS(),
  }));
}

function heartbeatBody(status: string): Buffer {
  return Buffer.from(JSON.stringify({ v: '1.0', status, rssi: -61, ip: '10.0.0.2', uptime_s: 180, free_heap: 151_000, volume: 80, config_version: 1, ts: nowS() }));
}

interface Conn {
  dev: Device;
  client: mqtt.MqttClient;
}

interface ConnectResult {
  conns: Conn[];
  seconds: number;
  latencies: Float64Array;
  lost: () => number;
}

async function connectAll(url: string, devices: Device[], concurrency: number): Promise<ConnectResult> {
  const conns: Conn[] = new Array(devices.length);
  const latencies = new Float64Array(devices.length);
  let lost = 0;
  const t0 = performance.now();
  await pool(devices.length, concurrency, (i) => {
    const dev = devices[i]!;
    const started = performance.now();
    return new Promise<void>((resolve, reject) => {
      const client = mqtt.connect(url, {
        protocolVersion: 4, clientId: dev.id, username: dev.id, password: dev.password, clean: true,
        keepalive: 60, reconnectPeriod: 0, connectTimeout: 30_000, resubscribe: false,
        will: { topic: `devices/${dev.id}/status`, payload: Buffer.from(JSON.stringify({ v: '1.0', status: 'OFFLINE', reason: 'lwt', ts: nowS() })), qos: 1, retain: true },
      });
      const fail = (err: Error) => {
        client.off('error', fail);
        client.off('close', closedEarly);
        client.end(true);
        reject(new Error(`device ${i} (${dev.id}) did not connect: ${err.message}`));
      };
      const closedEarly = () => fail(new Error('connection closed before CONNACK'));
      client.on('error', fail);
      client.on('close', closedEarly);
      client.once('connect', () => {
        latencies[i] = performance.now() - started;
        client.off('error', fail);
        client.off('close', closedEarly);
        client.on('error', () => undefined);
        client.once('close', () => {
          if (!client.disconnecting) lost++;
        });
        conns[i] = { dev, client };
        resolve();
      });
    });
  });
  return { conns, seconds: (performance.now() - t0) / 1000, latencies, lost: () => lost };
}

/** Publishes every (conn, k) message and resolves when every QoS 1 one is PUBACKed; fails past `timeoutMs`. */
/**
 * `loopS`: how long the synchronous publish loop took. mqtt-packet corks each socket until the next tick, so
 * no byte of the round leaves this process, and the broker has nothing to read, before the loop ends.
 */
function burst(conns: Conn[], perDevice: number, message: (c: Conn, k: number) => { topic: string; body: Buffer; qos: 0 | 1; retain: boolean }, timeoutMs: number): Promise<{ seconds: number; sent: number; loopS: number }> {
  return new Promise((resolve, reject) => {
    let pending = 0;
    let sent = 0;
    let done = false;
    let loopS = 0;
    const t0 = performance.now();
    const timer = setTimeout(() => {
      done = true;
      reject(new Error(`burst: ${pending} PUBACKs still missing after ${timeoutMs} ms`));
    }, timeoutMs);
    const acked = (err?: Error) => {
      if (done) return;
      if (err) {
        done = true;
        clearTimeout(timer);
        reject(err);
        return;
      }
      if (--pending === 0) {
        done = true;
        clearTimeout(timer);
        resolve({ seconds: (performance.now() - t0) / 1000, sent, loopS });
      }
    };
    // k outer: every device's first message, then every device's second, ... as many devices would.
    for (let k = 0; k < perDevice; k++) {
      for (const c of conns) {
        const m = message(c, k);
        sent++;
        if (m.qos === 1) {
          pending++;
          c.client.publish(m.topic, m.body, { qos: 1, retain: m.retain }, (err) => acked(err ?? undefined));
        } else c.client.publish(m.topic, m.body, { qos: 0, retain: m.retain });
      }
    }
    loopS = (performance.now() - t0) / 1000;
    if (pending === 0) {
      clearTimeout(timer);
      resolve({ seconds: loopS, sent, loopS });
    }
  });
}

function publishAcked(client: mqtt.MqttClient, topic: string, body: Buffer, t0: number): Promise<number> {
  return new Promise((resolve, reject) => {
    client.publish(topic, body, { qos: 1, retain: true }, (err) => (err ? reject(err) : resolve(performance.now() - t0)));
  });
}

/** Resolves on the next turn of the event loop where `check()` holds; fails past `timeoutMs`. */
function until(check: () => boolean, timeoutMs: number, what: string): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const tick = () => {
      if (check()) return resolve(performance.now());
      if (performance.now() - t0 > timeoutMs) return reject(new Error(`${what}: not seen within ${timeoutMs} ms`));
      setImmediate(tick);
    };
    setImmediate(tick);
  });
}

async function endAll(conns: Conn[]): Promise<void> {
  const wait = Promise.all(conns.map((c) => new Promise<void>((resolve) => c.client.end(false, {}, () => resolve()))));
  await Promise.race([wait, new Promise((r) => setTimeout(r, 15_000).unref())]);
  for (const c of conns) if (!c.client.disconnected) c.client.end(true);
}

// ---------------------------------------------------------------------------------------------------
// One broker, all phases

/** CPU used while one phase ran: by the broker child, by this process (the load generator), by everything else. */
interface CpuSpent {
  seconds: number;
  brokerCpuS: number;
  brokerCores: number;
  genCores: number;
  /** Cores taken by other processes on the host (from /proc/stat, minus the broker and this process); null when unknown. */
  bgCores: number | null;
  /** The broker's main thread (the event loop): seconds on a core, and runnable but waiting for one; null when unknown. */
  main: { runS: number; waitS: number } | null;
}

/** Starts a measurement window; calling the result closes it. */
function cpuWindow(child: Child): () => CpuSpent {
  const host0 = hostBusySeconds();
  const self0 = process.cpuUsage();
  const child0 = child.cpuSeconds();
  const main0 = child.mainThread();
  const t0 = performance.now();
  return () => {
    const seconds = (performance.now() - t0) / 1000;
    const brokerCpuS = child.cpuSeconds() - child0;
    const self = process.cpuUsage(self0);
    const selfS = (self.user + self.system) / 1e6;
    const host1 = hostBusySeconds();
    const bgCores = host0 === null || host1 === null ? null : Math.max(0, (host1 - host0 - brokerCpuS - selfS) / seconds);
    const main1 = child.mainThread();
    const main = main0 && main1 ? { runS: main1.runS - main0.runS, waitS: main1.waitS - main0.waitS } : null;
    return { seconds, brokerCpuS, brokerCores: brokerCpuS / seconds, genCores: selfS / seconds, bgCores, main };
  };
}

/** Two windows as one (the connects run in two halves; a burst's rounds). */
function mergeCpu(a: CpuSpent, b: CpuSpent): CpuSpent {
  const seconds = a.seconds + b.seconds;
  const brokerCpuS = a.brokerCpuS + b.brokerCpuS;
  const bgCores = a.bgCores === null || b.bgCores === null ? null : (a.bgCores * a.seconds + b.bgCores * b.seconds) / seconds;
  const main = a.main && b.main ? { runS: a.main.runS + b.main.runS, waitS: a.main.waitS + b.main.waitS } : null;
  return { seconds, brokerCpuS, brokerCores: brokerCpuS / seconds, genCores: (a.genCores * a.seconds + b.genCores * b.seconds) / seconds, bgCores, main };
}

/**
 * The host is shared: waits (up to `maxS`) until other processes have used under CONTENDED_CORES for a
 * whole second, so a phase starts on a quiet host when there is one. Returns what it saw.
 */
async function waitQuiet(child: Child, maxS: number): Promise<{ waitedS: number; bgCores: number | null }> {
  const t0 = performance.now();
  let last: number | null = null;
  do {
    const close = cpuWindow(child);
    await new Promise((r) => setTimeout(r, 1000));
    last = close().bgCores;
    if (last === null || last < CONTENDED_CORES) break;
  } while ((performance.now() - t0) / 1000 < maxS);
  return { waitedS: (performance.now() - t0) / 1000, bgCores: last };
}

interface PhaseResult {
  label: string;
  /** The connects after the broker's start (cold), then opts.rounds reconnects of every device (median). */
  connect: Bursts;
  /** Connect latency p50 and p99 over the measured (warm) rounds. */
  connectP50: number;
  connectP99: number;
  status: Bursts;
  hb: Bursts;
  latP50: number;
  latP99: number;
  ackP50: number;
  ackP99: number;
  latCpu: CpuSpent;
  rssIdle: number;
  rssHalf: number;
  rssConnected: number;
  /** Marginal: growth over the second half of the connects, per connection. */
  rssPerConn: number;
  /** Average: growth from idle to all N connected, per connection (includes one-off growth). */
  rssPerConnAvg: number;
  /** Marginal, like rssPerConn: V8 heap used + external. */
  heapPerConn: number;
  rssEnd: number;
  /** The restart storm (bench/world/restart-storm.ts), run after the other phases on a broker started again. */
  storm?: Storm;
}

/** The restart storm's rounds: each on a broker process started again, every device back at once. */
interface Storm {
  rounds: Array<{ seconds: number; cpuUs: number; cpu: CpuSpent }>;
  /** Medians over the rounds, each on its own. */
  seconds: number;
  cpuUs: number;
}

/** One burst: its rate, the broker's CPU per message, and the cores it took. */
interface Burst {
  perS: number;
  cpuUs: number;
  cpu: CpuSpent;
  sent: number;
  /** The burst's length, and the part of it the load generator's publish loop took (none for connects). */
  seconds: number;
  loopS: number;
}

/** A broker's bursts of one kind: the cold first one, and the median of the measured rounds after it. */
interface Bursts {
  cold: Burst;
  rounds: Burst[];
  /** Medians (nearest rank) over `rounds`, rate and CPU each on its own; `cpu` is the rounds' windows merged. */
  perS: number;
  cpuUs: number;
  cpu: CpuSpent;
  /** Messages per round. */
  sent: number;
  /** Messages over every round, the cold one included. */
  total: number;
  /** The rounds' publish loops over the rounds' length. */
  loopShare: number;
}

function bursts(all: Burst[]): Bursts {
  const [cold, ...rounds] = all as [Burst, ...Burst[]];
  return {
    cold, rounds,
    perS: percentile(rounds.map((r) => r.perS), 50),
    cpuUs: percentile(rounds.map((r) => r.cpuUs), 50),
    cpu: rounds.map((r) => r.cpu).reduce(mergeCpu),
    sent: cold.sent,
    total: all.reduce((a, r) => a + r.sent, 0),
    loopShare: rounds.reduce((a, r) => a + r.loopS, 0) / rounds.reduce((a, r) => a + r.seconds, 0),
  };
}

interface LatencyProbe {
  /** Resolves when the message with this reason has reached the place that counts as "ingested". */
  seen(deviceId: string, reason: string): Promise<number>;
  close(): Promise<void>;
}

const cpuNote = (c: CpuSpent) =>
  `broker ${fmt(c.brokerCores, 2)} cores, generator ${fmt(c.genCores, 2)} cores, other processes ${c.bgCores === null ? 'n/a' : `${fmt(c.bgCores, 2)} cores`}`;

/** How long after its start a broker's idle memory is measured (see runPhases). */
const IDLE_SETTLE_MS = 15_000;

async function runPhases(
  label: string,
  child: Child,
  mqttUrl: string,
  devices: Device[],
  opts: Options,
  probe: (conns: Conn[]) => Promise<LatencyProbe>,
  verify: (expected: { status: number; heartbeats: number }) => Promise<void>,
): Promise<PhaseResult> {
  const n = devices.length;
  const k = opts.messages;
  const say = (line: string) => console.log(`  [${label}] ${line}`);
  const quiet = async (phase: string) => {
    if (opts.quietWaitS <= 0) return;
    const q = await waitQuiet(child, opts.quietWaitS);
    if (q.bgCores !== null && q.bgCores >= CONTENDED_CORES) say(`host still busy before the ${phase} (other processes ${fmt(q.bgCores, 2)} cores after ${fmt(q.waitedS, 0)} s of waiting); measuring anyway`);
  };

  // ---- connect
  await quiet('connects');
  // Idle means idle: start-up grows V8's young generation to ~30 MiB, which V8's memory reducer gives back ~8 s
  // after the last full GC once allocation is low. Measured sooner, Minaret's idle RSS swung 107-161 MiB by
  // timing alone (bench/RESULTS.md, "Idle memory"). Both brokers wait the same.
  await new Promise((r) => setTimeout(r, Math.max(0, child.readyAt + IDLE_SETTLE_MS - performance.now())));
  const idle = await mem(child);
  if (!idle.gc) say('warning: the broker process has no global.gc; memory figures include garbage');
  // In two halves, memory measured after each: the second half's growth is the marginal cost of a
  // connection, free of the one-off growth (code, heap reservations) the first connections bring.
  const half = n >= 20 ? Math.floor(n / 2) : 0;
  const settle = () => new Promise((r) => setTimeout(r, 1000)); // the connects' follow-ups (configs, timeline rows)
  let window = cpuWindow(child);
  const first = await connectAll(mqttUrl, devices.slice(0, half), opts.concurrency);
  const firstCpu = window();
  await settle();
  const halfMem = half > 0 ? await mem(child) : idle;
  window = cpuWindow(child);
  const second = await connectAll(mqttUrl, devices.slice(half), opts.concurrency);
  const connectCpu = mergeCpu(firstCpu, window());
  let conns = [...first.conns, ...second.conns];
  const connectSeconds = first.seconds + second.seconds;
  const coldConnect: Burst = { perS: n / connectSeconds, cpuUs: cpuPerMessageUs(connectCpu.brokerCpuS, n), cpu: connectCpu, sent: n, seconds: connectSeconds, loopS: 0 };
  say(`${n} connects (cold) in ${fmt(connectSeconds, 2)} s (two halves): ${fmt(n / connectSeconds, 0)}/s (p50 ${fmt(percentile([...first.latencies, ...second.latencies], 50), 1)} ms); ${fmt(coldConnect.cpuUs, 0)} µs broker CPU each; ${cpuNote(connectCpu)}`);
  await settle();
  const withConns = await mem(child);
  const marginalRss = (withConns.rss - halfMem.rss) / (n - half);
  const marginalHeap = (withConns.heapUsed + withConns.external - halfMem.heapUsed - halfMem.external) / (n - half);
  say(`RSS ${mib(idle.rss)} idle -> ${mib(halfMem.rss)} with ${half} -> ${mib(withConns.rss)} with ${n} connections: ${kib(marginalRss)} per connection over the second half (${kib((withConns.rss - idle.rss) / n)} on average); heap ${kib(marginalHeap)} per connection over the second half`);

  // Then every device disconnects and reconnects, opts.rounds times (as after a network outage at the
  // homes' side): the measured connects, on a warm broker. 1 + rounds CONNECTs per device stay under the
  // flap rule's 15 a minute.
  const lostCounts = [first.lost, second.lost];
  const warmConnects: Burst[] = [];
  const warmLatencies: number[] = [];
  for (let r = 1; r <= opts.rounds; r++) {
    await endAll(conns);
    await settle(); // the broker's disconnect work (a clean DISCONNECT: OFFLINE rows in Minaret)
    await quiet('connects');
    window = cpuWindow(child);
    const again = await connectAll(mqttUrl, devices, opts.concurrency);
    const cpu = window();
    conns = again.conns;
    lostCounts.push(again.lost);
    warmLatencies.push(...again.latencies);
    warmConnects.push({ perS: n / again.seconds, cpuUs: cpuPerMessageUs(cpu.brokerCpuS, n), cpu, sent: n, seconds: again.seconds, loopS: 0 });
    say(`${n} connects round ${r} in ${fmt(again.seconds, 2)} s: ${fmt(n / again.seconds, 0)}/s (p50 ${fmt(percentile([...again.latencies], 50), 1)} ms); ${fmt(warmConnects[r - 1]!.cpuUs, 0)} µs broker CPU each; ${cpuNote(cpu)}`);
  }
  const connect = bursts([coldConnect, ...warmConnects]);
  await settle();

  // ---- bursts: one unmeasured (cold) burst, then opts.rounds measured ones; the table takes their median.
  // A broker's first burst after its start runs its code unoptimized (the JIT has not seen it yet) and is
  // reported on its own; a service runs for years, so the warm rounds are the comparison.
  const bodies = new Map<string, Buffer>();
  const statusOf = (kind: Kind, i: number) => STATES[kind][i % 2]!;
  const bodyFor = (kind: Kind, i: number) => {
    const key = `${kind}:${i % 2}`;
    let b = bodies.get(key);
    if (!b) bodies.set(key, (b = statusBody(kind, statusOf(kind, i), statusOf(kind, i + 1), 'bench')));
    return b;
  };
  const rounds = 1 + opts.rounds;
  const measure = async (what: string, run: (round: number) => Promise<{ seconds: number; sent: number; loopS: number }>): Promise<Bursts> => {
    const all: Burst[] = [];
    for (let r = 0; r < rounds; r++) {
      await quiet(what);
      const close = cpuWindow(child);
      const done = await run(r);
      const cpu = close();
      all.push({ perS: done.sent / done.seconds, cpuUs: cpuPerMessageUs(cpu.brokerCpuS, done.sent), cpu, sent: done.sent, seconds: done.seconds, loopS: done.loopS });
      say(`${what} ${r === 0 ? '(cold)' : `round ${r}`}: ${done.sent} in ${fmt(done.seconds, 2)} s: ${fmt(done.sent / done.seconds, 0)}/s; ${fmt(all[r]!.cpuUs, 1)} µs broker CPU each; ${cpuNote(cpu)}`);
    }
    return bursts(all);
  };

  // Status: N x K QoS 1 retained statuses a round, alternating states (each one a transition).
  const st = await measure('status burst', (r) =>
    burst(conns, k, (c, i) => ({ topic: `devices/${c.dev.id}/status`, body: bodyFor(c.dev.kind, r * k + i), qos: 1, retain: true }), 60_000 + n * k * 2));

  // Heartbeats: K QoS 0 each, then one QoS 1 fence each; the same status as the device's last one.
  const last = rounds * k - 1;
  const finalStatus = (kind: Kind) => statusOf(kind, last);
  const hbBodies: Record<Kind, Buffer> = { transmitter: heartbeatBody(finalStatus('transmitter')), stream_player: heartbeatBody(finalStatus('stream_player')) };
  const hb = await measure('heartbeat burst', () =>
    burst(conns, k + 1, (c, i) => ({ topic: `devices/${c.dev.id}/heartbeat`, body: hbBodies[c.dev.kind], qos: i === k ? 1 : 0, retain: false }), 60_000 + n * k * 2));

  await verify({ status: st.total, heartbeats: hb.total });

  // ---- latency: one device at a time, a status with a unique reason; the first WARMUP_SAMPLES are not counted
  const watcher = await probe(conns);
  await quiet('latency samples');
  const total = opts.samples + WARMUP_SAMPLES;
  const stride = Math.max(1, Math.floor(n / total));
  const lat: number[] = [];
  const ack: number[] = [];
  window = cpuWindow(child);
  for (let s = 0; s < total; s++) {
    const c = conns[(s * stride + Math.floor(stride / 2)) % n]!;
    const reason = `bench-lat-${s}-${crypto.randomBytes(3).toString('hex')}`;
    // The other state than the device's current one: a transition, as a real status change is.
    const body = statusBody(c.dev.kind, statusOf(c.dev.kind, last + 1), finalStatus(c.dev.kind), reason);
    const seen = watcher.seen(c.dev.id, reason);
    const t0 = performance.now();
    const acked = publishAcked(c.client, `devices/${c.dev.id}/status`, body, t0);
    const tSeen = await seen;
    const tAck = await acked;
    if (s >= WARMUP_SAMPLES) {
      lat.push(tSeen - t0);
      ack.push(tAck);
    }
  }
  const latCpu = window();
  await watcher.close();
  const latP50 = percentile(lat, 50);
  const latP99 = percentile(lat, 99);
  say(`latency over ${lat.length} sequential publishes: p50 ${fmt(latP50, 2)} ms, p99 ${fmt(latP99, 2)} ms (PUBACK p50 ${fmt(percentile(ack, 50), 2)} ms, p99 ${fmt(percentile(ack, 99), 2)} ms); other processes ${latCpu.bgCores === null ? 'n/a' : `${fmt(latCpu.bgCores, 2)} cores`}`);

  const end = await mem(child);
  const lost = lostCounts.reduce((a, f) => a + f(), 0);
  if (lost > 0) throw new Error(`${label}: ${lost} device connections dropped during the run`);
  await endAll(conns);
  return {
    label,
    connect,
    connectP50: percentile(warmLatencies, 50),
    connectP99: percentile(warmLatencies, 99),
    status: st,
    hb,
    latP50,
    latP99,
    ackP50: percentile(ack, 50),
    ackP99: percentile(ack, 99),
    latCpu,
    rssIdle: idle.rss,
    rssConnected: withConns.rss,
    rssHalf: halfMem.rss,
    rssPerConn: marginalRss,
    rssPerConnAvg: (withConns.rss - idle.rss) / n,
    heapPerConn: marginalHeap,
    rssEnd: end.rss,
  };
}

/**
 * `rounds` restart storms: each starts the broker (`start`), waits for it and for a quiet host, then brings every
 * device back at once (`full`: Minaret's return, each device leased and ONLINE; else CONNECT and SUBSCRIBE);
 * `verify` checks what the broker holds before the devices leave and the broker stops.
 */
async function stormRounds(label: string, start: () => Child, devices: StormDevice[], opts: Options, full: boolean, verify: () => void): Promise<Storm> {
  const rounds: Storm['rounds'] = [];
  for (let r = 1; r <= opts.rounds; r++) {
    const child = start();
    const url = String((await child.next('ready', 120_000))['mqttUrl']);
    if (opts.quietWaitS > 0) await waitQuiet(child, opts.quietWaitS);
    const window = cpuWindow(child);
    const { seconds, clients } = await restartStorm(url, devices, opts.concurrency, full);
    const cpu = window();
    verify();
    await endStorm(clients);
    await child.stop();
    const cpuUs = cpuPerMessageUs(cpu.brokerCpuS, devices.length);
    rounds.push({ seconds, cpuUs, cpu });
    console.log(`  [${label}] restart storm ${r}: ${devices.length} devices back in ${fmt(seconds, 2)} s; ${fmt(cpuUs, 0)} µs broker CPU each; ${cpuNote(cpu)}`);
  }
  return { rounds, seconds: percentile(rounds.map((x) => x.seconds), 50), cpuUs: percentile(rounds.map((x) => x.cpuUs), 50) };
}

/**
 * Warms the load generator (this process), not a broker measured: its mqtt.js connect, publish and PUBACK paths
 * run once against a throwaway bare aedes, as they will against each broker. Without it the broker measured
 * first met a cold generator: in one run the generator spent 62 µs of its own CPU per status against
 * Minaret (first) and 38.5 µs against bare aedes (second) for the same work, which held Minaret's rates down.
 */
async function warmGenerator(devices: Device[], opts: Options): Promise<number> {
  const t0 = performance.now();
  const broker = new Child('warm-up', path.join('bench', 'bare-broker.ts'), { HOST }, { nodeFlags: ['--expose-gc'] });
  try {
    const url = String((await broker.next('ready', 60_000))['mqttUrl']);
    const some = devices.slice(0, Math.min(devices.length, 2 * opts.concurrency));
    const { conns } = await connectAll(url, some, opts.concurrency);
    const k = opts.messages;
    for (let r = 0; r < 2; r++) {
      await burst(conns, k, (c, i) => ({ topic: `devices/${c.dev.id}/status`, body: statusBody(c.dev.kind, STATES[c.dev.kind][i % 2]!, STATES[c.dev.kind][(i + 1) % 2]!, 'warm-up'), qos: 1, retain: true }), 60_000);
      await burst(conns, k + 1, (c, i) => ({ topic: `devices/${c.dev.id}/heartbeat`, body: heartbeatBody(STATES[c.dev.kind][0]), qos: i === k ? 1 : 0, retain: false }), 60_000);
    }
    await endAll(conns);
  } finally {
    await broker.stop();
  }
  return (performance.now() - t0) / 1000;
}

// ---------------------------------------------------------------------------------------------------
// The disk under the database: what one write transaction costs there, apart from any broker

interface DiskProbe {
  wallUs: number;
  cpuUs: number;
}

function diskProbe(dir: string): DiskProbe {
  const file = path.join(dir, 'disk-probe.db');
  const db = new Database(file);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.exec('CREATE TABLE d (id INTEGER PRIMARY KEY, status TEXT, detail TEXT); CREATE TABLE e (id INTEGER PRIMARY KEY AUTOINCREMENT, device INTEGER, detail TEXT)');
    const seed = db.prepare('INSERT INTO d (id, status, detail) VALUES (?, ?, ?)');
    db.transaction(() => {
      for (let i = 0; i < 2000; i++) seed.run(i, 'ONLINE', '{}');
    })();
    const update = db.prepare('UPDATE d SET status = ?, detail = ? WHERE id = ?');
    const insert = db.prepare('INSERT INTO e (device, detail) VALUES (?, ?)');
    const detail = JSON.stringify({ prev: 'ONLINE', reason: 'bench', detail: { pad: 'x'.repeat(160) } });
    const tx = db.transaction((i: number) => {
      update.run(i % 2 ? 'PLAYING' : 'ONLINE', detail, i % 2000);
      insert.run(i % 2000, detail);
    });
    const count = 5000;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < count; i++) tx(i);
    const wallUs = ((performance.now() - t0) * 1000) / count;
    const cpu = process.cpuUsage(cpu0);
    return { wallUs, cpuUs: (cpu.user + cpu.system) / count };
  } finally {
    db.close();
    for (const f of [file, `${file}-wal`, `${file}-shm`]) fs.rmSync(f, { force: true });
  }
}

// ---------------------------------------------------------------------------------------------------
// Formatting and RESULTS.md

const mib = (bytes: number) => `${fmt(bytes / 2 ** 20, 1)} MiB`;
const kib = (bytes: number) => `${fmt(bytes / 1024, 1)} KiB`;

function report(opts: Options, reg: Registration, m: PhaseResult, b: PhaseResult, disk: DiskProbe, command: string, date: string): string {
  const n = opts.devices;
  const lines: string[] = [];
  lines.push(`### ${n.toLocaleString('en-US')} devices, ${opts.messages} messages each`);
  lines.push('');
  lines.push(`- Date: ${date}`);
  lines.push(`- Command: \`${command}\``);
  lines.push(...machine());
  lines.push(`- Disk: one SQLite write transaction (row UPDATE + INSERT) in the run's temp dir (${os.tmpdir()}, WAL, synchronous=NORMAL as the service sets it) takes ${fmt(disk.wallUs, 0)} µs wall for ${fmt(disk.cpuUs, 0)} µs CPU, measured by the bench before the brokers run`);
  lines.push(
    `- Devices: ${reg.transmitters} transmitters and ${n - reg.transmitters} stream players (owned by ${reg.members} approved members, so each holds a lease) in ${reg.mosques} mosque(s), registered over HTTP in ${fmt(reg.seconds, 1)} s (${fmt(n / reg.seconds, 0)}/s, 20 in flight); ` +
      'the service is then restarted on that database, so its figures start from a fresh process as the bare broker\'s do, and every device connects as after a restart. ' +
      `One mqtt.js client per device in the load generator (the bench process), ${opts.concurrency} connects in flight; each broker in its own child process, one after the other, on the same 2 cores as the generator.`,
  );
  lines.push('');
  lines.push('| Figure | Minaret | bare aedes | Minaret / bare |');
  lines.push('|---|---:|---:|---:|');
  const row = (name: string, mv: string, bv: string, r: string) => lines.push(`| ${name} | ${mv} | ${bv} | ${r} |`);
  row(`**Connects/s** (${n} CONNECT→CONNACK, every device reconnecting; median of ${opts.rounds} rounds)`, `**${fmt(m.connect.perS, 0)}**`, `**${fmt(b.connect.perS, 0)}**`, `**${ratio(m.connect.perS, b.connect.perS)}**`);
  row('Connect latency p50 / p99 (ms, measured rounds)', `${fmt(m.connectP50, 1)} / ${fmt(m.connectP99, 1)}`, `${fmt(b.connectP50, 1)} / ${fmt(b.connectP99, 1)}`, `${ratio(m.connectP50, b.connectP50)} / ${ratio(m.connectP99, b.connectP99)}`);
  row('Broker CPU per connect (µs, median)', fmt(m.connect.cpuUs, 0), fmt(b.connect.cpuUs, 0), ratio(m.connect.cpuUs, b.connect.cpuUs));
  const spread = (x: Bursts, pick: (r: Burst) => number, digits: number) => `${x.rounds.map((r) => fmt(pick(r), digits)).join(', ')}`;
  row(`**Status messages ingested/s** (${m.status.sent} QoS 1 a round, until the last PUBACK; median of ${opts.rounds} rounds)`, `**${fmt(m.status.perS, 0)}**`, `**${fmt(b.status.perS, 0)}**`, `**${ratio(m.status.perS, b.status.perS)}**`);
  row('Broker CPU per status message (µs, median)', fmt(m.status.cpuUs, 1), fmt(b.status.cpuUs, 1), ratio(m.status.cpuUs, b.status.cpuUs));
  row(`**Heartbeats/s** (${m.hb.sent} a round: QoS 0 + a QoS 1 fence per device; median of ${opts.rounds} rounds)`, `**${fmt(m.hb.perS, 0)}**`, `**${fmt(b.hb.perS, 0)}**`, `**${ratio(m.hb.perS, b.hb.perS)}**`);
  row('Broker CPU per heartbeat (µs, median)', fmt(m.hb.cpuUs, 1), fmt(b.hb.cpuUs, 1), ratio(m.hb.cpuUs, b.hb.cpuUs));
  if (m.storm && b.storm) {
    row(`**Restart storm: broker CPU per device** (µs, median of ${opts.rounds}; Minaret: CONNECT, SUBSCRIBEs, leased config, ONLINE written; bare: CONNECT + SUBSCRIBEs)`, `**${fmt(m.storm.cpuUs, 0)}**`, `**${fmt(b.storm.cpuUs, 0)}**`, `**${ratio(m.storm.cpuUs, b.storm.cpuUs)}**`);
    row('Restart storm: every device back (s, median)', fmt(m.storm.seconds, 2), fmt(b.storm.seconds, 2), ratio(m.storm.seconds, b.storm.seconds));
    row('Restart storm: broker CPU per device in each round (µs)', m.storm.rounds.map((x) => fmt(x.cpuUs, 0)).join(', '), b.storm.rounds.map((x) => fmt(x.cpuUs, 0)).join(', '), '');
  }
  row('Connects/s in each measured round', spread(m.connect, (r) => r.perS, 0), spread(b.connect, (r) => r.perS, 0), '');
  row('Status/s in each measured round', spread(m.status, (r) => r.perS, 0), spread(b.status, (r) => r.perS, 0), '');
  row('Heartbeats/s in each measured round', spread(m.hb, (r) => r.perS, 0), spread(b.hb, (r) => r.perS, 0), '');
  const cold = (x: PhaseResult, pick: (b: Burst) => number, digits: number) => [x.connect, x.status, x.hb].map((y) => fmt(pick(y.cold), digits)).join('; ');
  const coldRatio = (pick: (b: Burst) => number) => [m.connect, m.status, m.hb].map((y, i) => ratio(pick(y.cold), pick([b.connect, b.status, b.hb][i]!.cold))).join('; ');
  row('First after start (cold, not in the medians): connects/s; status/s; heartbeats/s', cold(m, (y) => y.perS, 0), cold(b, (y) => y.perS, 0), coldRatio((y) => y.perS));
  row('First after start: broker CPU per connect; per status; per heartbeat (µs)', cold(m, (y) => y.cpuUs, 1), cold(b, (y) => y.cpuUs, 1), coldRatio((y) => y.cpuUs));
  row(`**Publish → record p50** (ms; bare: → subscriber*)`, `**${fmt(m.latP50, 2)}**`, `**${fmt(b.latP50, 2)}**`, `**${ratio(m.latP50, b.latP50)}**`);
  row(`**Publish → record p99** (ms; bare: → subscriber*)`, `**${fmt(m.latP99, 2)}**`, `**${fmt(b.latP99, 2)}**`, `**${ratio(m.latP99, b.latP99)}**`);
  row('Publish → PUBACK p50 / p99 (ms, same publishes)', `${fmt(m.ackP50, 2)} / ${fmt(m.ackP99, 2)}`, `${fmt(b.ackP50, 2)} / ${fmt(b.ackP99, 2)}`, `${ratio(m.ackP50, b.ackP50)} / ${ratio(m.ackP99, b.ackP99)}`);
  row(`**Broker RSS per connection** ((RSS with ${n} − RSS idle) / ${n})`, `**${kib(m.rssPerConnAvg)}**`, `**${kib(b.rssPerConnAvg)}**`, `**${ratio(m.rssPerConnAvg, b.rssPerConnAvg)}**`);
  row(`Broker RSS per connection, marginal (over the second ${n - Math.floor(n / 2)} connects)`, kib(m.rssPerConn), kib(b.rssPerConn), ratio(m.rssPerConn, b.rssPerConn));
  row('Broker JS heap + external per connection, marginal', kib(m.heapPerConn), kib(b.heapPerConn), ratio(m.heapPerConn, b.heapPerConn));
  row(`Broker RSS idle → ${Math.floor(n / 2)} → ${n} connected → end of run`, `${mib(m.rssIdle)} → ${mib(m.rssHalf)} → ${mib(m.rssConnected)} → ${mib(m.rssEnd)}`, `${mib(b.rssIdle)} → ${mib(b.rssHalf)} → ${mib(b.rssConnected)} → ${mib(b.rssEnd)}`, '');
  const share = (x: number) => (Number.isFinite(x) ? `${fmt(100 * x, 0)} %` : 'n/a');
  const mainShares = (c: CpuSpent) =>
    c.main === null ? 'n/a' : [c.main.runS / c.seconds, c.main.waitS / c.seconds, 1 - (c.main.runS + c.main.waitS) / c.seconds].map(share).join(' / ');
  const cores = (c: CpuSpent) => `${fmt(c.brokerCores, 2)} / ${fmt(c.genCores, 2)} / ${c.bgCores === null ? 'n/a' : fmt(c.bgCores, 2)}`;
  row('Cores during the measured connects: broker / generator / other processes**', cores(m.connect.cpu), cores(b.connect.cpu), '');
  row('Cores during the measured status bursts: broker / generator / other processes**', cores(m.status.cpu), cores(b.status.cpu), '');
  row('Cores during the measured heartbeat bursts: broker / generator / other processes**', cores(m.hb.cpu), cores(b.hb.cpu), '');
  row('Broker main thread in the measured status bursts: running / waiting for a core / idle (share of the bursts)***', mainShares(m.status.cpu), mainShares(b.status.cpu), '');
  row('Broker main thread in the measured heartbeat bursts: running / waiting for a core / idle***', mainShares(m.hb.cpu), mainShares(b.hb.cpu), '');
  row("Load generator's publish loop, no byte sent yet (share of the status bursts; of the heartbeat bursts)***", `${share(m.status.loopShare)}; ${share(m.hb.loopShare)}`, `${share(b.status.loopShare)}; ${share(b.hb.loopShare)}`, '');
  row('Other processes during the latency samples (cores)**', m.latCpu.bgCores === null ? 'n/a' : fmt(m.latCpu.bgCores, 2), b.latCpu.bgCores === null ? 'n/a' : fmt(b.latCpu.bgCores, 2), '');
  lines.push('');
  lines.push(
    `\\* Minaret: from the publish to the device row carrying that status committed in SQLite, polled read-only by the load generator on the same file (WAL), ${opts.samples} sequential publishes of a status transition after ${WARMUP_SAMPLES} warm-up ones. ` +
      'The bare broker keeps no record, so its figure is publish → delivery to a subscriber of `devices/+/status` on the same broker: the nearest equivalent, not the same thing. ' +
      'Throughput ratios below 1 and cost ratios above 1 are what Minaret pays over plain aedes. RSS is `process.memoryUsage().rss` of the broker process after a full GC, idle (15 s after its start, once V8 has given back the young generation start-up grew), after half the connects and after all of them; the marginal figure (growth over the second half) leaves out the one-off growth the first connections bring. ' +
      'Broker CPU is the broker process\'s own user + system time (/proc/<pid>/stat) divided by the connects or messages of the phase, so it does not depend on how much CPU the broker got.',
  );
  lines.push('');
  lines.push('\\*\\* CPU of the broker process, of the load generator (the bench process) and of every other process on the host (/proc/stat minus those two) during the phase, in cores.');
  lines.push('');
  lines.push(
    '\\*\\*\\* The broker\'s main thread (its event loop) from /proc/<pid>/task/<pid>/schedstat: on a core, runnable but waiting for one, and neither (waiting in epoll for bytes to read, or blocked in a system call). ' +
      'The load generator writes a round\'s publishes in one synchronous loop, and mqtt-packet corks each socket until the next tick: until that loop ends no byte of the round reaches the broker.',
  );
  lines.push('');
  lines.push(interpret(m, b, disk, opts));
  lines.push('');
  return lines.join('\n');
}

/** What the publish budgets and flap bans cost: the same service with them and without them, same run. */
/**
 * What the publish budgets and the flap bans cost, from their own modules (broker/budgets.ts,
 * broker/flapping.ts) built with the service's settings and run here over the same devices and the same
 * pattern as a round of the bench: a CONNECT (ban check and flap count) per device, then K statuses and
 * K + 1 heartbeats each (a budget spend per publish). The service has no switch to leave them out: a second
 * service run without them measured the same code within the noise of two runs (±20 % on a quiet host),
 * while the CPU per call, set beside the broker CPU per operation of the run above, is a steady share.
 */
interface BudgetCost {
  connectUs: number;
  statusUs: number;
  heartbeatUs: number;
}

function budgetCost(devices: Device[], env: Record<string, string>, opts: Options): BudgetCost {
  const loaded = loadConfig(env);
  if (!loaded.ok) throw new Error(`config: ${loaded.error}`);
  const c = loaded.config;
  // One set for the whole run, as in the broker: a cold pass first (the buckets and flap entries made), then
  // the measured rounds, within the bursts and the flap count the service was given for 1 + R rounds. Logs and
  // broadcasts are not published here, so their rates do not matter.
  const budgets = createBudgets({ ...c.deviceBudgets, log: { perSecond: 1, burst: 1 }, broadcast: { perSecond: 1, burst: 5 } }, c.deviceFloodWindowS * 1000);
  const flapping = createFlapDetector({ maxConnects: c.mqttFlap.maxConnects, windowMs: c.mqttFlap.windowS * 1000, banMs: c.mqttFlap.banS * 1000 });
  const timed = (work: () => void, count: number) => {
    const since = process.cpuUsage();
    work();
    return cpuPerMessageUs(processCpuSeconds(since), count);
  };
  let now = Date.now();
  const rounds: BudgetCost[] = [];
  for (let r = 0; r <= opts.rounds; r++) {
    const connectUs = timed(() => {
      for (const d of devices) if (!flapping.isBanned(d.id, now)) flapping.connect(d.id, now);
    }, devices.length);
    const statusUs = timed(() => {
      for (let k = 0; k < opts.messages; k++) for (const d of devices) budgets.spend(d.id, 'status', (now += 0.01));
    }, devices.length * opts.messages);
    const heartbeatUs = timed(() => {
      for (let k = 0; k <= opts.messages; k++) for (const d of devices) budgets.spend(d.id, 'heartbeat', (now += 0.01));
    }, devices.length * (opts.messages + 1));
    if (r > 0) rounds.push({ connectUs, statusUs, heartbeatUs });
  }
  const med = (pick: (b: BudgetCost) => number) => percentile(rounds.map(pick), 50);
  return { connectUs: med((b) => b.connectUs), statusUs: med((b) => b.statusUs), heartbeatUs: med((b) => b.heartbeatUs) };
}

function budgetReport(m: PhaseResult, cost: BudgetCost): string {
  const lines = ['', '**Hardening budgets** (`--budget-cost`: broker/budgets.ts and broker/flapping.ts with the service\'s settings, run in the load generator over the same devices and publishes as a round; share = their CPU / Minaret\'s broker CPU per operation above):', '',
    '| Figure | budgets and flap bans alone (µs CPU) | Minaret broker CPU (µs) | share |', '|---|---:|---:|---:|'];
  const share = (a: number, b: number) => (b > 0 && Number.isFinite(a / b) ? `${fmt((100 * a) / b, 1)} %` : 'n/a');
  const row = (name: string, a: number, b: number) => lines.push(`| ${name} | ${fmt(a, 3)} | ${fmt(b, 1)} | ${share(a, b)} |`);
  row('Per connect (ban check, flap count)', cost.connectUs, m.connect.cpuUs);
  row('Per status message (budget spend)', cost.statusUs, m.status.cpuUs);
  row('Per heartbeat (budget spend)', cost.heartbeatUs, m.hb.cpuUs);
  lines.push('');
  return lines.join('\n');
}

/** The headline figures of one broker, as --json writes them: the medians the table gives, and the host's contention. */
function figures(r: PhaseResult): Record<string, number> {
  return {
    connectsPerS: r.connect.perS, cpuUsPerConnect: r.connect.cpuUs,
    statusPerS: r.status.perS, cpuUsPerStatus: r.status.cpuUs,
    heartbeatsPerS: r.hb.perS, cpuUsPerHeartbeat: r.hb.cpuUs,
    recordP50Ms: r.latP50, recordP99Ms: r.latP99, pubackP50Ms: r.ackP50, pubackP99Ms: r.ackP99,
    rssPerConnection: r.rssPerConnAvg, otherProcessesCores: contention(r),
    ...(r.storm && { cpuUsPerStormDevice: r.storm.cpuUs, stormSeconds: r.storm.seconds }),
  };
}

function contention(r: PhaseResult): number {
  return Math.max(...[r.connect.cpu, r.status.cpu, r.hb.cpu, r.latCpu, ...(r.storm?.rounds.map((x) => x.cpu) ?? [])].map((c) => c.bgCores ?? 0));
}

function interpret(m: PhaseResult, b: PhaseResult, disk: DiskProbe, opts: Options): string {
  const pct = (a: number, x: number) => `${fmt((100 * a) / x, 0)} %`;
  const parts: string[] = [];
  parts.push(
    `**Reading.** Connects: Minaret accepts ${pct(m.connect.perS, b.connect.perS)} of bare aedes's rate at ${ratio(m.connect.cpuUs, b.connect.cpuUs)} its broker CPU per connect. ` +
      'On top of aedes, each CONNECT is checked against the in-memory registry (SHA-256 of the password, the will topic, the flap count) and the socket guard, and leaves a `connected` timeline row (in the next group commit, with the notes of other connects). ' +
      'Its retained config is already there: the service rebuilt every device\'s config at start, before the broker listened (a stream player\'s with the Ed25519 lease it already holds, kept in its row; signed anew only when missing, stale or past half its life: here each was signed at registration, minutes before), so a CONNECT only asks memory whether a player\'s lease is past half its life.',
  );
  parts.push(
    `Status: Minaret ingests ${pct(m.status.perS, b.status.perS)} of the bare broker's PUBACK rate at ${ratio(m.status.cpuUs, b.status.cpuUs)} its CPU per message (${fmt(m.status.cpuUs, 0)} µs against ${fmt(b.status.cpuUs, 0)} µs). ` +
      'Every status is parsed and schema-checked, then written before its PUBACK goes out: an UPDATE of the device row and, as every status here is a transition, a timeline INSERT, in the group commit of its event-loop turn (one transaction for up to 256 statuses); ' +
      'aedes alone only swaps the retained message in memory.',
  );
  const sc = m.status.cpu;
  if (sc.main) {
    const idle = 1 - (sc.main.runS + sc.main.waitS) / sc.seconds;
    parts.push(
      `Minaret's event loop was on a core ${pct(sc.main.runS, sc.seconds)} of those bursts, waited for one ${pct(sc.main.waitS, sc.seconds)} and was idle ${pct(idle, 1)}. ` +
        `The load generator's publish loop took ${pct(m.status.loopShare, 1)} of Minaret's burst time (${pct(b.status.loopShare, 1)} of bare aedes's), and until it ends no byte of the round reaches the broker: a round's time is that loop plus what the broker has left to do after it, so the rates understate the gap between the brokers and their CPU per message states it ` +
        `(a write transaction on this machine's disk, for scale: ${fmt(disk.wallUs, 0)} µs wall for ${fmt(disk.cpuUs, 0)} µs CPU, WAL with synchronous=NORMAL, which does not sync each commit).`,
    );
  }
  if (sc.brokerCores < 0.75 && (sc.bgCores ?? 0) > 0.4) {
    parts.push(`Other processes took ${fmt(sc.bgCores ?? 0, 2)} cores during those bursts, so Minaret's rate is CPU-starved here; its CPU per message is the figure to compare.`);
  }
  parts.push(
    `Heartbeats, validated and merged in memory and written in one batched transaction every 2 s, run at ${pct(m.hb.perS, b.hb.perS)} of bare aedes's rate at ${ratio(m.hb.cpuUs, b.hb.cpuUs)} its CPU each; ` +
      `at ${fmt(m.hb.cpuUs, 0)} µs a heartbeat costs Minaret ${fmt(m.status.cpuUs / m.hb.cpuUs, 1)}× less than a status: what batching the writes buys.`,
  );
  parts.push(
    `Latency: a status is in the committed device row ${fmt(m.latP50, 2)} ms (p50) / ${fmt(m.latP99, 2)} ms (p99) after the publish; bare aedes delivers the same publish to a subscriber in ${fmt(b.latP50, 2)} / ${fmt(b.latP99, 2)} ms. ` +
      `The like-for-like figure is publish → PUBACK, ${ratio(m.ackP50, b.ackP50)} at p50 and ${ratio(m.ackP99, b.ackP99)} at p99` +
      (m.ackP99 > 2 * b.ackP99
        ? ': one status costs a fraction of a millisecond more, and a few samples wait behind work the bare broker does not have (this bench does not tell which: candidates are a WAL checkpoint inside a commit, GC of a larger heap, the service\'s periodic passes over all devices).'
        : '.'),
  );
  parts.push(
    `Memory: ${opts.devices.toLocaleString('en-US')} connections add ${mib(m.rssConnected - m.rssIdle)} to Minaret's RSS over an idle ${mib(m.rssIdle)}, ${kib(m.rssPerConnAvg)} each, against ${mib(b.rssConnected - b.rssIdle)} over ${mib(b.rssIdle)} for bare aedes, ${kib(b.rssPerConnAvg)} each (${ratio(m.rssPerConnAvg, b.rssPerConnAvg)}). ` +
      `Past the first half, each further connection adds ${kib(m.heapPerConn)} of JS heap in Minaret against ${kib(b.heapPerConn)} (${ratio(m.heapPerConn, b.heapPerConn)}), most likely the per-connection state Minaret keeps beside aedes's (presence, counters, the flap and budget entries); ` +
      'RSS follows the heap in allocator-sized steps and lags it when the heap has room (Minaret idles with a larger one), so the marginal RSS figures are coarse and the heap ratio is the steadier per-connection comparison.',
  );
  const worst = Math.max(contention(m), contention(b));
  if (worst > CONTENDED_CORES) {
    parts.push(
      `**Caveat: the host was shared** — other processes took up to ${fmt(worst, 2)} cores of its ${os.availableParallelism()} during a phase (rows marked **). Rates and latencies are depressed by that and by the load generator sharing the cores; ` +
        'the broker CPU per connect / message, measured on the broker process alone, are the figures that hold up, and the ratios of those are the fairer comparison.',
    );
  }
  return parts.join(' ');
}

// ---------------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  checkHostLimits(opts.devices);
  const watchdog = setTimeout(() => {
    console.error(`bench: still running after ${opts.timeoutS} s (--timeout); stopping.`);
    process.exit(1);
  }, opts.timeoutS * 1000);
  watchdog.unref();

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-devices-'));
  tempDir = dir;
  const dbPath = path.join(dir, 'minaret.db');
  const date = new Date().toISOString();
  // `npm run bench` may chain further benches after this one, which would take `-- flags` for themselves.
  const command = process.argv.length > 2 ? `npx tsx bench/devices.ts ${process.argv.slice(2).join(' ')}` : 'npm run bench';
  console.log(`Minaret device benchmark — ${date}`);
  console.log(`${opts.devices} devices, ${opts.messages} status messages and ${opts.messages} heartbeats each, ${opts.concurrency} connects in flight, ${opts.samples} latency samples; budget ${opts.timeoutS} s`);

  try {
    const disk = diskProbe(dir);
    console.log(`SQLite write transaction on ${os.tmpdir()} (WAL, synchronous=NORMAL, no broker running): ${fmt(disk.wallUs, 0)} µs wall, ${fmt(disk.cpuUs, 0)} µs CPU`);

    // ---- Phase A: Minaret
    const root = serviceRoot();
    const nodeFlags = serviceNodeFlags(root);
    console.log(`Phase A: Minaret (bench/device-server.ts${root === ROOT ? '' : ` of ${root}, BENCH_SERVICE_ROOT`})`);
    const serverEnv = {
      NODE_ENV: 'test', HOST, HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: dbPath, DATA_DIR: dir,
      JWT_SECRET: 'bench-devices-jwt-secret-0123456789-abcdefghijklmnopqrstuvwxyz', BCRYPT_COST: '4', LOG_LEVEL: 'warn',
      AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000', NOTIFY_TRANSPORT: 'console',
      // Every device sends K statuses and K + 1 heartbeats a round, 1 + R rounds within seconds (and one latency
      // sample), beyond the default bursts (10 and 5): bursts that admit them all, so the bench measures ingest.
      // The budget's lookup still runs on every packet.
      DEVICE_STATUS_BURST: String(Math.max(10, (1 + opts.rounds) * opts.messages + 1)), DEVICE_HEARTBEAT_BURST: String(Math.max(5, (1 + opts.rounds) * (opts.messages + 1))),
      // The load generator is one address standing for thousands of homes: past the per-address handshake cap
      // (50, docs/settings.md) its connects would be refused. The cap's check still runs on every socket.
      MQTT_MAX_HANDSHAKES_PER_ADDRESS: String(Math.max(50, opts.concurrency + 10)),
      // A few members own all the players here (each one's players share its lease work).
      MAX_PLAYERS_PER_USER: '100000',
      // As `npm start`, the Dockerfile and the systemd unit run the service (docs/operator.md, "Starting and
      // stopping"), as with the node flags (serviceNodeFlags); bare aedes runs without either.
      MALLOC_ARENA_MAX: '2',
    };
    let server = new Child('minaret', path.join('bench', 'device-server.ts'), serverEnv, { nodeFlags: ['--expose-gc', ...nodeFlags], root });
    let ready = await server.next('ready', 60_000);
    const reg = await registerDevices(server, String(ready['httpUrl']), dbPath, opts.devices);
    console.log(`  [minaret] registered ${opts.devices} devices (${reg.transmitters} transmitters, ${reg.mosques} mosque(s), ${reg.members} members) over HTTP in ${fmt(reg.seconds, 1)} s`);
    // A fresh service process on the same database: its memory starts where a restarted Minaret's does (the
    // registry loaded, nothing else), not inflated by the registration's garbage; and every device then
    // connects as after a restart. The bare broker is a fresh process too.
    await server.stop();
    server = new Child('minaret', path.join('bench', 'device-server.ts'), serverEnv, { nodeFlags: ['--expose-gc', ...nodeFlags], root });
    ready = await server.next('ready', 60_000);
    const httpUrl = String(ready['httpUrl']);
    const minaretMqtt = String(ready['mqttUrl']);
    console.log('  [minaret] service restarted on the same database');
    console.log(`  load generator warmed against a throwaway bare aedes in ${fmt(await warmGenerator(reg.devices, opts), 1)} s`);

    const ro = new Database(dbPath, { readonly: true, fileMustExist: true });
    const reasonOf = ro.prepare<[string], string | undefined>('SELECT status_reason FROM devices WHERE id = ?').pluck();
    const minaret = await runPhases(
      'minaret', server, minaretMqtt, reg.devices, opts,
      async () => ({
        seen: (id, reason) => until(() => reasonOf.get(id) === reason, 10_000, `status of ${id} in SQLite`),
        close: async () => undefined,
      }),
      async (expected) => {
        // The service's own per-device counters: every message ingested, none rejected.
        const rows = await api<Array<{ counters: { status_messages: number; heartbeats: number; payloads_rejected: number; publishes_refused: number } }>>(httpUrl, 'GET', '/api/v1/devices', undefined, reg.rootToken);
        const sum = (key: 'status_messages' | 'heartbeats' | 'payloads_rejected' | 'publishes_refused') => rows.reduce((a, r) => a + r.counters[key], 0);
        const got = { status: sum('status_messages'), heartbeats: sum('heartbeats'), rejected: sum('payloads_rejected') + sum('publishes_refused') };
        if (rows.length !== opts.devices || got.status !== expected.status || got.heartbeats !== expected.heartbeats || got.rejected !== 0) {
          throw new Error(`minaret ingest check failed: ${rows.length} devices, counters ${JSON.stringify(got)}, expected ${JSON.stringify({ ...expected, rejected: 0 })}`);
        }
        console.log(`  [minaret] ingest check: counters show ${got.status} statuses and ${got.heartbeats} heartbeats ingested, 0 rejected`);
      },
    );
    await server.stop();
    // The restart storm: the service started again on the same database, every device back at once.
    const mosqueOf = ro.prepare<[string], string | null>('SELECT mosque_id FROM devices WHERE id = ?').pluck();
    const stormDevices: StormDevice[] = reg.devices.map((d) => {
      const mosque = d.kind === 'stream_player' ? mosqueOf.get(d.id) : null;
      return { ...d, broadcastTopic: mosque ? `mosques/${mosque}/broadcast` : null };
    });
    const onlineRows = ro.prepare<[], number>("SELECT count(*) FROM devices WHERE status = 'ONLINE'").pluck();
    const leasedRows = ro.prepare<[], number>("SELECT count(*) FROM devices WHERE kind = 'stream_player' AND lease_expires_at > unixepoch()").pluck();
    const players = reg.devices.filter((d) => d.kind === 'stream_player').length;
    minaret.storm = await stormRounds('minaret', () => new Child('minaret', path.join('bench', 'device-server.ts'), serverEnv, { nodeFlags: ['--expose-gc', ...nodeFlags], root }), stormDevices, opts, true, () => {
      // Each PUBACK followed its commit: every row is ONLINE now, and every player holds a lease.
      const [online, leased] = [onlineRows.get()!, leasedRows.get()!];
      if (online !== opts.devices || leased !== players) throw new Error(`restart storm: ${online} of ${opts.devices} rows ONLINE, ${leased} of ${players} players leased`);
    });

    // ---- The budgets' own cost, from their modules with the same settings (see budgetCost)
    const budgets = opts.budgetCost ? budgetCost(reg.devices, serverEnv, opts) : null;
    ro.close();

    // ---- Phase B: bare aedes
    console.log('Phase B: bare aedes (bench/bare-broker.ts)');
    const bare = new Child('bare-aedes', path.join('bench', 'bare-broker.ts'), { HOST }, { nodeFlags: ['--expose-gc'] });
    const bareReady = await bare.next('ready', 60_000);
    const bareMqtt = String(bareReady['mqttUrl']);
    const bareResult = await runPhases(
      'bare', bare, bareMqtt, reg.devices, opts,
      async (conns) => {
        const observer = mqtt.connect(bareMqtt, { protocolVersion: 4, clientId: 'bench-observer', clean: true, reconnectPeriod: 0 });
        await new Promise<void>((resolve, reject) => {
          observer.once('connect', () => resolve());
          observer.once('error', reject);
        });
        const wanted = new Map<string, () => void>();
        let lastAt = performance.now();
        let retained = 0;
        observer.on('message', (_topic, payload, packet) => {
          lastAt = performance.now();
          if (packet.retain) retained++;
          if (wanted.size === 0) return;
          for (const [needle, hit] of wanted) {
            if (payload.includes(needle)) {
              wanted.delete(needle);
              hit();
            }
          }
        });
        await new Promise<void>((resolve, reject) => observer.subscribe('devices/+/status', { qos: 0 }, (err) => (err ? reject(err) : resolve())));
        // The subscription first brings every device's retained status: wait until they have all arrived.
        lastAt = performance.now();
        await until(() => retained >= conns.length || performance.now() - lastAt > 1000, 30_000, 'retained statuses drained');
        return {
          seen: (_id, reason) =>
            new Promise<number>((resolve, reject) => {
              const timer = setTimeout(() => {
                wanted.delete(`"${reason}"`);
                reject(new Error(`status ${reason} not delivered within 10 s`));
              }, 10_000);
              wanted.set(`"${reason}"`, () => {
                clearTimeout(timer);
                resolve(performance.now());
              });
            }),
          close: () => new Promise<void>((resolve) => observer.end(false, {}, () => resolve())),
        };
      },
      async () => undefined,
    );
    await bare.stop();
    bareResult.storm = await stormRounds('bare', () => new Child('bare-aedes', path.join('bench', 'bare-broker.ts'), { HOST }, { nodeFlags: ['--expose-gc'] }), stormDevices, opts, false, () => undefined);

    if (opts.json) {
      writeJson(opts.json, { bench: 'devices', date, command, serviceRoot: root, options: opts, minaret: figures(minaret), bare: figures(bareResult) });
      console.log(`(figures written to ${opts.json})`);
    }
    const sub = report(opts, reg, minaret, bareResult, disk, command, date) + (budgets ? budgetReport(minaret, budgets) : '');
    console.log('');
    console.log(sub);
    if (opts.write) {
      writeSubsection(
        SECTION,
        "`npm run bench` (bench/devices.ts): Minaret's device plane against a bare aedes broker (no hooks, no store) in the same run. One subsection per device count; a rerun replaces its own.",
        sub,
        (s) => Number((s.match(/^### ([\d,]+) devices/)?.[1] ?? '0').replace(/,/g, '')),
      );
      console.log(`(written to ${path.relative(process.cwd(), RESULTS_FILE)} under "${SECTION}")`);
    }
  } finally {
    cleanupSync();
  }
}

process.on('exit', cleanupSync);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping`);
    process.exit(130); // 'exit' kills the children and removes the temp folder
  });
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(`bench failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
