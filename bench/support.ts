/**
 * What every benchmark needs and measures the same way: the host's busy CPU, the open-file limit, the
 * machine lines of bench/RESULTS.md, percentiles, a bounded task pool, and rewriting one section of
 * bench/RESULTS.md while keeping the others (several benches write that file); and the one command-line
 * parser and report formatting every bench uses.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { projectPath } from '../src/platform/config.ts';

export const ROOT = projectPath('');
export const RESULTS_FILE = path.join(ROOT, 'bench', 'RESULTS.md');
/** USER_HZ: `getconf CLK_TCK` is 100 on Linux. */
export const CLOCK_TICKS_PER_S = 100;
/** Other processes taking more than this many cores during a phase make its figures suspect. */
export const CONTENDED_CORES = 0.25;

/** Busy CPU time of the whole host so far, in seconds (Linux /proc/stat); null elsewhere. */
export function hostBusySeconds(): number | null {
  try {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    const [, ...ticks] = line.trim().split(/\s+/).map(Number);
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = ticks;
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS_PER_S;
  } catch {
    return null;
  }
}

export function openFilesLimit(): { soft: number; hard: number } | null {
  try {
    const line = fs.readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
    const [soft, hard] = (line ?? '').replace('Max open files', '').trim().split(/\s+/);
    const num = (s: string | undefined) => (s === 'unlimited' ? Number.POSITIVE_INFINITY : Number(s));
    if (!soft || !hard || Number.isNaN(num(soft))) return null;
    return { soft: num(soft), hard: num(hard) };
  } catch {
    return null;
  }
}

/** Nearest-rank percentile (p in 0..100); NaN for no values. */
export function percentile(values: ArrayLike<number>, p: number): number {
  const sorted = Float64Array.from(values).sort();
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1]!;
}

