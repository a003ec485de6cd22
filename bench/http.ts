/**
 * HTTP benchmark (goals: docs/sizing.md, "Goals"): Minaret's `GET /healthz` and authenticated `GET /api/v1/me` against a bare Hono
 * route (`GET /hello`, same node_modules, no middleware) measured in the same run. Every server runs in its
 * own child process (bench/http-server.ts); load comes from `wrk` in another. The targets take turns within
 * each repetition (bare, healthz, me, [before healthz, before me]), so a busy spell on a shared host hits them
 * alike; figures are reported as ranges over the repetitions, each ratio against the same repetition's bare run.
 *
 *   npx tsx bench/http.ts [--duration 8] [--connections 50] [--threads 1] [--reps 3] [--log-level warn]
 *                         [--before <dir>]   also load Minaret from <dir> (an older checkout with node_modules)
 *                         [--json <file>]    also write every repetition's figures as JSON (bench/compare/compare.ts)
 *   BENCH_SERVICE_ROOT=<checkout> npx tsx bench/http.ts ...   Minaret from another checkout, through that checkout's own
 *                                                             bench/http-server.ts (the bare route stays this one's)
 *
 * Each server reports, per measured window, its CPU time, event-loop delay (monitorEventLoopDelay, 1 ms
 * resolution) and GC pauses (PerformanceObserver), so a tail can be told from a stall and a stall from GC.
 * wrk corrects its latencies for coordinated omission: a request held up S ms also adds the samples the
 * requests a steady client would have sent meanwhile would have seen, so p99 is where loop stalls show.
 */
import { fork, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLOCK_TICKS_PER_S, CONTENDED_CORES, ROOT, cli, cpuPerMessageUs, fmt, hostBusySeconds, packageVersion, range, serviceRoot, usageError, writeJson } from './support.ts';

interface Options {
  durationS: number;
  connections: number;
  threads: number;
  warmupS: number;
  reps: number;
  logLevel: string;
  before: string | null;
  json: string | undefined;
}

const USAGE = 'usage: npx tsx bench/http.ts [--duration 8] [--connections 50] [--threads 1] [--reps 3] [--log-level warn] [--before <dir>] [--json <file>]';

function parseOptions(argv: string[]): Options {
  const a = cli(USAGE, {
    duration: { type: 'number', default: 8, min: 1 },
    connections: { type: 'number', default: 50, min: 1 },
    threads: { type: 'number', default: 1, min: 1 },
    reps: { type: 'number', default: 3, min: 1 },
    'log-level': { type: 'string', default: 'warn' },
    before: { type: 'string' },
    json: { type: 'string' },
  }, argv);
  let before: string | null = null;
  if (a.before !== undefined) {
    before = path.resolve(a.before);
    if (!fs.existsSync(path.join(before, 'src', 'service.ts'))) usageError(USAGE, `--before: ${before} holds no src/service.ts`);
  }
  return {
    durationS: a.duration, connections: a.connections, reps: a.reps, logLevel: a['log-level'], before, json: a.json,
    threads: Math.min(a.threads, a.connections), // wrk refuses fewer connections than threads
    warmupS: Math.min(2, a.duration),
  };
}

// ---------------------------------------------------------------------------------------------------
// Servers (child processes)

interface ServerWindow {
  cpuS: number; wallS: number; loopP50Ms: number; loopP99Ms: number; loopMaxMs: number;
  gcCount: number; gcTotalMs: number; gcMaxMs: number; gcMajorMaxMs: number; heapUsedMiB: number;
}

interface Server {
  name: string;
  url: string;
  child: ChildProcess;
  window<T>(during: () => Promise<T>): Promise<{ result: T; server: ServerWindow }>;
}

const children = new Set<ChildProcess>();

