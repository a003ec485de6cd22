/**
 * Before and after (npm run bench:compare): the device bench (bench/devices.ts), the HTTP bench (bench/http.ts)
 * and, when asked (--benches), the broadcast bench (bench/broadcast.ts, players as many as --devices) run against Minaret at an older commit and against this checkout, alternating, so a busy
 * spell on a shared host falls on both; every figure is reported before against after, and each also against
 * the bare baseline (bare aedes, a bare Hono route) measured in the same run.
 *
 *   npm run bench:compare -- [--before <git ref>=7d5d3cf] [--rounds <r>=2] [--devices <n>=2000] [--device-rounds <k>=3]
 *                            [--duration <s>=8] [--benches devices,http[,broadcast]] [--no-write]
 *
 * The older commit is checked out into a temporary git worktree under .tmp/ (`git worktree add --detach`, its
 * node_modules a symlink to this checkout's), removed at the end. The benches are this checkout's; under
 * BENCH_SERVICE_ROOT they start the older tree's own server scripts (bench/device-server.ts,
 * bench/http-server.ts, bench/broadcast-server.ts), which load the older service; the load generators, the baselines and the report are
 * the same code for both. Each run writes its figures with --json and this runner reads them.
 *
 * Order, for each of --rounds rounds: devices before, devices after, http before, http after (then broadcast). A figure's
 * "after ÷ before" pairs the runs of the same round. A figure worse by more than 10 % (a rate below 0.9×, a
 * cost or a latency above 1.1×) is marked. Writes its table into bench/RESULTS.md under
 * "## Before and after (npm run bench:compare)" (--no-write: print only).
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { CONTENDED_CORES, RESULTS_FILE, ROOT, cli, fmt, machine, range, usageError, writeSubsection } from '../support.ts';

const SECTION = '## Before and after (npm run bench:compare)';
const USAGE =
  'usage: npm run bench:compare -- [--before <git ref>=7d5d3cf] [--rounds <r>=2] [--devices <n>=2000] [--device-rounds <k>=3] [--duration <s>=8] [--benches devices,http[,broadcast]] [--no-write]';
/** The last commit before the refactor that gave each table one owner behind the async store port (docs/architecture.md): the default older side. */
const DEFAULT_BEFORE = '7d5d3cf';
/** Worse than this much, a figure is marked (a rate below 1 - it, a cost above 1 + it). */
const WORSE = 0.1;

type Bench = 'devices' | 'http' | 'broadcast';
const BENCHES: readonly Bench[] = ['devices', 'http', 'broadcast'];
type Side = 'before' | 'after';

const git = (args: string[]) => spawnSync('git', args, { cwd: ROOT, encoding: 'utf8' });

function parseOptions(argv: string[]) {
  const a = cli(USAGE, {
    before: { type: 'string', default: DEFAULT_BEFORE },
    rounds: { type: 'number', default: 2, min: 1 },
    devices: { type: 'number', default: 2000, min: 1 },
    'device-rounds': { type: 'number', default: 3, min: 1 },
    duration: { type: 'number', default: 8, min: 1 },
    benches: { type: 'string', default: 'devices,http' },
    'no-write': { type: 'boolean' },
  }, argv);
  const asked = a.benches.split(',').filter(Boolean);
  if (asked.length === 0 || asked.some((b) => !(BENCHES as readonly string[]).includes(b))) usageError(USAGE, `--benches: some of ${BENCHES.join(', ')} (got ${JSON.stringify(a.benches)})`);
  // Always in the same order, whatever order they were named in.
  const benches = BENCHES.filter((b) => asked.includes(b));
  // The ref is resolved before anything runs, so a typo costs nothing.
  const sha = git(['rev-parse', '--verify', '--quiet', `${a.before}^{commit}`]);
  if (sha.status !== 0) usageError(USAGE, `--before: ${JSON.stringify(a.before)} is not a commit of this repository`);
  return { ...a, benches, beforeSha: sha.stdout.trim() };
}

