import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';

export interface TimelineRow {
  id: number;
  device_id: string;
  mosque_id: string | null;
  at: number;
  kind: string;
  from_status: string | null;
  to_status: string | null;
  reason: string | null;
  actor_user_id: string | null;
  detail: string;
}

/** One entry of GET /devices/{id}/events: `{id, at, device_id, mosque_id, kind, from, to, reason, detail}`. */
export function toTimelineEntry(row: TimelineRow) {
  return {
    id: String(row.id),
    at: toIsoString(row.at),
    device_id: row.device_id,
    mosque_id: row.mosque_id,
    kind: row.kind,
    from: row.from_status,
    to: row.to_status,
    reason: row.reason,
    actor_user_id: row.actor_user_id,
    detail: JSON.parse(row.detail) as Record<string, unknown>,
  };
}

export interface TimelineEvent {
  deviceId: string;
  mosqueId: string | null;
  kind: string;
  from?: string | null;
  to?: string | null;
  reason?: string | null;
  actorUserId?: string | null;
  detail?: Record<string, unknown>;
  /** Unix seconds; now by default (a note written later than it happened carries its own time). */
  at?: number;
}

/**
 * A scalar subquery: the device's newest status at or before `until`, its chain (migration 012) walked back
 * from `head` only as far as that status. For statements over many devices (the broadcast report), so the
 * chain's layout stays written here.
 */
const statusAsOfSql = (head: string, until: string) => `(
  WITH RECURSIVE chain(id, prev, hit) AS (
    SELECT e.id, e.prev_id, e.kind = 'status' AND e.at <= ${until} FROM mosque_device_events e WHERE e.id = ${head}
    UNION ALL
    SELECT e.id, e.prev_id, e.kind = 'status' AND e.at <= ${until}
    FROM chain c JOIN mosque_device_events e ON e.id = c.prev AND e.id < c.id WHERE NOT c.hit)
  SELECT e.to_status FROM chain c JOIN mosque_device_events e ON e.id = c.id WHERE c.hit LIMIT 1)`;

/**
 * Whether the device whose newest row is `head` reported PLAYING at any time in [from, until] (Unix seconds): its
 * chain walked back from the head only as far as `from`, so a broadcast's window costs the rows written since.
 */
const playedBetweenSql = (head: string, from: string, until: string) => `(
  WITH RECURSIVE chain(id, prev, at) AS (
    SELECT e.id, e.prev_id, e.at FROM mosque_device_events e WHERE e.id = ${head}
    UNION ALL
    SELECT e.id, e.prev_id, e.at FROM chain c JOIN mosque_device_events e ON e.id = c.prev AND e.id < c.id WHERE c.at >= ${from})
  SELECT EXISTS (SELECT 1 FROM chain c JOIN mosque_device_events e ON e.id = c.id
    WHERE e.kind = 'status' AND e.to_status = 'PLAYING' AND e.at BETWEEN ${from} AND ${until}))`;

/**
 * The broadcast report's read of every device of a mosque (docs/api.md, "Broadcasts and their delivery report"):
 * each device's status as of a time and whether it reported PLAYING within the broadcast's window, in one
 * statement over the mosque's devices. `now` is the same while the window reaches the present: a device row's
 * status is its newest committed status, written in the same transaction as its timeline row, so no chain needs
 * walking (1.3 ms against 3.8 ms per 1,000 devices, warm).
 */
export function createDeliveryStatuses(db: Db) {
  const asOf = db.prepare<{ until: number; mosque: string; from: number; played_until: number }, { status: string | null; played: number }>(
    `SELECT ${statusAsOfSql('d.timeline_head', '@until')} AS status, ${playedBetweenSql('d.timeline_head', '@from', '@played_until')} AS played
     FROM devices d WHERE d.mosque_id = @mosque`,
  );
  const now = db.prepare<{ mosque: string; from: number; played_until: number }, { status: string; played: number }>(
    `SELECT d.status, ${playedBetweenSql('d.timeline_head', '@from', '@played_until')} AS played FROM devices d WHERE d.mosque_id = @mosque`,
  );
  return {
    asOf: (q: { until: number; mosque: string; from: number; played_until: number }) => asOf.all(q),
    now: (q: { mosque: string; from: number; played_until: number }) => now.all(q),
  };
}

