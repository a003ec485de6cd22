/**
 * One service process against two on one host in Redis mode (the second half of `npm run bench:cluster`),
 * with a bare aedes broker (no hooks, in memory: bench/bare-broker.ts) as the ceiling, all in the same run.
 *
 *   npx tsx bench/cluster/cluster.ts [--players <n>=10000] [--messages <k>=2] [--concurrency <c>=200] [--runs <r>=2] [--no-write]
 *
 * One redis-server and one SQLite file (as deploy/compose.yaml runs them); each service is
 * bench/device-server.ts in its own process, so its CPU and memory are its own. N stream players of one
 * mosque (approved members, so each holds a lease), registered over the API once; player i connects to
 * process i mod P. Per topology, from fresh processes: connects/s (CONNECT -> CONNACK, C in flight); ready
 * (SUBSCRIBE config, leased config, SUBSCRIBE broadcast); K statuses per player (QoS 1, retained) until the
 * last PUBACK; K heartbeats (QoS 0) + a QoS 1 fence per player; two broadcasts POSTed to process 1, the
 * start's first receipt and p99 over the N players. The runs alternate the order of the two topologies.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import { CONTENDED_CORES, cli, cpuPerMessageUs, fmt, machine, openFilesLimit, percentile, range, ratios, writeSubsection } from '../support.ts';
import { Child, HOST, cpuWindow, runBench, serviceEnv as sharedServiceEnv, startRedisServer, type RedisServer, type Spent } from './processes.ts';
import { SECTION, SECTION_INTRO, subsectionOrder } from './sections.ts';
import { api } from '../world/registration.ts';
import { Watch, buildWorld, burst, connectAll, endAll, heartbeatBody, readyAll, statusBody, type Fleet, type World } from './world.ts';

const args = process.argv.slice(2);
const opts = cli('usage: npx tsx bench/cluster/cluster.ts [--players <n>=10000] [--messages <k>=2] [--concurrency <c>=200] [--runs <r>=2] [--no-write]', {
  players: { type: 'number', default: 10_000, min: 2 },
  messages: { type: 'number', default: 2, min: 1 },
  concurrency: { type: 'number', default: 200, min: 1 },
  runs: { type: 'number', default: 2, min: 1 },
  'no-write': { type: 'boolean' },
}, args);
const N = opts.players;
const K = opts.messages;
const C = opts.concurrency;
const RUNS = opts.runs;
const WRITE = !opts['no-write'];
const FANOUTS = 2;

type Figures = Record<string, number>;

const serviceEnv = (dir: string, redisUrl: string) => sharedServiceEnv(dir, redisUrl, { perPlayer: K, handshakes: C });

const note = (into: Figures, key: string, spent: Spent) => {
  into[`${key}S`] = spent.seconds;
  into[`${key}Cpu`] = spent.cpu.slice(0, -2).reduce((a, b) => a + b, 0); // the services (or bare broker), not Redis or the generator
  into[`${key}Redis`] = spent.cpu.at(-2)!;
  into['other'] = Math.max(into['other'] ?? 0, spent.otherCores ?? 0);
};

/** The phases against `procs` service processes (or the bare broker when procs is 0). */
async function topology(procs: number, world: World, dir: string, redis: RedisServer): Promise<Figures> {
  const f: Figures = {};
  const children = procs === 0 ? [new Child('bare aedes', 'bare-broker.ts', { HOST })] : Array.from({ length: procs }, (_, i) => new Child(`minaret ${i + 1}`, 'device-server.ts', serviceEnv(dir, redis.url)));
  try {
    const readies = await Promise.all(children.map((c) => c.next('ready')));
    const urls = readies.map((r) => String(r['mqttUrl']));
    const pids = [...children.map((c) => c.pid), redis.pid];
    f['perProcess'] = N / Math.max(1, procs);
    f['rssIdle'] = Math.max(...(await Promise.all(children.map((c) => c.rss()))));
    const fleet: Fleet = { clients: [], watch: null };
    let w = cpuWindow(pids);
    await connectAll(fleet, world.players, (i) => urls[i % urls.length]!, C);
    note(f, 'connect', w());
    const topic = procs === 0 ? 'mosques/bench/broadcast' : `mosques/${world.mosqueId}/broadcast`;
    if (procs > 0) f['readyS'] = await readyAll(fleet, world.players, topic, C);
    else await Promise.all(fleet.clients.map((c) => c.subscribeAsync(topic, { qos: 1 })));
    f['rssConnected'] = Math.max(...(await Promise.all(children.map((c) => c.rss()))));
    const ids = world.players.map((p) => p.id);
    const state = (k: number) => (k % 2 === 0 ? 'PLAYING' : 'ONLINE');
    w = cpuWindow(pids);
    await burst(fleet, world.players, K, (i, k) => ({ topic: `devices/${ids[i]}/status`, body: statusBody(state(k), state(k + 1)), qos: 1, retain: true }));
    note(f, 'status', w());
    const hb = heartbeatBody(state(K - 1));
    w = cpuWindow(pids);
    await burst(fleet, world.players, K + 1, (i, k) => ({ topic: `devices/${ids[i]}/heartbeat`, body: hb, qos: k === K ? 1 : 0, retain: false }));
    note(f, 'heartbeat', w());
    const firsts: number[] = [];
    const p99s: number[] = [];
    const posts: number[] = [];
    const publisher = procs === 0 ? await mqtt.connectAsync(urls[0]!, { clientId: 'bench-publisher', reconnectPeriod: 0 }) : null;
    const base = String(readies[0]!['httpUrl']);
    for (let r = 0; r < FANOUTS; r++) {
      const id = crypto.randomUUID();
      const event = (action: string) => JSON.stringify({ v: '1.0', broadcast_id: id, kind: 'azaan', action, ts: Math.floor(Date.now() / 1000) });
      fleet.watch = new Watch(N, 'start');
      w = cpuWindow(pids);
      const t0 = performance.now();
      const started = publisher
        ? await publisher.publishAsync(topic, event('start'), { qos: 1, retain: true }).then(() => ({ id }))
        : await api<{ id: string }>(base, 'POST', `/api/v1/mosques/${world.mosqueId}/broadcasts`, { kind: 'azaan', prayer: 'maghrib' }, world.ownerToken);
      posts.push(performance.now() - t0);
      await fleet.watch.all(60_000);
      const s = fleet.watch.summary(t0);
      note(f, `fanout${r}`, w());
      firsts.push(s.first);
      p99s.push(s.p99);
      fleet.watch = new Watch(N, 'stop');
      if (publisher) await publisher.publishAsync(topic, event('stop'), { qos: 1, retain: true });
      else await api(base, 'POST', `/api/v1/mosques/${world.mosqueId}/broadcasts/${started.id}/stop`, undefined, world.ownerToken);
      await fleet.watch.all(60_000);
      fleet.watch = null;
      await new Promise((r) => setTimeout(r, 500));
    }
    Object.assign(f, { first: percentile(firsts, 50), p99: percentile(p99s, 50), post: percentile(posts, 50) });
    await publisher?.endAsync();
    await endAll(fleet);
  } finally {
    await Promise.all(children.map((c) => c.stop()));
  }
  return f;
}

