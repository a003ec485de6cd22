/**
 * HTTP benchmark: GET /healthz (bare route, baseline) against GET /api/v1/me (bearer token) on one
 * service instance, plus an in-process micro-benchmark of jose's jwtVerify against a plain
 * node:crypto HMAC-SHA256 of the same token.
 *
 *   npx tsx bench/http.ts [--duration <s>] [--connections <n>] [--threads <n>]
 *
 * Load comes from `wrk` (a separate process) when it is on PATH; otherwise from a bounded in-process
 * keep-alive load generator, which shares the server's event loop and says so in the output.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import { jwtVerify } from 'jose';
import { loadConfig } from '../src/platform/config.ts';
import { createLogger, startService, type Service } from '../src/service.ts';
import { CLOCK_TICKS_PER_S, CONTENDED_CORES, hostBusySeconds } from './support.ts';

// ---------------------------------------------------------------------------------------------------
// Options

interface Options {
  durationS: number;
  connections: number;
  threads: number;
  warmupS: number;
  verifyIterations: number;
}

function parseArgs(argv: string[]): Options {
  const opts: Options = { durationS: 10, connections: 50, threads: 2, warmupS: 2, verifyIterations: 20_000 };
  const wholeNumber = (flag: string, raw: string | undefined, min: number): number => {
    const n = Number(raw);
    if (raw === undefined || !/^\d+$/.test(raw) || n < min) {
      throw new Error(`${flag}: expected a whole number >= ${min} (got ${raw === undefined ? 'nothing' : JSON.stringify(raw)})`);
    }
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const [flag, inline] = arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--duration': opts.durationS = wholeNumber(flag, value(), 1); break;
      case '--connections': opts.connections = wholeNumber(flag, value(), 1); break;
      case '--threads': opts.threads = wholeNumber(flag, value(), 1); break;
      case '--help': case '-h':
        console.log('usage: npx tsx bench/http.ts [--duration <s>=10] [--connections <n>=50] [--threads <n>=2]');
        process.exit(0);
      default: throw new Error(`unknown argument ${JSON.stringify(arg)} (try --help)`);
    }
  }
  // wrk refuses fewer connections than threads.
  opts.threads = Math.min(opts.threads, opts.connections);
  opts.warmupS = Math.min(opts.warmupS, opts.durationS);
  return opts;
}

// ---------------------------------------------------------------------------------------------------
// Results

interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** Non-2xx/3xx responses plus socket errors: any of them makes the run invalid. */
  errors: number;
  /** CPU used on the host by processes other than this one and wrk, in cores; null when unknown. */
  backgroundCores: number | null;
  /** CPU this process (the server; with the fallback generator, also the load) used, in cores. */
  serverCores: number;
  /** This process's CPU time per request in µs: the cost of a request, independent of how much CPU it got. */
  serverCpuUsPerReq: number;
  /** Longest event-loop stall of the server during the run, in ms. */
  loopMaxMs: number;
}

// ---------------------------------------------------------------------------------------------------
// Background load: the host is shared, so each run says how much CPU other processes took meanwhile.


interface CpuWindow {
  host: number | null;
  self: NodeJS.CpuUsage;
  wall: number;
  loop: ReturnType<typeof monitorEventLoopDelay>;
}

const openWindow = (): CpuWindow => {
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  return { host: hostBusySeconds(), self: process.cpuUsage(), wall: performance.now(), loop };
};

interface CpuSpent {
  /** Cores used by everything except this process and the load generator; null when unknown. */
  backgroundCores: number | null;
  /** Longest event-loop stall of this process in the window, in ms (10 ms sampling). */
  loopMaxMs: number;
  /** CPU seconds this process used in the window. */
  selfCpuS: number;
  /** Cores this process used on average in the window. */
  selfCores: number;
}