// ---------------------------------------------------------------------------------------------------
// The older tree: a detached worktree under .tmp/, removed on any exit

let tree: string | null = null;

function removeTree(): void {
  if (!tree) return;
  const dir = tree;
  tree = null;
  // The symlink goes first, so nothing that removes the tree can reach into this checkout's node_modules.
  fs.rmSync(path.join(dir, 'node_modules'), { force: true });
  if (git(['worktree', 'remove', '--force', dir]).status !== 0) {
    fs.rmSync(dir, { recursive: true, force: true });
    git(['worktree', 'prune']);
  }
}

/**
 * The message types a bench child script sends and answers (`type: '...'` anywhere in it): the older tree's
 * must be this tree's, or the bench would wait for a reply that never comes.
 */
function ipcTypes(file: string): string {
  return [...new Set([...fs.readFileSync(file, 'utf8').matchAll(/type\s*(?:===|:)\s*'(\w+)'/g)].map((m) => m[1]!))]
    .filter((t) => !CLUSTER_ONLY.has(t)).sort().join(', ');
}
/** Messages only the cluster benches send (bench/cluster/azaan-minute.ts), never the compared ones: an older tree may lack them. */
const CLUSTER_ONLY = new Set(['starts']);

function checkOut(sha: string): string {
  const dir = path.join(ROOT, '.tmp', `compare-${sha.slice(0, 7)}-${process.pid}`);
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const added = git(['worktree', 'add', '--detach', dir, sha]);
  if (added.status !== 0) throw new Error(`git worktree add ${dir} ${sha}: ${added.stderr.trim()}`);
  tree = dir;
  fs.symlinkSync(fs.realpathSync(path.join(ROOT, 'node_modules')), path.join(dir, 'node_modules'), 'dir');
  for (const script of ['device-server.ts', 'http-server.ts', 'broadcast-server.ts']) {
    const theirs = path.join(dir, 'bench', script);
    if (!fs.existsSync(theirs)) throw new Error(`${sha.slice(0, 7)} has no bench/${script}: too old to compare with these benches`);
    const [mine, old] = [ipcTypes(path.join(ROOT, 'bench', script)), ipcTypes(theirs)];
    if (mine !== old) throw new Error(`bench/${script} at ${sha.slice(0, 7)} speaks other IPC messages (${old}) than this tree's (${mine})`);
  }
  return dir;
}

// ---------------------------------------------------------------------------------------------------
// Runs

/** One bench run's headline figures: Minaret's value and the same run's bare baseline, by figure key. */
type RunFigures = Record<string, { value: number; baseline: number }>;

interface Run {
  bench: Bench;
  side: Side;
  round: number;
  figures: RunFigures;
  otherCores: number;
}

function runChild(file: string, args: string[], root: string | null): Promise<void> {
  const env = { ...process.env };
  if (root) env['BENCH_SERVICE_ROOT'] = root;
  else delete env['BENCH_SERVICE_ROOT'];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'bench', file), ...args], { cwd: ROOT, env, stdio: ['ignore', 'inherit', 'inherit'] });
    running = child;
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      running = null;
      if (code === 0) resolve();
      else reject(new Error(`bench/${file} ${args.join(' ')} ended with ${signal ?? `code ${code}`}`));
    });
  });
}

let running: ReturnType<typeof spawn> | null = null;

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** Minaret's figures and bare aedes's from a bench that writes both by the same keys (devices, broadcast). */
function minaretAndBare(bench: Bench, json: string): Omit<Run, 'side' | 'round'> {
  const out = JSON.parse(fs.readFileSync(json, 'utf8')) as { minaret: Record<string, number>; bare: Record<string, number> };
  const figures: RunFigures = {};
  for (const key of Object.keys(out.minaret)) figures[key] = { value: out.minaret[key]!, baseline: out.bare[key]! };
  return { bench, figures, otherCores: Math.max(out.minaret['otherProcessesCores'] ?? 0, out.bare['otherProcessesCores'] ?? 0) };
}