function report(runs: Array<Record<number, Figures>>, date: string, command: string, registerS: number): string {
  const all = (procs: number, fn: (f: Figures) => number) => runs.map((r) => fn(r[procs]!));
  const cell = (procs: number, fn: (f: Figures) => number, digits = 0) => range(all(procs, fn), digits);
  const ratio = (fn: (f: Figures) => number) => ratios(all(2, fn), all(1, fn));
  const vsBare = (procs: number, fn: (f: Figures) => number) => ratios(all(procs, fn), all(0, fn));
  const n = N.toLocaleString('en-US');
  const rows: Array<[string, (f: Figures) => number, number, boolean]> = [
    [`Connects/s (${n} CONNECT → CONNACK, ${C} in flight)`, (f) => N / f['connectS']!, 0, true],
    ['Service CPU per connect, all processes (µs)', (f) => cpuPerMessageUs(f['connectCpu']!, N), 0, true],
    ['Ready (SUBSCRIBE config, leased config, SUBSCRIBE broadcast)/s', (f) => N / f['readyS']!, 0, false],
    [`**Statuses ingested/s** (${(N * K).toLocaleString('en-US')} QoS 1 retained, until the last PUBACK)`, (f) => (N * K) / f['statusS']!, 0, true],
    ['Service CPU per status, all processes (µs)', (f) => cpuPerMessageUs(f['statusCpu']!, N * K), 0, true],
    ['redis-server CPU per status (µs)', (f) => cpuPerMessageUs(f['statusRedis']!, N * K), 1, false],
    [`Heartbeats/s (${(N * (K + 1)).toLocaleString('en-US')}: QoS 0 + a QoS 1 fence each)`, (f) => (N * (K + 1)) / f['heartbeatS']!, 0, true],
    ['Service CPU per heartbeat, all processes (µs)', (f) => cpuPerMessageUs(f['heartbeatCpu']!, N * (K + 1)), 1, true],
    [`**Broadcast → first player** (ms after the POST began; bare: after the publish)`, (f) => f['first']!, 1, true],
    [`**Broadcast → p99 of ${n} players** (ms)`, (f) => f['p99']!, 0, true],
    ['The POST\'s (bare: PUBACK\'s) own time (ms)', (f) => f['post']!, 0, true],
    ['RSS idle, largest process (MiB)', (f) => f['rssIdle']! / 2 ** 20, 0, true],
    ['RSS per connected player, largest process (KiB; its players only)', (f) => (f['rssConnected']! - f['rssIdle']!) / 2 ** 10 / f['perProcess']!, 1, true],
  ];
  const L = [
    `### 1 process against 2, ${n} players`,
    '',
    `- Date: ${date}`,
    `- Command: \`${command}\``,
    ...machine(),
    `- One redis-server (${process.env['BENCH_REDIS_VERSION'] ?? 'the system\'s'}) and one SQLite file in a temp dir; each service process is bench/device-server.ts with \`REDIS_URL\`; player i connects to process i mod P; broadcasts are POSTed to process 1, so in the 2-process run half the players hear it through Redis pub/sub. ${n} stream players of one mosque registered over the API once (${fmt(registerS, 1)} s). The load generator (this process, one mqtt.js client per player) shares the 2 cores. ${RUNS} runs, alternating which topology goes first; each cell is the range over the runs. Bare aedes: in memory, no hooks, no Redis (bench/bare-broker.ts), the ceiling.`,
    '',
    '| Figure | 1 process | 2 processes | 2 / 1 | bare aedes | 1 process / bare |',
    '|---|---:|---:|---:|---:|---:|',
  ];
  for (const [label, fn, digits, bare] of rows) {
    L.push(`| ${label} | ${cell(1, fn, digits)} | ${cell(2, fn, digits)} | ${ratio(fn)} | ${bare ? cell(0, fn, digits) : ''} | ${bare ? vsBare(1, fn) : ''} |`);
  }
  const other = Math.max(...runs.flatMap((r) => [r[0]!, r[1]!, r[2]!].map((f) => f['other']!)));
  L.push('', `Other processes on the host took up to ${fmt(other, 2)} cores during a phase${other > CONTENDED_CORES ? ' (**contended**: rates are depressed, CPU per message is the steadier figure)' : ''}. Service CPU is the sum over the service processes of user + system time (/proc/<pid>/stat, 10 ms ticks) divided by the messages; redis-server's is its own process's.`, '');
  return L.join('\n');
}

