/**
 * A fleet on PostgreSQL (the third part of `npm run bench:cluster`): M mosques with P stream players each,
 * two service nodes (bench/device-server.ts) on one redis-server, each figure beside its baseline of the same
 * round:
 *   1. the azaan minute: every mosque's azaan due in the same minute with auto_start, through the scheduler
 *      (bench/cluster/azaan-minute.ts), against the same fan-out on bare aedes;
 *   2. the reconnect storm: every player on one node, that node crashed and started again
 *      (bench/cluster/storm.ts), against bare aedes's CONNECT alone;
 *   3. CPU per connect, status and heartbeat on PostgreSQL against SQLite (same rows: the SQLite world copied by
 *      `minaret migrate-store`), per node, and of PostgreSQL's and Redis's own processes;
 *   4. a sizing table calculated from those costs (bench/cluster/sizing.ts).
 *
 *   npx tsx bench/cluster/fleet.ts [--mosques <m>=1000] [--per-mosque <p>=20] [--messages <k>=1] [--concurrency <c>=200] [--rounds <r>=2] [--fleet <n>=200000] [--reload-s <s>=3600] [--no-write]
 *
 * --rounds-file <f>: each round's figures are written there as it ends ({meta, rounds}); with --replay nothing is
 * measured and the report is made again from that file (a run cut short on a contended host keeps its rounds).
 *
 * --reload-s is every node's SHARED_CACHE_RELOAD_S. Its default of 10 s does not hold at this size on
 * PostgreSQL: a node's reload reads one membership per leased player (one round trip each), a pass outlasts
 * the 10 s, the passes pile up and starve the devices' own writes (bench/RESULTS.md says what was seen); an
 * hour keeps the passes out of the measured windows, on both stores alike.
 *
 * The load generator (this process, one mqtt.js client per player) holds one socket per player: when the
 * open-file limit cannot hold M × P of them, P is lowered to what fits and the report says so.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { CONTENDED_CORES, cli, cpuPerMessageUs, fmt, machine, openFilesLimit, range, ratios, usageError, writeSubsection } from '../support.ts';
import { createFirstSuperadminRow, registerWorld, superadminToken } from '../world/registration.ts';
import { PRAYERS, bareMinute, scheduledMinute, type MinuteFigures } from './azaan-minute.ts';
import { migrateInto, startBenchPostgres, type BenchPostgres } from './postgres.ts';
import { Child, HOST, cpuWindow, runBench, serviceEnv, startRedisServer, type RedisServer, type Spent } from './processes.ts';
import { SECTION, SECTION_INTRO, subsectionOrder } from './sections.ts';
import { sizingTable, type Costs } from './sizing.ts';
import { bareStorm, reconnectStorm, type BareStormFigures, type StormFigures } from './storm.ts';
import { burst, connectAll, endAll, heartbeatBody, readyAll, statusBody, type Fleet, type Player } from './world.ts';

const args = process.argv.slice(2);
const USAGE = 'usage: npx tsx bench/cluster/fleet.ts [--mosques <m>=1000] [--per-mosque <p>=20] [--messages <k>=1] [--concurrency <c>=200] [--rounds <r>=2] [--fleet <n>=200000] [--reload-s <s>=3600] [--rounds-file <f>] [--replay] [--no-write]';
const opts = cli(USAGE, {
  mosques: { type: 'number', default: 1000, min: 1 },
  'per-mosque': { type: 'number', default: 20, min: 1 },
  messages: { type: 'number', default: 1, min: 1 },
  concurrency: { type: 'number', default: 200, min: 1 },
  rounds: { type: 'number', default: 2, min: 1 },
  fleet: { type: 'number', default: 200_000, min: 1 },
  'reload-s': { type: 'number', default: 3600, min: 1 },
  'rounds-file': { type: 'string' },
  replay: { type: 'boolean' },
  'no-write': { type: 'boolean' },
}, args);
const M = opts.mosques;
const limit = openFilesLimit();
// One socket per player in this process, plus what Node, the children's pipes and the API's sockets take.
const FD_RESERVE = 512;
const P = limit ? Math.min(opts['per-mosque'], Math.floor((limit.soft - FD_RESERVE) / M)) : opts['per-mosque'];
const N = M * P;
const K = opts.messages;
const C = opts.concurrency;
const ROUNDS = Math.min(opts.rounds, PRAYERS.length); // each round's azaan is another prayer's slot of the day
const WRITE = !opts['no-write'];
const RELOAD_S = opts['reload-s'];
const nodeEnv = (dir: string, redis: RedisServer, databaseUrl?: string) => ({
  ...serviceEnv(dir, redis.url, { perPlayer: K, handshakes: C, ...(databaseUrl && { databaseUrl }) }),
  SHARED_CACHE_RELOAD_S: String(RELOAD_S),
});
const log = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

type Store = 'sqlite' | 'postgres';
/** Per phase: seconds, and CPU seconds of node 1, node 2, PostgreSQL (0 on SQLite), Redis. */
type Phase = { s: number; n1: number; n2: number; pg: number; redis: number; other: number };
type Phases = Record<'connect' | 'status' | 'heartbeat', Phase>;
interface Round {
  stores: Record<Store, Phases>;
  bareConnect: Phase;
  minute: MinuteFigures;
  bareMinute: MinuteFigures;
  storm: StormFigures;
  /** The storm's return on bare aedes on Redis (absent from rounds files older than it). */
  bareStorm?: BareStormFigures;
}

