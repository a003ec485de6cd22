/**
 * Idle memory of the service process (docs/sizing.md, "Goals": idle RSS ≤ 120 MiB), part by part.
 *
 *   npm run bench:memory -- [--devices <n>=2000] [--runs <r>=3] [--settle <s>=3] [--only <i,...>] [--spaces]
 *                           [--node-args "<flags>"] [--env K=V ...] [--seed-only <dir>]
 *
 * Each figure is a fresh child process (`node --expose-gc --import tsx`, as bench/devices.ts starts the broker)
 * measured after `--settle` seconds and two full GCs, nothing connected: rss, V8 heap total / used, external,
 * array buffers, the threads the process runs, and from /proc/self/smaps_rollup the anonymous memory.
 * The stages, each adding to the one before:
 *   node + tsx          the loader alone (nothing of Minaret imported)
 *   modules             every module of the service imported, nothing started
 *   empty database      startService on a fresh database
 *   <n> devices         startService on a database holding n devices, registered over HTTP as bench/devices.ts does
 *   ... console served  the same after one request for every console file (brotli, then gzip)
 * and, to price one part each, `<n> devices, CONSOLE_DIR=off` and `<n> devices` without MALLOC_ARENA_MAX=2 (which the
 * service stages get, as npm start sets it). The parent seeds the database in-process first.
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const JWT_SECRET = 'bench-memory-jwt-secret-0123456789-abcdefghijklmnopqrstuvwxyz';

interface Figures {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  threads: number;
  anonymous: number;
  /** V8 heap spaces: space name → [committed, used]. */
  spaces: Record<string, [number, number]>;
}

type Stage = 'tsx' | 'modules' | 'service' | 'console';

function serviceEnv(dir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir,
    JWT_SECRET, BCRYPT_COST: '4', LOG_LEVEL: 'warn', AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000',
    NOTIFY_TRANSPORT: 'console', MAX_PLAYERS_PER_USER: '100000', MALLOC_ARENA_MAX: '2', ...extra,
  };
}

// ---------------------------------------------------------------------------------------------------
// Child: one stage, measured

function figures(): Figures {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('bench/memory/idle.ts: the child needs --expose-gc');
  gc();
  gc();
  const m = process.memoryUsage();
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  const rollup = fs.readFileSync('/proc/self/smaps_rollup', 'utf8');
  const kib = (text: string, key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0) * 1024;
  const spaces: Figures['spaces'] = {};
  for (const s of v8.getHeapSpaceStatistics()) spaces[s.space_name] = [s.physical_space_size, s.space_used_size];
  return {
    rss: m.rss, heapTotal: m.heapTotal, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers,
    threads: Number(/^Threads:\s+(\d+)/m.exec(status)?.[1] ?? 0), anonymous: kib(rollup, 'Anonymous'), spaces,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function child(stage: Stage, settleMs: number): Promise<void> {
  if (stage === 'tsx') {
    await sleep(settleMs);
    return report(figures());
  }
  const { loadConfig } = await import('../../src/platform/config.ts');
  const { startService } = await import('../../src/service.ts');
  if (stage === 'modules') {
    await sleep(settleMs);
    return report(figures());
  }
  const loaded = loadConfig(process.env);
  if (!loaded.ok) throw new Error(`config: ${loaded.error}`);
  const { createLogger } = await import('../../src/service.ts');
  const service = await startService(loaded.config, { logger: createLogger(loaded.config), transport: { name: 'bench', deliver: async () => {} } });
  if (stage === 'console') {
    // The parent fetches (a client here would count its own memory): it writes a line to stdin when done.
    process.stdout.write(`url ${service.httpUrl}\n`);
    await new Promise((resolve) => process.stdin.once('data', resolve));
    process.stdin.pause();
  }
  await sleep(settleMs);
  const f = figures();
  await service.close();
  report(f);
}

/** Every file the console's page names, fetched once as a browser would (br, else gzip). */
async function fetchConsole(base: string): Promise<void> {
  const page = await (await fetch(`${base}/`, { headers: { 'accept-encoding': 'br, gzip' } })).text();
  const build = /\/c\/([0-9a-f]{12})\//.exec(page)?.[1];
  if (!build) throw new Error('console: no build hash in the page');
  const dir = path.join(ROOT, 'console');
  const names: string[] = [];
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(path.join(d, e.name));
      else names.push(path.relative(dir, path.join(d, e.name)).split(path.sep).join('/'));
    }
  };
  walk(dir);
  for (const name of names.filter((n) => n !== 'index.html')) {
    for (const coding of ['br', 'gzip']) {
      const res = await fetch(`${base}/c/${build}/${name}`, { headers: { 'accept-encoding': coding } });
      await res.arrayBuffer();
    }
  }
}

function report(f: Figures): void {
  process.stdout.write(`${JSON.stringify(f)}\n`);
}

