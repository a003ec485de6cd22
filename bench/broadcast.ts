/**
 * Broadcast benchmark (the second half of `npm run bench`): how fast a broadcast reaches N entitled stream
 * players, how fast a ban reaches a player's config, and a bare aedes broker doing the same fan-out in the
 * same run as the baseline.
 *
 *   npx tsx bench/broadcast.ts [--players <n>=2000] [--runs <r>=3] [--bans <b>=50] [--http-concurrency <h>=50]
 *                              [--connect-concurrency <c>=40] [--quiet-wait <s>=5] [--timeout <s>] [--no-write] [--json <file>]
 *   BENCH_SERVICE_ROOT=<checkout> npx tsx bench/broadcast.ts ...   Minaret from another checkout, through that checkout's
 *                                                                  own bench/broadcast-server.ts (bench/compare/compare.ts)
 *
 * Everything runs on 127.0.0.1. The service runs in a child process (bench/broadcast-server.ts) with
 * NODE_ENV=test, ports 0, a temp database and data dir; this process is the load generator (one plain
 * mqtt.js client per player) and the notifier's webhook peer (it reads the superadmin's OTP from there).
 *
 * World, all through the real API except the superadmin row (written into the SQLite file first):
 * superadmin 2FA login -> an owner (signup) -> a mosque with a stream_url owned by them -> N members sign up,
 * join, are approved by the owner and register one stream player each -> every player connects
 * (clientId = username = its id, MQTT 3.1.1, keepalive 300), subscribes to devices/{id}/config and, once a
 * config with a lease arrives, to mosques/{mosque}/broadcast (QoS 1).
 *
 * Measured:
 *   fan-out  R times: POST /mosques/{id}/broadcasts by the owner -> every player has the start event; the
 *            start is then stopped (POST .../stop) and every player waits for the stop event. Per run:
 *            p50/p99/max over the players of (receipt - POST start), and the POST's own response time;
 *            the table gives the median over the runs. Just before each POST, a GET /mosques/{id} by the same
 *            client times the HTTP door alone (the part of the trigger bare aedes has no counterpart for).
 *   ban      B players (spread over the N) one after the other: PATCH /memberships/{id} {status:'banned'}
 *            by the owner -> that player receives its retained config without lease and stream_url and
 *            with unbound_reason 'membership_lapsed'. Then one more broadcast checks that the N - B still
 *            entitled players get it and none of the banned ones do (a check, not a figure).
 *   bare     a bare aedes broker (no hooks, bench/broadcast-server.ts bare) in its own child process, N
 *            plain subscribers of one topic (QoS 1), one publisher: publish (QoS 1, retained, same payload
 *            size) -> every subscriber has it, R times, p50/p99/max, median of the runs.
 * Writes its table into bench/RESULTS.md under "## Broadcasts (npm run bench, bench/broadcast.ts)", one
 * subsection per player count, leaving every other section as it finds it (--no-write: print only).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import { CONTENDED_CORES, cli, fmt, openFilesLimit, percentile, ratio, serviceRoot, writeJson } from './support.ts';
import { api, registerWorld, createFirstSuperadminRow, superadminToken } from './world/registration.ts';
import { cpuWindow, killChildrenSync, serverChild, sleep, startWebhook, waitQuiet, type Child, type CpuSpent, type Webhook } from './fanout/children.ts';
import { FANOUT_TIMEOUT_MS, Watch, connectFleet, endFleet, minaretFanout, newFleet, summarize, type Fleet, type FanoutRun } from './fanout/players.ts';
import { delivered, head, num, otherCores, perRun as perRunOf, writeFanoutSubsection } from './fanout/report.ts';

const SECTION = '## Broadcasts (npm run bench, bench/broadcast.ts)';
const HOST = '127.0.0.1';
const STREAM_URL = 'https://radio.example.org/bench-noor';
/** Sockets and files this process needs besides one per player. */
const FD_MARGIN = 512;

// ---------------------------------------------------------------------------------------------------
// Options

interface Options {
  players: number;
  runs: number;
  bans: number;
  httpConcurrency: number;
  connectConcurrency: number;
  quietWaitS: number;
  timeoutS: number;
  write: boolean;
  /** Also write the fan-out figures as JSON to this file (bench/compare/compare.ts reads it). */
  json: string | undefined;
}