const mosqueOf = (i: number) => i % M;

/** [node 1, node 2, PostgreSQL?, Redis, generator] of a window over two nodes. */
function phase(spent: Spent, withPg: boolean): Phase {
  const [n1 = 0, n2 = 0] = spent.cpu;
  return { s: spent.seconds, n1, n2, pg: withPg ? spent.cpu[2]! : 0, redis: spent.cpu.at(-2)!, other: spent.otherCores ?? 0 };
}

/** Two nodes on one store: connects, statuses and heartbeats of every player (player i on node i mod 2); on PostgreSQL the azaan minute too. */
async function twoNodes(store: Store, round: number, players: Player[], topicOf: (i: number) => string, dir: string, redis: RedisServer, pg: BenchPostgres, world: { ownerToken: string; mosqueIds: string[] }): Promise<{ phases: Phases; minute: MinuteFigures | null }> {
  const env = nodeEnv(dir, redis, store === 'postgres' ? pg.url : undefined);
  const nodes = [new Child(`${store} 1`, 'device-server.ts', env), new Child(`${store} 2`, 'device-server.ts', env)];
  const fleet: Fleet = { clients: [], watch: null };
  try {
    const readies = await Promise.all(nodes.map((c) => c.next('ready')));
    const urls = readies.map((r) => String(r['mqttUrl']));
    const watched = [...nodes.map((c) => c.pid), ...(store === 'postgres' ? [pg.cpu] : []), redis.pid];
    const withPg = store === 'postgres';
    let w = cpuWindow(watched);
    await connectAll(fleet, players, (i) => urls[i % 2]!, C);
    const connect = phase(w(), withPg);
    log(`${store}: connected in ${connect.s.toFixed(1)} s`);
    await readyAll(fleet, players, topicOf, C);
    const ids = players.map((p) => p.id);
    const state = (k: number) => (k % 2 === 0 ? 'PLAYING' : 'ONLINE');
    w = cpuWindow(watched);
    await burst(fleet, players, K, (i, k) => ({ topic: `devices/${ids[i]}/status`, body: statusBody(state(k), state(k + 1)), qos: 1, retain: true }));
    const status = phase(w(), withPg);
    log(`${store}: statuses in ${status.s.toFixed(1)} s`);
    const hb = heartbeatBody(state(K - 1));
    w = cpuWindow(watched);
    await burst(fleet, players, K + 1, (i, k) => ({ topic: `devices/${ids[i]}/heartbeat`, body: hb, qos: k === K ? 1 : 0, retain: false }));
    const heartbeat = phase(w(), withPg);
    let minute: MinuteFigures | null = null;
    if (store === 'postgres') {
      log(`round ${round + 1}: the azaan minute (${PRAYERS[round]}) ...`);
      minute = await scheduledMinute({
        fleet, bases: readies.map((r) => String(r['httpUrl'])), ownerToken: world.ownerToken, mosqueIds: world.mosqueIds, mosqueOf, prayer: PRAYERS[round]!, watched,
        starts: async () => Object.assign({}, ...(await Promise.all(nodes.map(async (c) => {
          const reply = c.next('starts');
          c.proc.send({ type: 'starts' });
          return (await reply)['starts'] as Record<string, number>;
        })))),
      });
    }
    return { phases: { connect, status, heartbeat }, minute };
  } finally {
    await endAll(fleet);
    await Promise.all(nodes.map((c) => c.stop()));
  }
}

