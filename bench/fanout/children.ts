/**
 * A bench's server child and what is measured of it: a bench script started in its own process with IPC (the
 * service or a bare aedes broker through bench/broadcast-server.ts or bench/device-server.ts, or another load
 * generator), its CPU from /proc/<pid>/stat, a window of CPU spent by it, this process and everyone else, and the
 * notifier's webhook peer the superadmin's OTP arrives at. Shared by bench/broadcast.ts, bench/firmware/firmware.ts
 * and bench/devices.ts.
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

export interface ChildOptions {
  /** Arguments after the script. */
  args?: string[];
  /** Node flags before the script (BENCH_BROKER_NODE_ARGS is added after them). */
  nodeFlags?: string[];
  /** The checkout whose `script` runs (another one under BENCH_SERVICE_ROOT, see serviceRoot); cwd stays this one. */
  root?: string;
}

/**
 * A bench script in its own process, talking over IPC: each message it sends goes to the listener of its type,
 * else waits in an inbox for next(type), so a reply that comes before it is asked for is not lost.
 */
export class Child {
  readonly proc: ChildProcess;
  exited = false;
  exitCode: number | null = null;
  /** When the child said it was ready (performance.now()). */
  readyAt = 0;
  private readonly inbox: ChildMessage[] = [];
  private readonly waiters: Array<{ type: string; resolve: (m: ChildMessage) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }> = [];
  private readonly listeners = new Map<string, (m: ChildMessage) => void>();
  private readonly exitedP: Promise<void>;
  private readyP: Promise<ChildMessage> | null = null;

  /** `script` is a path from the checkout's root, e.g. bench/broadcast-server.ts. */
  constructor(readonly name: string, script: string, env: Record<string, string>, { args = [], nodeFlags = [], root = ROOT }: ChildOptions = {}) {
    // BENCH_BROKER_NODE_ARGS: extra node flags for the server children, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
    const extra = (process.env['BENCH_BROKER_NODE_ARGS'] ?? '').split(/\s+/).filter(Boolean);
    this.proc = spawn(process.execPath, [...nodeFlags, ...extra, '--import', 'tsx', path.join(root, script), ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.add(this);
    this.proc.on('message', (m: ChildMessage) => this.deliver(m));
    this.exitedP = new Promise((resolve) => {
      this.proc.once('exit', (code, signal) => {
        this.exited = true;
        this.exitCode = code;
        children.delete(this);
        for (const w of this.waiters.splice(0)) {
          clearTimeout(w.timer);
          w.reject(new Error(`${this.name} exited (${signal ?? `code ${code}`}) while waiting for '${w.type}'`));
        }
        resolve();
      });
    });
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  private deliver(m: ChildMessage): void {
    if (m?.type === 'ready') this.readyAt = performance.now();
    const listener = this.listeners.get(m?.type);
    if (listener) return listener(m);
    const i = this.waiters.findIndex((w) => w.type === m?.type);
    if (i >= 0) {
      const [w] = this.waiters.splice(i, 1);
      clearTimeout(w!.timer);
      w!.resolve(m);
    } else this.inbox.push(m);
  }

  /** Every later message of this type goes to `fn` (for a stream of them, which the inbox would hoard). */
  listen(type: string, fn: (m: ChildMessage) => void): void {
    this.listeners.set(type, fn);
  }

  /** The child's next message of this type (one already in the inbox first). */
  next(type: string, timeoutMs = 30_000): Promise<ChildMessage> {
    const i = this.inbox.findIndex((m) => m.type === type);
    if (i >= 0) return Promise.resolve(this.inbox.splice(i, 1)[0]!);
    if (this.exited) return Promise.reject(new Error(`${this.name} has exited (code ${this.exitCode})`));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const at = this.waiters.findIndex((w) => w.timer === timer);
        if (at >= 0) this.waiters.splice(at, 1);
        reject(new Error(`${this.name}: no '${type}' message within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push({ type, resolve, reject, timer });
    });
  }

  /** Sends `{type}` and waits for the child's reply of the same type. */
  request(type: string, timeoutMs = 30_000): Promise<ChildMessage> {
    const reply = this.next(type, timeoutMs);
    this.proc.send({ type });
    return reply;
  }

  /** Its 'ready' message (with its URLs), once; the same answer to every call. */
  ready(): Promise<ChildMessage> {
    this.readyP ??= this.next('ready', 60_000);
    return this.readyP;
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

  /**
   * Its main thread's time on a core and time runnable but waiting for one, so far, in seconds (Linux
   * /proc/<pid>/task/<pid>/schedstat); null where the kernel does not say.
   */
  mainThread(): { runS: number; waitS: number } | null {
    try {
      const [run, wait] = fs.readFileSync(`/proc/${this.pid}/task/${this.pid}/schedstat`, 'utf8').split(' ').map(Number);
      return Number.isFinite(run) && Number.isFinite(wait) ? { runS: run! / 1e9, waitS: wait! / 1e9 } : null;
    } catch {
      return null;
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

/**
 * bench/broadcast-server.ts as `mode`: the service with the node flags npm start gives it, from the checkout
 * measured (BENCH_SERVICE_ROOT, see serviceRoot); bare aedes from this one, without them.
 */
export function serverChild(name: string, mode: 'minaret' | 'bare', env: Record<string, string>): Child {
  const root = mode === 'minaret' ? serviceRoot() : ROOT;
  const nodeFlags = mode === 'minaret' ? serviceNodeFlags(root) : [];
  return new Child(name, path.join('bench', 'broadcast-server.ts'), env, { args: [mode], nodeFlags, root });
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
