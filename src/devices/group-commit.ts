import type { Store, StoreTransaction } from '../platform/store/store.ts';
import { inTransaction } from '../platform/store/after-commit.ts';

/**
 * Group commit: the device writes of one event-loop turn go into ONE store transaction, and
 * each write's `settle` (a status's PUBACK, its callbacks) runs only after the commit that holds it, so an
 * acknowledgement still means "written". A status costs a commit's fixed price once per batch instead of
 * once per message.
 *
 * The window is the rest of the current turn (setImmediate: everything the poll phase read from the
 * sockets), closed early at `maxBatch` writes. Not a timer: a lone status on a quiet service is committed
 * in the turn it arrived, so latency does not grow; under load one poll phase reads hundreds of sockets and
 * the batch fills by itself. The cap bounds how long one commit holds the event loop (a status is ~25 µs
 * of SQLite work here: 256 of them ~6 ms).
 */
export const MAX_BATCH = 256;
/**
 * How long a write that need not commit in its own turn (addLater: a `connected` note) may wait for a batch
 * to ride in. In a reconnect storm the CONNECTs of a turn had a commit of their own, ~60-130 µs each when a
 * turn held only a few of them; now they join the next statuses' batch, or commit together.
 */
export const LATER_MS = 50;

export interface GroupWrite {
  /**
   * Runs inside the batch's transaction, through `trx` only, after the writes added before it finished;
   * throws (or rejects) to fail the whole batch (nothing of it is kept).
   */
  write(trx: StoreTransaction): Promise<void> | void;
  /** After the commit (err null) or the rollback (err set), in the order the writes were added. */
  settle(err: unknown): void;
  /**
   * For a batch that holds this write alone: the same write as ONE statement on the store, outside any
   * transaction (a statement commits or fails whole by itself), so BEGIN and COMMIT cost no round trip of their
   * own; null where it takes more than one statement (then `write` runs in a transaction).
   */
  writeAlone?(store: Store): Promise<void> | null;
}

/**
 * A write that holds many rows as arrays (src/devices/telemetry/row-set.ts): while it is the batch's last write,
 * the next row of its kind joins it instead of adding a write of its own, so a batch of statuses is one write with
 * one settle, flushed as a few multi-row statements per table.
 */
export type RowSet = GroupWrite;

/** `onFault`: where a throw from a batch committed at the end of a turn goes (no caller is there to catch it). */
export function createGroupCommit(store: Store, onFault: (err: unknown) => void, maxBatch = MAX_BATCH, laterMs = LATER_MS) {
  let batch: GroupWrite[] = [];
  /** Rows in the open batch (a set counts each of its rows): what `maxBatch` bounds. */
  let rows = 0;
  /** The set rows join while it is the batch's last write, and the opener that made it. */
  let openSet: RowSet | null = null;
  let openedBy: (() => RowSet) | null = null;
  let scheduled = false;
  let later: NodeJS.Timeout | null = null;
  /** The batch under way (or the last one): the next one begins only once it settled, so batches commit in order. */
  let tail: Promise<void> = Promise.resolve();

  /** One batch: one transaction, each write awaited in the order added; then every settle, in that order. */
  async function commit(items: GroupWrite[]): Promise<void> {
    let failure: unknown = null;
    try {
      const alone = items.length === 1 ? items[0]!.writeAlone?.(store) : null;
      if (alone) await alone;
      else await inTransaction(store, async (trx) => {
        for (const item of items) {
          const written = item.write(trx);
          if (written) await written; // a write that had nothing to do costs no turn of the microtask queue
        }
      });
    } catch (err) {
      failure = err ?? new Error('group commit failed');
    }
    let thrown: unknown = null;
    for (const item of items) {
      try {
        item.settle(failure);
      } catch (err) {
        thrown ??= err;
      }
    }
    if (thrown !== null) throw thrown; // a bug in a settle: the caller's fault handler reports it
  }

  /**
   * Commits what is pending now, then settles it; resolves once that batch (and every one before it) settled.
   * Never awaited inside a store transaction: the batch waits for the connection that transaction holds.
   */
  function flush(): Promise<void> {
    scheduled = false;
    if (later) clearTimeout(later);
    later = null;
    if (batch.length === 0) return tail;
    const items = batch;
    batch = [];
    rows = 0;
    openSet = null;
    const done = tail.then(() => commit(items));
    tail = done.catch(() => undefined); // a settle's bug is the caller's to report; the next batch still runs
    return done;
  }

  const flushReporting = () => {
    flush().catch(onFault);
  };

  const inThisTurn = () => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(flushReporting);
  };
  const inLaterMs = () => {
    if (scheduled || later) return;
    later = setTimeout(flushReporting, laterMs);
    later.unref(); // the last flush at shutdown (device plane stop) commits what waits
  };
  /** The set the next row goes into: the batch's last write when `open` made it, else a new one added. */
  const setFor = <S extends RowSet>(open: () => S): S => {
    if (rows >= maxBatch) flushReporting();
    rows++;
    if (openSet !== null && openedBy === open && batch[batch.length - 1] === openSet) return openSet as S;
    const set = open();
    batch.push(set);
    openSet = set;
    openedBy = open;
    return set;
  };

  return {
    add(item: GroupWrite): void {
      batch.push(item);
      if (++rows >= maxBatch) return flushReporting();
      inThisTurn();
    },
    /**
     * The set (made by `open`, always the same function for one kind of set) that the caller's next row goes into,
     * committed at the end of this turn as `add`'s writes are. The caller pushes its row at once.
     */
    join<S extends RowSet>(open: () => S): S {
      const set = setFor(open);
      inThisTurn();
      return set;
    },
    /** `join` for a row nothing waits on, as `addLater`. */
    joinLater<S extends RowSet>(open: () => S): S {
      const set = setFor(open);
      inLaterMs();
      return set;
    },
    /**
     * A write nothing waits on (no acknowledgement, no reader in this turn): it rides in the next batch, in
     * the order added, and commits on its own only when none comes within `laterMs`.
     */
    addLater(item: GroupWrite): void {
      batch.push(item);
      if (++rows >= maxBatch) return flushReporting();
      inLaterMs();
    },
    /**
     * Commits the open batch now: a write outside the batch (a timeline note of its own, a page read) awaits
     * this first, so the rows land in the order things happened.
     */
    flush,
    /**
     * `fn` (a transaction of its own) once the open batch and every one before it settled, and before the next:
     * nothing of this queue runs beside it. On PostgreSQL two of this process's transactions at once, each on a
     * connection of its own, each updating many devices' rows in its own order, deadlocked (40P01), and the
     * batch PostgreSQL chose to abort took its statuses with it.
     */
    runAlone<T>(fn: () => Promise<T>): Promise<T> {
      if (batch.length > 0) flushReporting();
      const done = tail.then(fn);
      tail = done.then(() => undefined, () => undefined);
      return done;
    },
    pending: () => rows,
  };
}

export type GroupCommit = ReturnType<typeof createGroupCommit>;