/**
 * Bare aedes: every player's CONNECT alone (the storm's baseline), then the same fan-out as the azaan minute; then,
 * on Redis, the storm's whole return (bench/cluster/storm.ts, bareStorm).
 */
async function bare(players: Player[], redis: RedisServer, stormTopicOf: (i: number) => string): Promise<{ connect: Phase; minute: MinuteFigures; storm: BareStormFigures }> {
  const broker = new Child('bare aedes', 'bare-broker.ts', { HOST });
  const fleet: Fleet = { clients: [], watch: null };
  try {
    const url = String((await broker.next('ready'))['mqttUrl']);
    let w = cpuWindow([broker.pid, redis.pid]);
    await connectAll(fleet, players, () => url, C);
    const s = w();
    const connect: Phase = { s: s.seconds, n1: s.cpu[0]!, n2: 0, pg: 0, redis: 0, other: s.otherCores ?? 0 };
    const topicOf = (m: number) => `mosques/m${m}/broadcast`;
    await Promise.all(fleet.clients.map((c, i) => c.subscribeAsync(topicOf(mosqueOf(i)), { qos: 1 })));
    const minute = await bareMinute({ fleet, url, topicOf, mosques: M, mosqueOf, watched: [broker.pid, redis.pid] });
    await endAll(fleet);
    await broker.stop();
    // Database 1: the retained configs it publishes stay out of Minaret's (database 0), and go at its end.
    const storm = await bareStorm({ players, topicOf: stormTopicOf, redisUrl: `${redis.url}/1`, concurrency: C, watched: [redis.pid] });
    return { connect, minute, storm };
  } finally {
    await endAll(fleet);
    await broker.stop();
  }
}

const n = (x: number) => x.toLocaleString('en-US');
const us = (cpu: number, messages: number) => cpuPerMessageUs(cpu, messages);

interface Meta { date: string; command: string; registerS: number; migrateS: number; pgVersion: string; redisVersion: string }

