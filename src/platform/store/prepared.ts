import { CompiledQuery, type Compilable, type QueryResult } from 'kysely';
import { transactionConnectionOf, type Queries } from './store.ts';

/**
 * A query built and compiled once, run many times with new values: for the hot paths (a status, a
 * heartbeat flush), where building and compiling the query again each time cost ~6-8 µs of the ~10 µs a
 * builder query takes here, against ~3 µs for a compiled one (measured on this machine with an in-memory file).
 * The builder is called once with a marker in place of each named value; running the query puts the values
 * where the markers went, whatever the dialect numbers its placeholders. The SQL text stays the same, so the
 * SQLite connection's statement cache prepares it once too.
 */
export interface Prepared<V, R> {
  run(q: Queries, values: V): Promise<QueryResult<R>>;
  /**
   * The same query answered in this turn, where the engine answers synchronously (through a transaction of a
   * SQLite store); undefined without running it elsewhere, and the caller runs it with `run`. Every prepared
   * query of one store answers the same way through one transaction. For the per-status path,
   * where each await costs a turn of the microtask queue and a promise.
   */
  runNow(q: Queries, values: V): QueryResult<R> | undefined;
  readonly sql: string;
}

type Marked<V> = { [K in keyof V]: V[K] };
type SyncConnection = { executeNow<R>(compiled: CompiledQuery): QueryResult<R> };

export function prepared<V extends Record<string, unknown>, R = unknown>(
  q: Queries, names: ReadonlyArray<keyof V & string>, build: (values: Marked<V>) => Compilable<R>,
): Prepared<V, R> {
  // Objects as markers: no value a caller passes can be one of them by accident.
  const markers = new Map<unknown, keyof V & string>(names.map((n) => [{ marker: n }, n]));
  const byName = Object.fromEntries([...markers].map(([m, n]) => [n, m])) as Marked<V>;
  const compiled: CompiledQuery<R> = build(byName).compile();
  const slots = compiled.parameters.map((p) => markers.get(p));
  const missing = names.filter((n) => !slots.includes(n));
  if (missing.length > 0) throw new Error(`prepared query does not use ${missing.join(', ')}: ${compiled.sql}`);
  const heldConnection = transactionConnectionOf(q);
  const withValues = (values: V): CompiledQuery<R> => {
    const parameters = compiled.parameters.map((p, i) => {
      const name = slots[i];
      return name === undefined ? p : values[name];
    });
    return { ...compiled, parameters };
  };
  return {
    sql: compiled.sql,
    run(on, values) {
      // Through a transaction of a SQLite store: straight on the connection it holds (sqlite-dialect.ts says why
      // that is the same connection and the same transaction).
      const held = on.isTransaction ? heldConnection?.() : null;
      return held ? held.executeQuery<R>(withValues(values)) : on.executeQuery<R>(withValues(values));
    },
    runNow(on, values) {
      const held = on.isTransaction ? heldConnection?.() : null;
      return held && 'executeNow' in held ? (held as SyncConnection).executeNow<R>(withValues(values)) : undefined;
    },
  };
}

/**
 * Statements whose text was written for one dialect of `store`, run with their parameters in order: for a batch's
 * multi-row statements, whose values the batch lays out as flat arrays (or, on PostgreSQL, one array per column),
 * with no map of names per value. `sqlite`: whether `store` is SQLite's (its statements answer in this turn
 * through a transaction of it, each text prepared once by the connection).
 */
export function textStatements(store: Queries) {
  const heldConnection = transactionConnectionOf(store);
  const raw = <R>(text: string, parameters: readonly unknown[]) => CompiledQuery.raw(text, parameters as unknown[]) as CompiledQuery<R>;
  const statements = {
    sqlite: heldConnection !== null,
    run<R>(q: Queries, text: string, parameters: readonly unknown[]): Promise<QueryResult<R>> {
      return q.executeQuery<R>(raw<R>(text, parameters));
    },
    /** Through a transaction of a SQLite store, answered in this turn; a bug anywhere else. */
    runNow<R>(q: Queries, text: string, parameters: readonly unknown[]): QueryResult<R> {
      const held = q.isTransaction ? heldConnection?.() : null;
      if (!held || !('executeNow' in held)) throw new Error('a synchronous statement outside a SQLite transaction');
      return (held as SyncConnection).executeNow<R>(raw<R>(text, parameters));
    },
    /**
     * `count` rows as multi-row statements through a transaction of a SQLite store, answered in this turn: in
     * chunks of `sizes` rows (largest first, down to 1), `textOf(n)` the statement for n rows, `fill` laying out
     * row i's parameters. A handful of statement texts in all, each prepared once by the connection.
     */
    runInChunks(q: Queries, sizes: readonly number[], textOf: (n: number) => string, count: number, fill: (out: unknown[], i: number) => void): void {
      let at = 0;
      for (const size of sizes) {
        while (count - at >= size) {
          const out: unknown[] = [];
          for (let i = at; i < at + size; i++) fill(out, i);
          statements.runNow(q, textOf(size), out);
          at += size;
        }
      }
    },
  };
  return statements;
}