/**
 * How long one slice of the timeline's upkeep may hold the event loop before it yields (the hourly
 * per-device cap was one GROUP BY over the whole table, ~0.9 s on 850,000 rows, every device's packets waiting).
 */
export const PRUNE_SLICE_MS = 5;
/** Rows one DELETE removes by age; a slice runs as many as fit in PRUNE_SLICE_MS. */
const AGE_CHUNK = 500;

/**
 * The device timeline (mosque_device_events), with retention so a Raspberry Pi's card does not fill up.
 * `pendingFirst` commits notes still waiting in the device group commit, so that a note written directly
 * (outside a transaction) and a page read come after them, in the order things happened.
 */
export function createTimeline(db: Db, clock: Clock, pendingFirst: () => void = () => undefined) {
  // Each row points to its device's previous one, and the device row to the newest (migration 012): a row
  // is an append to the table's end, and the two statements write in the caller's transaction, or in one of
  // their own.
  const insert = db.prepare(
    `INSERT INTO mosque_device_events (device_id, prev_id, mosque_id, at, kind, from_status, to_status, reason, actor_user_id, detail)
     VALUES (?, (SELECT timeline_head FROM devices WHERE id = ?), ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const moveHead = db.prepare('UPDATE devices SET timeline_head = ?, timeline_seq = timeline_seq + 1 WHERE id = ?');
  const append = (e: TimelineEvent): void => {
    const { lastInsertRowid } = insert.run(
      e.deviceId, e.deviceId, e.mosqueId, e.at ?? toUnixSeconds(clock()), e.kind, e.from ?? null, e.to ?? null, e.reason ?? null, e.actorUserId ?? null, JSON.stringify(e.detail ?? {}),
    );
    moveHead.run(lastInsertRowid, e.deviceId);
  };
  const appendAlone = db.transaction(append);
  // A chain walked back from `start`, newest first (`n` counts from 1), at most `limit` rows; `e.id < c.id`
  // bounds every walk (ids only fall along a chain).
  const chainFrom = (start: string, limit = '') => `WITH RECURSIVE chain(id, prev, n) AS (
      SELECT id, prev_id, 1 FROM mosque_device_events WHERE id = ${start}
      UNION ALL
      SELECT e.id, e.prev_id, c.n + 1 FROM chain c JOIN mosque_device_events e ON e.id = c.prev AND e.id < c.id ${limit})`;
  const headOf = db.prepare<[string], number | null>('SELECT timeline_head FROM devices WHERE id = ?').pluck();
  const rowOf = db.prepare<[number], { device_id: string; prev_id: number | null }>('SELECT device_id, prev_id FROM mosque_device_events WHERE id = ?');
  const firstBelow = db.prepare<{ start: number | null; before: number }, number>(`${chainFrom('@start')} SELECT id FROM chain WHERE id < @before LIMIT 1`).pluck();
  const page = db.prepare<{ start: number | null; limit: number; device: string }, TimelineRow>(
    `${chainFrom('@start', 'LIMIT @limit')} SELECT e.* FROM chain JOIN mosque_device_events e ON e.id = chain.id
     WHERE e.device_id = @device ORDER BY e.id DESC`,
  );
  // Two subqueries, each a seek to one end of the rowid tree: min() and max() in one SELECT scan the table
  // (~160 ms at 1.4 million rows, all of it on the event loop).
  const bounds = db.prepare<[], { lo: number | null; hi: number | null }>(
    'SELECT (SELECT min(id) FROM mosque_device_events) AS lo, (SELECT max(id) FROM mosque_device_events) AS hi',
  );
  const firstFrom = db.prepare<[number], { id: number; at: number }>('SELECT id, at FROM mosque_device_events WHERE id >= ? ORDER BY id LIMIT 1');
  const olderChunk = db.prepare(
    'DELETE FROM mosque_device_events WHERE id IN (SELECT id FROM mosque_device_events WHERE id < ? ORDER BY id LIMIT ?)',
  );
  const allDevices = db.prepare<[], string>('SELECT id FROM devices').pluck();
  // The per-device cap. A chain holds at most seq - floor + 1 rows (retention may have taken some of its
  // oldest since): only a device over the cap by that count is walked, and the walk sets the floor to the
  // oldest row it kept.
  const capState = db.prepare<[string], { seq: number; floor: number; head: number | null }>(
    'SELECT timeline_seq AS seq, timeline_floor AS floor, timeline_head AS head FROM devices WHERE id = ?',
  );
  const chainLength = db.prepare<[number], number>(`${chainFrom('?')} SELECT count(*) FROM chain`).pluck();
  const beyondCap = db.prepare<{ head: number; cap: number }>(`DELETE FROM mosque_device_events WHERE id IN (${chainFrom('@head')} SELECT id FROM chain WHERE n > @cap)`);
  const setFloor = db.prepare<[number, string]>('UPDATE devices SET timeline_floor = ? WHERE id = ?');
  const mayBeOver = (device: string, cap: number) => {
    const st = capState.get(device);
    return st !== undefined && st.seq - st.floor + 1 > cap ? st : null;
  };
  // Immediate: the walk and the delete see the same chain, even with another process writing to the file.
  const capWalk = db.transaction((device: string, cap: number): number => {
    const st = mayBeOver(device, cap);
    if (!st) return 0;
    const length = st.head === null ? 0 : chainLength.get(st.head)!;
    const removed = length > cap ? beyondCap.run({ head: st.head!, cap }).changes : 0;
    setFloor.run(st.seq - Math.min(length, cap) + 1, device);
    return removed;
  });
  /** A device under its cap costs one read of its row; only one that may be over takes the write lock. */
  const capOf = (device: string, cap: number): number => (mayBeOver(device, cap) ? capWalk.immediate(device, cap) : 0);
  // A deleted device's rows (its head noted by the trigger of migration 012), AGE_CHUNK at a time.
  const orphan = db.prepare<[], { rowid: number; head: number }>('SELECT rowid, head FROM device_timeline_orphans LIMIT 1');
  const orphanChunk = db.prepare<[number], number>(`${chainFrom('?', `LIMIT ${AGE_CHUNK + 1}`)} SELECT id FROM chain`).pluck();
  const dropIds = db.prepare<[string]>('DELETE FROM mosque_device_events WHERE id IN (SELECT value FROM json_each(?))');
  const orphanMoved = db.prepare<[number, number]>('UPDATE device_timeline_orphans SET head = ? WHERE rowid = ?');
  const orphanGone = db.prepare<[number]>('DELETE FROM device_timeline_orphans WHERE rowid = ?');
  /** One chunk of one deleted device's rows; false when none is left. Run immediate, as the cap's walk. */
  const orphanStep = db.transaction((): { more: boolean; gone: number } => {
    const o = orphan.get();
    if (!o) return { more: false, gone: 0 };
    const ids = orphanChunk.all(o.head);
    const gone = dropIds.run(JSON.stringify(ids.slice(0, AGE_CHUNK))).changes;
    const rest = ids[AGE_CHUNK];
    if (rest === undefined) orphanGone.run(o.rowid);
    else orphanMoved.run(rest, o.rowid);
    return { more: true, gone };
  });
  /** Devices with rows written since their cap was last checked; null until the first pass has checked all. */
  let touched: Set<string> | null = null;

  /**
   * The first id whose row is not older than `cutoff`. Ids grow in insertion order and `at` is the clock at
   * insertion, so the rows are in time order: a binary search over the ids (each probe one rowid seek) finds
   * the cut without an index on `at`. A clock stepped back moves the cut by that step at most.
   */
  function firstKept(cutoff: number): number {
    const { lo: min, hi: max } = bounds.get()!;
    if (min === null || max === null) return 0;
    let lo = min;
    let hi = max + 1; // every id below lo is older than cutoff; hi is a possible answer
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const row = firstFrom.get(mid);
      if (!row || row.id >= hi) hi = mid;
      else if (row.at < cutoff) lo = row.id + 1;
      else hi = row.id;
    }
    return lo;
  }

  /** Runs `step` until it says it is done, at most PRUNE_SLICE_MS at a time, yielding to the event loop between slices. */
  function sliced(step: () => boolean, sliceMs: number, stopped: () => boolean): Promise<void> {
    return new Promise((resolve, reject) => {
      const slice = () => {
        try {
          if (stopped()) return resolve(); // the service is closing: the next start's pass finishes the job
          const end = performance.now() + sliceMs;
          let more: boolean;
          do more = step();
          while (more && performance.now() < end);
          if (more) setImmediate(slice);
          else resolve();
        } catch (err) {
          reject(err);
        }
      };
      slice();
    });
  }

  return {
    record(e: TimelineEvent): void {
      if (db.inTransaction) append(e);
      else {
        pendingFirst();
        appendAlone(e);
      }
      touched?.add(e.deviceId);
    },
    /**
     * Newest first; `before` is the id of the last entry of the previous page. A page walks its own rows from
     * that entry's predecessor; any other `before` (not this device's, or pruned) is found along the chain.
     */
    list(deviceId: string, limit: number, before: number | null) {
      pendingFirst();
      const head = headOf.get(deviceId) ?? null;
      let start = head;
      if (before !== null) {
        const from = rowOf.get(before);
        start = from?.device_id === deviceId ? from.prev_id : (firstBelow.get({ start: head, before }) ?? null);
      }
      return start === null || limit < 1 ? [] : page.all({ start, limit, device: deviceId }).map(toTimelineEntry);
    },
    /**
     * Deletes events older than the retention, the events of deleted devices and, per device, all but the
     * newest `cap`, in slices that yield to the event loop (devices' packets are served between them). Only
     * devices written to since the last pass can be over their cap, so after the first pass only those are
     * looked at. Resolves to how many went.
     */
    async prune(retentionDays: number, cap: number, opts: { sliceMs?: number; stopped?: () => boolean } = {}): Promise<number> {
      const sliceMs = opts.sliceMs ?? PRUNE_SLICE_MS;
      const stopped = opts.stopped ?? (() => false);
      let removed = 0;
      const cut = firstKept(toUnixSeconds(clock()) - retentionDays * 86_400);
      await sliced(() => {
        const gone = olderChunk.run(cut, AGE_CHUNK).changes;
        removed += gone;
        return gone === AGE_CHUNK;
      }, sliceMs, stopped);
      await sliced(() => {
        const step = orphanStep.immediate();
        removed += step.gone;
        return step.more;
      }, sliceMs, stopped);
      const due = touched === null ? allDevices.all() : [...touched];
      const next = new Set<string>();
      touched = next;
      let i = 0;
      let done = false;
      try {
        await sliced(() => {
          const id = due[i++];
          if (id !== undefined) removed += capOf(id, cap);
          done = i >= due.length;
          return !done;
        }, sliceMs, stopped);
      } finally {
        // A pass stopped or failed part-way: the devices it did not reach stay due for the next one (from the
        // last one taken, which a failed step did not finish).
        if (!done) for (let j = Math.max(0, i - 1); j < due.length; j++) next.add(due[j]!);
      }
      return removed;
    },
  };
}
export type Timeline = ReturnType<typeof createTimeline>;
