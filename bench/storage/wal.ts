/**
 * `npm run bench:wal`: what a WAL checkpoint costs the event loop, inline (SQLite's default: the commit that
 * crosses 1000 WAL pages copies them into the main file and syncs it) against the background checkpointer
 * (src/platform/db.ts: a worker thread's own connection runs PASSIVE checkpoints). The same writes, the same
 * pace, alternating runs, each on a fresh file in the temp dir; the inline run is the same-run baseline.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { checkpointInBackground, openDatabase } from '../../src/platform/db.ts';
import { cli, fmt, hostBusySeconds, machine, percentile, processCpuSeconds, writeSubsection } from '../support.ts';

const opts = cli('usage: npm run bench:wal [-- --writes <n>=30000] [--no-write]   (BENCH_WAL_WRITES=<n> sets the default)', {
  writes: { type: 'number', default: Number(process.env.BENCH_WAL_WRITES ?? 30_000), min: 1 },
  'no-write': { type: 'boolean' },
});
const WRITES = opts.writes;
const PER_TICK = 30; // 30 transactions every 10 ms: about 3,000 status-like commits a second
const REPEATS = 2;

interface Run { mode: 'inline' | 'background'; commitMs: number[]; loopMaxMs: number; loopP99Ms: number; walMaxMiB: number; hostCores: number }

async function run(mode: Run['mode']): Promise<Run> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-wal-'));
  const file = path.join(dir, 'wal.db');
  const db = openDatabase(file);
  const checkpointer = mode === 'background' ? checkpointInBackground(db, { onError: (e) => { throw e; } }) : null;
  // The shape of a status write: the device row updated and a timeline row added, in one transaction.
  db.exec(`CREATE TABLE devices (id TEXT PRIMARY KEY, status TEXT, detail TEXT, at INTEGER);
    CREATE TABLE events (id INTEGER PRIMARY KEY, device_id TEXT, kind TEXT, detail TEXT, at INTEGER)`);
  const insertDevice = db.prepare('INSERT INTO devices VALUES (?, ?, ?, ?)');
  for (let i = 0; i < 2000; i++) insertDevice.run(`d${i}`, 'ONLINE', '', 0);
  const update = db.prepare('UPDATE devices SET status = ?, detail = ?, at = ? WHERE id = ?');
  const insert = db.prepare('INSERT INTO events (device_id, kind, detail, at) VALUES (?, ?, ?, ?)');
  const write = db.transaction((i: number) => {
    const detail = `{"rssi":-${50 + (i % 40)},"fw":"1.4.2","uptime_s":${i}}`;
    update.run(i % 2 ? 'PLAYING' : 'ONLINE', detail, i, `d${i % 2000}`);
    insert.run(`d${i % 2000}`, 'status', detail.repeat(4), i);
  });
  const commitMs: number[] = [];
  let walMax = 0;
  const loop = monitorEventLoopDelay({ resolution: 1 });
  const busy0 = hostBusySeconds();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  loop.enable();
  for (let i = 0; i < WRITES; i++) {
    const start = performance.now();
    write(i);
    commitMs.push(performance.now() - start);
    if (i % PER_TICK === PER_TICK - 1) {
      walMax = Math.max(walMax, fs.statSync(`${file}-wal`).size);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  loop.disable();
  const seconds = (performance.now() - t0) / 1000;
  const busy1 = hostBusySeconds();
  const cpuS = processCpuSeconds(cpu0);
  await checkpointer?.close();
  db.close();
  fs.rmSync(dir, { recursive: true, force: true });
  return {
    mode, commitMs, loopMaxMs: loop.max / 1e6, loopP99Ms: loop.percentile(99) / 1e6, walMaxMiB: walMax / 2 ** 20,
    // Other work on the host during the run: cores busy beyond this process's own (its worker included).
    hostCores: busy0 === null || busy1 === null ? Number.NaN : (busy1 - busy0 - cpuS) / seconds,
  };
}

const runs: Run[] = [];
for (let r = 0; r < REPEATS; r++) for (const mode of ['inline', 'background'] as const) runs.push(await run(mode));

const rowOf = (r: Run) => {
  const slow = r.commitMs.filter((ms) => ms > 5).length;
  return `| ${r.mode} | ${fmt(percentile(r.commitMs, 50), 3)} | ${fmt(percentile(r.commitMs, 99), 3)} | ${fmt(percentile(r.commitMs, 99.9), 2)} | ${fmt(Math.max(...r.commitMs), 1)} | ${slow} | ${fmt(r.loopP99Ms, 1)} / ${fmt(r.loopMaxMs, 1)} | ${fmt(r.walMaxMiB, 1)} | ${fmt(Math.max(0, r.hostCores), 2)} |`;
};
const table = [
  '| Checkpoints | commit p50 (ms) | p99 | p99.9 | max | commits > 5 ms | loop delay p99 / max (ms) | WAL file max (MiB) | other processes (cores) |',
  '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...runs.map(rowOf),
].join('\n');
const sub = [
  `### ${WRITES.toLocaleString('en')} status-like commits at about 3,000/s`,
  '',
  `- Date: ${new Date().toISOString()}`,
  '- Command: `npm run bench:wal`',
  ...machine(),
  `- Each run: a fresh file in ${os.tmpdir()} opened as the service opens it (WAL, synchronous=NORMAL), 2,000 device rows, then ${WRITES.toLocaleString('en')} transactions of one UPDATE and one INSERT (the shape of a status write), ${PER_TICK} every 10 ms. Runs alternate; inline is SQLite's automatic checkpoint (the same-run baseline), background is the service's worker thread.`,
  '',
  table,
  '',
  '**Reading.** The checkpoints\' stalls are the tail: p99.9, max and the commits over 5 ms. With the other processes\' column near 2 cores the loop-delay figures are mostly the scheduler\'s; compare runs with it low. The WAL file grows further with the worker (it can only start over in a quiet moment) and is held under 64 MiB: past it the writer checkpoints inline again until the WAL is short.',
].join('\n');
console.log(sub);
if (!opts['no-write']) writeSubsection('## Database checkpoints (npm run bench:wal)',
  '`npm run bench:wal` (bench/storage/wal.ts): the event loop\'s cost of WAL checkpoints, inline against the background checkpointer the service runs (src/platform/db.ts). A rerun replaces its own subsection.',
  sub, () => 0);
