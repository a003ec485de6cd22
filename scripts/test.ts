/**
 * `npm test`: the type check and every test file, several at a time (docs/architecture.md, "Developing").
 *
 *   npm test                          the type check and all of test/
 *   npm test -- test/api test/e2e/cli.test.ts   only these files or folders (no type check)
 *   TEST_CONCURRENCY=6 npm test       how many files run at once (default 4, and up to 8 while a CPU is idle)
 *   TEST_VERBOSE=1 npm test           print every file's TAP output, not only a failing file's
 *   TEST_FILE_TIMEOUT_S=900 npm test  kill and fail a file still running after this long (default 600)
 *   MINARET_TEST_STORE=postgres npm test -- test/api   these files once, on PostgreSQL only (sqlite: SQLite only)
 *
 * Every file runs on SQLite; the files under ON_POSTGRES then run a second time on PostgreSQL
 * (MINARET_TEST_STORE=postgres, test/support/database.ts), beside the others, named `<file> [postgres]`.
 *
 * Each test file runs in a node process of its own, as plain JavaScript transpiled once at the start
 * (scripts/test-build.ts, under .tmp/js; node:test's TAP reporter), as `node --test` runs each file in a child
 * process, so files share nothing but the
 * machine: every service listens on port 0, every file and database lives under its own mkdtemp, and Redis and Icecast are started per test on free ports. Much of a file's time is waiting
 * (sockets, timers, a browser), so more files than cores run at once, and more again while the machine has CPU to
 * spare (pool). The files named in TIMED run after the
 * others, no more at once than the machine has cores, so none waits for a CPU: their assertions bound a
 * wall-clock time tightly enough that a loaded machine could fail them. Each list starts with its longest
 * files, as the last whole run measured them (.tmp/test-times.json), so no long file starts last.
 *
 * A file that fails runs once more, alone, after all the others (at most FLAKY_RETRIES of them); its second run's
 * result counts, and the closing lines name a file that passed only alone as flaky.
 *
 * The output: one line per passing file (its whole TAP with TEST_VERBOSE), the whole TAP of a failing one,
 * the slowest files, and last the totals in node --test's own form (`# tests`, `# pass`, `# fail`, ...),
 * which .ci/run reads. The exit code is 1 when the type check or any file fails (alone too).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FOLDERS, transpileProject } from './test-build.ts';
import { postgresInstalled } from '../test/platform/postgres.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Where the test run's JavaScript goes (scripts/test-build.ts): one run's, rewritten by the next. */
const JS_DIR = path.join(ROOT, '.tmp/js');

/**
 * Files that run after the others, one per core. Each bounds a reaction by wall-clock time (a device cut within
 * 1 s, a reply "at once" within 1 s, a timeout that fires between 290 ms and 2.5 s); a loaded machine can
 * stretch those without the product being slow. Most of their time is timers, so one per core leaves each a
 * CPU of its own, as the serial run did.
 */
const TIMED = new Set<string>([
  'test/audio/gate.test.ts', // a banned or deleted listener cut within 1 s
  'test/audio/recordings.test.ts', // an upload ended in 'fetch failed' three times with four files at once, never alone: not yet explained
  'test/audio/simulator-audio.test.ts', // Icecast restarted: the simulators, retrying with backoff, PLAYING again within 15 s
  'test/audio/whole-path.test.ts', // a ban cuts a player out of Icecast within 1 s
  'test/device/console-audio.test.ts', // the tone heard within 2 s of Start, silent within 1 s of Stop and of a ban
  'test/broker/cluster.test.ts', // the other process learns of a change within 1.5 s
  'test/broker/connect.test.ts', // a refused client closed within 1 s
  'test/broker/ingest.test.ts', // a connection ended within 1.5 s
  'test/broker/presence.test.ts', // a config change pushed within 1 s
  'test/e2e/broadcasts.test.ts', // a player PLAYING within 1 s of the start
  'test/e2e/cli-support.test.ts', // sixteen CLI processes at once must all exit within 30 s
  'test/e2e/commands.test.ts', // device_offline within 1 s, a 300 ms timeout fired before 2.5 s
  'test/e2e/entitlement.test.ts', // ONLINE within 1 s of the approval, cut within 1 s of a deletion
  'test/hostile/mqtt/budgets.test.ts', // a neighbour's status within 1.5 s of a flood
  'test/mosques/event-stream-revocation.test.ts', // an event stream ended within 1 s
  'test/people/addresses/account-holding.test.ts', // a player cut off within 2 s of its owner's account being emptied
  'test/people/sessions-across-processes.test.ts', // the other process refuses a token within 1 s
]);