function report(rounds: Round[], o: Meta): string {
  const col = (fn: (r: Round) => number, digits = 0) => range(rounds.map(fn), digits);
  const rat = (a: (r: Round) => number, b: (r: Round) => number) => ratios(rounds.map(a), rounds.map(b));
  const nodes = (p: Phase) => p.n1 + p.n2;
  const msgs = { connect: N, status: N * K, heartbeat: N * (K + 1) };
  const L = [
    `### A fleet on PostgreSQL: ${n(M)} mosques × ${P} players (${n(N)}), two nodes`,
    '',
    `- Date: ${o.date}`,
    `- Command: \`${o.command}\``,
    ...machine(),
    `- PostgreSQL ${o.pgVersion} (Debian's, a private cluster with fsync=off, as test/platform/postgres.ts starts it) and ${o.redisVersion}, one of each; two service nodes (bench/device-server.ts, \`REDIS_URL\`, and \`DATABASE_URL\` on PostgreSQL), player i on node i mod 2 unless said otherwise. The world (${n(M)} auto-approving mosques with a stream_url, ${n(N)} stream players of ${n(Math.ceil(N / 2000))} members) was registered over the API into SQLite (${fmt(o.registerS, 1)} s) and copied into PostgreSQL by \`minaret migrate-store\` (${fmt(o.migrateS, 1)} s), so both stores hold the same rows. ${rounds.length} rounds, alternating the order of PostgreSQL, SQLite and bare aedes; each cell is the range over the rounds, each ratio against the same round's baseline.`,
    ...(P < opts['per-mosque'] ? [`- **Size lowered**: ${opts['per-mosque']} players per mosque (${n(M * opts['per-mosque'])}) need that many sockets in the load generator and, in the storm, in one node; \`ulimit -n\` is ${limit?.soft} here (hard limit too), so this run has ${P} per mosque (${n(N)}). \`--per-mosque\` sets it.`] : []),
    ...(rounds.length < ROUNDS ? [`- **Cut short**: ${rounds.length} of ${ROUNDS} rounds ran (the report was made from the rounds file, \`--replay\`); each cell is that round's figure, not a range.`] : []),
    '',
    `#### The azaan minute: ${n(M)} scheduled azaans with auto_start in the same minute`,
    '',
    `Each round PATCHes every mosque (as its owner, through both nodes: ${col((r) => r.minute.patchS, 1)} s for ${n(M)}) so that one prayer's azaan is fixed at the next whole minute at least 150 s away, auto_start on (docs/schedule.md); both nodes' schedulers hear the change on the feed, and at the minute one of them claims each slot and starts its broadcast. Times are to each player's \`start\`, from its mosque's start (the broadcast committed and its event handed to the broker, as the node that started it timed it) and from the due minute (bare aedes: both from the instant one publisher sends ${n(M)} retained QoS 1 starts, one per mosque topic, to ${P} subscribers each). CPU is over the window from 2 s before the minute to the last receipt, per player.`,
    '',
    '| Figure | Minaret: scheduler, 2 nodes, PostgreSQL + Redis | bare aedes | Minaret / bare |',
    '|---|---:|---:|---:|',
  ];
  const fromStart = rounds.every((r) => r.minute.fromStart && r.bareMinute.fromStart);
  const minuteRows: Array<[string, (f: MinuteFigures) => number, number]> = [
    ...(fromStart ? [
      [`From its mosque's start: p50 of the players (ms)`, (f: MinuteFigures) => f.fromStart!.p50, 0],
      [`**From its mosque's start: p99 of the ${n(N)} players** (ms; goal ≤ 1 s)`, (f: MinuteFigures) => f.fromStart!.p99, 0],
      [`From its mosque's start: the last player (ms)`, (f: MinuteFigures) => f.fromStart!.last, 0],
    ] as Array<[string, (f: MinuteFigures) => number, number]> : []),
    ['From the due minute: first player (ms)', (f) => f.first, 0],
    ['From the due minute: p50 of the players (ms)', (f) => f.p50, 0],
    [`${fromStart ? '' : '**'}From the due minute: p99 of the ${n(N)} players${fromStart ? '' : '**'} (ms)`, (f) => f.p99, 0],
    ['From the due minute: the last player (ms)', (f) => f.last, 0],
    [`p99 over the mosques of the spread within one (its last player − its first, ms)`, (f) => f.spreadP99, 0],
    ['Service CPU per player, all nodes (µs)', (f) => us(f.spent.cpu[0]! + (f.spent.cpu.length > 3 ? f.spent.cpu[1]! : 0), N), 0],
  ];
  for (const [label, fn, d] of minuteRows) L.push(`| ${label} | ${col((r) => fn(r.minute), d)} | ${col((r) => fn(r.bareMinute), d)} | ${rat((r) => fn(r.minute), (r) => fn(r.bareMinute))} |`);
  L.push(`| PostgreSQL / Redis CPU per player (µs) | ${col((r) => us(r.minute.spent.cpu[2]!, N), 1)} / ${col((r) => us(r.minute.spent.cpu[3]!, N), 1)} | | |`);
  if (fromStart) {
    const worst = Math.max(...rounds.map((r) => r.minute.fromStart!.p99));
    L.push('', `Goal, p99 from each mosque's start to its players' \`start\` ≤ 1 s: **${worst <= 1000 ? 'met' : 'not met'}** (${fmt(worst, 0)} ms in the worst round). From the due minute, the p99 also holds the time the schedulers take to start the last of the ${n(M)} mosques.`);
  }
  const stormService = (r: Round) => us(r.storm.spent.cpu[0]! + r.storm.spent.cpu[1]!, N);
  const bareConnect = (r: Round) => us(r.bareConnect.n1, N);
  const worstRatio = Math.max(...rounds.map((r) => stormService(r) / bareConnect(r)));
  const withBareStorm = rounds.filter((r) => r.bareStorm);
  const bareStormCpu = (r: Round) => us(r.bareStorm!.spent.cpu[0]!, N);
  const worstSameWork = withBareStorm.length === rounds.length ? Math.max(...rounds.map((r) => stormService(r) / bareStormCpu(r))) : Number.NaN;
  L.push(
    '',
    `#### The reconnect storm: ${n(N)} players on one node, the node crashed and started again`,
    '',
    `Every player connected to node 1 (node 2 up, idle but for its scheduler and the feed); node 1 killed (SIGKILL) and started again on the same PostgreSQL and Redis; every player then comes back to it with ${C} CONNECTs in flight (the handshakes one address may have) and does what firmware does after CONNACK (docs/firmware.md): SUBSCRIBE its config and wait for the leased one, SUBSCRIBE its mosque's broadcast topic, publish status ONLINE (QoS 1, retained) and a heartbeat. Done at the last status PUBACK; then the store is polled until it holds every player ONLINE, connected and heard from since the crash. CPU over the window from the restarted node's ready to the last PUBACK. Baseline: bare aedes's CONNECT → CONNACK alone, ${n(N)} players, ${C} in flight.`,
    '',
    '| Figure | Minaret | bare aedes | Minaret / bare |',
    '|---|---:|---:|---:|',
    `| Wall time, restarted node ready → every player ONLINE (s; bare: CONNECT alone, in memory) | ${col((r) => r.storm.seconds, 1)} | ${col((r) => r.bareConnect.s, 1)} | ${rat((r) => r.storm.seconds, (r) => r.bareConnect.s)} |`,
    `| Wall time, crash → every player ONLINE (s; the restart included) | ${col((r) => r.storm.fromCrashS, 1)} | | |`,
    `| Crash → the store holds every player ONLINE (s) | ${col((r) => r.storm.storedS, 1)} (${col((r) => r.storm.stored)} of ${n(N)}) | | |`,
    `| Statuses never PUBACKed within 60 s (the service dropped their write) | ${col((r) => r.storm.unacked ?? Number.NaN)} | | |`,
    `| **Service CPU per device, both nodes (µs; bare: CONNECT alone, in memory)** | ${col(stormService)} | ${col(bareConnect)} | ${rat(stormService, bareConnect)} |`,
    `| The same against Minaret's own plain CONNECT (2 nodes on PostgreSQL, next table) | | | ${rat(stormService, (r) => us(nodes(r.stores.postgres.connect), N))} |`,
    ...(withBareStorm.length === rounds.length ? [
      `| **The same return on bare aedes on Redis**: CPU per device, broker (µs) | ${col(stormService)} | ${col(bareStormCpu)} | ${rat(stormService, bareStormCpu)} |`,
      `| The same return on bare aedes on Redis: wall time (s) | ${col((r) => r.storm.seconds, 1)} | ${col((r) => r.bareStorm!.seconds, 1)} | ${rat((r) => r.storm.seconds, (r) => r.bareStorm!.seconds)} |`,
      `| The same return on bare aedes on Redis: Redis CPU per device (µs) | ${col((r) => us(r.storm.spent.cpu[3]!, N))} | ${col((r) => us(r.bareStorm!.spent.cpu[1]!, N))} | ${rat((r) => us(r.storm.spent.cpu[3]!, N), (r) => us(r.bareStorm!.spent.cpu[1]!, N))} |`,
    ] : []),
    `| Restarted node's CPU per device (µs; bare: CONNECT alone) | ${col((r) => us(r.storm.spent.cpu[0]!, N))} | | ${rat((r) => us(r.storm.spent.cpu[0]!, N), bareConnect)} |`,
    `| PostgreSQL / Redis CPU per device (µs) | ${col((r) => us(r.storm.spent.cpu[2]!, N))} / ${col((r) => us(r.storm.spent.cpu[3]!, N))} | | |`,
    '',
    `Goal, service CPU per device ≤ 1.5× bare aedes's CONNECT: **${worstRatio <= 1.5 ? 'met' : 'not met'}** (${fmt(worstRatio, 2)}× in the worst round). The storm does more than a CONNECT (two SUBSCRIBEs, a leased config, a status and a heartbeat per device), which is what a device does after every reconnect; the plain CONNECT on two nodes is in the next table.${Number.isNaN(worstSameWork) ? '' : ` Against the same return on bare aedes with its persistence and pub/sub in Redis (the parts several hosts need, as their libraries ship them; each player's leased config retained beforehand), the service spends ${fmt(worstSameWork, 2)}× its CPU per device in the worst round.`}`,
    '',
    `#### PostgreSQL against SQLite: CPU per message, same rows, same workload`,
    '',
    `Two nodes on each store, both on Redis; ${n(N)} CONNECTs (${C} in flight), ${n(N * K)} statuses (QoS 1 retained, until the last PUBACK), ${n(N * (K + 1))} heartbeats (QoS 0 + a QoS 1 fence each). Per node: each node's CPU over its own half of the messages (both nodes' figures in the range). PostgreSQL's CPU is every process of its cluster (user + sys from /proc/<pid>/stat: the postmaster with its reaped backends' cutime/cstime, and every live child); Redis's is redis-server's.`,
    '',
    '| Figure | SQLite | PostgreSQL | PostgreSQL / SQLite |',
    '|---|---:|---:|---:|',
  );
  for (const key of ['connect', 'status', 'heartbeat'] as const) {
    const m = msgs[key];
    const of = (s: Store) => (r: Round) => r.stores[s][key];
    const perNode = (s: Store) => range(rounds.flatMap((r) => [us(of(s)(r).n1, m / 2), us(of(s)(r).n2, m / 2)]), key === 'heartbeat' ? 1 : 0);
    const all = (s: Store) => (r: Round) => us(nodes(of(s)(r)), m);
    const d = key === 'heartbeat' ? 1 : 0;
    L.push(
      `| **${key === 'connect' ? 'Connects' : key === 'status' ? 'Statuses' : 'Heartbeats'}/s** | ${col((r) => m / of('sqlite')(r).s)} | ${col((r) => m / of('postgres')(r).s)} | ${rat((r) => m / of('postgres')(r).s, (r) => m / of('sqlite')(r).s)} |`,
      `| Service CPU per ${key}, all nodes (µs) | ${col(all('sqlite'), d)} | ${col(all('postgres'), d)} | ${rat(all('postgres'), all('sqlite'))} |`,
      `| Service CPU per ${key}, per node (µs) | ${perNode('sqlite')} | ${perNode('postgres')} | |`,
      `| PostgreSQL CPU per ${key} (µs) | | ${col((r) => us(of('postgres')(r).pg, m), 1)} | |`,
      `| Redis CPU per ${key} (µs) | ${col((r) => us(of('sqlite')(r).redis, m), 1)} | ${col((r) => us(of('postgres')(r).redis, m), 1)} | ${rat((r) => us(of('postgres')(r).redis, m), (r) => us(of('sqlite')(r).redis, m))} |`,
    );
  }
  L.push(`| Bare aedes CPU per connect, one broker (µs) | ${col(bareConnect)} | | |`);
  const worst = (fn: (r: Round) => number) => Math.max(...rounds.map(fn));
  const costs: Costs = {
    heartbeat: { service: worst((r) => us(nodes(r.stores.postgres.heartbeat), msgs.heartbeat)), postgres: worst((r) => us(r.stores.postgres.heartbeat.pg, msgs.heartbeat)) },
    status: { service: worst((r) => us(nodes(r.stores.postgres.status), msgs.status)), postgres: worst((r) => us(r.stores.postgres.status.pg, msgs.status)) },
    minute: { service: worst((r) => us(r.minute.spent.cpu[0]! + r.minute.spent.cpu[1]!, N)), postgres: worst((r) => us(r.minute.spent.cpu[2]!, N)) },
    storm: { service: worst(stormService), postgres: worst((r) => us(r.storm.spent.cpu[2]!, N)) },
  };
  const other = Math.max(...rounds.flatMap((r) => [...Object.values(r.stores).flatMap((p) => Object.values(p).map((x) => x.other)), r.bareConnect.other, r.minute.spent.otherCores ?? 0, r.bareMinute.spent.otherCores ?? 0, r.storm.spent.otherCores ?? 0]));
  L.push(
    '',
    `Other processes on the host took up to ${fmt(other, 2)} cores during a phase${other > CONTENDED_CORES ? ' (**contended**: rates and latencies are depressed; CPU per message is the steadier figure)' : ''}. The load generator (this process) shares the 2 cores with the nodes, PostgreSQL and Redis.`,
    '',
    `#### Sizing for ${n(opts.fleet)} players (calculated)`,
    '',
    ...sizingTable(costs, opts.fleet),
    '',
  );
  return L.join('\n');
}

async function main(): Promise<void> {
  if (opts.replay) {
    if (!opts['rounds-file']) usageError(USAGE, '--replay needs --rounds-file');
    const saved = JSON.parse(fs.readFileSync(opts['rounds-file'], 'utf8')) as { meta: Meta; rounds: Round[] };
    const text = report(saved.rounds, saved.meta);
    console.log(text);
    if (WRITE) writeSubsection(SECTION, SECTION_INTRO, text, subsectionOrder);
    return;
  }
  if (P < 1) throw new Error(`ulimit -n is ${limit?.soft}: not one player per mosque fits`);
  if (P < opts['per-mosque']) console.log(`ulimit -n ${limit?.soft}: ${P} players per mosque (${N}), not ${opts['per-mosque']}`);
  const date = new Date().toISOString();
  const command = args.length ? `npx tsx bench/cluster/fleet.ts ${args.join(' ')}` : 'npm run bench:cluster';
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-fleet-'));
  const redis = await startRedisServer();
  const redisVersion = `redis ${/redis_version:(\S+)/.exec(await redis.client.info('server'))?.[1] ?? '?'}`;
  let pg: BenchPostgres | null = null;
  try {
    pg = await startBenchPostgres();
    console.log(`registering ${M} mosques and ${N} players ...`);
    const dbFile = path.join(dir, 'minaret.db');
    const registrar = new Child('registrar', 'device-server.ts', nodeEnv(dir, redis));
    const t0 = performance.now();
    await createFirstSuperadminRow(dbFile);
    const base = String((await registrar.next('ready'))['httpUrl']);
    const root = await superadminToken(base, async () => String((await registrar.next('otp', 30_000))['code']));
    const registered = await registerWorld(base, root, {
      mosques: Array.from({ length: M }, (_, m) => ({ name: `Bench Masjid ${m + 1}`, auto_approve_members: true, stream_url: `https://radio.example.org/bench-${m + 1}` })),
      members: Math.max(1, Math.ceil(N / 2000)), devices: N, concurrency: 20, progress: log,
      confirmCode: async () => String((await registrar.next('otp', 30_000))['code']), confirmOneAtATime: true,
    });
    const registerS = (performance.now() - t0) / 1000;
    await registrar.stop();
    const world = { ownerToken: registered.ownerToken, mosqueIds: registered.mosqueIds };
    const players: Player[] = registered.devices.map((d) => ({ id: d.id, password: d.password }));
    const topicOf = (i: number) => `mosques/${world.mosqueIds[mosqueOf(i)]}/broadcast`;
    const t1 = performance.now();
    migrateInto(dbFile, pg.url);
    const migrateS = (performance.now() - t1) / 1000;
    console.log(`registered in ${registerS.toFixed(1)} s, copied into PostgreSQL in ${migrateS.toFixed(1)} s`);
    const rounds: Round[] = [];
    const meta: Meta = { date, command, registerS, migrateS, pgVersion: pg.version, redisVersion };
    for (let r = 0; r < ROUNDS; r++) {
      const round: Omit<Partial<Round>, 'stores'> & { stores: Partial<Record<Store, Phases>> } = { stores: {} };
      for (const what of r % 2 === 0 ? (['postgres', 'sqlite', 'bare'] as const) : (['bare', 'sqlite', 'postgres'] as const)) {
        log(`round ${r + 1}: ${what} ...`);
        if (what === 'bare') {
          const b = await bare(players, redis, topicOf);
          Object.assign(round, { bareConnect: b.connect, bareMinute: b.minute, bareStorm: b.storm });
        } else {
          const t = await twoNodes(what, r, players, topicOf, dir, redis, pg, world);
          round.stores[what] = t.phases;
          if (t.minute) round.minute = t.minute;
        }
      }
      log(`round ${r + 1}: the reconnect storm ...`);
      round.storm = await reconnectStorm({
        players, topicOf, env: nodeEnv(dir, redis, pg.url), databaseUrl: pg.url, concurrency: C, watched: [pg.cpu, redis.pid], log,
      });
      rounds.push(round as Round); // every part was set above, or the round threw
      if (opts['rounds-file']) fs.writeFileSync(opts['rounds-file'], JSON.stringify({ meta, rounds }));
      console.log(JSON.stringify(round, (_k, v: unknown) => (typeof v === 'number' ? Math.round(v * 1000) / 1000 : v)));
    }
    const text = report(rounds, meta);
    console.log(`\n${text}`);
    if (WRITE) writeSubsection(SECTION, SECTION_INTRO, text, subsectionOrder);
  } finally {
    await pg?.stop();
    await redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

runBench('fleet bench', main);