async function main(): Promise<void> {
  const limit = openFilesLimit();
  if (limit && limit.soft < N + 512) throw new Error(`ulimit -n is ${limit.soft}: ${N} players need ${N + 512} (one socket each here and in the broker)`);
  const date = new Date().toISOString();
  const command = args.length ? `npx tsx bench/cluster/cluster.ts ${args.join(' ')}` : 'npm run bench:cluster';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-cluster-'));
  const redis = await startRedisServer();
  process.env['BENCH_REDIS_VERSION'] = `redis ${/redis_version:(\S+)/.exec(await redis.client.info('server'))?.[1] ?? '?'}`;
  try {
    console.log(`registering ${N} players ...`);
    const registrar = new Child('registrar', 'device-server.ts', serviceEnv(dir, redis.url));
    const t0 = performance.now();
    const world = await buildWorld(registrar, String((await registrar.next('ready'))['httpUrl']), path.join(dir, 'minaret.db'), N);
    const registerS = (performance.now() - t0) / 1000;
    await registrar.stop();
    const runs: Array<Record<number, Figures>> = [];
    for (let r = 0; r < RUNS; r++) {
      const run: Record<number, Figures> = {};
      for (const procs of r % 2 === 0 ? [1, 2, 0] : [0, 2, 1]) {
        console.log(`run ${r + 1}: ${procs === 0 ? 'bare aedes' : `${procs} process(es)`} ...`);
        run[procs] = await topology(procs, world, dir, redis);
        console.log(JSON.stringify(run[procs], (_k, v: unknown) => (typeof v === 'number' ? Math.round(v * 1000) / 1000 : v)));
      }
      runs.push(run);
    }
    const text = report(runs, date, command, registerS);
    console.log(`\n${text}`);
    if (WRITE) writeSubsection(SECTION, SECTION_INTRO, text, subsectionOrder);
  } finally {
    await redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

runBench('cluster bench', main);