/**
 * The files that run a second time on PostgreSQL: the tests of the repositories and of the HTTP API, which
 * reach every table through the store port (docs/architecture.md, "Developing"). The rest run on SQLite only:
 * the broker, audio, console (browser), hostile and process tests spend their time on sockets, Icecast, a
 * browser or a child process over the same repositories these already cover, and would double the run; and
 * test/platform's PostgreSQL tests choose their engine themselves. A test in these files that holds only on
 * SQLite (it opens the file, reads its pages, tests the SQLite dialect) says so in its skip
 * (`sqliteOnly(reason)`, test/support/database.ts), which the PostgreSQL run reports as skipped.
 */
const ON_POSTGRES = [
  'test/api', 'test/broadcasts', 'test/devices', 'test/mosques', 'test/people', 'test/schedule',
  'test/unit/entitlement.test.ts',
];

/** A job's name when it runs on PostgreSQL: its file's, marked. */
const POSTGRES_MARK = ' [postgres]';

/**
 * A file still running after this long is killed and fails the run (it would otherwise hold the run forever,
 * as a test that leaves a handle open after a failure does): ten times the slowest file on an idle machine.
 */
const FILE_TIMEOUT_S = Number(process.env.TEST_FILE_TIMEOUT_S ?? 600);

const TOTALS = ['tests', 'suites', 'pass', 'fail', 'cancelled', 'skipped', 'todo'] as const;
type Totals = Record<(typeof TOTALS)[number], number>;

interface Job {
  name: string;
  command: string;
  args: string[];
  /** Settings added to the runner's own environment (MINARET_TEST_STORE for the PostgreSQL run). */
  env?: Record<string, string>;
  /** A test file's summary lines are counted; the type check has none. */
  counted: boolean;
}

interface Finished {
  job: Job;
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
  seconds: number;
  /** User plus system CPU seconds of the file's process and all it started and waited for; null if unknown. */
  cpu: number | null;
  totals: Totals | null;
}

function testFiles(roots: string[]): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    const stat = fs.statSync(p);
    if (stat.isDirectory()) for (const entry of fs.readdirSync(p)) walk(path.join(p, entry));
    else if (p.endsWith('.test.ts')) out.push(path.relative(ROOT, path.resolve(p)).split(path.sep).join('/'));
  };
  for (const root of roots) walk(path.resolve(ROOT, root));
  return [...new Set(out)].sort();
}

/** node --test's closing lines (`# pass 12`); null when the process died before writing them. */
function totalsOf(output: string): Totals | null {
  const totals = {} as Totals;
  for (const key of TOTALS) {
    const all = [...output.matchAll(new RegExp(`^# ${key} (\\d+)$`, 'gm'))];
    if (all.length === 0) return null;
    totals[key] = Number(all[all.length - 1]![1]);
  }
  return totals;
}

/** `times`'s second line (the children's user and system time, `1m2.345s 0m0.678s`) as seconds. */
function cpuOf(times: string): number | null {
  const line = times.trim().split('\n')[1];
  const parts = line ? [...line.matchAll(/(\d+)m([\d.]+)s/g)] : [];
  return parts.length === 2 ? parts.reduce((sum, m) => sum + Number(m[1]) * 60 + Number(m[2]), 0) : null;
}

/**
 * The job runs under sh, whose `times` then reports the CPU the job and everything it waited for used (the
 * service's worker threads, a browser, the processes a test started): on a shared machine CPU says what a file
 * costs better than its wall time does. The report comes on a pipe of its own (fd 3), closed to the job itself.
 */
const MEASURED = ['-c', '"$@" 3>&-; status=$?; times >&3; exit $status', 'sh'];

