/**
 * A device's return after a restart, alone: the reconnect storm of bench/cluster/fleet.ts (two nodes on
 * PostgreSQL + Redis, node 1 crashed and started again, its players back to it; bench/cluster/storm.ts) beside
 * the same return on bare aedes with aedes-persistence-redis + mqemitter-redis, in the same run, without the
 * fleet bench's other phases. For measuring a change to the return at a smaller size than the fleet's.
 *
 *   npx tsx bench/cluster/return.ts [--mosques <m>=100] [--per-mosque <p>=20] [--concurrency <c>=200] [--rounds <r>=2]
 *
 * BENCH_CPU_PROF=<dir> writes a V8 CPU profile of every service node that exits cleanly (the restarted node
 * among them). Prints its figures; writes nothing to bench/RESULTS.md (the fleet bench's storm table is the record).
 */
import fs from 'node:fs';
import pg from 'pg';
import type { Redis } from 'ioredis';
import os from 'node:os';
import path from 'node:path';
import { cli, cpuPerMessageUs, fmt, range, ratios } from '../support.ts';
import { createFirstSuperadminRow, registerWorld, superadminToken } from '../world/registration.ts';
import { migrateInto, startBenchPostgres, type BenchPostgres } from './postgres.ts';
import { Child, runBench, serviceEnv, startRedisServer } from './processes.ts';
import { bareStorm, reconnectStorm, type BareStormFigures, type StormFigures, type StormWindow } from './storm.ts';
import type { Player } from './world.ts';

const args = process.argv.slice(2);
const opts = cli('usage: npx tsx bench/cluster/return.ts [--mosques <m>=100] [--per-mosque <p>=20] [--concurrency <c>=200] [--rounds <r>=2]', {
  mosques: { type: 'number', default: 100, min: 1 },
  'per-mosque': { type: 'number', default: 20, min: 1 },
  concurrency: { type: 'number', default: 200, min: 1 },
  rounds: { type: 'number', default: 2, min: 1 },
}, args);
const M = opts.mosques;
const N = M * opts['per-mosque'];
const C = opts.concurrency;
const log = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

type Counts = Record<string, number>;