// ---------------------------------------------------------------------------------------------------
// Parent: seed, then one child per stage and run

async function api<T>(base: string, method: string, url: string, body?: unknown, token?: string): Promise<T> {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: { 'content-type': 'application/json', ...(token && { authorization: `Bearer ${token}` }) },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${url}: ${res.status} ${text}`);
  return (text ? JSON.parse(text) : null) as T;
}

const sha256Hex = (s: string) => crypto.createHash('sha256').update(s).digest('hex');

/** The database bench/devices.ts measures: a superadmin, an owner, mosques, approved members and n devices. */
async function seed(dir: string, n: number): Promise<void> {
  const { loadConfig } = await import('../../src/platform/config.ts');
  const { startService } = await import('../../src/service.ts');
  const { openDatabase } = await import('../../src/platform/db.ts');
  const { createUserStore } = await import('../../src/people/users.ts');
  const { sqliteStore } = await import('../../src/platform/store/store.ts');
  const { identifierHash } = await import('../../src/platform/identifiers.ts');
  const { systemClock } = await import('../../src/platform/clock.ts');
  const bcrypt = (await import('bcryptjs')).default;
  const loaded = loadConfig(serviceEnv(dir));
  if (!loaded.ok) throw new Error(loaded.error);
  const rootEmail = 'root@bench.example';
  const rootPassword = sha256Hex('bench root password');
  const db = openDatabase(loaded.config.databasePath);
  const { migrate } = await import('../../src/platform/db.ts');
  migrate(db);
  await (await createUserStore(sqliteStore(db), systemClock)).create({
    email: rootEmail, emailHash: identifierHash(rootEmail), phone: null, phoneHash: null, passwordBcrypt: bcrypt.hashSync(rootPassword, 4), role: 'superadmin',
  });
  db.close();
  let code = '';
  const service = await startService(loaded.config, { transport: { name: 'bench', deliver: async (m) => void (m.code && (code = m.code)) } });
  try {
    const base = service.httpUrl;
    const step1 = await api<{ session_token: string }>(base, 'POST', '/api/v1/auth/superadmin-2fa', { identifier_hash: identifierHash(rootEmail), password_hash: rootPassword });
    const timestamp = Math.floor(Date.now() / 1000);
    const hmac = crypto.createHmac('sha256', step1.session_token).update(`${code}|${timestamp}`).digest('hex');
    const root = await api<{ access_token: string }>(base, 'POST', '/api/v1/auth/superadmin-2fa/verify', { session_token: step1.session_token, timestamp, hmac });
    const signup = (email: string) => api<{ access_token: string; user: { id: string } }>(base, 'POST', '/api/v1/auth/signup', { email, password_hash: sha256Hex(`pw ${email}`) });
    const owner = await signup('owner@bench.example');
    const mosques: string[] = [];
    for (let i = 0; i < Math.max(1, Math.ceil(n / 1000)); i++) {
      mosques.push((await api<{ id: string }>(base, 'POST', '/api/v1/mosques', { name: `Bench Masjid ${i + 1}`, owner_user_id: owner.user.id, auto_approve_members: true }, root.access_token)).id);
    }
    const members: string[] = [];
    for (let i = 0; i < Math.max(1, Math.ceil(n / 500)); i++) {
      const token = (await signup(`member${i + 1}@bench.example`)).access_token;
      for (const id of mosques) await api(base, 'POST', `/api/v1/mosques/${id}/join`, {}, token);
      members.push(token);
    }
    const every = Math.ceil(n / Math.max(1, Math.round(n / 100)));
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < n; i = next++) {
        const mosqueId = mosques[i % mosques.length]!;
        if (i % every === 0) await api(base, 'POST', `/api/v1/mosques/${mosqueId}/devices`, { kind: 'transmitter', name: `tx ${i}` }, owner.access_token);
        else await api(base, 'POST', '/api/v1/devices', { kind: 'stream_player', mosque_id: mosqueId, name: `player ${i}` }, members[i % members.length]);
      }
    };
    await Promise.all(Array.from({ length: 20 }, worker));
  } finally {
    await service.close();
  }
}

function measure(stage: Stage, env: Record<string, string>, settleS: number, nodeArgs: string[], extraEnv: Record<string, string>): Promise<Figures> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--expose-gc', ...nodeArgs, '--import', 'tsx', fileURLToPath(import.meta.url), '--child', stage, String(settleS * 1000)], {
      cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] as const, env: Object.fromEntries(Object.entries({ PATH: process.env['PATH'] ?? '', ...extraEnv, ...env }).filter(([, v]) => v !== '')),
    });
    let out = '';
    let fetched = false;
    proc.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const url = /^url (\S+)$/m.exec(out)?.[1];
      if (!url || fetched) return;
      fetched = true;
      fetchConsole(url).then(() => proc.stdin.end('done\n'), reject);
    });
    proc.on('error', reject);
    proc.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (code !== 0 || !line) return reject(new Error(`stage ${stage} exited ${code}: ${out}`));
      resolve(JSON.parse(line) as Figures);
    });
  });
}

const mib = (b: number) => (b / 1048576).toFixed(1);

const USAGE =
  'usage: npm run bench:memory -- [--devices <n>=2000] [--runs <r>=3] [--settle <s>=3] [--only <i,...>] [--spaces]\n' +
  '                               [--node-args "<flags>"] [--env K=V ...] [--seed-only <dir>]';

async function parent(): Promise<void> {
  // Imported here, in the parent only: the children's first stages price the loader and the modules alone.
  const { SERVICE_NODE_FLAGS, cli, range: rangeOf, usageError } = await import('../support.ts');
  const opts = cli(USAGE, {
    devices: { type: 'number', default: 2000 },
    runs: { type: 'number', default: 3, min: 1 },
    settle: { type: 'number', default: 3, fraction: true },
    only: { type: 'string' },
    spaces: { type: 'boolean' },
    // `--node-args "--max-semi-space-size=2"`: flags for every child, to price a V8 or node setting.
    'node-args': { type: 'string', default: '' },
    // `--env K=V` (repeatable): set in every child, e.g. MALLOC_ARENA_MAX=2.
    env: { type: 'strings' },
    // `--seed-only <dir>`: leave a seeded database there (for a heap snapshot of the service on it) and stop.
    'seed-only': { type: 'string' },
  });
  const devices = opts.devices;
  if (opts['seed-only'] !== undefined) {
    const dir = path.resolve(opts['seed-only']);
    fs.mkdirSync(dir, { recursive: true });
    return seed(dir, devices);
  }
  const runs = opts.runs;
  const settleS = opts.settle;
  const nodeArgs = opts['node-args'].split(' ').filter(Boolean);
  const extraEnv: Record<string, string> = {};
  for (const pair of opts.env) {
    const [k, ...v] = pair.split('=');
    if (!k || v.length === 0) return usageError(USAGE, `--env: K=V, got ${JSON.stringify(pair)}`);
    extraEnv[k] = v.join('=');
  }
  const only = opts.only === undefined ? null : opts.only.split(',').map(Number);
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-memory-empty-'));
  const full = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-memory-full-'));
  try {
    const t0 = performance.now();
    await seed(full, devices);
    console.log(`Idle memory — ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores; seeded ${devices} devices in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    const stages: Array<[string, Stage, Record<string, string>]> = [
      ['node + tsx', 'tsx', {}],
      ['modules imported', 'modules', {}],
      ['service, empty database', 'service', serviceEnv(empty)],
      [`service, ${devices} devices`, 'service', serviceEnv(full)],
      [`service, ${devices} devices, console served once`, 'console', serviceEnv(full)],
      [`service, ${devices} devices, CONSOLE_DIR=off`, 'service', serviceEnv(full, { CONSOLE_DIR: 'off' })],
      [`service, ${devices} devices, glibc's default arenas`, 'service', serviceEnv(full, { MALLOC_ARENA_MAX: '' })],
    ];
    console.log('| Stage | RSS (MiB) | heap total / used | external / array buffers | anonymous | threads |');
    console.log('|---|---:|---:|---:|---:|---:|');
    for (const [index, [label, stage, env]] of stages.entries()) {
      if (only && !only.includes(index)) continue;
      const results: Figures[] = [];
      // The service stages run with the node flags npm start gives the service.
      const flags = stage === 'service' || stage === 'console' ? SERVICE_NODE_FLAGS : [];
      for (let r = 0; r < runs; r++) results.push(await measure(stage, env, settleS, [...flags, ...nodeArgs], extraEnv));
      const range = (pick: (f: Figures) => number) => rangeOf(results.map((f) => pick(f) / 1048576), 1);
      console.log(`| ${label} | ${range((f) => f.rss)} | ${range((f) => f.heapTotal)} / ${range((f) => f.heapUsed)} | ${range((f) => f.external)} / ${range((f) => f.arrayBuffers)} | ${range((f) => f.anonymous)} | ${results.map((f) => f.threads).join(', ')} |`);
      if (opts.spaces) {
        for (const [space, [committed, used]] of Object.entries(results[0]!.spaces)) console.log(`    ${space}: ${mib(committed)} committed, ${mib(used)} used`);
      }
    }
    if (nodeArgs.length > 0 || Object.keys(extraEnv).length > 0) console.log(`Children ran with node ${nodeArgs.join(' ')} and ${JSON.stringify(extraEnv)}.`);
    console.log(`Each stage ${runs} fresh processes (range), ${settleS} s after start, RSS after two full GCs.`);
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
    fs.rmSync(full, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--child') {
  child(process.argv[3] as Stage, Number(process.argv[4])).then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
} else {
  parent().catch((err: unknown) => {
    console.error(`bench/memory/idle.ts: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
}