function runJob(job: Job): Promise<Finished> {
  const started = performance.now();
  return new Promise((resolve) => {
    // Each file is a top-level run of its own, also when this runner itself runs inside a test (test/runner.test.ts).
    const { NODE_TEST_CONTEXT: _inTest, ...inherited } = process.env;
    const env = { ...inherited, ...job.env };
    // A group of its own, so a file that never ends is killed with everything it started.
    const child = spawn('/bin/sh', [...MEASURED, job.command, ...job.args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe', 'pipe'], detached: true });
    let output = '';
    let times = '';
    child.stdout!.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString('utf8')));
    (child.stdio[3] as NodeJS.ReadableStream).on('data', (c: Buffer) => (times += c.toString('utf8')));
    const timer = setTimeout(() => {
      output += `\n# scripts/test.ts: killed after ${FILE_TIMEOUT_S} s (TEST_FILE_TIMEOUT_S)\n`;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* the group is gone already */
      }
    }, FILE_TIMEOUT_S * 1000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const seconds = (performance.now() - started) / 1000;
      resolve({ job, code, signal, output, seconds, cpu: cpuOf(times), totals: job.counted ? totalsOf(output) : null });
    });
  });
}

/** The machine's CPU time so far, all cores together (os.cpus(): /proc/stat on Linux), in ms. */
function cpuTimes(): { idle: number; total: number } {
  let idle = 0;
  let total = 0;
  for (const { times } of os.cpus()) {
    idle += times.idle;
    total += times.user + times.nice + times.sys + times.idle + times.irq;
  }
  return { idle, total };
}

/**
 * How many failed files run once more, alone, before the run is judged. Two of this suite's files have failed in
 * a clean-clone run beside the others and passed alone, from what their own parts do under load: Debian's
 * icecast2 dying after it answered (test/audio/icecast-plain.ts says how it also crashes while it starts), and a
 * first page in chromium not rendered within 30 s. A file that fails again alone fails the run; one that passes
 * alone is named in the closing lines as flaky, so it is seen, not hidden. More failures than this are not a flake.
 */
const FLAKY_RETRIES = 2;

/** The most files the pools ran at once, for the closing lines. */
let mostAtOnce = 0;

/** How often the pool looks at the machine, and the idle share over that time that lets one more file start. */
const LOOK_MS = 2000;
const IDLE_FOR_ONE_MORE = 0.4;

/**
 * Runs the jobs in the order given, `width` at a time, and up to `upTo` while the machine has CPU to spare:
 * every LOOK_MS, one more starts if at least IDLE_FOR_ONE_MORE of the machine's CPU time in the last LOOK_MS
 * was idle (many files spend most of their time waiting on timers, a browser, a child process). Another
 * program's load counts too, so a shared machine gets fewer at once. `onDone` as each job ends.
 */
async function pool(jobs: Job[], width: number, onDone: (f: Finished) => void, upTo = width): Promise<Finished[]> {
  const queue = [...jobs];
  const done: Finished[] = [];
  let running = 0;
  let wake: () => void = () => {};
  const start = (job: Job) => {
    running++;
    mostAtOnce = Math.max(mostAtOnce, running);
    void runJob(job).then((f) => {
      running--;
      done.push(f);
      onDone(f);
      wake();
    });
  };
  let last = cpuTimes();
  let spare = false;
  const look = setInterval(() => {
    const now = cpuTimes();
    spare = (now.idle - last.idle) / Math.max(1, now.total - last.total) >= IDLE_FOR_ONE_MORE;
    last = now;
    wake();
  }, LOOK_MS);
  while (queue.length > 0 || running > 0) {
    if (queue.length > 0 && (running < width || (spare && running < upTo))) {
      if (running >= width) spare = false; // one more per look, then look again
      start(queue.shift()!);
      continue;
    }
    await new Promise<void>((resolve) => (wake = resolve));
  }
  clearInterval(look);
  return done;
}

const failed = (f: Finished) => f.code !== 0 || (f.job.counted && (f.totals === null || f.totals.fail > 0 || f.totals.cancelled > 0));

function report(f: Finished, verbose: boolean): void {
  const bad = failed(f);
  const what = f.totals ? `${f.totals.pass}/${f.totals.tests} passed` : f.job.counted ? 'no summary' : bad ? 'failed' : 'ok';
  process.stdout.write(`# ${bad ? 'FAILED' : 'done'} ${f.job.name}: ${what} in ${f.seconds.toFixed(1)} s${f.cpu !== null ? ` (cpu ${f.cpu.toFixed(1)} s)` : ''}${f.code !== 0 ? ` (exit ${f.code ?? f.signal})` : ''}\n`);
  if (bad || verbose) process.stdout.write(f.output.endsWith('\n') ? f.output : `${f.output}\n`);
}

/**
 * Where a whole run (`npm test` without arguments) leaves each file's seconds, for the next run's order. .tmp/ is
 * not committed: a fresh clone has none and starts with LONG, then the biggest files.
 */
const TIMES_FILE = path.join(ROOT, '.tmp/test-times.json');