/** Redis commands by name so far (INFO commandstats; the INFO itself is counted too, once per reading). */
async function redisCommands(redis: Redis): Promise<Counts> {
  const out: Counts = {};
  for (const m of (await redis.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

/** PostgreSQL transactions so far (each statement outside a transaction is one), after its backends reported them. */
async function pgTransactions(url: string): Promise<number> {
  await new Promise((r) => setTimeout(r, 1500)); // a backend reports its counts at most once a second
  const client = new pg.Client(url);
  await client.connect();
  try {
    return Number((await client.query<{ n: string }>('SELECT sum(xact_commit + xact_rollback) AS n FROM pg_stat_database')).rows[0]!.n);
  } finally {
    await client.end();
  }
}

/** A StormWindow that counts Redis commands (and PostgreSQL transactions, given a URL) from its start to its end. */
function counting(redis: Redis, pgUrl: string | null): { window: StormWindow; counts: Counts } {
  const counts: Counts = {};
  let before: Counts = {};
  let xacts = 0;
  return {
    counts,
    async window(edge) {
      if (edge === 'start') {
        before = await redisCommands(redis);
        if (pgUrl) xacts = await pgTransactions(pgUrl);
        return;
      }
      const after = await redisCommands(redis);
      for (const [k, v] of Object.entries(after)) if (v - (before[k] ?? 0) > 0) counts[`redis ${k}`] = v - (before[k] ?? 0);
      if (pgUrl) counts['pg transactions'] = (await pgTransactions(pgUrl)) - xacts;
    },
  };
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-return-'));
  const redis = await startRedisServer();
  let pg: BenchPostgres | null = null;
  try {
    pg = await startBenchPostgres();
    const env = (databaseUrl?: string) => ({
      ...serviceEnv(dir, redis.url, { perPlayer: 1, handshakes: C, ...(databaseUrl && { databaseUrl }) }),
      SHARED_CACHE_RELOAD_S: '3600', // as the fleet bench: keeps reload passes out of the window
    });
    const dbFile = path.join(dir, 'minaret.db');
    const registrar = new Child('registrar', 'device-server.ts', env());
    await createFirstSuperadminRow(dbFile);
    const base = String((await registrar.next('ready'))['httpUrl']);
    const root = await superadminToken(base, async () => String((await registrar.next('otp', 30_000))['code']));
    const world = await registerWorld(base, root, {
      mosques: Array.from({ length: M }, (_, m) => ({ name: `Bench Masjid ${m + 1}`, auto_approve_members: true, stream_url: `https://radio.example.org/bench-${m + 1}` })),
      members: Math.max(1, Math.ceil(N / 2000)), devices: N, concurrency: 20, progress: log,
      confirmCode: async () => String((await registrar.next('otp', 30_000))['code']), confirmOneAtATime: true,
    });
    await registrar.stop();
    migrateInto(dbFile, pg.url);
    const players: Player[] = world.devices.map((d) => ({ id: d.id, password: d.password }));
    const topicOf = (i: number) => `mosques/${world.mosqueIds[i % M]}/broadcast`;
    const rounds: Array<{ storm: StormFigures; bare: BareStormFigures; stormCounts: Counts; bareCounts: Counts }> = [];
    for (let r = 0; r < opts.rounds; r++) {
      const stormCounted = counting(redis.client, pg.url);
      const bareCounted = counting(redis.client, null);
      const bare = () => bareStorm({ players, topicOf, redisUrl: `${redis.url}/1`, concurrency: C, watched: [redis.pid], window: bareCounted.window });
      const storm = () => reconnectStorm({ players, topicOf, env: env(pg!.url), databaseUrl: pg!.url, concurrency: C, watched: [pg!.cpu, redis.pid], log, window: stormCounted.window });
      log(`round ${r + 1} ...`);
      const round = r % 2 === 0 ? { bare: await bare(), storm: await storm() } : { storm: await storm(), bare: await bare() };
      rounds.push({ ...round, stormCounts: stormCounted.counts, bareCounts: bareCounted.counts });
      console.log(JSON.stringify(rounds.at(-1), (_k, v: unknown) => (typeof v === 'number' ? Math.round(v * 1000) / 1000 : v)));
    }
    const perDevice = (c: Counts) => Object.entries(c).sort().map(([k, v]) => `${k} ${fmt(v / N, 2)}`).join(', ');
    const us = (cpu: number) => cpuPerMessageUs(cpu, N);
    const service = rounds.map((r) => us(r.storm.spent.cpu[0]! + r.storm.spent.cpu[1]!));
    const bareCpu = rounds.map((r) => us(r.bare.spent.cpu[0]!));
    console.log([
      `\nA device's return, ${N.toLocaleString('en-US')} players (${M} mosques), ${opts.rounds} rounds, ${C} CONNECTs in flight`,
      `| Service CPU per device, both nodes (µs) | ${range(service, 0)} | bare aedes on Redis | ${range(bareCpu, 0)} | ${ratios(service, bareCpu)} |`,
      `| Restarted node's CPU per device (µs) | ${range(rounds.map((r) => us(r.storm.spent.cpu[0]!)), 0)} | | | |`,
      `| PostgreSQL CPU per device (µs) | ${range(rounds.map((r) => us(r.storm.spent.cpu[2]!)), 0)} | | | |`,
      `| Redis CPU per device (µs) | ${range(rounds.map((r) => us(r.storm.spent.cpu[3]!)), 0)} | | ${range(rounds.map((r) => us(r.bare.spent.cpu[1]!)), 0)} | |`,
      `| Wall time (s) | ${range(rounds.map((r) => r.storm.seconds), 1)} | | ${range(rounds.map((r) => r.bare.seconds), 1)} | |`,
      `| Unacked / stored ONLINE | ${rounds.map((r) => `${r.storm.unacked ?? 0}/${r.storm.stored}`).join(', ')} | | | |`,
      ...rounds.map((r, i) => `Round ${i + 1}, per device: Minaret: ${perDevice(r.stormCounts)}; bare: ${perDevice(r.bareCounts)}`),
      `Other cores at most ${fmt(Math.max(...rounds.flatMap((r) => [r.storm.spent.otherCores ?? 0, r.bare.spent.otherCores ?? 0])), 2)}.`,
    ].join('\n'));
  } finally {
    await pg?.stop();
    await redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

runBench('return bench', main);