async function runDevices(opts: ReturnType<typeof parseOptions>, root: string | null, json: string): Promise<Omit<Run, 'side' | 'round'>> {
  await runChild('devices.ts', ['--devices', String(opts.devices), '--rounds', String(opts['device-rounds']), '--no-write', '--json', json], root);
  return minaretAndBare('devices', json);
}

async function runBroadcast(opts: ReturnType<typeof parseOptions>, root: string | null, json: string): Promise<Omit<Run, 'side' | 'round'>> {
  await runChild('broadcast.ts', ['--players', String(Math.max(2, opts.devices)), '--no-write', '--json', json], root);
  return minaretAndBare('broadcast', json);
}

async function runHttp(opts: ReturnType<typeof parseOptions>, root: string | null, json: string): Promise<Omit<Run, 'side' | 'round'>> {
  // One repetition a run: the alternation between the trees is this runner's.
  await runChild('http.ts', ['--duration', String(opts.duration), '--reps', '1', '--json', json], root);
  type HttpRun = { target: string; rps: number; p99Ms: number; cpuUsPerRequest: number; otherProcessesCores: number | null };
  const out = JSON.parse(fs.readFileSync(json, 'utf8')) as { targets: string[]; runs: HttpRun[] };
  const of = (suffix: string, pick: (r: HttpRun) => number) => median(out.runs.filter((r) => r.target.endsWith(suffix)).map(pick));
  const bare = (pick: (r: HttpRun) => number) => median(out.runs.filter((r) => r.target === out.targets[0]).map(pick));
  const figures: RunFigures = {};
  for (const [name, suffix] of [['healthz', 'Minaret GET /healthz'], ['me', 'Minaret GET /api/v1/me']] as const) {
    figures[`${name}Rps`] = { value: of(suffix, (r) => r.rps), baseline: bare((r) => r.rps) };
    figures[`${name}CpuUs`] = { value: of(suffix, (r) => r.cpuUsPerRequest), baseline: bare((r) => r.cpuUsPerRequest) };
    figures[`${name}P99Ms`] = { value: of(suffix, (r) => r.p99Ms), baseline: bare((r) => r.p99Ms) };
  }
  return { bench: 'http', figures, otherCores: Math.max(0, ...out.runs.map((r) => r.otherProcessesCores ?? 0)) };
}

// ---------------------------------------------------------------------------------------------------
// Report

interface Figure {
  bench: Bench;
  key: string;
  label: string;
  /** Which way is better: a rate up, a cost or a latency down. */
  better: 'higher' | 'lower';
  digits: number;
  baseline: string;
}

