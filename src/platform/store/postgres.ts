import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Store, Tables } from './store.ts';

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
  return new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
}
