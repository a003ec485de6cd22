import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort } from '../support/redis.ts';

/**
 * A real PostgreSQL (Debian's package) for the tests of the PostgreSQL store: a private cluster in a temporary
 * directory on a free port of 127.0.0.1, made with initdb and ended with the test file. PostgreSQL refuses to
 * run as root: as root the cluster belongs to the `postgres` system user. Each test takes a fresh database.
 */
export const PG_BIN = (() => {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => Number(v) >= 15).sort((a, b) => Number(b) - Number(a)) : [];
  return versions[0] ? path.join(root, versions[0], 'bin') : null;
})();

export const postgresInstalled = () => PG_BIN !== null && fs.existsSync(path.join(PG_BIN, 'initdb'));

export interface PostgresCluster {
  port: number;
  /** A new database's URL: empty, or a copy of `template` (a database of this cluster no one is connected to). */
  database(template?: string): Promise<string>;
  stopServer(): Promise<void>;
  startServer(): Promise<void>;
  stop(): void;
}

/**
 * `listen`: an address of this host's besides 127.0.0.1 to listen on too (the bridge of test/platform/hosts.ts),
 * with `allow` the network (CIDR) whose clients it trusts there; databases' URLs then name that address, so a
 * node in another network namespace reaches them.
 */
export async function startPostgres(opts: { listen?: { address: string; allow: string } } = {}): Promise<PostgresCluster> {
  const asRoot = process.getuid?.() === 0;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-pg-'));
  if (asRoot) spawnSync('chown', ['postgres', dir]);
  const run = (cmd: string, args: string[]) => (asRoot ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]) as [string, string[]];
  const init = spawnSync(...run(path.join(PG_BIN!, 'initdb'), ['-D', path.join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync']), { encoding: 'utf8' });
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`);
  // initdb -A trust trusts local clients only (its pg_hba.conf lists 127.0.0.1/32 and ::1): the network of the
  // other address is trusted too, or its clients are refused with "no pg_hba.conf entry".
  if (opts.listen) fs.appendFileSync(path.join(dir, 'data', 'pg_hba.conf'), `host all all ${opts.listen.allow} trust\n`);
  const listenAddresses = opts.listen ? `127.0.0.1,${opts.listen.address}` : '127.0.0.1';
  const host = opts.listen?.address ?? '127.0.0.1';
  const port = await freePort();
  const admin = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let child: ReturnType<typeof spawn>;
  const pidFile = path.join(dir, 'data', 'postmaster.pid');
  // The postmaster itself, by the pid in postmaster.pid: as root `child` is runuser, and a SIGKILL to it left the
  // postmaster running, with the cluster's directory removed under it. SIGQUIT is PostgreSQL's immediate
  // shutdown (its own processes end too); the server's files are thrown away after it, so nothing is lost.
  const kill = () => {
    let pid = 0;
    try {
      pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
    } catch {
      /* not started, or stopped already */
    }
    if (pid > 0) {
      try {
        process.kill(pid, 'SIGQUIT');
      } catch {
        /* gone already */
      }
      for (let i = 0; i < 50 && alive(pid); i++) spawnSync('sleep', ['0.1']);
    }
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', () => kill());
  const launch = async () => {
    child = spawn(...run(path.join(PG_BIN!, 'postgres'), [
      '-D', path.join(dir, 'data'), '-p', String(port), '-k', dir, '-c', `listen_addresses=${listenAddresses}`, '-c', 'fsync=off',
      // A test's data is thrown away: nothing needs to survive a crash, and several clusters share the machine.
      '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'shared_buffers=16MB',
    ]), { stdio: 'ignore' });
    const deadline = Date.now() + 15_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`postgres exited with ${child.exitCode}`);
      const probe = new pg.Client(admin);
      try {
        await probe.connect();
        await probe.end();
        return;
      } catch {
        await probe.end().catch(() => undefined);
        if (Date.now() > deadline) throw new Error('postgres did not answer within 15 s');
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  await launch();
  let n = 0;
  return {
    port,
    async database(template?: string) {
      const name = `t${++n}`;
      const client = new pg.Client(admin);
      await client.connect();
      try {
        await client.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
      } finally {
        await client.end();
      }
      return `postgres://postgres@${host}:${port}/${name}`;
    },
    /** The server stopped (fast shutdown: clients are cut off), its files kept for `startServer`. */
    async stopServer() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      // The postmaster itself (as root, `child` is runuser, which does not pass SIGINT on): its pid is the
      // first line of postmaster.pid.
      const pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
      process.kill(pid, 'SIGINT');
      await exited;
    },
    /** The same server started again on the same port and files. */
    startServer: launch,
    stop() {
      kill();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Whether `pid` still runs (an exited child of this process not yet reaped is a zombie: it counts as ended). */
function alive(pid: number): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}
