import { Kysely, type DatabaseConnection, type Transaction } from 'kysely';
import type { Tables } from '../../../generated/tables.ts';
import type { Db } from '../db.ts';
import { MinaretSqliteDialect } from './sqlite-dialect.ts';

export type { Tables };

/**
 * The store port: every repository reads and writes its tables through it, with Kysely's typed builder, so
 * one set of queries serves each dialect Kysely compiles to (SQLite today; PostgreSQL speaks the same builder).
 * It is async whatever the engine: a repository never assumes a query answers before the next line runs.
 * Row types come from the migrated schema (generated/tables.ts, written by `npm run docs`).
 */
export type Store = Kysely<Tables>;
/** A store inside a transaction: what a repository's writer takes when its caller groups several writes. */
export type StoreTransaction = Transaction<Tables>;
/** Either: a repository method that writes may run alone or inside its caller's transaction. */
export type Queries = Store | StoreTransaction;

/** The store over the SQLite connection src/platform/db.ts opened and migrated. Closing the store leaves it open. */
export function sqliteStore(db: Db): Store {
  const dialect = new MinaretSqliteDialect(db);
  const store = new Kysely<Tables>({ dialect });
  direct.set(store, () => dialect.transactionConnection());
  return store;
}

const direct = new WeakMap<Store, () => DatabaseConnection | null>();

/**
 * Whether an INSERT through `store` answers its new row's id without RETURNING (SQLite's last insert rowid, as
 * Kysely's `insertId`): on a status's path RETURNING costs ~2-4 µs more per row there. PostgreSQL needs RETURNING.
 */
export function answersInsertId(store: Queries): boolean {
  return direct.has(store as Store);
}
/**
 * For a SQLite store: the connection while a transaction holds it (null otherwise, and always null for other
 * dialects). Only for a query made through a transaction of `store` (src/platform/store/prepared.ts).
 */
export function transactionConnectionOf(store: Queries): (() => DatabaseConnection | null) | null {
  return direct.get(store as Store) ?? null;
}

/**
 * Whether a write failed on a UNIQUE constraint (or a primary key), in either dialect: better-sqlite3's
 * SQLITE_CONSTRAINT_UNIQUE / _PRIMARYKEY, PostgreSQL's SQLSTATE 23505 (unique_violation).
 */
export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === '23505';
}