/** `root`: the checkout whose bench/http-server.ts runs (another one under BENCH_SERVICE_ROOT, see serviceRoot). */
async function startServer(name: string, args: string[], logLevel: string, root = ROOT): Promise<Server> {
  const script = path.join(root, 'bench', 'http-server.ts');
  const child = fork(script, args, {
    execArgv: ['--import', 'tsx'], env: { ...process.env, BENCH_LOG_LEVEL: logLevel }, stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  const ready = await new Promise<{ url: string }>((resolve, reject) => {
    child.once('message', (m: { type: string; url: string }) => (m.type === 'ready' ? resolve(m) : reject(new Error(`${name}: ${JSON.stringify(m)}`))));
    child.once('exit', (code) => reject(new Error(`${name} exited with ${code} before it was ready`)));
  });
  const window = async <T>(during: () => Promise<T>) => {
    child.send({ type: 'start' });
    const result = await during();
    const server = await new Promise<ServerWindow>((resolve) => {
      child.once('message', (m: ServerWindow & { type: string }) => resolve(m));
      child.send({ type: 'stop' });
    });
    return { result, server };
  };
  return { name, url: ready.url, child, window };
}

// ---------------------------------------------------------------------------------------------------
// wrk

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

interface WrkResult {
  requests: number; seconds: number; rps: number; p50Ms: number; p99Ms: number; errors: number; cpuS: number | null;
}

function runWrk(url: string, headers: Record<string, string>, o: { seconds: number; connections: number; threads: number; script: string }): Promise<WrkResult> {
  const args = [`-t${o.threads}`, `-c${o.connections}`, `-d${o.seconds}s`, '--latency', '-s', o.script];
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
  args.push(url);
  return new Promise((resolve, reject) => {
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => {
      children.delete(child);
      const line = out.split('\n').find((l) => l.startsWith('BENCH_JSON '));
      if (code !== 0 || !line) {
        reject(new Error(`wrk exited with ${code}: ${err.trim() || out.trim()}`));
        return;
      }
      const r = JSON.parse(line.slice('BENCH_JSON '.length)) as Record<string, number>;
      const seconds = r.duration_us! / 1e6;
      resolve({
        requests: r.requests!, seconds, rps: r.requests! / seconds, p50Ms: r.p50_us! / 1000, p99Ms: r.p99_us! / 1000,
        errors: r.connect! + r.read! + r.write! + r.status! + r.timeout!, cpuS: r.cpu_ticks! >= 0 ? r.cpu_ticks! / CLOCK_TICKS_PER_S : null,
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Figures

interface Run {
  rep: number;
  target: string;
  wrk: WrkResult;
  server: ServerWindow;
  /** CPU of every other process on the host during the run, in cores (null when /proc/stat is unreadable). */
  backgroundCores: number | null;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  if (spawnSync('which', ['wrk']).status !== 0) throw new Error('wrk is not on PATH (apt-get install wrk): this benchmark needs a load generator outside Node');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-wrk-'));
  const script = path.join(dir, 'done.lua');
  fs.writeFileSync(script, WRK_DONE_SCRIPT);
  const stopAll = () => {
    for (const c of children) c.kill('SIGTERM');
  };
  process.on('SIGINT', () => { stopAll(); process.exit(130); });
  process.on('SIGTERM', () => { stopAll(); process.exit(143); });

  try {
    const root = serviceRoot();
    const servers = [await startServer('bare', ['bare'], opts.logLevel), await startServer('minaret', ['minaret'], opts.logLevel, root)];
    if (opts.before) servers.push(await startServer('before', ['minaret', opts.before], opts.logLevel));
    const targets: Array<{ name: string; server: Server; url: string; headers: Record<string, string> }> = [
      { name: 'bare Hono GET /hello', server: servers[0]!, url: `${servers[0]!.url}/hello`, headers: {} },
    ];
    for (const s of servers.slice(1)) {
      const token = await signUp(s.url);
      const label = s.name === 'before' ? 'before: ' : '';
      targets.push({ name: `${label}Minaret GET /healthz`, server: s, url: `${s.url}/healthz`, headers: {} });
      targets.push({ name: `${label}Minaret GET /api/v1/me`, server: s, url: `${s.url}/api/v1/me`, headers: { Authorization: `Bearer ${token}` } });
    }
    for (const t of targets) {
      const res = await fetch(t.url, { headers: t.headers });
      if (res.status !== 200) throw new Error(`${t.name}: HTTP ${res.status} ${await res.text()}`);
      await res.arrayBuffer();
    }

    const load = { connections: opts.connections, threads: opts.threads, script };
    console.log(`Minaret HTTP benchmark: ${new Date().toISOString()}`);
    console.log(`node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model?.trim() ?? 'unknown'}), hono ${packageVersion('hono')}, @hono/node-server ${packageVersion('@hono/node-server')}`);
    console.log(`wrk -t${opts.threads} -c${opts.connections} -d${opts.durationS}s --latency, ${opts.warmupS} s warm-up per target, ${opts.reps} alternating repetitions, LOG_LEVEL=${opts.logLevel}${opts.before ? `, before = ${opts.before}` : ''}${root === ROOT ? '' : `, Minaret from ${root} (BENCH_SERVICE_ROOT)`}`);
    const runs: Run[] = [];
    for (let rep = 1; rep <= opts.reps; rep++) {
      for (const t of targets) {
        await runWrk(t.url, t.headers, { ...load, seconds: opts.warmupS });
        const host0 = hostBusySeconds();
        const { result: wrk, server } = await t.server.window(() => runWrk(t.url, t.headers, { ...load, seconds: opts.durationS }));
        const host1 = hostBusySeconds();
        if (wrk.errors > 0) throw new Error(`${t.name}: ${wrk.errors} socket errors or non-2xx responses during the run`);
        const backgroundCores = host0 === null || host1 === null || wrk.cpuS === null ? null : Math.max(0, (host1 - host0 - server.cpuS - wrk.cpuS) / server.wallS);
        runs.push({ rep, target: t.name, wrk, server, backgroundCores });
        console.log(`  rep ${rep} ${t.name}: ${fmt(wrk.rps, 0)} req/s, p50 ${fmt(wrk.p50Ms, 2)} ms, p99 ${fmt(wrk.p99Ms, 2)} ms; server ${fmt(cpuPerMessageUs(server.cpuS, wrk.requests), 1)} µs CPU/req, loop delay p99 ${fmt(server.loopP99Ms, 1)} / max ${fmt(server.loopMaxMs, 1)} ms, longest GC ${fmt(server.gcMaxMs, 1)} ms (major ${fmt(server.gcMajorMaxMs, 1)}); other processes ${backgroundCores === null ? 'n/a' : fmt(backgroundCores, 2)} cores`);
      }
    }
    report(opts, targets.map((t) => t.name), runs);
    if (opts.json) {
      const perRun = (r: Run) => ({
        rep: r.rep, target: r.target, rps: r.wrk.rps, p50Ms: r.wrk.p50Ms, p99Ms: r.wrk.p99Ms,
        cpuUsPerRequest: cpuPerMessageUs(r.server.cpuS, r.wrk.requests), loopP99Ms: r.server.loopP99Ms, otherProcessesCores: r.backgroundCores,
      });
      writeJson(opts.json, { bench: 'http', date: new Date().toISOString(), serviceRoot: root, options: opts, targets: targets.map((t) => t.name), runs: runs.map(perRun) });
      console.log(`(figures written to ${opts.json})`);
    }
  } finally {
    for (const c of children) c.send?.({ type: 'exit' });
    await new Promise((r) => setTimeout(r, 500));
    stopAll();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function signUp(base: string): Promise<string> {
  const res = await fetch(`${base}/api/v1/auth/signup`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'bench@example.com', password_hash: 'ab'.repeat(32) }),
  });
  const body = (await res.json()) as { access_token?: string };
  if (!body.access_token) throw new Error(`signup at ${base}: HTTP ${res.status} ${JSON.stringify(body)}`);
  return body.access_token;
}

/** One row per target: ranges over the repetitions; ratios against the bare run of the same repetition. */
function report(opts: Options, names: string[], runs: Run[]): void {
  const bareOf = (rep: number) => runs.find((r) => r.rep === rep && r.target === names[0])!;
  console.log('');
  console.log('| Target | req/s | × bare (median) | p50 (ms) | p99 (ms) | server CPU µs/req | loop delay p99 / max (ms) | longest GC pause (ms) | other processes (cores) |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  const goals: string[] = [];
  for (const name of names) {
    const rs = runs.filter((r) => r.target === name);
    const ratios = rs.map((r) => r.wrk.rps / bareOf(r.rep).wrk.rps);
    const bg = rs.map((r) => r.backgroundCores).filter((x): x is number => x !== null);
    console.log(`| ${name} | ${range(rs.map((r) => r.wrk.rps), 0)} | ${name === names[0] ? '1' : `${range(ratios, 2)} (${fmt(median(ratios), 2)})`} | ${range(rs.map((r) => r.wrk.p50Ms), 2)} | ${range(rs.map((r) => r.wrk.p99Ms), 1)} | ${range(rs.map((r) => cpuPerMessageUs(r.server.cpuS, r.wrk.requests)), 1)} | ${range(rs.map((r) => r.server.loopP99Ms), 0)} / ${range(rs.map((r) => r.server.loopMaxMs), 0)} | ${range(rs.map((r) => r.server.gcMaxMs), 1)} | ${bg.length ? range(bg, 2) : 'n/a'} |`);
    const goal = name.endsWith('/healthz') ? 0.6 : name.endsWith('/me') ? 0.4 : null;
    if (goal !== null && !name.startsWith('before')) {
      const p99 = median(rs.map((r) => r.wrk.p99Ms));
      goals.push(`${name}: median ${fmt(median(ratios), 2)}× bare (goal ≥ ${goal}: ${median(ratios) >= goal ? 'met' : 'NOT met'}), median p99 ${fmt(p99, 1)} ms (goal ≤ 10: ${p99 <= 10 ? 'met' : 'NOT met'})`);
    }
  }
  console.log('');
  for (const g of goals) console.log(`- ${g}`);
  if (runs.some((r) => r.backgroundCores !== null && r.backgroundCores > CONTENDED_CORES)) {
    console.log(`- WARNING: other processes took more than ${CONTENDED_CORES} cores during some runs: the host was shared, rates and tails are depressed; CPU µs/req holds up best.`);
  }
  console.log(`- Command: \`npx tsx bench/http.ts${process.argv.slice(2).length ? ` ${process.argv.slice(2).join(' ')}` : ''}\` (${opts.reps} repetitions).`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