const USAGE =
  'usage: npx tsx bench/broadcast.ts [--players <n>=2000] [--runs <r>=3] [--bans <b>=50] [--http-concurrency <h>=50] ' +
  '[--connect-concurrency <c>=40] [--quiet-wait <s>=5] [--timeout <s>] [--no-write] [--json <file>]';

function parseOptions(argv: string[]): Options {
  const a = cli(USAGE, {
    players: { type: 'number', default: 2000, min: 2 },
    runs: { type: 'number', default: 3, min: 1 },
    bans: { type: 'number', default: 50 },
    'http-concurrency': { type: 'number', default: 50, min: 1 },
    // 40 connects in flight: the broker refuses handshakes past MQTT_MAX_HANDSHAKES_PER_ADDRESS (50) from one
    // address (docs/settings.md).
    'connect-concurrency': { type: 'number', default: 40, min: 1 },
    'quiet-wait': { type: 'number', default: 5 },
    timeout: { type: 'number', min: 30 },
    'no-write': { type: 'boolean' },
    json: { type: 'string' },
  }, argv);
  return {
    players: a.players, runs: a.runs, bans: a.bans, httpConcurrency: a['http-concurrency'], connectConcurrency: a['connect-concurrency'],
    quietWaitS: a['quiet-wait'], timeoutS: a.timeout ?? 0, write: !a['no-write'], json: a.json,
  };
}

/** The whole-run budget: two minutes of fixed cost plus a generous share per player. */
const defaultTimeoutS = (o: Options) => Math.ceil(180 + o.players * 0.08 + (2 * o.runs + 2) * o.quietWaitS + o.bans * 0.5);

// ---------------------------------------------------------------------------------------------------
// Host limits: every player is one socket in this process (and one in the broker child)

/** N if the open-file limit allows it, else a smaller N with a clear message (nothing is raised). */
function fitPlayers(n: number): { players: number; note: string | null } {
  const limit = openFilesLimit();
  if (!limit || limit.soft >= n + FD_MARGIN) return { players: n, note: null };
  const fitted = Math.max(2, limit.soft - FD_MARGIN);
  const note =
    `Open-file limit too low for ${n.toLocaleString('en-US')} players: \`ulimit -n\` is ${limit.soft} (hard ${limit.hard}); each player is one socket in the ` +
    `load generator and one in the broker (separate processes, each with this limit), so each needs ${(n + FD_MARGIN).toLocaleString('en-US')}. ` +
    `Running with ${fitted.toLocaleString('en-US')} players instead; for ${n.toLocaleString('en-US')}, raise the limit of your shell (\`ulimit -n ${n + FD_MARGIN}\`, within the hard limit) and rerun.`;
  return { players: fitted, note };
}

let tempDir: string | null = null;
let webhook: Webhook | null = null;

function cleanupSync(): void {
  killChildrenSync();
  webhook?.close();
  webhook = null;
  if (tempDir) fs.rmSync(tempDir, { recursive: true, force: true });
  tempDir = null;
}

// ---------------------------------------------------------------------------------------------------
// Small helpers

const median = (values: number[]) => percentile(values, 50);

// ---------------------------------------------------------------------------------------------------
// Setting up the world through the API

interface Registered {
  id: string;
  password: string;
  membershipId: string;
}

interface World {
  base: string;
  ownerToken: string;
  mosqueId: string;
  players: Registered[];
  setupS: number;
}

/** The world of bench/world/registration.ts: one mosque with a stream_url, one member (approved by the owner) per player. */
async function buildWorld(base: string, webhook: Webhook, opts: Options): Promise<World> {
  const t0 = performance.now();
  const root = await superadminToken(base, () => webhook.nextCode('superadmin_otp', 30_000));
  const world = await registerWorld(base, root, {
    mosques: [{ name: 'Bench Masjid', stream_url: STREAM_URL }],
    members: opts.players, devices: opts.players, concurrency: opts.httpConcurrency, progress: (line) => console.log(`  ${line}`),
    confirmCode: (email) => webhook.nextCode('confirm_address', 60_000, email),
  });
  const players = world.devices.map((d) => ({ id: d.id, password: d.password, membershipId: d.membershipId! }));
  return { base, ownerToken: world.ownerToken, mosqueId: world.mosqueIds[0]!, players, setupS: (performance.now() - t0) / 1000 };
}

