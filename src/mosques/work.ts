import { isUniqueViolation, type Store, type StoreTransaction } from '../platform/store/store.ts';
import { afterCommit, inTransaction } from '../platform/store/after-commit.ts';

/**
 * One transaction of the mosques' repositories and what to tell once it commits. A change spanning several
 * repositories (a mosque created with its owner, an invitation with its membership) passes one `Work` down;
 * their announcements (the change feed, the membership listeners) wait for the COMMIT, so a listener that
 * reads or writes never runs inside the transaction, and nothing is announced that a rollback undid.
 */
export interface Work {
  readonly q: StoreTransaction;
  afterCommit(fn: () => void): void;
}

/** Runs `fn` in a store transaction; what it queued with `afterCommit` runs once that commits, in order. */
export async function transact<T>(store: Store, fn: (w: Work) => Promise<T>): Promise<T> {
  return inTransaction(store, (q) => fn({ q, afterCommit: (f) => afterCommit(q, f) }));
}

/**
 * `transact` for a read that decides an insert (no row yet: make one), run once more when the insert lost a
 * race on a unique constraint. SQLite runs one write transaction at a time, so the read already saw the other's
 * row; on PostgreSQL (READ COMMITTED) two transactions can both read nothing and both insert, and the second's
 * insert fails on the unique index. Run again, its read sees the row the other committed. The failed attempt
 * was rolled back whole, and what it queued with afterCommit never ran.
 */
export async function transactRacingInsert<T>(store: Store, fn: (w: Work) => Promise<T>): Promise<T> {
  try {
    return await transact(store, fn);
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
    return transact(store, fn);
  }
}

/** Joins the caller's work when there is one, else runs alone in a transaction of its own. */
export function within<T>(store: Store, w: Work | undefined, fn: (w: Work) => Promise<T>): Promise<T> {
  return w ? fn(w) : transact(store, fn);
}
