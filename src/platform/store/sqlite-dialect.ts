import {
  CompiledQuery, SqliteAdapter, SqliteIntrospector, SqliteQueryCompiler,
  type DatabaseConnection, type Dialect, type Driver, type Kysely, type QueryResult, type SelectModifier, type SelectQueryNode,
} from 'kysely';
import type Database from 'better-sqlite3';

/**
 * Kysely's SQLite dialect over the connection Minaret already holds (src/platform/db.ts opens it with its
 * pragmas; the migrations, the checkpointer and operator tools use it too), with two differences from the
 * dialect Kysely ships:
 * - Statements are prepared once per SQL text and kept (better-sqlite3 prepares on every call otherwise: the
 *   same query, built again from the same code, compiles to the same text). At most MAX_STATEMENTS are kept.
 * - A transaction begins IMMEDIATE: it takes the write lock at BEGIN, so two processes on one file (REDIS_URL,
 *   docs/decisions.md "Several processes") wait on busy_timeout instead of failing with SQLITE_BUSY when
 *   a read transaction tries to become a write one (sqlite.org/lang_transaction.html).
 * - A row lock (`.forUpdate()`, FOR SHARE, ...) is left out of the SQL: SQLite has no such clause, and needs
 *   none, as a transaction holds the write lock from BEGIN; on PostgreSQL the same query locks the row it reads
 *   for a write that depends on it (MinaretSqliteQueryCompiler below).
 * One query or transaction at a time holds the connection (ConnectionMutex below), so a transaction has it to
 * itself from BEGIN to COMMIT; the store never closes it (its opener does).
 */
export const MAX_STATEMENTS = 500;

class SqliteConnection implements DatabaseConnection {
  readonly #db: Database.Database;
  readonly #statements = new Map<string, Database.Statement>();

  constructor(db: Database.Database) {
    this.#db = db;
  }

  #statement(text: string): Database.Statement {
    let stmt = this.#statements.get(text);
    if (stmt) return stmt;
    stmt = this.#db.prepare(text);
    if (this.#statements.size >= MAX_STATEMENTS) this.#statements.delete(this.#statements.keys().next().value!);
    this.#statements.set(text, stmt);
    return stmt;
  }

  executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    try {
      return Promise.resolve(this.executeNow<R>(compiled));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  /** The same, answered in this turn (better-sqlite3 is synchronous); throws SQLite's error. */
  executeNow<R>(compiled: CompiledQuery): QueryResult<R> {
    const stmt = this.#statement(compiled.sql);
    const parameters = compiled.parameters as unknown[];
    if (stmt.reader) return { rows: stmt.all(parameters) as R[] };
    const { changes, lastInsertRowid } = stmt.run(parameters);
    return { rows: [], numAffectedRows: BigInt(changes), insertId: BigInt(lastInsertRowid) };
  }

  // eslint-disable-next-line require-yield
  async *streamQuery<R>(compiled: CompiledQuery): AsyncIterableIterator<QueryResult<R>> {
    for (const row of this.#statement(compiled.sql).iterate(compiled.parameters as unknown[])) yield { rows: [row as R] };
  }
}

/**
 * One holder of the connection at a time: a transaction keeps it from BEGIN to COMMIT, and every other query waits
 * for it, in the order asked. Without this, a second transaction's BEGIN would land inside the first one
 * (one connection, one transaction at a time in SQLite).
 */
class ConnectionMutex {
  #held: Promise<void> | null = null;
  #release: (() => void) | null = null;

  async lock(): Promise<void> {
    while (this.#held) await this.#held;
    this.#held = new Promise((resolve) => {
      this.#release = resolve;
    });
  }

  unlock(): void {
    const release = this.#release;
    this.#held = null;
    this.#release = null;
    release?.();
  }
}

class SqliteDriver implements Driver {
  readonly #connection: SqliteConnection;
  readonly #mutex = new ConnectionMutex();
  /** Between BEGIN and COMMIT or ROLLBACK: the one transaction that holds the connection. */
  inTransaction = false;

  /** The connection while a transaction holds it (see `MinaretSqliteDialect.transactionConnection`). */
  get transactionConnection(): DatabaseConnection | null {
    return this.inTransaction ? this.#connection : null;
  }

  constructor(db: Database.Database) {
    this.#connection = new SqliteConnection(db);
  }

  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    await this.#mutex.lock();
    return this.#connection;
  }
  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('BEGIN IMMEDIATE'));
    this.inTransaction = true;
  }
  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    this.inTransaction = false;
    await connection.executeQuery(CompiledQuery.raw('COMMIT'));
  }
  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    this.inTransaction = false;
    await connection.executeQuery(CompiledQuery.raw('ROLLBACK'));
  }
  async releaseConnection(): Promise<void> {
    this.#mutex.unlock();
  }
  async destroy(): Promise<void> {}
}

const ROW_LOCKS = new Set<SelectModifier>(['ForUpdate', 'ForShare', 'ForKeyShare', 'ForNoKeyUpdate', 'NoWait', 'SkipLocked']);

/** Kysely's SQLite compiler, without row locks (see above); every other part of a SELECT as Kysely writes it. */
class MinaretSqliteQueryCompiler extends SqliteQueryCompiler {
  protected override visitSelectQuery(node: SelectQueryNode): void {
    const kept = node.endModifiers?.filter((m) => m.modifier === undefined || !ROW_LOCKS.has(m.modifier));
    super.visitSelectQuery(kept?.length === node.endModifiers?.length ? node : { ...node, endModifiers: kept?.length ? kept : undefined });
  }
}

export class MinaretSqliteDialect implements Dialect {
  readonly #db: Database.Database;
  #driver: SqliteDriver | null = null;

  constructor(db: Database.Database) {
    this.#db = db;
  }

  createDriver(): Driver {
    this.#driver = new SqliteDriver(this.#db);
    return this.#driver;
  }

  /**
   * The connection while a transaction holds it, else null. On this one connection only one transaction can be
   * open, so a query made through any transaction of this store while one is open is made by that transaction:
   * prepared() (src/platform/store/prepared.ts) runs its compiled queries on the connection directly then, without
   * Kysely's executor around each (~2 µs a query on a status's path, measured here).
   */
  transactionConnection(): DatabaseConnection | null {
    return this.#driver?.transactionConnection ?? null;
  }
  createQueryCompiler() {
    return new MinaretSqliteQueryCompiler();
  }
  createAdapter() {
    return new SqliteAdapter();
  }
  createIntrospector(db: Kysely<unknown>) {
    return new SqliteIntrospector(db);
  }
}
