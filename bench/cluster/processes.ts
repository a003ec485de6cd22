/**
 * What the Redis-mode benches (bench/cluster/) share: a real redis-server on a free 127.0.0.1 port, the CPU
 * a process has used (Linux /proc), children that speak the IPC protocol of bench/device-server.ts, and
 * a window that says how much of the host other processes took meanwhile.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { CLOCK_TICKS_PER_S, ROOT, SERVICE_NODE_FLAGS, hostBusySeconds, processCpuSeconds } from '../support.ts';

export const REDIS_SERVER = '/usr/bin/redis-server';
export const HOST = '127.0.0.1';

/** CPU seconds (user + system) of a process so far, from /proc/<pid>/stat; NaN if unknown. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_S;
  } catch {
    return Number.NaN;
  }
}

const live = new Set<ChildProcess>();
/** Kills every child these helpers started (on exit, on a signal, after a failure). */
export function killAll(): void {
  for (const c of live) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
}

/**
 * Runs a bench's `main` as the process: every child it started is killed at the exit, whatever ends it (an
 * interrupt too), and a failure prints its stack under the bench's `name` and exits 1.
 */
export function runBench(name: string, main: () => Promise<void>): void {
  process.on('exit', killAll);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130));
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(`${name} failed: ${err instanceof Error ? err.stack : String(err)}`);
      process.exit(1);
    },
  );
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, HOST, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export interface RedisServer {
  url: string;
  pid: number;
  client: Redis;
  stop(): Promise<void>;
}