function closeWindow(w: CpuWindow, loadCpuS: number | null): CpuSpent {
  const host = hostBusySeconds();
  const self = process.cpuUsage(w.self);
  w.loop.disable();
  const loopMaxMs = w.loop.max / 1e6;
  const selfCpuS = (self.user + self.system) / 1e6;
  const wallS = (performance.now() - w.wall) / 1000;
  const backgroundCores =
    w.host === null || host === null || loadCpuS === null ? null : Math.max(0, (host - w.host - selfCpuS - loadCpuS) / wallS);
  return { backgroundCores, loopMaxMs, selfCpuS, selfCores: selfCpuS / wallS };
}

/** Nearest-rank percentile of an ascending array. */
function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

// ---------------------------------------------------------------------------------------------------
// wrk (separate process)

const WRK_DONE_SCRIPT = `
-- wrk's own CPU (utime + stime, clock ticks) so the runner can tell how busy the rest of the host was.
local function cpu_ticks()
  local f = io.open("/proc/self/stat", "r")
  if not f then return -1 end
  local stat = f:read("*a")
  f:close()
  local fields = {}
  for word in (stat:match("%) (.*)$") or ""):gmatch("%S+") do fields[#fields + 1] = word end
  return (tonumber(fields[12]) or -1) + (tonumber(fields[13]) or 0)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%.1f,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50_us":%.1f,"p99_us":%.1f,"cpu_ticks":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), cpu_ticks()))
end
`;

function wrkAvailable(): boolean {
  const which = spawnSync('which', ['wrk'], { encoding: 'utf8' });
  return which.status === 0 && which.stdout.trim() !== '';
}

let activeChild: ChildProcess | undefined;

/** Set by SIGINT/SIGTERM: the running load is cut short, the service closed, and the process exits 128+n. */
let stopSignal: NodeJS.Signals | undefined;

class Stopped extends Error {}

function checkStop(): void {
  if (stopSignal) throw new Stopped(stopSignal);
}

function runWrk(url: string, headers: Record<string, string>, o: { seconds: number; connections: number; threads: number; script: string }): Promise<LoadResult> {
  const args = [`-t${o.threads}`, `-c${o.connections}`, `-d${o.seconds}s`, '--latency', '-s', o.script];
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
  args.push(url);
  return new Promise((resolve, reject) => {
    const window = openWindow();
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    activeChild = child;
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => {
      activeChild = undefined;
      if (stopSignal) {
        reject(new Stopped(stopSignal));
        return;
      }
      const line = out.split('\n').find((l) => l.startsWith('BENCH_JSON '));
      if (code !== 0 || !line) {
        reject(new Error(`wrk exited with ${code}: ${err.trim() || out.trim()}`));
        return;
      }
      const r = JSON.parse(line.slice('BENCH_JSON '.length)) as Record<string, number>;
      const seconds = r.duration_us! / 1e6;
      const wrkCpuS = r.cpu_ticks! >= 0 ? r.cpu_ticks! / CLOCK_TICKS_PER_S : null;
      const cpu = closeWindow(window, wrkCpuS);
      resolve({
        requests: r.requests!,
        seconds,
        rps: r.requests! / seconds,
        p50Ms: r.p50_us! / 1000,
        p99Ms: r.p99_us! / 1000,
        errors: r.connect! + r.read! + r.write! + r.status! + r.timeout!,
        backgroundCores: cpu.backgroundCores,
        serverCores: cpu.selfCores,
        serverCpuUsPerReq: (cpu.selfCpuS * 1e6) / r.requests!,
        loopMaxMs: cpu.loopMaxMs,
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Fallback: in-process keep-alive load generator (fixed duration, fixed concurrency)

async function runInProcess(url: string, headers: Record<string, string>, o: { seconds: number; connections: number }): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.connections, maxFreeSockets: o.connections });
  const latencies: number[] = [];
  let errors = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      const req = http.request(url, { agent, headers }, (res) => {
        res.resume();
        res.on('end', () => {
          latencies.push(performance.now() - t0);
          if ((res.statusCode ?? 0) >= 400) errors++;
          resolve();
        });
      });
      req.on('error', () => {
        errors++;
        resolve();
      });
      req.end();
    });
  const window = openWindow();
  const started = performance.now();
  const deadline = started + o.seconds * 1000;
  const worker = async () => {
    while (performance.now() < deadline && !stopSignal) await one();
  };
  await Promise.all(Array.from({ length: o.connections }, worker));
  const seconds = (performance.now() - started) / 1000;
  agent.destroy();
  const cpu = closeWindow(window, 0);
  checkStop();
  const sorted = Float64Array.from(latencies).sort();
  return {
    requests: latencies.length, seconds, rps: latencies.length / seconds, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), errors,
    backgroundCores: cpu.backgroundCores, serverCores: cpu.selfCores, serverCpuUsPerReq: (cpu.selfCpuS * 1e6) / latencies.length, loopMaxMs: cpu.loopMaxMs,
  };
}