const FIGURES: Figure[] = [
  { bench: 'devices', key: 'connectsPerS', label: 'Connects/s', better: 'higher', digits: 0, baseline: 'bare aedes' },
  { bench: 'devices', key: 'cpuUsPerConnect', label: 'Broker CPU per connect (µs)', better: 'lower', digits: 0, baseline: 'bare aedes' },
  { bench: 'devices', key: 'statusPerS', label: 'Statuses/s', better: 'higher', digits: 0, baseline: 'bare aedes' },
  { bench: 'devices', key: 'cpuUsPerStatus', label: 'Broker CPU per status (µs)', better: 'lower', digits: 1, baseline: 'bare aedes' },
  { bench: 'devices', key: 'heartbeatsPerS', label: 'Heartbeats/s', better: 'higher', digits: 0, baseline: 'bare aedes' },
  { bench: 'devices', key: 'cpuUsPerHeartbeat', label: 'Broker CPU per heartbeat (µs)', better: 'lower', digits: 1, baseline: 'bare aedes' },
  { bench: 'devices', key: 'recordP99Ms', label: 'Status publish → record p99 (ms)', better: 'lower', digits: 2, baseline: 'bare aedes → subscriber' },
  { bench: 'devices', key: 'pubackP99Ms', label: 'Status publish → PUBACK p99 (ms)', better: 'lower', digits: 2, baseline: 'bare aedes' },
  { bench: 'broadcast', key: 'firstMs', label: 'Broadcast → first player (ms, median of runs)', better: 'lower', digits: 2, baseline: 'bare aedes publish' },
  { bench: 'broadcast', key: 'p99Ms', label: 'Broadcast → players p99 (ms)', better: 'lower', digits: 1, baseline: 'bare aedes publish' },
  { bench: 'broadcast', key: 'cpuMsPerFanout', label: 'Broker CPU per fan-out (ms)', better: 'lower', digits: 0, baseline: 'bare aedes publish' },
  { bench: 'http', key: 'healthzRps', label: 'GET /healthz req/s', better: 'higher', digits: 0, baseline: 'bare Hono' },
  { bench: 'http', key: 'healthzCpuUs', label: 'GET /healthz server CPU per request (µs)', better: 'lower', digits: 1, baseline: 'bare Hono' },
  { bench: 'http', key: 'healthzP99Ms', label: 'GET /healthz p99 (ms)', better: 'lower', digits: 2, baseline: 'bare Hono' },
  { bench: 'http', key: 'meRps', label: 'GET /api/v1/me req/s', better: 'higher', digits: 0, baseline: 'bare Hono' },
  { bench: 'http', key: 'meCpuUs', label: 'GET /api/v1/me server CPU per request (µs)', better: 'lower', digits: 1, baseline: 'bare Hono' },
  { bench: 'http', key: 'meP99Ms', label: 'GET /api/v1/me p99 (ms)', better: 'lower', digits: 2, baseline: 'bare Hono' },
];

/** Whether the median of the rounds' after ÷ before ratios is worse than WORSE allows. */
function isWorse(ratios: number[], better: 'higher' | 'lower'): boolean {
  const m = median(ratios);
  return better === 'higher' ? m < 1 - WORSE : m > 1 + WORSE;
}

function table(runs: Run[], rounds: number): { lines: string[]; worse: string[] } {
  const lines = [
    '| Figure | Before | After | After ÷ before | Baseline in the before / after runs | After ÷ before, each ÷ its baseline |',
    '|---|---:|---:|---:|---:|---:|',
  ];
  const worse: string[] = [];
  for (const f of FIGURES) {
    const pairs: Array<{ b: { value: number; baseline: number }; a: { value: number; baseline: number } }> = [];
    for (let r = 1; r <= rounds; r++) {
      const b = runs.find((x) => x.bench === f.bench && x.side === 'before' && x.round === r)?.figures[f.key];
      const a = runs.find((x) => x.bench === f.bench && x.side === 'after' && x.round === r)?.figures[f.key];
      if (a && b) pairs.push({ a, b });
    }
    if (pairs.length === 0) continue;
    const raw = pairs.map((p) => p.a.value / p.b.value);
    const against = pairs.map((p) => p.a.value / p.a.baseline / (p.b.value / p.b.baseline));
    const mark = (xs: number[]) => {
      const bad = isWorse(xs, f.better);
      return `${range(xs, 2, '×')}${bad ? ' **worse**' : ''}`;
    };
    if (isWorse(raw, f.better)) worse.push(`${f.label} (${fmt(median(raw), 2)}×)`);
    if (isWorse(against, f.better)) worse.push(`${f.label} against its baseline (${fmt(median(against), 2)}×)`);
    lines.push(
      `| ${f.label} | ${range(pairs.map((p) => p.b.value), f.digits)} | ${range(pairs.map((p) => p.a.value), f.digits)} | ${mark(raw)} | ${f.baseline}: ${range(pairs.map((p) => p.b.baseline), f.digits)} / ${range(pairs.map((p) => p.a.baseline), f.digits)} | ${mark(against)} |`,
    );
  }
  return { lines, worse };
}

/** A commit as its short hash and the start of its subject line. */
const subject = (ref: string): string => {
  const line = git(['log', '-1', '--format=%h %s', ref]).stdout.trim();
  return line.length > 72 ? `${line.slice(0, 71)}…` : line;
};