/** redis-server without persistence, answering PING; its own process, so its CPU is its own. */
export async function startRedisServer(): Promise<RedisServer> {
  if (!fs.existsSync(REDIS_SERVER)) throw new Error(`${REDIS_SERVER} is not installed: the Redis-mode benches need it`);
  const port = await freePort();
  const child = spawn(REDIS_SERVER, ['--save', '', '--appendonly', 'no', '--port', String(port), '--bind', HOST], { stdio: 'ignore' });
  live.add(child);
  child.once('exit', () => live.delete(child));
  const deadline = Date.now() + 5000;
  for (;;) {
    const probe = new Redis({ port, host: HOST, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined); // refused until the server is up
    const up = await probe.connect().then(() => probe.ping()).then(() => true, () => false);
    probe.disconnect();
    if (up) break;
    if (child.exitCode !== null || Date.now() > deadline) throw new Error('redis-server did not answer within 5 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  const client = new Redis({ port, host: HOST, maxRetriesPerRequest: 1 });
  client.on('error', () => undefined); // gone at the end of the run
  return {
    url: `redis://${HOST}:${port}`,
    pid: child.pid ?? -1,
    client,
    async stop() {
      client.disconnect();
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((r) => child.once('exit', r));
    },
  };
}

/**
 * The environment of a bench/device-server.ts service in Redis mode: SQLite at dir/minaret.db, or PostgreSQL
 * when databaseUrl is given (the service picks it from DATABASE_URL). `perPlayer` is how many statuses a player
 * sends at once, `handshakes` the CONNECTs in flight from the one load-generator address.
 */
export function serviceEnv(dir: string, redisUrl: string, o: { perPlayer: number; handshakes: number; databaseUrl?: string }): Record<string, string> {
  return {
    NODE_ENV: 'test', HOST, HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir, REDIS_URL: redisUrl,
    ...(o.databaseUrl && { DATABASE_URL: o.databaseUrl }),
    JWT_SECRET: 'bench-cluster-jwt-secret-0123456789-abcdefghijklmnopqrstuvwxyz', BCRYPT_COST: '4', LOG_LEVEL: 'warn',
    AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000', NOTIFY_TRANSPORT: 'console',
    // Each player sends its statuses and heartbeats at once; the budgets' checks still run on every packet.
    DEVICE_STATUS_BURST: String(Math.max(10, o.perPlayer + 1)), DEVICE_HEARTBEAT_BURST: String(Math.max(5, o.perPlayer + 2)),
    // One load-generator address stands for thousands of homes, and few members own all the players.
    MQTT_MAX_HANDSHAKES_PER_ADDRESS: String(o.handshakes + 10), MAX_PLAYERS_PER_USER: '100000',
  };
}

type Message = { type: string; [key: string]: unknown };

/** A child process speaking bench/device-server.ts's IPC protocol (ready, otp, mem, stop). */
export class Child {
  readonly proc: ChildProcess;
  private readonly inbox: Message[] = [];
  private readonly waiters: Array<{ type: string; resolve: (m: Message) => void }> = [];

  constructor(readonly name: string, script: string, env: Record<string, string>) {
    // The service runs with the node flags npm start gives it (device-server.ts is the whole service).
    // BENCH_CPU_PROF=<dir>: each service node writes a V8 CPU profile there as it exits (not for a SIGKILLed one).
    const prof = process.env['BENCH_CPU_PROF'] ? ['--cpu-prof', `--cpu-prof-dir=${process.env['BENCH_CPU_PROF']}`] : [];
    const flags = script === 'device-server.ts' ? [...SERVICE_NODE_FLAGS, ...prof] : [];
    this.proc = spawn(process.execPath, ['--expose-gc', ...flags, '--import', 'tsx', path.join(ROOT, 'bench', script)], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    live.add(this.proc);
    this.proc.once('exit', () => live.delete(this.proc));
    this.proc.on('message', (m: Message) => {
      const i = this.waiters.findIndex((w) => w.type === m.type);
      if (i >= 0) this.waiters.splice(i, 1)[0]!.resolve(m);
      else this.inbox.push(m);
    });
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  next(type: string, timeoutMs = 60_000): Promise<Message> {
    const i = this.inbox.findIndex((m) => m.type === type);
    if (i >= 0) return Promise.resolve(this.inbox.splice(i, 1)[0]!);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name}: no '${type}' within ${timeoutMs} ms`)), timeoutMs);
      this.proc.once('exit', (code) => reject(new Error(`${this.name} exited (${code}) waiting for '${type}'`)));
      this.waiters.push({ type, resolve: (m) => (clearTimeout(timer), resolve(m)) });
    });
  }

  async rss(): Promise<number> {
    const reply = this.next('mem');
    this.proc.send({ type: 'mem' });
    return Number((await reply)['rss']);
  }

  /** A crash (SIGKILL: no goodbye to devices, Redis or the database), resolved once the process is gone. */
  async kill(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((r) => this.proc.once('exit', r));
    if (this.proc.connected) this.proc.send({ type: 'stop' });
    else this.proc.kill('SIGTERM');
    const killer = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(killer);
  }
}

export interface Spent {
  seconds: number;
  /** CPU seconds of each watched process or group (same order as given). */
  cpu: number[];
  /** Cores the rest of the host (other engineers' work) took meanwhile; null off Linux. */
  otherCores: number | null;
}

/**
 * CPU seconds so far of what one window entry watches: a process by pid, or a reading of a group of processes
 * (PostgreSQL's: bench/cluster/postgres.ts).
 */
export type Watched = number | (() => number);
const readCpu = (w: Watched): number => (typeof w === 'number' ? cpuSeconds(w) : w());

/** Starts a measuring window over some processes (this one is always counted as the generator, last). */
export function cpuWindow(pids: Watched[]): () => Spent {
  const t0 = performance.now();
  const host0 = hostBusySeconds();
  const cpu0 = pids.map(readCpu);
  const self0 = process.cpuUsage();
  return () => {
    const seconds = (performance.now() - t0) / 1000;
    const cpu = pids.map((p, i) => readCpu(p) - cpu0[i]!);
    const self = processCpuSeconds(self0);
    const host1 = hostBusySeconds();
    const mine = cpu.reduce((a, b) => a + b, 0) + self;
    const otherCores = host0 === null || host1 === null ? null : Math.max(0, (host1 - host0 - mine) / seconds);
    return { seconds, cpu: [...cpu, self], otherCores };
  };
}
