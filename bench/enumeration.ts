/**
 * Account enumeration by timing (contract 4): POST /auth/login for an existing account with a wrong
 * password, an unknown account, and an existing account with the right password, interleaved, through one
 * keep-alive connection. Prints medians and their ratios; the claim is that unknown ~ wrong password.
 *   npx tsx bench/enumeration.ts [--rounds 150] [--cost 10]
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/platform/config.ts';
import { silentLogger } from '../src/platform/log.ts';
import { startService } from '../src/service.ts';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
};
const rounds = arg('--rounds', 150);
const cost = arg('--cost', 10);
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
    const post = async (body: object) => {
      const started = performance.now();
      const res = await fetch(`${service.httpUrl}/api/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      await res.text();
      return { ms: performance.now() - started, status: res.status };
    };
    const signup = await fetch(`${service.httpUrl}/api/v1/auth/signup`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'known@example.com', password_hash: sha('right password') }),
    });
    if (signup.status !== 201) throw new Error(`signup: ${signup.status}`);
    const cases = {
      wrong_password: { identifier_hash: sha('known@example.com'), password_hash: sha('wrong password') },
      unknown_account: { identifier_hash: sha('nobody@example.com'), password_hash: sha('wrong password') },
      right_password: { identifier_hash: sha('known@example.com'), password_hash: sha('right password') },
    };
    const times: Record<keyof typeof cases, number[]> = { wrong_password: [], unknown_account: [], right_password: [] };
    for (let warm = 0; warm < 5; warm++) for (const body of Object.values(cases)) await post(body);
    for (let i = 0; i < rounds; i++) {
      for (const [name, body] of Object.entries(cases) as Array<[keyof typeof cases, object]>) times[name].push((await post(body)).ms);
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!;
    const base = median(times.wrong_password);
    console.log(`login timing, bcrypt cost ${cost}, ${rounds} interleaved rounds (${os.cpus().length} cores, node ${process.version})\n`);
    console.log('| case | median ms | p90 ms | median / wrong_password |');
    console.log('|---|---|---|---|');
    for (const [name, xs] of Object.entries(times)) console.log(`| ${name} | ${median(xs).toFixed(1)} | ${p90(xs).toFixed(1)} | ${(median(xs) / base).toFixed(3)} |`);
  } finally {
    await service.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  console.error(`bench/enumeration: ${err.message}`);
  process.exit(1);
});