/** The files that took longest in a whole run on a 2-core machine: first when no earlier run left its times. */
const LONG = [
  'test/e2e/docs.test.ts',
  'test/e2e/process.test.ts',
  'test/e2e/deploy.test.ts',
  'test/bench/cli.test.ts',
  'test/console/widths.test.ts',
  'test/hostile/http/fuzz.test.ts',
];

/** Longest first: by the seconds the last whole run measured, else LONG, else the file's size. */
function startOrder(names: string[]): string[] {
  let times: Record<string, number> = {};
  try {
    times = JSON.parse(fs.readFileSync(TIMES_FILE, 'utf8')) as Record<string, number>;
  } catch {
    /* no earlier run here */
  }
  const size = (name: string) => fs.statSync(path.join(ROOT, fileOf(name))).size;
  const known = names.filter((f) => typeof times[f] === 'number').sort((a, b) => times[b]! - times[a]!);
  if (known.length === names.length) return known;
  // A file no run has measured yet (new, or all of them in a fresh clone) goes first: it may be long.
  const unknown = names.filter((f) => typeof times[f] !== 'number');
  const long = LONG.filter((f) => unknown.includes(f));
  return [...long, ...unknown.filter((f) => !long.includes(f)).sort((a, b) => size(b) - size(a)), ...known];
}

/** The test file a job's name names (without its [postgres] mark). */
const fileOf = (name: string) => (name.endsWith(POSTGRES_MARK) ? name.slice(0, -POSTGRES_MARK.length) : name);

/** Whether `file` (a path from the project's root) is one of ON_POSTGRES's files or under one of its folders. */
const runsOnPostgres = (file: string) => ON_POSTGRES.some((p) => file === p || file.startsWith(`${p}/`));