/** Runs task(0..count-1) with at most `limit` in flight; the first failure stops new tasks and is thrown. */
export async function pool(count: number, limit: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  let failed: unknown = null;
  const worker = async () => {
    while (failed === null && next < count) {
      const i = next++;
      try {
        await task(i);
      } catch (err) {
        failed ??= err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  if (failed !== null) throw failed;
}

const startScript = (root: string): string =>
  (JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['start'] ?? '';

/**
 * The V8 flags `npm start` gives the service (package.json, the `--` options after `node`, less a loader and its
 * argument): a bench's service child runs with them, as the Dockerfile and the systemd unit run it.
 */
export function serviceNodeFlags(root: string): string[] {
  const words = / exec node (.*)$/.exec(startScript(root))?.[1]?.split(' ').filter(Boolean) ?? [];
  const flags: string[] = [];
  for (let i = 0; i < words.length; i++) {
    if (words[i] === '--import') i++;
    else if (words[i]!.startsWith('--')) flags.push(words[i]!);
  }
  return flags;
}

/**
 * The module of the checkout's service a bench's child loads (`src/service.ts` or `src/platform/config.ts`):
 * what `npm start` runs there. Where that is the compiled JavaScript (docs/architecture.md, "Running"), the
 * child loads dist/'s, built if a source is newer, so a bench measures what production runs, not tsx's
 * transform of it; an older checkout whose `npm start` ran the sources through tsx is measured that way.
 */
export function serviceModule(root: string, file: 'src/service.ts' | 'src/platform/config.ts'): string {
  if (!/\bdist\//.test(startScript(root))) return path.join(root, file);
  const built = path.join(root, 'dist', file.replace(/\.ts$/, '.js'));
  const sources = ['src', 'api', 'broker', 'notify', 'icecast', 'generated'].map((d) => path.join(root, d));
  const newest = Math.max(...sources.filter((d) => fs.existsSync(d)).flatMap((d) =>
    fs.readdirSync(d, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts')).map((f) => fs.statSync(path.join(d, f)).mtimeMs)));
  if (!fs.existsSync(built) || fs.statSync(built).mtimeMs < newest) {
    const r = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`npm run build failed in ${root}`);
  }
  return built;
}
export const SERVICE_NODE_FLAGS: string[] = serviceNodeFlags(ROOT);

/**
 * The checkout whose service a bench measures: this one, or the one BENCH_SERVICE_ROOT names (npm run
 * bench:compare points it at an older commit's tree). The bench then starts that tree's own child script
 * (bench/device-server.ts, bench/http-server.ts), which loads that tree's service, with that tree's node
 * flags; the load generator, the baseline and the report stay this tree's. The child scripts speak the IPC
 * protocol their headers describe, the same since the before-and-after comparison was added.
 */
export function serviceRoot(): string {
  const root = process.env['BENCH_SERVICE_ROOT'];
  if (!root) return ROOT;
  const resolved = path.resolve(root);
  if (!fs.existsSync(path.join(resolved, 'src', 'service.ts'))) throw new Error(`BENCH_SERVICE_ROOT: ${resolved} holds no src/service.ts`);
  return resolved;
}

/** Writes a bench's figures as JSON (--json <file>), for a runner that compares runs (bench/compare/compare.ts). */
export function writeJson(file: string, figures: unknown): void {
  fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(figures, null, 2) + '\n');
}

export function packageVersion(name: string): string {
  try {
    return (JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return '?';
  }
}

/** The machine lines every results section starts with. */
export function machine(): string[] {
  const run = (cmd: string, args: string[]) => {
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    return r.status === 0 ? r.stdout.trim() : 'n/a';
  };
  const free = run('free', ['-h']).split('\n').find((l) => l.startsWith('Mem:'))?.trim().split(/\s+/) ?? [];
  const limit = openFilesLimit();
  return [
    `- Machine: ${run('nproc', [])} CPUs (\`nproc\`; ${os.cpus()[0]?.model?.trim() ?? 'unknown'}), memory ${free[1] ?? 'n/a'} total / ${free[6] ?? 'n/a'} available (\`free -h\`), ${os.type()} ${os.release()}`,
    `- Node ${run(process.execPath, ['--version'])} (\`node --version\`), aedes ${packageVersion('aedes')}, mqtt.js ${packageVersion('mqtt')}; \`ulimit -n\` ${limit ? `${limit.soft}` : 'n/a'}`,
  ];
}

/**
 * Writes one `### ...` subsection into the `## ...` section of bench/RESULTS.md: replaces the subsection
 * with the same heading or adds it, keeps the subsections ordered by `sizeOf`, and leaves every other
 * section as it was. The file is re-read right before writing, since other benches write it too.
 */
export function writeSubsection(section: string, intro: string, sub: string, sizeOf: (subsection: string) => number): void {
  let text = fs.existsSync(RESULTS_FILE) ? fs.readFileSync(RESULTS_FILE, 'utf8') : '# Benchmark results\n';
  if (!text.endsWith('\n')) text += '\n';
  const head = `${section}\n\n${intro}\n\n`;
  const heading = sub.split('\n', 1)[0]!;
  const start = text.search(new RegExp(`^${section.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'));
  if (start < 0) {
    text = `${text.trimEnd()}\n\n${head}${sub.trimEnd()}\n`;
  } else {
    const afterHeading = start + section.length + 1;
    const nextSection = text.slice(afterHeading).search(/^## /m);
    const end = nextSection < 0 ? text.length : afterHeading + nextSection;
    const subs = text.slice(afterHeading, end).split(/^(?=### )/m).filter((s) => s.startsWith('### '));
    const kept = subs.filter((s) => s.split('\n', 1)[0] !== heading).map((s) => s.trimEnd() + '\n\n');
    kept.push(sub.trimEnd() + '\n\n');
    kept.sort((a, b) => sizeOf(a) - sizeOf(b));
    text = text.slice(0, start) + head + kept.join('') + (end < text.length ? text.slice(end) : '');
  }
  fs.writeFileSync(RESULTS_FILE, text.trimEnd() + '\n');
}

// ---------------------------------------------------------------------------------------------------
// Command lines: one parser for every bench (node:util parseArgs underneath), so each accepts
// `--flag value` and `--flag=value` alike, answers --help with its usage and refuses what it does not know.

export type OptionSpec =
  /** A number; whole (>= min, 0 unless given) unless `fraction`. Without a default the value is undefined when absent. */
  | { type: 'number'; default?: number; min?: number; fraction?: boolean }
  | { type: 'string'; default?: string }
  /** Repeatable: every value given, in order. */
  | { type: 'strings' }
  | { type: 'boolean' };

type ValueOf<S extends OptionSpec> = S extends { type: 'number'; default: number }
  ? number
  : S extends { type: 'number' }
    ? number | undefined
    : S extends { type: 'string'; default: string }
      ? string
      : S extends { type: 'string' }
        ? string | undefined
        : S extends { type: 'strings' }
          ? string[]
          : boolean;

export type Values<Spec extends Record<string, OptionSpec>> = { [K in keyof Spec]: ValueOf<Spec[K]> };

/** A command line the bench cannot run with: its message and the usage go to stderr, exit code 2. */
export function usageError(usage: string, message: string): never {
  console.error(`${message}\n${usage}`);
  process.exit(2);
}

/**
 * The options of `argv` (the process's own by default) by `spec`; `--help`/`-h` prints `usage` and exits 0,
 * anything unknown or malformed is a usage error. A value may start with a dash (`--node-args --foo`):
 * parseArgs alone would take that for a flag, so `--flag value` is joined into `--flag=value` first.
 */
export function cli<const Spec extends Record<string, OptionSpec>>(usage: string, spec: Spec, argv: string[] = process.argv.slice(2)): Values<Spec> {
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(usage);
    process.exit(0);
  }
  const takesValue = (flag: string) => {
    const s = spec[flag.slice(2)];
    return flag.startsWith('--') && s !== undefined && s.type !== 'boolean';
  };
  const joined: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (takesValue(arg) && i + 1 < argv.length) joined.push(`${arg}=${argv[++i]}`);
    else joined.push(arg);
  }
  const options = Object.fromEntries(
    Object.entries(spec).map(([name, s]) => [name, s.type === 'boolean' ? { type: 'boolean' as const } : { type: 'string' as const, multiple: s.type === 'strings' }]),
  );
  let values: Record<string, string | boolean | string[] | undefined>;
  try {
    values = parseArgs({ args: joined, options, strict: true, allowPositionals: false }).values as typeof values;
  } catch (err) {
    return usageError(usage, err instanceof Error ? err.message : String(err));
  }
  const out: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(spec)) {
    const raw = values[name];
    if (s.type === 'boolean') out[name] = raw === true;
    else if (s.type === 'strings') out[name] = (raw as string[] | undefined) ?? [];
    else if (s.type === 'string') out[name] = (raw as string | undefined) ?? s.default;
    else if (raw === undefined) out[name] = s.default;
    else {
      const min = s.min ?? 0;
      const n = Number(raw);
      const ok = s.fraction ? raw !== '' && Number.isFinite(n) && n >= min : /^\d+$/.test(raw as string) && n >= min;
      if (!ok) usageError(usage, `--${name}: expected ${s.fraction ? 'a number' : 'a whole number'} >= ${min} (got ${JSON.stringify(raw)})`);
      out[name] = n;
    }
  }
  return out as Values<Spec>;
}

// ---------------------------------------------------------------------------------------------------
// Report figures, the same way in every bench: ranges over rounds, ratios against the baseline of the
// same run (or round), CPU per message as (user + sys) / messages.

/** A figure with `digits` decimals and thousands separators; "n/a" when not finite. */
export const fmt = (x: number, digits = 1): string =>
  Number.isFinite(x) ? x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }) : 'n/a';

/** Lowest–highest over the rounds, or the one figure when both round alike; `unit` after it; "n/a" if any is not finite. */
export function range(values: number[], digits = 1, unit = ''): string {
  const lo = fmt(Math.min(...values), digits);
  const hi = fmt(Math.max(...values), digits);
  if (lo === 'n/a' || hi === 'n/a') return 'n/a';
  return `${lo === hi ? lo : `${lo}–${hi}`}${unit}`;
}

/** a against its baseline b, as "1.23×"; "n/a" without a baseline. */
export const ratio = (a: number, b: number, digits = 2): string => (b > 0 && Number.isFinite(a / b) ? `${fmt(a / b, digits)}×` : 'n/a');

/** Each round's figure against the same round's baseline, as a range of ratios ("0.63–0.91×"). */
export const ratios = (values: number[], baselines: number[], digits = 2): string => range(values.map((v, i) => v / baselines[i]!), digits, '×');

/** CPU per message in µs: (user + sys seconds) / messages. */
export const cpuPerMessageUs = (cpuSeconds: number, messages: number): number => (messages > 0 ? (cpuSeconds * 1e6) / messages : Number.NaN);

/** This process's user + sys CPU in seconds since `since` (a process.cpuUsage() reading), or since it started. */
export function processCpuSeconds(since?: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1e6;
}