async function bareFanout(fleet: Fleet, publisher: mqtt.MqttClient, topic: string, child: Child): Promise<FanoutRun> {
  const n = fleet.conns.length;
  const id = crypto.randomUUID();
  const event = (action: 'start' | 'stop') =>
    Buffer.from(JSON.stringify({ v: '1.0', broadcast_id: id, kind: 'azaan', action, ...(action === 'start' && { stream_url: STREAM_URL }), ts: Math.floor(Date.now() / 1000) }));
  const publish = (body: Buffer) =>
    new Promise<void>((resolve, reject) => publisher.publish(topic, body, { qos: 1, retain: true }, (err) => (err ? reject(err) : resolve())));
  const watch = new Watch(n, 'start', null);
  fleet.watch = watch;
  const body = event('start');
  const close = cpuWindow(child);
  const t0 = performance.now();
  await publish(body);
  const triggerMs = performance.now() - t0;
  await watch.all(FANOUT_TIMEOUT_MS);
  const cpu = close();
  const start = summarize(watch, t0, id);
  const stopWatch = new Watch(n, 'stop', null);
  fleet.watch = stopWatch;
  const s0 = performance.now();
  await publish(event('stop'));
  await stopWatch.all(FANOUT_TIMEOUT_MS);
  const stop = summarize(stopWatch, s0, id);
  fleet.watch = null;
  return { ...start, expected: n, triggerMs, doorMs: Number.NaN, cpu, stopP50: stop.p50, stopP99: stop.p99, stopReceived: stop.received, reportMs: Number.NaN };
}

// ---------------------------------------------------------------------------------------------------
// Bans

interface BanResult {
  latencies: number[];
  patchMs: number[];
  missing: number;
  /** The check broadcast after the bans: still-entitled players reached / expected, banned players reached. */
  afterReached: number;
  afterExpected: number;
  afterBannedReached: number;
}

const BAN_TIMEOUT_MS = 10_000;

async function bans(fleet: Fleet, world: World, b: number): Promise<BanResult> {
  const n = fleet.conns.length;
  const sample = Array.from({ length: Math.min(b, n - 1) }, (_, k) => Math.floor(((k + 0.5) * n) / Math.min(b, n - 1)));
  const latencies: number[] = [];
  const patchMs: number[] = [];
  let missing = 0;
  for (const i of sample) {
    const player = world.players[i]!;
    let t0 = 0;
    const got = new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => resolve(null), BAN_TIMEOUT_MS);
      fleet.configWaiters.set(i, (t, cfg) => {
        if (cfg['lease'] !== undefined || cfg['stream_url'] !== undefined || cfg['unbound_reason'] !== 'membership_lapsed') return;
        clearTimeout(timer);
        resolve(t);
      });
    });
    t0 = performance.now();
    await api(world.base, 'PATCH', `/api/v1/memberships/${player.membershipId}`, { status: 'banned' }, world.ownerToken);
    patchMs.push(performance.now() - t0);
    const t = await got;
    fleet.configWaiters.delete(i);
    if (t === null) missing++;
    else latencies.push(t - t0);
    await sleep(20);
  }
  // Check: one more broadcast reaches every still-entitled player and none of the banned ones.
  const banned = new Set(sample);
  const entitled = new Set<number>();
  for (let i = 0; i < n; i++) if (!banned.has(i)) entitled.add(i);
  const watch = new Watch(n, 'start', entitled);
  fleet.watch = watch;
  const res = await api<{ id: string }>(world.base, 'POST', `/api/v1/mosques/${world.mosqueId}/broadcasts`, { kind: 'announcement', title: 'after the bans' }, world.ownerToken);
  await watch.all(FANOUT_TIMEOUT_MS);
  await sleep(1000); // time for a wrongly delivered copy to a banned player to show up
  let afterReached = 0;
  let afterBannedReached = 0;
  for (let i = 0; i < n; i++) {
    if (Number.isNaN(watch.at[i]!)) continue;
    if (banned.has(i)) afterBannedReached++;
    else afterReached++;
  }
  fleet.watch = null;
  await api(world.base, 'POST', `/api/v1/mosques/${world.mosqueId}/broadcasts/${res.id}/stop`, undefined, world.ownerToken);
  return { latencies, patchMs, missing, afterReached, afterExpected: entitled.size, afterBannedReached };
}

