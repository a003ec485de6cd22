/**
 * The service child of a fan-out bench and what is measured of it: bench/broadcast-server.ts started in its own
 * process (the whole service, or a bare aedes broker), its CPU from /proc/<pid>/stat, a window of CPU spent by it,
 * this process and everyone else, and the notifier's webhook peer the superadmin's OTP arrives at. Shared by
 * bench/broadcast.ts and bench/firmware/firmware.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { CLOCK_TICKS_PER_S, CONTENDED_CORES, ROOT, hostBusySeconds, serviceNodeFlags, serviceRoot } from '../support.ts';

const HOST = '127.0.0.1';

export type ChildMessage = { type: string; [key: string]: unknown };
const children = new Set<Child>();

export class Child {
  readonly proc: ChildProcess;
  exited = false;
  private readonly exitedP: Promise<void>;
  private readonly readyP: Promise<ChildMessage>;

  /** `script` (from the checkout's root) is started with the argument `mode`; the service's is bench/broadcast-server.ts. */
  constructor(readonly name: string, mode: 'minaret' | 'bare' | (string & {}), env: Record<string, string>, script = path.join('bench', 'broadcast-server.ts')) {
    // BENCH_BROKER_NODE_ARGS: extra node flags for the server children, as in bench/devices.ts (e.g. "--cpu-prof").
    const extra = (process.env['BENCH_BROKER_NODE_ARGS'] ?? '').split(/\s+/).filter(Boolean);
    // The service runs with the node flags npm start gives it, from the checkout measured (BENCH_SERVICE_ROOT,
    // see serviceRoot); bare aedes from this one, without them.
    const root = mode === 'minaret' ? serviceRoot() : ROOT;
    const flags = mode === 'minaret' ? serviceNodeFlags(root) : [];
    this.proc = spawn(process.execPath, [...flags, ...extra, '--import', 'tsx', path.join(root, script), mode], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.add(this);
    this.exitedP = new Promise((resolve) => {
      this.proc.once('exit', () => {
        this.exited = true;
        children.delete(this);
        resolve();
      });
    });
    this.readyP = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${name}: not ready within 60 s`)), 60_000);
      this.proc.on('message', (m: ChildMessage) => {
        if (m?.type === 'ready') {
          clearTimeout(timer);
          resolve(m);
        }
      });
      this.proc.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${name} exited (${signal ?? `code ${code}`}) before it was ready`));
      });
    });
  }

  ready(): Promise<ChildMessage> {
    return this.readyP;
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  /** CPU seconds (user + system) the child has used so far, from /proc/<pid>/stat; NaN if unknown. */
  cpuSeconds(): number {
    try {
      const stat = fs.readFileSync(`/proc/${this.pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_S;
    } catch {
      return Number.NaN;
    }
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    if (this.proc.connected) this.proc.send({ type: 'stop' });
    else this.proc.kill('SIGTERM');
    const killer = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    await this.exitedP;
    clearTimeout(killer);
  }
}


/** Kills every child still running (the bench's exit path). */
export function killChildrenSync(): void {
  for (const c of children) if (!c.exited) c.proc.kill('SIGKILL');
}

/** Resident memory of a process in bytes, from /proc/<pid>/status (VmRSS); NaN if unknown. */
export function rssBytes(pid: number): number {
  try {
    const kb = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb === undefined ? Number.NaN : Number(kb) * 1024;
  } catch {
    return Number.NaN;
  }
}

// ---------------------------------------------------------------------------------------------------
// CPU accounting (Linux /proc; figures are NaN / null elsewhere)

export interface CpuSpent {
  seconds: number;
  brokerCpuS: number;
  genCores: number;
  bgCores: number | null;
}

export function cpuWindow(child: Child): () => CpuSpent {
  const host0 = hostBusySeconds();
  const self0 = process.cpuUsage();
  const child0 = child.cpuSeconds();
  const t0 = performance.now();
  return () => {
    const seconds = (performance.now() - t0) / 1000;
    const brokerCpuS = child.cpuSeconds() - child0;
    const self = process.cpuUsage(self0);
    const selfS = (self.user + self.system) / 1e6;
    const host1 = hostBusySeconds();
    const bgCores = host0 === null || host1 === null || !Number.isFinite(brokerCpuS) ? null : Math.max(0, (host1 - host0 - brokerCpuS - selfS) / seconds);
    return { seconds, brokerCpuS, genCores: selfS / seconds, bgCores };
  };
}

/** Waits (up to maxS) for a whole second in which other processes used under CONTENDED_CORES. */
export async function waitQuiet(child: Child, maxS: number): Promise<number | null> {
  if (maxS <= 0) return null;
  const t0 = performance.now();
  let last: number | null = null;
  do {
    const close = cpuWindow(child);
    await sleep(1000);
    last = close().bgCores;
    if (last === null || last < CONTENDED_CORES) break;
  } while ((performance.now() - t0) / 1000 < maxS);
  return last;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------
// The notifier's webhook peer: the superadmin's OTP arrives here

export interface Webhook {
  url: string;
  close(): void;
  /** The next code of that purpose (sent to `to`, when given); each code is handed out once. */
  nextCode(purpose: string, timeoutMs: number, to?: string): Promise<string>;
}

export async function startWebhook(): Promise<Webhook> {
  const codes: Array<{ purpose: string; to: string; code: string }> = [];
  const waiters: Array<() => void> = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        const m = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { purpose?: string; to?: string; code?: string };
        if (typeof m.code === 'string') codes.push({ purpose: String(m.purpose ?? ''), to: String(m.to ?? ''), code: m.code });
      } catch {
        /* not JSON: ignored, still acknowledged */
      }
      res.writeHead(204).end();
      for (const w of waiters.splice(0)) w();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, HOST, () => resolve());
  });
  const { port } = server.address() as { port: number };
  return {
    url: `http://${HOST}:${port}/notify`,
    close: () => server.close(),
    async nextCode(purpose, timeoutMs, to) {
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        const i = codes.findIndex((c) => c.purpose === purpose && (to === undefined || c.to === to));
        if (i >= 0) return codes.splice(i, 1)[0]!.code;
        const left = deadline - performance.now();
        if (left <= 0) throw new Error(`webhook: no ${purpose} code within ${timeoutMs} ms`);
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, left);
          waiters.push(() => {
            clearTimeout(t);
            resolve();
          });
        });
      }
    },
  };
}
