/**
 * Account enumeration by timing (docs/api.md, "Signing in" and "Signup"): POST /auth/login for an existing
 * account with a wrong password, an unknown account and the right password, and POST /auth/signup for an
 * address that has an account (wrong password), a new address and the right password, interleaved, through
 * one keep-alive connection. Prints medians and their ratios; the claims are unknown ~ wrong password and
 * taken address ~ new address.
 *   npx tsx bench/enumeration.ts [--rounds 150] [--cost 10]
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/platform/config.ts';
import { silentLogger } from '../src/platform/log.ts';
import { startService } from '../src/service.ts';
import { cli, fmt, ratio } from './support.ts';

const { rounds, cost } = cli('usage: npx tsx bench/enumeration.ts [--rounds 150] [--cost 10]', {
  rounds: { type: 'number', default: 150, min: 1 },
  // bcryptjs's cost: 4 to 31.
  cost: { type: 'number', default: 10, min: 4 },
});
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-enum-'));
  const loaded = loadConfig({
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'db.sqlite'), DATA_DIR: dir,
    JWT_SECRET: 'bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz', BCRYPT_COST: String(cost), LOG_LEVEL: 'silent',
    AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000',
  });
  if (!loaded.ok) throw new Error(loaded.error);
  const service = await startService(loaded.config, { logger: silentLogger, transport: { name: 'none', deliver: async () => undefined } });
  try {
    const post = async (route: string, body: object) => {
      const started = performance.now();
      const res = await fetch(`${service.httpUrl}/api/v1/auth/${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      await res.text();
      return { ms: performance.now() - started, status: res.status };
    };
    const first = await post('signup', { email: 'known@example.com', password_hash: sha('right password') });
    if (first.status !== 201) throw new Error(`signup: ${first.status}`);
    let fresh = 0;
    // Each case: the route, a body (made anew for each call where it must be new) and the status it must answer.
    const cases: Record<string, { route: string; body: () => object; status: number }> = {
      wrong_password: { route: 'login', body: () => ({ identifier_hash: sha('known@example.com'), password_hash: sha('wrong password') }), status: 401 },
      unknown_account: { route: 'login', body: () => ({ identifier_hash: sha('nobody@example.com'), password_hash: sha('wrong password') }), status: 401 },
      right_password: { route: 'login', body: () => ({ identifier_hash: sha('known@example.com'), password_hash: sha('right password') }), status: 200 },
      // docs/api.md, "Signup": an address with an account and a wrong password, and a new address, must cost the same.
      signup_taken_address: { route: 'signup', body: () => ({ email: 'known@example.com', password_hash: sha('wrong password') }), status: 201 },
      signup_new_address: { route: 'signup', body: () => ({ email: `new-${++fresh}@example.com`, password_hash: sha('wrong password') }), status: 201 },
      signup_right_password: { route: 'signup', body: () => ({ email: 'known@example.com', password_hash: sha('right password') }), status: 200 },
    };
    const times: Record<string, number[]> = Object.fromEntries(Object.keys(cases).map((name) => [name, []]));
    const call = async (name: string) => {
      const c = cases[name]!;
      const res = await post(c.route, c.body());
      if (res.status !== c.status) throw new Error(`${name}: expected ${c.status}, got ${res.status}`);
      return res.ms;
    };
    for (let warm = 0; warm < 5; warm++) for (const name of Object.keys(cases)) await call(name);
    for (let i = 0; i < rounds; i++) for (const name of Object.keys(cases)) times[name]!.push(await call(name));
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!;
    console.log(`sign-in and signup timing, bcrypt cost ${cost}, ${rounds} interleaved rounds (${os.cpus().length} cores, node ${process.version})\n`);
    console.log('| case | median ms | p90 ms | median / its baseline |');
    console.log('|---|---|---|---|');
    const baseline = (name: string) => median(times[name.startsWith('signup') ? 'signup_new_address' : 'wrong_password']!);
    for (const [name, xs] of Object.entries(times)) console.log(`| ${name} | ${fmt(median(xs), 1)} | ${fmt(p90(xs), 1)} | ${ratio(median(xs), baseline(name), 3)} |`);
    console.log('\nbaselines: login rows against wrong_password, signup rows against signup_new_address (goal for the refusals: within 1.05)');
  } finally {
    await service.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  console.error(`bench/enumeration: ${err.message}`);
  process.exit(1);
});