// ---------------------------------------------------------------------------------------------------
// Formatting and RESULTS.md

const ms = (x: number) => fmt(x, x >= 100 ? 0 : x >= 10 ? 1 : 2);

interface Outcome {
  opts: Options;
  requested: number;
  fdNote: string | null;
  world: World;
  minaretFleet: Fleet;
  bareFleet: Fleet;
  m: FanoutRun[];
  b: FanoutRun[];
  ban: BanResult;
  date: string;
  command: string;
}

const med = (runs: FanoutRun[], f: (r: FanoutRun) => number) => median(runs.map(f));
const perRun = (runs: FanoutRun[], f: (r: FanoutRun) => number) => perRunOf(runs, f, ms);

function report(o: Outcome): string {
  const { opts, m, b, ban } = o;
  const n = opts.players;
  const L: string[] = [];
  L.push(...head(`${num(n)} players`, o.date, o.command));
  if (o.fdNote) L.push(`- **Players reduced from ${num(o.requested)}**: ${o.fdNote}`);
  L.push(
    `- World: one mosque (with a stream_url), ${num(n)} members who each signed up, joined, were approved by the owner and registered one stream player, all over the HTTP API ` +
      `(${fmt(o.world.setupS, 1)} s, ${opts.httpConcurrency} requests in flight); every player connected (${opts.connectConcurrency} in flight, ${fmt(o.minaretFleet.connectS, 1)} s), got its leased config and subscribed to the broadcast topic (QoS 1). ` +
      `The service (and then the bare broker) runs in its own child process; this process is the load generator with one mqtt.js client per player, on the same ${os.availableParallelism()} cores.`,
  );
  L.push('');
  L.push('| Figure (median of the runs) | Minaret | bare aedes | Minaret / bare |');
  L.push('|---|---:|---:|---:|');
  const row = (name: string, mv: string, bv: string, r: string) => L.push(`| ${name} | ${mv} | ${bv} | ${r} |`);
  const both = (label: string, f: (r: FanoutRun) => number, bold = false) => {
    const [s, e] = bold ? ['**', '**'] : ['', ''];
    row(`${s}${label}${e}`, `${s}${ms(med(m, f))}${e}`, `${s}${ms(med(b, f))}${e}`, `${s}${ratio(med(m, f), med(b, f))}${e}`);
  };
  both(`Start event → all ${num(n)} players, p50 (ms)*`, (r) => r.p50, true);
  both(`Start event → all ${num(n)} players, p99 (ms)*`, (r) => r.p99, true);
  both('Start event → last player (max, ms)*', (r) => r.max);
  both('Start event → first player (ms)*', (r) => r.first);
  both('Spread, first → last player (ms): the fan-out itself', (r) => r.max - r.first);
  row('Trigger response (ms): POST /broadcasts → 201 (bare: publish → PUBACK)', ms(med(m, (r) => r.triggerMs)), ms(med(b, (r) => r.triggerMs)), ratio(med(m, (r) => r.triggerMs), med(b, (r) => r.triggerMs)));
  row('HTTP door alone (ms): GET /mosques/{id} → 200 just before the POST (same client, token and gate, no broadcast)', ms(med(m, (r) => r.doorMs)), '—', '');
  row('Delivery report alone (ms): GET /broadcasts/{bid} → 200 (the POST answers with it pending)', ms(med(m, (r) => r.reportMs)), '—', '');
  both('Stop event → players, p50 (ms)', (r) => r.stopP50);
  both('Stop event → players, p99 (ms)', (r) => r.stopP99);
  row(
    'Broker CPU per fan-out (ms, trigger → last receipt)',
    ms(med(m, (r) => r.cpu.brokerCpuS * 1000)),
    ms(med(b, (r) => r.cpu.brokerCpuS * 1000)),
    ratio(med(m, (r) => r.cpu.brokerCpuS), med(b, (r) => r.cpu.brokerCpuS)),
  );
  row(
    `All ${num(n)} receivers ready (s): connected and subscribed (Minaret: and leased), ${opts.connectConcurrency} in flight`,
    fmt(o.minaretFleet.connectS, 1),
    fmt(o.bareFleet.connectS, 1),
    ratio(o.minaretFleet.connectS, o.bareFleet.connectS),
  );
  const mc = o.minaretFleet.connectCpu;
  const bc = o.bareFleet.connectCpu;
  const bg = (c: CpuSpent | null) => (c?.bgCores == null ? 'n/a' : fmt(c.bgCores, 2));
  row(
    'Broker CPU to get them ready (s) [cores taken by other processes meanwhile]',
    `${fmt(mc?.brokerCpuS ?? Number.NaN, 1)} [${bg(mc)}]`,
    `${fmt(bc?.brokerCpuS ?? Number.NaN, 1)} [${bg(bc)}]`,
    ratio(mc?.brokerCpuS ?? Number.NaN, bc?.brokerCpuS ?? Number.NaN),
  );
  row(
    `**Ban → player's new config, p50 / p99 (ms)** (${ban.latencies.length} bans)`,
    `**${ms(percentile(ban.latencies, 50))} / ${ms(percentile(ban.latencies, 99))}**`,
    '—',
    '',
  );
  row('Ban: PATCH /memberships/{id} response p50 / p99 (ms)', `${ms(percentile(ban.patchMs, 50))} / ${ms(percentile(ban.patchMs, 99))}`, '—', '');
  L.push('');
  L.push(
    `Runs (${opts.runs} start/stop cycles each): Minaret p50 ${perRun(m, (r) => r.p50)}, p99 ${perRun(m, (r) => r.p99)}, max ${perRun(m, (r) => r.max)}, first ${perRun(m, (r) => r.first)}, POST ${perRun(m, (r) => r.triggerMs)}, door ${perRun(m, (r) => r.doorMs)} ms; ` +
      `bare p50 ${perRun(b, (r) => r.p50)}, p99 ${perRun(b, (r) => r.p99)}, max ${perRun(b, (r) => r.max)}, first ${perRun(b, (r) => r.first)} ms. ` +
      `Delivered: Minaret ${delivered(m)} (wrong broadcast_id: ${m.reduce((a, r) => a + r.wrongId, 0)}), bare ${delivered(b)}; ` +
      `other processes during the fan-outs: ${otherCores(m)} cores (Minaret), ${otherCores(b)} (bare). ` +
      `Ban → config max ${ms(percentile(ban.latencies, 100))} ms, ${ban.missing} of ${ban.latencies.length + ban.missing} not seen within ${BAN_TIMEOUT_MS / 1000} s. ` +
      `Check broadcast after the bans: ${num(ban.afterReached)}/${num(ban.afterExpected)} still-entitled players got it, ${ban.afterBannedReached} of the banned did. ` +
      `Connections lost during the run: ${o.minaretFleet.lost()} (Minaret), ${o.bareFleet.lost()} (bare).`,
  );
  L.push('');
  L.push(
    '\\* Minaret: from the start of POST /api/v1/mosques/{id}/broadcasts (trigger admin) to each player\'s receipt of the start event on `mosques/{id}/broadcast`; ' +
      'bare aedes: from one QoS 1 retained publish of the same-sized payload by a plain client to each of N plain subscribers\' receipt. Both include the load generator\'s own time to ' +
      `read ${num(n)} deliveries on its one event loop. p50/p99/max are over the ${num(n)} receivers of one run; each figure is the median over ${opts.runs} runs (a start, all received, a stop, all received). ` +
      `Ban: from the start of PATCH /api/v1/memberships/{id} {status:"banned"} by the mosque owner to that player receiving its retained config without lease and stream_url (unbound_reason membership_lapsed), one ban at a time${ban.latencies.length < 100 ? ' (fewer than 100 bans: the p99 is the slowest one)' : ''}. ` +
      'Broker CPU is the child process\'s user + system time from /proc/<pid>/stat (10 ms ticks).',
  );
  L.push('');
  L.push(interpret(o));
  L.push('');
  return L.join('\n');
}