function report(opts: ReturnType<typeof parseOptions>, runs: Run[], command: string, date: string): string {
  const dirty = git(['status', '--porcelain', '--untracked-files=no']).stdout.trim() !== '';
  const { lines, worse } = table(runs, opts.rounds);
  const busiest = Math.max(0, ...runs.map((r) => r.otherCores));
  const order = opts.benches.flatMap((b) => [`${b} before`, `${b} after`]).join(', ');
  const out = [
    '### Latest run',
    '',
    `- Date: ${date}; command: \`${command}\``,
    `- Before: \`${subject(opts.beforeSha)}\` (checked out into a temporary worktree); after: \`${subject('HEAD')}\`${dirty ? ' with uncommitted changes' : ''}`,
    ...machine(),
    `- ${opts.rounds} round(s), each in this order: ${order}. ${[
      opts.benches.includes('devices') ? `Devices: \`bench/devices.ts --devices ${opts.devices} --rounds ${opts['device-rounds']}\` (its figures are the medians of its measured rounds).` : '',
      opts.benches.includes('http') ? `HTTP: \`bench/http.ts --duration ${opts.duration} --reps 1\` (wrk, 50 connections).` : '',
      opts.benches.includes('broadcast') ? `Broadcasts: \`bench/broadcast.ts --players ${Math.max(2, opts.devices)}\` (medians of its runs).` : '',
    ].filter(Boolean).join(' ')}`,
    '- Ranges over the rounds; "after ÷ before" pairs the two runs of a round; a figure worse by more than 10 % (median over the rounds) is marked **worse**. CPU is the measured server process\'s user + system time per message or request.',
    '',
    ...lines,
    '',
    worse.length === 0 ? '- No figure worse by more than 10 %.' : `- Worse by more than 10 %: ${worse.join('; ')}.`,
    busiest > CONTENDED_CORES
      ? `- Caveat: other processes took up to ${fmt(busiest, 2)} cores during a run: rates and tails are depressed and noisy; CPU per message and the ratios against the same run's baseline hold up best.`
      : `- Other processes took at most ${fmt(busiest, 2)} cores during any run.`,
  ];
  return out.join('\n') + '\n';
}

// ---------------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  const date = new Date().toISOString();
  const command = `npm run bench:compare${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;
  const before = checkOut(opts.beforeSha);
  const jsonDir = path.join(before, '.bench-compare');
  console.log(`bench:compare — before ${subject(opts.beforeSha)} in ${path.relative(ROOT, before)}; after: this checkout (${subject('HEAD')})`);
  const runs: Run[] = [];
  for (let round = 1; round <= opts.rounds; round++) {
    for (const bench of opts.benches) {
      for (const side of ['before', 'after'] as const) {
        console.log(`\n=== round ${round}/${opts.rounds}: ${bench}, ${side}`);
        const json = path.join(jsonDir, `${bench}-${side}-${round}.json`);
        const root = side === 'before' ? before : null;
        const got = bench === 'devices' ? await runDevices(opts, root, json) : bench === 'http' ? await runHttp(opts, root, json) : await runBroadcast(opts, root, json);
        runs.push({ ...got, side, round });
      }
    }
  }
  const sub = report(opts, runs, command, date);
  console.log('');
  console.log(sub);
  if (!opts['no-write']) {
    writeSubsection(
      SECTION,
      "`npm run bench:compare` (bench/compare/compare.ts): `npm run bench`'s device figures and `npm run bench:http`'s, Minaret at an older commit against this checkout in alternating runs, each figure also against the bare baseline of its own run.",
      sub,
      () => 0,
    );
    console.log(`(written to ${path.relative(process.cwd(), RESULTS_FILE)} under "${SECTION}")`);
  }
}

process.on('exit', () => {
  running?.kill('SIGTERM');
  removeTree();
});
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping`);
    process.exit(130); // 'exit' stops the running bench and removes the worktree
  });
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(`bench:compare failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