function recordTimes(results: Finished[]): void {
  const times = Object.fromEntries(results.filter((f) => f.job.counted).map((f) => [f.job.name, Math.round(f.seconds * 10) / 10]));
  fs.mkdirSync(path.dirname(TIMES_FILE), { recursive: true });
  fs.writeFileSync(TIMES_FILE, `${JSON.stringify(times, null, 2)}\n`);
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const files = testFiles(args.length ? args : ['test']);
  // A renamed file would otherwise leave TIMED silently and run beside the others.
  const gone = [...TIMED].filter((f) => !fs.existsSync(path.join(ROOT, f)));
  if (gone.length) throw new Error(`scripts/test.ts TIMED names files that do not exist: ${gone.join(', ')}`);
  if (files.length === 0) throw new Error(`no test file under ${args.join(' ') || 'test'}`);
  const width = Number(process.env.TEST_CONCURRENCY ?? 4);
  if (!Number.isInteger(width) || width < 1) throw new Error(`TEST_CONCURRENCY: a whole number of at least 1, not ${process.env.TEST_CONCURRENCY}`);
  // TEST_CONCURRENCY fixes the number; by default more start while the machine has CPU to spare (pool).
  const upTo = process.env.TEST_CONCURRENCY ? width : 2 * width;
  const verbose = Boolean(process.env.TEST_VERBOSE);

  // MINARET_TEST_STORE set for the run: each file once, on that dialect (test/support/database.ts checks the
  // value). Unset: each on SQLite, and ON_POSTGRES's files again on PostgreSQL where it is installed.
  const chosen = process.env.MINARET_TEST_STORE;
  const again = chosen ? [] : files.filter(runsOnPostgres);
  const postgresMissing = again.length > 0 && !postgresInstalled();
  const names = [...files, ...(postgresMissing ? [] : again.map((f) => f + POSTGRES_MARK))];
  // The longest files first, so a long one does not start last and leave the other lanes idle at the end.
  const order = startOrder(names);
  // No --test: node would start a second process to run the one file in; the file's own run reports the same TAP.
  // A file outside the project's folders (named on the command line) was not transpiled: tsx runs it.
  const job = (name: string): Job => {
    const file = fileOf(name);
    const rel = path.relative(ROOT, path.resolve(ROOT, file));
    const inProject = FOLDERS.includes(rel.split(path.sep)[0]!);
    const run = inProject ? [path.join(JS_DIR, rel.replace(/\.ts$/, '.js'))] : ['--import', 'tsx', file];
    // The SQLite run's files get the runner's own environment (MINARET_TEST_STORE unset, or what was chosen).
    const env = name === file ? undefined : { MINARET_TEST_STORE: 'postgres' };
    return { name, command: process.execPath, args: ['--test-reporter=tap', ...run], counted: true, ...(env && { env }) };
  };
  const together = order.filter((f) => !TIMED.has(fileOf(f))).map(job);
  const timed = order.filter((f) => TIMED.has(fileOf(f))).map(job);
  const cores = os.availableParallelism();
  // The type check runs beside the tests (it is CPU while most tests wait); `npm test -- <files>` skips it.
  // Incremental: what it learnt is kept in .tmp/, so a run after a small change checks in a quarter of the CPU.
  const tsc = [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '--noEmit', '--incremental', '--tsBuildInfoFile', path.join(ROOT, '.tmp/tsc-noemit.tsbuildinfo')];
  const typecheck: Job[] = args.length ? [] : [{ name: 'tsc --noEmit', command: process.execPath, args: tsc, counted: false }];

  const started = performance.now();
  await transpileProject(ROOT, JS_DIR);
  if (postgresMissing) process.stdout.write(`# PostgreSQL 15 or newer is not installed: ${again.length} files do not run a second time on it (.ci/run installs it)\n`);
  const onPostgres = postgresMissing ? 0 : again.length;
  process.stdout.write(`# ${files.length} test files${onPostgres ? ` and ${onPostgres} of them again on PostgreSQL` : ''}${chosen ? ` (MINARET_TEST_STORE=${chosen})` : ''}: ${together.length} ${width} at a time${upTo > width ? ` (up to ${upTo} while a CPU is idle)` : ''}${typecheck.length ? ' beside tsc --noEmit' : ''}${timed.length ? `, then ${timed.length} timed ones ${cores} at a time` : ''} (${cores} cores)\n`);
  const first = await pool([...typecheck, ...together], width, (f) => report(f, verbose), upTo);
  first.push(...(await pool(timed, cores, (f) => report(f, verbose))));
  // A file that failed beside the others runs once more, alone: it passes only if it passes then, and the closing
  // lines name it (see FLAKY_RETRIES). The type check, and a file that failed alone already, are not run again.
  const retried: Finished[] = [];
  const failedFiles = first.filter((f) => failed(f) && f.job.counted);
  for (const f of failedFiles.length <= FLAKY_RETRIES ? failedFiles : []) {
    process.stdout.write(`# running ${f.job.name} again, alone\n`);
    retried.push(...(await pool([f.job], 1, (again) => report(again, verbose))));
  }
  const flaky = retried.filter((f) => !failed(f)).map((f) => f.job.name);
  const results = first.map((f) => retried.find((r) => r.job.name === f.job.name) ?? f);

  const totals = Object.fromEntries(TOTALS.map((k) => [k, 0])) as Totals;
  for (const f of results) if (f.totals) for (const k of TOTALS) totals[k] += f.totals[k];
  const bad = results.filter(failed);
  // A file that died without its summary counts as one failure, so the totals can never read as all passed.
  totals.fail += bad.filter((f) => f.job.counted && f.totals === null).length;

  if (!args.length) recordTimes(results);
  const slowest = results.filter((f) => f.job.counted).sort((a, b) => b.seconds - a.seconds).slice(0, 15);
  process.stdout.write('# slowest files:\n');
  for (const f of slowest) process.stdout.write(`#   ${f.seconds.toFixed(1).padStart(6)} s  ${f.cpu === null ? '' : `cpu ${f.cpu.toFixed(1).padStart(5)} s  `}${f.job.name}${TIMED.has(fileOf(f.job.name)) ? ' (timed)' : ''}\n`);
  const cpu = results.reduce((sum, f) => sum + (f.cpu ?? 0), 0);
  process.stdout.write(`# cpu: ${cpu.toFixed(0)} s of user and system time in all (the type check too) on ${os.availableParallelism()} cores, at most ${mostAtOnce} running at once, ${os.loadavg()[0]!.toFixed(1)} load at the end\n`);
  if (flaky.length) process.stdout.write(`# flaky (failed beside the others, passed alone): ${flaky.join(', ')}\n`);
  if (bad.length) process.stdout.write(`# failed: ${bad.map((f) => f.job.name).join(', ')}\n`);
  for (const k of TOTALS) process.stdout.write(`# ${k} ${totals[k]}\n`);
  process.stdout.write(`# duration_ms ${Math.round(performance.now() - started)}\n`);
  process.exitCode = bad.length ? 1 : 0;
}

await main();