// ---------------------------------------------------------------------------------------------------
// In-process micro-benchmarks

async function timeAsync(iterations: number, fn: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < Math.min(2_000, iterations); i++) await fn(); // warm-up
  const t0 = performance.now();
  for (let i = 0; i < iterations; i++) {
    if ((i & 1023) === 0) checkStop();
    await fn();
  }
  return ((performance.now() - t0) * 1000) / iterations; // µs per op
}

function timeSync(iterations: number, fn: () => unknown): number {
  for (let i = 0; i < Math.min(2_000, iterations); i++) fn(); // warm-up
  const t0 = performance.now();
  for (let i = 0; i < iterations; i++) {
    if ((i & 1023) === 0) checkStop();
    fn();
  }
  return ((performance.now() - t0) * 1000) / iterations; // µs per op
}

// ---------------------------------------------------------------------------------------------------
// Main

const fmt = (n: number, digits: number) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const cores = (c: number | null) => (c === null ? 'n/a' : `${fmt(c, 2)} cores`);
/** Above this much CPU taken by other processes, a run on a 2-core host is not a clean measurement. */

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const useWrk = wrkAvailable();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-'));
  const dbFile = path.join(dir, 'minaret.db');
  const jwtSecret = 'bench-jwt-secret-0123456789-abcdefghijklmnopqrstuvwxyz';

  const loaded = loadConfig({
    NODE_ENV: 'test',
    HOST: '127.0.0.1',
    HTTP_PORT: '0',
    MQTT_PORT: '0',
    DATABASE_PATH: dbFile,
    DATA_DIR: dir,
    JWT_SECRET: jwtSecret,
    BCRYPT_COST: '4',
    AUTH_RATE_LIMIT: '1000000',
    AUTH_IDENTIFIER_RATE_LIMIT: '1000000',
    LOG_LEVEL: 'warn',
  });
  if (!loaded.ok) throw new Error(`config: ${loaded.error}`);

  let service: Service | undefined;
  // Persistent listeners (not once): a process with no listener left would die on a second signal
  // before the service is closed. The handler only stops the load; main unwinds and cleans up.
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopSignal) return;
    stopSignal = signal;
    console.error(`\n${signal}: stopping the load, closing the service`);
    activeChild?.kill('SIGTERM');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    service = await startService(loaded.config, { logger: createLogger(loaded.config) });
    checkStop();
    const base = service.httpUrl;

    // One member, one access token.
    const signup = await fetch(`${base}/api/v1/auth/signup`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'bench@example.com', password_hash: crypto.randomBytes(32).toString('hex') }),
    });
    if (signup.status !== 201 && signup.status !== 200) throw new Error(`signup: HTTP ${signup.status} ${await signup.text()}`);
    const { access_token: token, user } = (await signup.json()) as { access_token: string; user: { id: string } };
    const auth = { Authorization: `Bearer ${token}` };

    // Both targets must answer 200 before we load them.
    for (const [url, headers] of [[`${base}/healthz`, {}], [`${base}/api/v1/me`, auth]] as const) {
      const res = await fetch(url, { headers });
      if (res.status !== 200) throw new Error(`${url}: HTTP ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
    }

    const script = path.join(dir, 'done.lua');
    fs.writeFileSync(script, WRK_DONE_SCRIPT);
    const generator = useWrk
      ? `wrk -t${opts.threads} -c${opts.connections} -d${opts.durationS}s --latency (separate process)`
      : `in-process http.request keep-alive generator, ${opts.connections} concurrent, ${opts.durationS}s (wrk NOT found; shares the server's event loop, figures are pessimistic)`;
    const load = (url: string, headers: Record<string, string>, seconds: number) =>
      useWrk
        ? runWrk(url, headers, { seconds, connections: opts.connections, threads: opts.threads, script })
        : runInProcess(url, headers, { seconds, connections: opts.connections });

    console.log(`Minaret HTTP benchmark — ${new Date().toISOString()}`);
    console.log(`node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? 'unknown'}), ${fmt(os.totalmem() / 2 ** 30, 1)} GiB`);
    console.log(`service ${base}; load: ${generator}; warm-up ${opts.warmupS}s per target`);

    const targets = [
      { name: 'GET /healthz (bare)', url: `${base}/healthz`, headers: {} as Record<string, string> },
      { name: 'GET /api/v1/me (bearer)', url: `${base}/api/v1/me`, headers: auth },
    ];
    const results: LoadResult[] = [];
    for (const t of targets) {
      await load(t.url, t.headers, opts.warmupS);
      checkStop();
      const r = await load(t.url, t.headers, opts.durationS);
      checkStop();
      if (r.errors > 0) throw new Error(`${t.name}: ${r.errors} errors or non-2xx responses during the run`);
      console.log(`  ${t.name}: ${fmt(r.rps, 0)} req/s, p50 ${fmt(r.p50Ms, 2)} ms, p99 ${fmt(r.p99Ms, 2)} ms (${r.requests} requests in ${fmt(r.seconds, 2)} s; server CPU ${cores(r.serverCores)}, ${fmt(r.serverCpuUsPerReq, 1)} µs/req; longest event-loop stall ${fmt(r.loopMaxMs, 0)} ms; background CPU ${cores(r.backgroundCores)})`);
      results.push(r);
    }
    const [bare, me] = results as [LoadResult, LoadResult];
    const ratio = me.rps / bare.rps;

    // jose verify against a bare HMAC-SHA256 of the same token (what an HS256 verify must compute at least).
    const key = new TextEncoder().encode(jwtSecret);
    const secretBuf = Buffer.from(jwtSecret);
    const dot = token.lastIndexOf('.');
    const signingInput = token.slice(0, dot);
    const signature = Buffer.from(token.slice(dot + 1), 'base64url');
    const n = opts.verifyIterations;
    checkStop();
    const microWindow = openWindow();
    const joseUs = await timeAsync(n, () => jwtVerify(token, key, { algorithms: ['HS256'], requiredClaims: ['exp', 'iat'] }));
    // Decomposition: jose imports a Uint8Array secret through WebCrypto on every call, then awaits subtle.verify.
    const cryptoKey = await crypto.subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
    const signingBytes = new TextEncoder().encode(signingInput);
    const joseImportedUs = await timeAsync(n, () => jwtVerify(token, cryptoKey, { algorithms: ['HS256'], requiredClaims: ['exp', 'iat'] }));
    const subtleUs = await timeAsync(n, async () => {
      if (!(await crypto.subtle.verify('HMAC', cryptoKey, signature, signingBytes))) throw new Error('subtle.verify mismatch');
    });
    const hmacUs = timeSync(n, () => {
      const mac = crypto.createHmac('sha256', secretBuf).update(signingInput).digest();
      if (!crypto.timingSafeEqual(mac, signature)) throw new Error('HMAC mismatch');
    });

    // The one SQLite read /me does per request, on a separate read-only connection to the same file.
    const ro = new Database(dbFile, { readonly: true });
    const byId = ro.prepare('SELECT * FROM users WHERE id = ?');
    const sqliteUs = timeSync(n, () => byId.get(user.id));
    ro.close();
    const microBackground = closeWindow(microWindow, 0).backgroundCores;

    const cpuRatio = bare.serverCpuUsPerReq / me.serverCpuUsPerReq;
    const row = (name: string, r: LoadResult) =>
      `| ${name} | ${fmt(r.rps, 0)} | ${fmt(r.p50Ms, 2)} | ${fmt(r.p99Ms, 2)} | ${fmt(r.serverCores, 2)} | ${fmt(r.serverCpuUsPerReq, 1)} | ${cores(r.backgroundCores)} |`;
    console.log('');
    console.log(`## HTTP (npm run bench:http)`);
    console.log('');
    console.log(`Load: ${generator}.`);
    console.log('');
    console.log('| Target | req/s | p50 (ms) | p99 (ms) | server CPU (cores) | server CPU µs/req* | background CPU** |');
    console.log('|---|---:|---:|---:|---:|---:|---:|');
    console.log(row('GET /healthz (bare)', bare));
    console.log(row('GET /api/v1/me (bearer)', me));
    console.log(`| **ratio me / bare** | **${fmt(ratio, 2)}** (req/s) | | | | **${fmt(cpuRatio, 2)}** (bare µs / me µs) | |`);
    console.log('');
    console.log(`Goal me/bare >= 0.50 (req/s): ${ratio >= 0.5 ? 'MET' : 'NOT MET'} (${fmt(ratio, 2)}); CPU-cost ratio ${fmt(cpuRatio, 2)}, /me costs +${fmt(me.serverCpuUsPerReq - bare.serverCpuUsPerReq, 1)} µs of server CPU per request.`);
    const contended = [bare, me].some((r) => r.backgroundCores !== null && r.backgroundCores > CONTENDED_CORES);
    if (contended) console.log(`WARNING: other processes used more than ${CONTENDED_CORES} cores during a run; these figures are contended, rerun on a quiet host.`);
    console.log('');
    console.log(`| In-process timings, ${fmt(n, 0)} iterations each, same token | µs per op |`);
    console.log('|---|---:|');
    console.log(`| jose jwtVerify (HS256) | ${fmt(joseUs, 2)} |`);
    console.log(`| node:crypto HMAC-SHA256 + timingSafeEqual | ${fmt(hmacUs, 2)} |`);
    console.log(`| **ratio jose / HMAC** | **${fmt(joseUs / hmacUs, 1)}×** |`);
    console.log(`| jose jwtVerify, CryptoKey imported once (not what the service does) | ${fmt(joseImportedUs, 2)} |`);
    console.log(`| WebCrypto subtle.verify HMAC alone, CryptoKey imported once | ${fmt(subtleUs, 2)} |`);
    console.log(`| SQLite SELECT * FROM users WHERE id = ? (better-sqlite3) | ${fmt(sqliteUs, 2)} |`);
    console.log('');
    console.log(`Background CPU during the in-process timings: ${cores(microBackground)}.`);
    if (microBackground !== null && microBackground > CONTENDED_CORES) {
      console.log(`WARNING: other processes used more than ${CONTENDED_CORES} cores during the in-process timings; rerun on a quiet host.`);
    }
    console.log('');
    console.log(useWrk
      ? '\\* CPU time of the server process (this one; wrk is separate) divided by requests served: the cost of a request, whatever share of the cores the server got.'
      : '\\* Includes the in-process load generator\'s CPU, so it overstates the server\'s cost.');
    console.log('\\*\\* CPU taken by other processes on the host during the run (from /proc/stat, minus this process and wrk).');
  } finally {
    activeChild?.kill('SIGTERM');
    await service?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    if (err instanceof Stopped || stopSignal) process.exit(128 + os.constants.signals[stopSignal ?? 'SIGINT']);
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
