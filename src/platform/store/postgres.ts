import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { Store, Tables } from './store.ts';
import { migratePostgres } from './postgres-migrations.ts';
import { storageFaultOf, type StorageProbe } from '../faults.ts';

/** A pool's bounds (docs/settings.md, DATABASE_POOL_SIZE and DATABASE_STATEMENT_TIMEOUT_MS). */
export interface PostgresOptions {
  poolSize: number;
  statementTimeoutMs: number;
  /** How long a query waits for a free connection before it fails (the pool is full). */
  connectTimeoutMs?: number;
}

// BIGINT (int8, OID 20) arrives as a string by default, as it may exceed 2^53; Minaret's are Unix times,
// counts and row ids, far below it, and the repositories take numbers, as SQLite gives them.
const INT8 = 20;
const types = {
  getTypeParser: (oid: number, format?: 'text' | 'binary') =>
    oid === INT8 ? (v: string) => Number.parseInt(v, 10) : pg.types.getTypeParser(oid, format as 'text'),
};

/** A PostgreSQL store, migrated: what the service and the operator CLI open (docs/operator.md, "Several hosts"). */
export interface OpenedPostgres {
  store: Store;
  /** The schema version the migrations brought it to. */
  version: number;
  /** `url` with its password masked, for a log line or an error. */
  shown: string;
  /** Whether it answers now (/healthz while degraded): a full disk shows in the writes that fail (SQLSTATE 53100). */
  probe: StorageProbe;
}

/**
 * The pool at `url`, with the same numbered migrations as the SQLite file applied under an advisory lock (nodes
 * starting together apply them once). Unusable (unreachable, refused, a migration failing): the pool is ended
 * and one Error says so, naming `setting` and the URL without its password.
 */
export async function openPostgres(url: string, opts: PostgresOptions, setting: string): Promise<OpenedPostgres> {
  const store = postgresStore(url, opts);
  const shown = withoutPassword(url);
  try {
    const version = await migratePostgres(store);
    return { store, version, shown, probe: answersProbe(store) };
  } catch (err) {
    await store.destroy();
    throw new Error(`${setting}: PostgreSQL at ${shown} could not be used: ${(err as Error).message ?? String(err)}`, { cause: err });
  }
}

function answersProbe(store: Store): StorageProbe {
  return {
    busy: () => false,
    write: async () => {
      try {
        await sql`SELECT 1`.execute(store);
        return null;
      } catch (err) {
        return storageFaultOf(err) ?? 'unavailable';
      }
    },
  };
}

/** A database URL as it may be logged: its password replaced. */
function withoutPassword(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'postgres://(unparsable)';
  }
}

/** The store over a PostgreSQL pool at `url` (postgres://...). Closing the store ends the pool. */
export function postgresStore(url: string, opts: PostgresOptions): Store {
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.poolSize,
    statement_timeout: opts.statementTimeoutMs,
    connectionTimeoutMillis: opts.connectTimeoutMs ?? 5000,
    types,
  });
  // An idle client whose server went away emits 'error' on the pool; unhandled, it would end the process.
  pool.on('error', () => {});
  // A client checked out of the pool (a transaction between its statements) has no listener of the pool's:
  // its connection lost then (PostgreSQL restarting, the network) emitted 'error' with none, and that ended the
  // process with every device on it. The query in flight fails with that error anyway, and the pool drops a
  // client that can no longer query when it comes back.
  pool.on('connect', (client) => client.on('error', () => {}));
  return new Kysely<Tables>({ dialect: new PostgresDialect({ pool: unreachableAsSqlstate(pool) }) });
}

/**
 * The pool as Kysely uses it (connect, and each client's query and release), with one difference: a failure to
 * reach the server (refused, reset, a connection that ended, no free connection in time) carries SQLSTATE 08006,
 * connection_failure, as the server's own connection errors do. pg gives those Node's codes or none, which
 * would make a write during a PostgreSQL restart a 500 instead of the 503 of a store that cannot take writes
 * now (src/platform/faults.ts).
 */
function unreachableAsSqlstate(pool: pg.Pool): pg.Pool {
  const clients = new WeakMap<pg.PoolClient, pg.PoolClient>();
  const wrap = (client: pg.PoolClient): pg.PoolClient => {
    let wrapped = clients.get(client);
    if (!wrapped) {
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      wrapped = new Proxy(client, {
        get(target, key, receiver) {
          if (key === 'query') return (...args: unknown[]) => query(...args).catch((err: unknown) => Promise.reject(asUnreachable(err)));
          const value = Reflect.get(target, key, receiver) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
      clients.set(client, wrapped);
    }
    return wrapped;
  };
  return new Proxy(pool, {
    get(target, key, receiver) {
      if (key === 'connect') {
        return async () => {
          try {
            return wrap(await target.connect());
          } catch (err) {
            throw asUnreachable(err);
          }
        };
      }
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
const LOST = /Connection terminated|timeout exceeded when trying to connect|connection error|Client was closed/i;

function asUnreachable(err: unknown): unknown {
  const e = err as { code?: unknown; message?: unknown } | null;
  if (typeof e?.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return err; // the server's own SQLSTATE
  const network = typeof e?.code === 'string' && NETWORK_CODES.has(e.code);
  if (!network && !(typeof e?.message === 'string' && LOST.test(e.message))) return err;
  return Object.assign(new Error(`PostgreSQL unreachable: ${String(e?.message)}`, { cause: err }), { code: '08006' });
}
