/**
 * The fleet bench's PostgreSQL: the tests' private cluster (test/platform/postgres.ts, Debian's PostgreSQL run
 * as the `postgres` user when we are root), the CPU of all its processes, and the SQLite world copied into it
 * with the operator's own `migrate-store` (docs/operator.md, "Several hosts"), so both stores hold the same rows.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { postgresInstalled, startPostgres, type PostgresCluster } from '../../test/platform/postgres.ts';
import { CLOCK_TICKS_PER_S, ROOT } from '../support.ts';

export interface BenchPostgres {
  cluster: PostgresCluster;
  url: string;
  /** CPU seconds so far of the whole cluster (a cpuWindow entry). */
  cpu: () => number;
  version: string;
  stop(): Promise<void>;
}

type Stat = { pid: number; ppid: number; ticks: number };

/** utime + stime + cutime + cstime of one process: its own CPU and that of its children it has waited for. */
function stat(pid: number): Stat | null {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { pid, ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]) };
  } catch {
    return null;
  }
}

const pids = () => fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d)).map(Number);

/** The postmaster listening on `port`: the postgres process whose command line names it. */
function postmasterOf(port: number): number {
  for (const pid of pids()) {
    try {
      const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (path.basename(argv[0] ?? '') === 'postgres' && argv.includes('-p') && argv[argv.indexOf('-p') + 1] === String(port)) return pid;
    } catch {
      /* gone meanwhile */
    }
  }
  throw new Error(`no postmaster on port ${port} in /proc`);
}

/**
 * The cluster's CPU: the postmaster's own and its reaped children's (a backend that ended is counted in the
 * postmaster's cutime/cstime), plus every live child's (backends, checkpointer, WAL writer, ...). A backend
 * that ends between two readings moves from one term to the other without being lost.
 */
function clusterCpu(port: number): () => number {
  const master = postmasterOf(port);
  return () => {
    let ticks = 0;
    for (const pid of pids()) {
      const s = stat(pid);
      if (s && (s.pid === master || s.ppid === master)) ticks += s.ticks;
    }
    return ticks / CLOCK_TICKS_PER_S;
  };
}

export async function startBenchPostgres(): Promise<BenchPostgres> {
  if (!postgresInstalled()) throw new Error('PostgreSQL (initdb) is not installed under /usr/lib/postgresql: the fleet bench needs it');
  const cluster = await startPostgres();
  const master = postmasterOf(cluster.port);
  // An interrupted bench ends with process.exit: the tests' exit hook kills runuser, not the server, so the
  // postmaster gets an immediate shutdown (SIGQUIT) of its own here.
  const quit = () => {
    try {
      process.kill(master, 'SIGQUIT');
    } catch {
      /* already gone */
    }
  };
  process.once('exit', quit);
  const url = await cluster.database();
  const client = new pg.Client(url);
  await client.connect();
  const version = String((await client.query('SHOW server_version')).rows[0]?.server_version ?? '?');
  await client.end();
  return {
    cluster, url, version, cpu: clusterCpu(cluster.port),
    async stop() {
      // The postmaster first: as root the tests' child is runuser, and killing it leaves the server running.
      await cluster.stopServer().catch(() => undefined);
      cluster.stop();
      process.off('exit', quit);
    },
  };
}

/** `minaret migrate-store` (cli/index.ts through tsx, as bench children run the sources): the SQLite file into the empty database. */
export function migrateInto(sqliteFile: string, url: string): void {
  const r = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'cli', 'index.ts'), 'migrate-store', '--from', sqliteFile, '--to', url], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`migrate-store failed (${r.status}): ${r.stderr || r.stdout}`);
}

/** How many devices the store holds ONLINE, connected to a broker and heard from since `sinceS` (Unix seconds). */
export async function onlineDevices(url: string, sinceS: number): Promise<number> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    const { rows } = await client.query<{ n: string }>(
      "SELECT count(*) AS n FROM devices WHERE status = 'ONLINE' AND connected_broker IS NOT NULL AND last_seen_at >= $1", [sinceS]);
    return Number(rows[0]!.n);
  } finally {
    await client.end();
  }
}