function interpret(o: Outcome): string {
  const { m, b, ban, opts } = o;
  const p50 = med(m, (r) => r.p50);
  const p99 = med(m, (r) => r.p99);
  const bp50 = med(b, (r) => r.p50);
  const bp99 = med(b, (r) => r.p99);
  const post = med(m, (r) => r.triggerMs);
  const first = med(m, (r) => r.first);
  const parts: string[] = [];
  parts.push(
    `**Reading.** A broadcast reaches half of ${num(opts.players)} entitled players ${ms(p50)} ms after the trigger request starts and 99 % of them after ${ms(p99)} ms; ` +
      `bare aedes fans one publish out to as many subscribers in ${ms(bp50)} / ${ms(bp99)} ms (${ratio(p50, bp50)} / ${ratio(p99, bp99)}).`,
  );
  const spread = med(m, (r) => r.max - r.first);
  const bSpread = med(b, (r) => r.max - r.first);
  const reportMs = med(m, (r) => r.reportMs);
  parts.push(
    `The first player hears the start ${ms(first)} ms after the POST began (bare aedes: first subscriber ${ms(med(b, (r) => r.first))} ms after its publish); ` +
      `the fan-out itself (first → last player) takes ${ms(spread)} ms against ${ms(bSpread)} ms for bare aedes (${ratio(spread, bSpread)}), though every Minaret delivery passes \`authorizeForward\`, an in-memory lease check per player. ` +
      'Bare aedes writes to no subscriber before it has walked all of them (for each it copies the packet, asks authorizeForward and queues the write in a setImmediate of its own), ' +
      'so its first copy leaves only after a walk that grows with N. Minaret\'s broker makes only the first 64 deliveries in that walk and the rest one event-loop turn later, ' +
      'behind the first 64 writes (broker/delivery/sliced-delivery.ts), so its first player waits for the HTTP request itself (the client\'s fetch, ' +
      `the request pipeline, the token and can_trigger checks: a GET through the same door just before took ${ms(med(m, (r) => r.doorMs))} ms; then the commit of the broadcast row and the start's bookkeeping), ` +
      'the 64 deliveries and a pass over the other subscriptions that only queues them. ' +
      'The request hands the start event to the broker right after the commit and answers at once with its report marked pending ' +
      `(${ms(post)} ms, seen from this load generator: the 201 leaves in the same event-loop turn as the walk, just before the first player's copy); ` +
      `the report (alone, as GET of the broadcast, ${ms(reportMs)} ms), the transmitters' commands and the pushes come after the fan-out's writes.`,
  );
  parts.push(
    `A ban reaches the player's config in ${ms(percentile(ban.latencies, 50))} ms (p50) / ${ms(percentile(ban.latencies, 99))} ms (p99): the PATCH recomputes that member's players' entitlement, drops the lease from the in-memory map the broker checks and republishes the retained config within the request ` +
      `(its response: ${ms(percentile(ban.patchMs, 50))} ms p50); the broker stops forwarding broadcasts to the player at that moment, before the config arrives.`,
  );
  parts.push(
    `Getting the ${num(opts.players)} players ready (connect, SUBSCRIBE to the config, the leased config, SUBSCRIBE to the broadcast topic) took ${fmt(o.minaretFleet.connectS, 1)} s ` +
      `(${fmt(opts.players / o.minaretFleet.connectS, 0)}/s, ${fmt(o.minaretFleet.connectCpu?.brokerCpuS ?? Number.NaN, 1)} s of broker CPU) against ${fmt(o.bareFleet.connectS, 1)} s for the bare broker's plain subscribers. Besides the per-connect work (credentials, a timeline row, a signed lease), ` +
      'each SUBSCRIBE to an exact topic is answered from a topic index of the retained messages (broker/delivery/retained-index.ts; aedes\'s in-memory persistence alone tests every retained message ' +
      'against each filter, and Minaret retains one config per device, which made getting N players ready grow with N squared: 145-266 s for 10,000 before the index).',
  );
  const worst = Math.max(...[...m, ...b].map((r) => r.cpu.bgCores ?? 0));
  if (worst > CONTENDED_CORES) {
    parts.push(
      `**Caveat: the host was shared** — other processes took up to ${fmt(worst, 2)} cores of ${os.availableParallelism()} during a fan-out; latencies are inflated by that, and the broker CPU per fan-out is the steadier figure.`,
    );
  }
  parts.push(
    `The load generator reads every delivery on one event loop in the same ${os.availableParallelism()} cores, so at this scale part of the p99 (for both brokers) is the generator's own queue, not the broker's.`,
  );
  return parts.join(' ');
}

