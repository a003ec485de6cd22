import { Kysely, type Transaction } from 'kysely';
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
  return new Kysely<Tables>({ dialect: new MinaretSqliteDialect(db) });
}
