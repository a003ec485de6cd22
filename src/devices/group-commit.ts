import type { Db } from '../platform/db.ts';

/**
 * Group commit: the device writes of one event-loop turn go into ONE SQLite transaction, and
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
  /** Runs inside the batch's transaction; throws to fail the whole batch (nothing of it is kept). */
  write(): void;
  /** After the commit (err null) or the rollback (err set), in the order the writes were added. */
  settle(err: unknown): void;
}

/** `onFault`: where a throw from a batch committed at the end of a turn goes (no caller is there to catch it). */
export function createGroupCommit(db: Db, onFault: (err: unknown) => void, maxBatch = MAX_BATCH, laterMs = LATER_MS) {
  let batch: GroupWrite[] = [];
  let scheduled = false;
  let later: NodeJS.Timeout | null = null;
  // Built once: better-sqlite3 makes new wrapper functions for every db.transaction() call.
  const writeAll = db.transaction((items: GroupWrite[]) => {
    for (const item of items) item.write();
  });

  /** Commits what is pending now, then settles it; a settle that throws does not stop the others. */
  function flush(): void {
    scheduled = false;
    if (later) clearTimeout(later);
    later = null;
    if (batch.length === 0) return;
    const items = batch;
    batch = [];
    let failure: unknown = null;
    try {
      writeAll(items);
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

  const flushReporting = () => {
    try {
      flush();
    } catch (err) {
      onFault(err);
    }
  };

  return {
    add(item: GroupWrite): void {
      batch.push(item);
      if (batch.length >= maxBatch) return flush();
      if (scheduled) return;
      scheduled = true;
      setImmediate(flushReporting);
    },
    /**
     * A write nothing waits on (no acknowledgement, no reader in this turn): it rides in the next batch, in
     * the order added, and commits on its own only when none comes within `laterMs`.
     */
    addLater(item: GroupWrite): void {
      batch.push(item);
      if (batch.length >= maxBatch) return flush();
      if (scheduled || later) return;
      later = setTimeout(flushReporting, laterMs);
      later.unref(); // the last flush at shutdown (device plane stop) commits what waits
    },
    /**
     * Commits the open batch at once: every write outside the batch (a backend verdict, a disconnect)
     * calls this first, so the rows land in the order things happened.
     */
    flush,
    pending: () => batch.length,
  };
}

export type GroupCommit = ReturnType<typeof createGroupCommit>;