// ---------------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opts = parseOptions(argv);
  const requested = opts.players;
  const fit = fitPlayers(opts.players);
  if (fit.note) console.warn(`\n${fit.note}\n`);
  opts.players = fit.players;
  if (opts.timeoutS === 0) opts.timeoutS = defaultTimeoutS(opts);
  const n = opts.players;
  const command = process.env['npm_lifecycle_event'] === 'bench' && argv.length === 0 ? 'npm run bench' : `npx tsx bench/broadcast.ts${argv.length ? ` ${argv.join(' ')}` : ''}`;
  const date = new Date().toISOString();

  const overall = setTimeout(() => {
    console.error(`broadcast bench: still running after ${opts.timeoutS} s (--timeout); aborting`);
    cleanupSync();
    process.exit(1);
  }, opts.timeoutS * 1000);
  overall.unref();

  tempDir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-broadcast-'));
  const dbPath = path.join(tempDir, 'minaret.db');
  await createFirstSuperadminRow(dbPath);
  webhook = await startWebhook();

  console.log(`broadcast bench: ${num(n)} players, ${opts.runs} runs, ${opts.bans} bans (timeout ${opts.timeoutS} s)`);
  const service = serverChild('minaret', 'minaret', {
    NODE_ENV: 'test',
    HOST,
    HTTP_PORT: '0',
    MQTT_PORT: '0',
    DATABASE_PATH: dbPath,
    DATA_DIR: path.join(tempDir, 'data'),
    JWT_SECRET: crypto.randomBytes(32).toString('hex'),
    BCRYPT_COST: '4',
    LOG_LEVEL: 'warn',
    AUTH_RATE_LIMIT: '1000000',
    AUTH_IDENTIFIER_RATE_LIMIT: '1000000',
    NOTIFY_TRANSPORT: 'webhook',
    NOTIFY_WEBHOOK_URL: webhook.url,
  });
  const ready = await service.ready();
  const base = String(ready['httpUrl']);
  const minaretMqtt = String(ready['mqttUrl']);

  console.log('setting up the world over the API ...');
  const world = await buildWorld(base, webhook, opts);
  console.log(`  ${num(n)} members, memberships and players in ${fmt(world.setupS, 1)} s`);

  console.log('connecting the players ...');
  const minaretFleet = newFleet(n);
  const broadcastTopic = `mosques/${world.mosqueId}/broadcast`;
  const minaretConnectCpu = cpuWindow(service);
  await connectFleet(
    minaretFleet,
    minaretMqtt,
    opts.connectConcurrency,
    (i) => ({ clientId: world.players[i]!.id, username: world.players[i]!.id, password: world.players[i]!.password }),
    broadcastTopic,
    (i) => `devices/${world.players[i]!.id}/config`,
  );
  minaretFleet.connectCpu = minaretConnectCpu();
  console.log(`  ${num(n)} players leased and subscribed in ${fmt(minaretFleet.connectS, 1)} s (ready p50 ${ms(minaretFleet.readyP50)} ms)`);

  const m: FanoutRun[] = [];
  for (let r = 0; r < opts.runs; r++) {
    await waitQuiet(service, opts.quietWaitS);
    const run = await minaretFanout(minaretFleet, world, service);
    m.push(run);
    console.log(`  minaret run ${r + 1}: p50 ${ms(run.p50)} p99 ${ms(run.p99)} max ${ms(run.max)} first ${ms(run.first)} ms, POST ${ms(run.triggerMs)} ms, door ${ms(run.doorMs)} ms, ${run.received}/${run.expected} received`);
    await sleep(500);
  }

  console.log(`banning ${opts.bans} players' owners one by one ...`);
  await waitQuiet(service, opts.quietWaitS);
  const ban = await bans(minaretFleet, world, opts.bans);
  console.log(`  ban -> config p50 ${ms(percentile(ban.latencies, 50))} p99 ${ms(percentile(ban.latencies, 99))} ms; check broadcast ${ban.afterReached}/${ban.afterExpected}, banned reached ${ban.afterBannedReached}`);

  await endFleet(minaretFleet);
  await service.stop();

  console.log('bare aedes baseline ...');
  const bare = serverChild('bare aedes', 'bare', { HOST });
  const bareReady = await bare.ready();
  const bareUrl = String(bareReady['mqttUrl']);
  const bareTopic = 'mosques/bench/broadcast';
  const bareFleet = newFleet(n);
  const bareConnectCpu = cpuWindow(bare);
  await connectFleet(bareFleet, bareUrl, opts.connectConcurrency, (i) => ({ clientId: `bare-${i}` }), bareTopic, null);
  bareFleet.connectCpu = bareConnectCpu();
  const publisher = await mqtt.connectAsync(bareUrl, { protocolVersion: 4, clientId: 'bare-publisher', clean: true, keepalive: 300, reconnectPeriod: 0 });
  const b: FanoutRun[] = [];
  for (let r = 0; r < opts.runs; r++) {
    await waitQuiet(bare, opts.quietWaitS);
    const run = await bareFanout(bareFleet, publisher, bareTopic, bare);
    b.push(run);
    console.log(`  bare run ${r + 1}: p50 ${ms(run.p50)} p99 ${ms(run.p99)} max ${ms(run.max)} first ${ms(run.first)} ms, PUBACK ${ms(run.triggerMs)} ms, ${run.received}/${run.expected} received`);
    await sleep(500);
  }
  await publisher.endAsync();
  await endFleet(bareFleet);
  await bare.stop();

  const outcome: Outcome = { opts, requested, fdNote: fit.note, world, minaretFleet, bareFleet, m, b, ban, date, command };
  const text = report(outcome);
  console.log(`\n${text}`);
  if (opts.json) {
    // Medians over the runs, Minaret's and bare aedes's, as the table gives them.
    const figures = (runs: FanoutRun[]) => ({
      firstMs: med(runs, (r) => r.first), p50Ms: med(runs, (r) => r.p50), p99Ms: med(runs, (r) => r.p99), maxMs: med(runs, (r) => r.max),
      cpuMsPerFanout: med(runs, (r) => r.cpu.brokerCpuS * 1000),
      otherProcessesCores: Math.max(0, ...runs.map((r) => r.cpu.bgCores ?? 0)),
    });
    writeJson(opts.json, { bench: 'broadcast', date, command, serviceRoot: serviceRoot(), options: opts, minaret: figures(m), bare: figures(b) });
    console.log(`(figures written to ${opts.json})`);
  }
  console.log(
    `Ratios Minaret/bare: p50 ${ratio(med(m, (r) => r.p50), med(b, (r) => r.p50))}, p99 ${ratio(med(m, (r) => r.p99), med(b, (r) => r.p99))}, max ${ratio(med(m, (r) => r.max), med(b, (r) => r.max))}`,
  );
  if (opts.write) {
    writeFanoutSubsection(
      SECTION,
      "`npm run bench` (after bench/devices.ts) runs `tsx bench/broadcast.ts`: a broadcast's fan-out to N entitled stream players and a ban's path to the player's config, " +
        'against a bare aedes broker fanning one publish out to N subscribers in the same run. One subsection per player count; a rerun replaces its own.',
      text,
    );
  }
  clearTimeout(overall);
}

process.on('exit', cleanupSync);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    cleanupSync();
    process.exit(130);
  });
}

main().then(
  () => {
    cleanupSync();
    process.exit(0);
  },
  (err: unknown) => {
    console.error(`broadcast bench failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
    cleanupSync();
    process.exit(1);
  },
);
