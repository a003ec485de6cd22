import type { Queries, Store, StoreTransaction } from './store.ts';

/**
 * What a write tells others (the change feed, another domain's listeners) waits for the COMMIT of the
 * transaction that wrote it: told before, another process would read the row it was told of and find the old
 * one (a reader sees only committed rows), and a rollback would leave it told of a change that never was.
 * A transaction opened with `inTransaction` keeps a queue; `afterCommit` on it queues, on the store itself
 * (a write of one statement, committed when it returned) runs at once.
 */
const queues = new WeakMap<Queries, Array<() => void>>();

/** Runs `fn` in one store transaction; what it queued with `afterCommit` runs once that committed, in order. */
export async function inTransaction<T>(store: Store, fn: (trx: StoreTransaction) => Promise<T>): Promise<T> {
  const queue: Array<() => void> = [];
  const result = await store.transaction().execute((trx) => {
    queues.set(trx, queue);
    return fn(trx);
  });
  for (const told of queue) told();
  return result;
}

/** `fn` once the transaction `q` belongs to committed (at once when `q` is the store or a transaction opened elsewhere). */
export function afterCommit(q: Queries, fn: () => void): void {
  const queue = queues.get(q);
  if (queue) queue.push(fn);
  else fn();
}
