/**
 * Account enumeration by timing (docs/api.md, "Signing in" and "Signup"): each route that is given an address,
 * POST /auth/signup, /auth/login, /auth/login-code and /auth/forgot-password, against an address that has an
 * account (held) and one that has none (free), the two interleaved (in alternating order) through one keep-alive
 * connection. A run is `--rounds` rounds on a fresh service; three runs. Prints each case's median per run, the
 * median of the three, and the ratio held / free (goal: within 1.05).
 *   npx tsx bench/enumeration.ts [--rounds 40] [--cost 10] [--runs 3]
 * The service runs in a child process (this file with `--serve`), as a remote client meets it: work a route queues
 * after its answer (src/platform/flow/after-answer.ts) runs in the child, never in the client's event loop, so the
 * time measured is the time to the answer.
 */
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/platform/config.ts';
import { silentLogger } from '../src/platform/log.ts';
import { startService } from '../src/service.ts';
import { cli, fmt } from './support.ts';

const { rounds, cost, runs, serve } = cli('usage: npx tsx bench/enumeration.ts [--rounds 40] [--cost 10] [--runs 3]', {
  serve: { type: 'boolean' },
  rounds: { type: 'number', default: 40, min: 1 },
  // bcryptjs's cost: 4 to 31.
  cost: { type: 'number', default: 10, min: 4 },
  runs: { type: 'number', default: 3, min: 1 },
});
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const HELD = 'held@example.com';
const FREE = 'nobody@example.com';
const RIGHT = sha('right password');
const WRONG = sha('wrong password');

interface Case {
  route: string;
  body: (email: string) => object;
  status: number;
}

let fresh = 0;
let heldSignups = 0;
/** Addresses held by one account each, one per signup round: a signup on a held address adds a claim to it. */
const heldForSignup = (i: number) => `held-${i}@example.com`;
/** What is asked of each route, the same for both addresses; the status each must answer. */
const ROUTES: Record<string, Case> = {
  // A free address must be new each time: signing up with it once makes it held. A held one must be held by one
  // account each time: a signup with it adds a claimant, and a password sign-in tries each claimant's password.
  signup: { route: 'signup', body: (email) => ({ email: email === FREE ? `new-${++fresh}@example.com` : heldForSignup(heldSignups++), password_hash: WRONG }), status: 201 },
  login: { route: 'login', body: (email) => ({ identifier_hash: sha(email), password_hash: WRONG }), status: 401 },
  'login-code': { route: 'login-code', body: (email) => ({ identifier_hash: sha(email) }), status: 202 },
  'forgot-password': { route: 'forgot-password', body: (email) => ({ identifier_hash: sha(email) }), status: 202 },
};

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** `--serve`: a fresh service in this process; prints its URL, stops when stdin closes. */
async function serveOnce(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-enum-'));
  const loaded = loadConfig({
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'db.sqlite'), DATA_DIR: dir,
    JWT_SECRET: 'bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz', BCRYPT_COST: String(cost), LOG_LEVEL: 'silent',
    AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000',
  });
  if (!loaded.ok) throw new Error(loaded.error);
  const service = await startService(loaded.config, { logger: silentLogger, transport: { name: 'none', deliver: async () => undefined } });
  console.log(`LISTENING ${service.httpUrl}`);
  process.stdin.resume();
  await new Promise((resolve) => process.stdin.on('end', resolve));
  await service.close();
  fs.rmSync(dir, { recursive: true, force: true });
}

/** A service in a child process (this file with `--serve`): its URL, and a way to stop it. */
async function childService(): Promise<{ url: string; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, [...process.execArgv, process.argv[1]!, '--serve', '--cost', String(cost)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout });
  const url = await new Promise<string>((resolve, reject) => {
    lines.on('line', (line) => { if (line.startsWith('LISTENING ')) resolve(line.slice(10)); });
    child.on('exit', (code) => reject(new Error(`the service exited (${code}) before it listened`)));
  });
  return { url, stop: () => new Promise((resolve) => { child.on('exit', () => resolve()); child.stdin.end(); }) };
}

/** One run on a fresh service: each route's median ms for the held and the free address. */
async function measure(): Promise<Record<string, { held: number; free: number }>> {
  const service = await childService();
  try {
    const post = async (route: string, body: object) => {
      const started = performance.now();
      const res = await fetch(`${service.url}/api/v1/auth/${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      await res.text();
      return { ms: performance.now() - started, status: res.status };
    };
    for (const email of [HELD, ...Array.from({ length: rounds + 5 }, (_, i) => heldForSignup(i))]) {
      const first = await post('signup', { email, password_hash: RIGHT });
      if (first.status !== 201) throw new Error(`signup: ${first.status}`);
    }
    heldSignups = 0;
    const times: Record<string, { held: number[]; free: number[] }> = Object.fromEntries(Object.keys(ROUTES).map((n) => [n, { held: [], free: [] }]));
    const call = async (name: string, which: 'held' | 'free', keep: boolean) => {
      const c = ROUTES[name]!;
      const res = await post(c.route, c.body(which === 'held' ? HELD : FREE));
      if (res.status !== c.status) throw new Error(`${name} (${which}): expected ${c.status}, got ${res.status}`);
      if (keep) times[name]![which].push(res.ms);
    };
    for (let i = 0; i < rounds + 5; i++) {
      // The first five rounds warm up; the order alternates, so neither address always follows the other's work.
      const order: Array<'held' | 'free'> = i % 2 === 0 ? ['held', 'free'] : ['free', 'held'];
      for (const name of Object.keys(ROUTES)) for (const which of order) await call(name, which, i >= 5);
    }
    return Object.fromEntries(Object.entries(times).map(([name, t]) => [name, { held: median(t.held), free: median(t.free) }]));
  } finally {
    await service.stop();
  }
}

async function main() {
  const results: Array<Record<string, { held: number; free: number }>> = [];
  for (let run = 0; run < runs; run++) results.push(await measure());
  console.log(`held against free address, bcrypt cost ${cost}, ${runs} runs of ${rounds} interleaved rounds (${os.cpus().length} cores, node ${process.version}, load ${os.loadavg()[0]!.toFixed(1)})\n`);
  console.log('| route | free ms per run | held ms per run | held / free per run | median held / median free |');
  console.log('|---|---|---|---|---|');
  for (const name of Object.keys(ROUTES)) {
    const free = results.map((r) => r[name]!.free);
    const held = results.map((r) => r[name]!.held);
    const perRun = held.map((h, i) => fmt(h / free[i]!, 3)).join(' / ');
    console.log(`| ${name} | ${free.map((x) => fmt(x, 2)).join(' / ')} | ${held.map((x) => fmt(x, 2)).join(' / ')} | ${perRun} | ${fmt(median(held) / median(free), 3)} |`);
  }
  console.log('\ngoal: the median held / median free within 1.05 for every route');
}

(serve ? serveOnce() : main()).catch((err: Error) => {
  console.error(`bench/enumeration: ${err.message}`);
  process.exit(1);
});
