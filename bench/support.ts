/**
 * What every benchmark needs and measures the same way: the host's busy CPU, the open-file limit, the
 * machine lines of bench/RESULTS.md, percentiles, a bounded task pool, and rewriting one section of
 * bench/RESULTS.md while keeping the others (several benches write that file).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
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

/**
 * The V8 flags `npm start` gives the service (package.json, between `node` and `--import`): a bench's service
 * child runs with them, as the Dockerfile and the systemd unit run it.
 */
export const SERVICE_NODE_FLAGS: string[] = (() => {
  const start = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts['start'] ?? '';
  return / exec node (.*?) ?--import /.exec(start)?.[1]?.split(' ').filter(Boolean) ?? [];
})();

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
