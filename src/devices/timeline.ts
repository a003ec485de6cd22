import { sql } from 'kysely';
import { answersInsertId, type Queries, type Store, type StoreTransaction } from '../platform/store/store.ts';
import type { Compilable, QueryResult } from 'kysely';
import { prepared } from '../platform/store/prepared.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { inTransaction } from '../platform/store/after-commit.ts';

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
 * from the device row's head only as far as that status. For statements over many devices (the broadcast
 * report), so the chain's layout stays written here.
 */
const statusAsOf = (until: number) => sql`(
  WITH RECURSIVE chain(id, prev, hit) AS (
    SELECT e.id, e.prev_id, e.kind = 'status' AND e.at <= ${until} FROM mosque_device_events e WHERE e.id = d.timeline_head
    UNION ALL
    SELECT e.id, e.prev_id, e.kind = 'status' AND e.at <= ${until}
    FROM chain c JOIN mosque_device_events e ON e.id = c.prev AND e.id < c.id WHERE NOT c.hit)
  SELECT e.to_status FROM chain c JOIN mosque_device_events e ON e.id = c.id WHERE c.hit LIMIT 1)`;

/**
 * Whether the device reported PLAYING at any time in [from, until] (Unix seconds): its chain walked back from
 * the head only as far as `from`, so a broadcast's window costs the rows written since.
 */
const playedBetween = (from: number, until: number) => sql`(
  WITH RECURSIVE chain(id, prev, at) AS (
    SELECT e.id, e.prev_id, e.at FROM mosque_device_events e WHERE e.id = d.timeline_head
    UNION ALL
    SELECT e.id, e.prev_id, e.at FROM chain c JOIN mosque_device_events e ON e.id = c.prev AND e.id < c.id WHERE c.at >= ${from})
  SELECT EXISTS (SELECT 1 FROM chain c JOIN mosque_device_events e ON e.id = c.id
    WHERE e.kind = 'status' AND e.to_status = 'PLAYING' AND e.at BETWEEN ${from} AND ${until}))`;

/**
 * The broadcast report's read of every device of a mosque (docs/api.md, "Broadcasts and their delivery report"):
 * each device's status as of a time and whether it reported PLAYING within the broadcast's window, in one
 * statement over the mosque's devices. `now` is the same while the window reaches the present: a device row's
 * status is its newest committed status, written in the same transaction as its timeline row, so no chain needs
 * walking (1.3 ms against 3.8 ms per 1,000 devices, warm). `played` is 1 or 0 (PostgreSQL's EXISTS is a boolean).
 */
export function createDeliveryStatuses(store: Store) {
  type Row = { id: string; kind: string; status: string | null; played: unknown };
  const played = (rows: Row[]) => rows.map((r) => ({ id: r.id, kind: r.kind, status: r.status, played: Number(r.played) }));
  return {
    asOf: async (q: { until: number; mosque: string; from: number; played_until: number }) =>
      played((await sql<Row>`SELECT d.id, d.kind, ${statusAsOf(q.until)} AS status, ${playedBetween(q.from, q.played_until)} AS played
        FROM devices d WHERE d.mosque_id = ${q.mosque}`.execute(store)).rows),
    now: async (q: { mosque: string; from: number; played_until: number }) =>
      played((await sql<Row>`SELECT d.id, d.kind, d.status, ${playedBetween(q.from, q.played_until)} AS played
        FROM devices d WHERE d.mosque_id = ${q.mosque}`.execute(store)).rows),
    localPlays: (q: { mosque: string; from: number; until: number }) => listLocalPlays(store, q),
  };
}

/** A player's report that it played its cached recording (docs/firmware.md, "The azaan without the network"). */
export interface LocalPlay {
  deviceId: string;
  /** The slot's `at` it names (detail.slot_at), else when its status arrived: Unix seconds. */
  playedFor: number;
}

/**
 * The local plays of a mosque's players whose status arrived in [from, until]: each device's chain walked back
 * from its head only as far as `from` (no index on time: the chain is the one way into the table by time, as the
 * broadcast report's). A status that arrived late (the player reconnected after the slot) names its slot.
 */
async function listLocalPlays(store: Store, q: { mosque: string; from: number; until: number }): Promise<LocalPlay[]> {
  const rows = (await sql<{ device_id: string; at: number; detail: string }>`WITH RECURSIVE chain(id, prev, at) AS (
      SELECT e.id, e.prev_id, e.at FROM devices d JOIN mosque_device_events e ON e.id = d.timeline_head WHERE d.mosque_id = ${q.mosque}
      UNION ALL
      SELECT e.id, e.prev_id, e.at FROM chain c JOIN mosque_device_events e ON e.id = c.prev AND e.id < c.id WHERE c.at >= ${q.from})
    SELECT e.device_id, e.at, e.detail FROM chain c JOIN mosque_device_events e ON e.id = c.id
    WHERE e.kind = 'status' AND e.to_status = 'PLAYING' AND e.reason = 'offline_fallback' AND e.mosque_id = ${q.mosque}
      AND e.at BETWEEN ${q.from} AND ${q.until}`.execute(store)).rows;
  const plays: LocalPlay[] = [];
  for (const row of rows) {
    const reported = (JSON.parse(row.detail) as { detail?: { source?: unknown; slot_at?: unknown } }).detail;
    if (reported?.source !== 'local') continue;
    const slotAt = reported.slot_at;
    plays.push({ deviceId: row.device_id, playedFor: typeof slotAt === 'number' && Number.isInteger(slotAt) ? slotAt : Number(row.at) });
  }
  return plays;
}

/**
 * The devices that covered the slot at `at` (Unix seconds) locally: each play goes to the slot nearest the time
 * it played for, counted only within [at - before, at + after] (docs/schedule.md, "Covered locally").
 */
export function coveredLocally(plays: LocalPlay[], slotTimes: number[], at: number, before: number, after: number): Set<string> {
  const devices = new Set<string>();
  for (const p of plays) {
    if (p.playedFor < at - before || p.playedFor > at + after) continue;
    const nearest = slotTimes.reduce((best, t) => (Math.abs(t - p.playedFor) < Math.abs(best - p.playedFor) ? t : best), at);
    if (nearest === at) devices.add(p.deviceId);
  }
  return devices;
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
export function createTimeline(store: Store, clock: Clock, pendingFirst: () => Promise<void> = async () => undefined) {
  // Each row points to its device's previous one, and the device row to the newest (migration 012): a row
  // is an append to the table's end, and the two statements write in the caller's transaction. Prepared: a
  // status transition appends one (src/platform/store/prepared.ts).
  type Appended = { device: string; mosque: string | null; at: number; kind: string; from: string | null; to: string | null; reason: string | null; actor: string | null; detail: string };
  // SQLite answers the new id without RETURNING (cheaper per status); PostgreSQL with it.
  const bareInsertId = answersInsertId(store);
  const insert = prepared<Appended, { id: number }>(
    store, ['device', 'mosque', 'at', 'kind', 'from', 'to', 'reason', 'actor', 'detail'],
    (v) => {
      const q = store.insertInto('mosque_device_events').values((eb) => ({
        device_id: v.device,
        prev_id: eb.selectFrom('devices').select('timeline_head').where('id', '=', v.device),
        mosque_id: v.mosque, at: v.at, kind: v.kind, from_status: v.from, to_status: v.to, reason: v.reason, actor_user_id: v.actor, detail: v.detail,
      }));
      return (bareInsertId ? q : q.returning('id')) as Compilable<{ id: number }>;
    },
  );
  const moveHead = prepared<{ head: number; device: string }>(
    store, ['head', 'device'],
    (v) => store.updateTable('devices').set((eb) => ({ timeline_head: v.head, timeline_seq: eb('timeline_seq', '+', 1) })).where('id', '=', v.device),
  );
  /** The row alone: its id, which the caller's write of the device row makes the head (see `appended`). */
  const rowOf = (e: TimelineEvent): Appended => ({
    device: e.deviceId, mosque: e.mosqueId, at: e.at ?? toUnixSeconds(clock()), kind: e.kind, from: e.from ?? null, to: e.to ?? null,
    reason: e.reason ?? null, actor: e.actorUserId ?? null, detail: JSON.stringify(e.detail ?? {}),
  });
  const idOf = (result: QueryResult<{ id: number }>) => (bareInsertId ? Number(result.insertId) : result.rows[0]!.id);
  const insertRow = async (trx: StoreTransaction, e: TimelineEvent): Promise<number> => idOf(await insert.run(trx, rowOf(e)));
  const append = async (trx: StoreTransaction, e: TimelineEvent): Promise<void> => {
    await moveHead.run(trx, { head: await insertRow(trx, e), device: e.deviceId });
  };
  /**
   * A chain walked back from `start`, newest first (`n` counts from 1); `e.id < c.id` bounds every walk (ids
   * only fall along a chain). `atMost` stops the walk after that many rows: a condition on `n` in the recursive
   * term, as PostgreSQL refuses a LIMIT there (a LIMIT on the outer SELECT, without ORDER BY, also stops a walk
   * early on both engines: the rows are produced as they are read).
   */
  const chainFrom = (start: number | null, atMost?: number) => sql`WITH RECURSIVE chain(id, prev, n) AS (
      SELECT id, prev_id, 1 FROM mosque_device_events WHERE id = ${start}
      UNION ALL
      SELECT e.id, e.prev_id, c.n + 1 FROM chain c JOIN mosque_device_events e ON e.id = c.prev AND e.id < c.id
      ${atMost === undefined ? sql`` : sql`WHERE c.n < ${atMost}`})`;
  const affected = (r: { numAffectedRows?: bigint }) => Number(r.numAffectedRows ?? 0n);

  // The per-device cap. A chain holds at most seq - floor + 1 rows (retention may have taken some of its
  // oldest since): only a device over the cap by that count is walked, and the walk sets the floor to the
  // oldest row it kept.
  const mayBeOver = async (q: Queries, device: string, cap: number) => {
    const st = await q.selectFrom('devices').select(['timeline_seq as seq', 'timeline_floor as floor', 'timeline_head as head'])
      .where('id', '=', device).executeTakeFirst();
    return st !== undefined && st.seq - st.floor + 1 > cap ? st : null;
  };
  /** A device under its cap costs one read of its row; only one that may be over takes the write lock. */
  const capOf = async (device: string, cap: number): Promise<number> => {
    if (!(await mayBeOver(store, device, cap))) return 0;
    // In a transaction (IMMEDIATE on SQLite): the walk and the delete see the same chain, even with another
    // process writing to the file.
    return inTransaction(store, async (trx) => {
      const st = await mayBeOver(trx, device, cap);
      if (!st) return 0;
      const length = st.head === null ? 0 : Number((await sql<{ n: number }>`${chainFrom(st.head)} SELECT count(*) AS n FROM chain`.execute(trx)).rows[0]!.n);
      const removed = length > cap
        ? affected(await sql`DELETE FROM mosque_device_events WHERE id IN (${chainFrom(st.head)} SELECT id FROM chain WHERE n > ${cap})`.execute(trx))
        : 0;
      await trx.updateTable('devices').set({ timeline_floor: st.seq - Math.min(length, cap) + 1 }).where('id', '=', device).execute();
      return removed;
    });
  };
  /**
   * One chunk of one deleted device's rows (its head noted by the trigger of migration 012, keyed by that head:
   * each row has its own, and PostgreSQL has no rowid), AGE_CHUNK at a time; false when none is left.
   * In a transaction, as the cap's walk.
   */
  const orphanStep = (): Promise<{ more: boolean; gone: number }> => inTransaction(store, async (trx) => {
    const o = await trx.selectFrom('device_timeline_orphans').select('head').limit(1).executeTakeFirst();
    if (!o) return { more: false, gone: 0 };
    const ids = (await sql<{ id: number }>`${chainFrom(o.head, AGE_CHUNK + 1)} SELECT id FROM chain`.execute(trx)).rows.map((r) => r.id);
    const chunk = ids.slice(0, AGE_CHUNK);
    const gone = chunk.length === 0 ? 0 : Number((await trx.deleteFrom('mosque_device_events').where('id', 'in', chunk).executeTakeFirst()).numDeletedRows);
    const rest = ids[AGE_CHUNK];
    if (rest === undefined) await trx.deleteFrom('device_timeline_orphans').where('head', '=', o.head).execute();
    else await trx.updateTable('device_timeline_orphans').set({ head: rest }).where('head', '=', o.head).execute();
    return { more: true, gone };
  });
  /** Devices with rows written since their cap was last checked; null until the first pass has checked all. */
  let touched: Set<string> | null = null;

  /**
   * The first id whose row is not older than `cutoff`. Ids grow in insertion order and `at` is the clock at
   * insertion, so the rows are in time order: a binary search over the ids (each probe one seek by key) finds
   * the cut without an index on `at`. A clock stepped back moves the cut by that step at most.
   */
  async function firstKept(cutoff: number): Promise<number> {
    // Two subqueries, each a seek to one end of the key's tree: min() and max() in one SELECT scan the table
    // (~160 ms at 1.4 million rows on SQLite, all of it on the event loop).
    const { lo: min, hi: max } = (await sql<{ lo: number | null; hi: number | null }>`SELECT
      (SELECT min(id) FROM mosque_device_events) AS lo, (SELECT max(id) FROM mosque_device_events) AS hi`.execute(store)).rows[0]!;
    if (min === null || max === null) return 0;
    let lo = min;
    let hi = max + 1; // every id below lo is older than cutoff; hi is a possible answer
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const row = await store.selectFrom('mosque_device_events').select(['id', 'at']).where('id', '>=', mid).orderBy('id').limit(1).executeTakeFirst();
      if (!row || row.id >= hi) hi = mid;
      else if (row.at < cutoff) lo = row.id + 1;
      else hi = row.id;
    }
    return lo;
  }

  /**
   * Runs `step` until it says it is done, at most `sliceMs` at a time, yielding to the event loop between slices.
   * A step's queries answer without leaving the turn on SQLite, so a slice is one turn, as it was.
   */
  async function sliced(step: () => Promise<boolean>, sliceMs: number, stopped: () => boolean): Promise<void> {
    for (;;) {
      if (stopped()) return; // the service is closing: the next start's pass finishes the job
      const end = performance.now() + sliceMs;
      let more: boolean;
      do more = await step();
      while (more && performance.now() < end);
      if (!more) return;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  return {
    /** Appends inside the caller's transaction (the row and the device's head move together). */
    async record(trx: StoreTransaction, e: TimelineEvent): Promise<void> {
      await append(trx, e);
      touched?.add(e.deviceId);
    },
    /**
     * The row only, inside the caller's transaction, which then sets the device row's `timeline_head` to the id
     * returned and adds 1 to its `timeline_seq` in its own UPDATE of that row (a status: one statement less).
     */
    async appended(trx: StoreTransaction, e: TimelineEvent): Promise<number> {
      const id = await insertRow(trx, e);
      touched?.add(e.deviceId);
      return id;
    },
    /** Rows of the device appended by a batch's own statement (src/devices/telemetry/row-set.ts): its cap is checked on the next pass. */
    appendedTo(deviceId: string): void {
      touched?.add(deviceId);
    },
    /**
     * A note of its own (a command sent or answered, a flood noted): after the notes and statuses still waiting
     * in the device group commit, in a transaction of its own. Never called inside a store transaction.
     */
    async note(e: TimelineEvent): Promise<void> {
      await pendingFirst();
      await inTransaction(store, (trx) => append(trx, e));
      touched?.add(e.deviceId);
    },
    /**
     * Newest first; `before` is the id of the last entry of the previous page. A page walks its own rows from
     * that entry's predecessor; any other `before` (not this device's, or pruned) is found along the chain.
     */
    async list(deviceId: string, limit: number, before: number | null) {
      await pendingFirst();
      const head = (await store.selectFrom('devices').select('timeline_head').where('id', '=', deviceId).executeTakeFirst())?.timeline_head ?? null;
      let start = head;
      if (before !== null) {
        const from = await store.selectFrom('mosque_device_events').select(['device_id', 'prev_id']).where('id', '=', before).executeTakeFirst();
        start = from?.device_id === deviceId
          ? from.prev_id
          : ((await sql<{ id: number }>`${chainFrom(head)} SELECT id FROM chain WHERE id < ${before} LIMIT 1`.execute(store)).rows[0]?.id ?? null);
      }
      if (start === null || limit < 1) return [];
      const page = await sql<TimelineRow>`${chainFrom(start, limit)} SELECT e.* FROM chain JOIN mosque_device_events e ON e.id = chain.id
        WHERE e.device_id = ${deviceId} ORDER BY e.id DESC`.execute(store);
      return page.rows.map(toTimelineEntry);
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
      const cut = await firstKept(toUnixSeconds(clock()) - retentionDays * 86_400);
      await sliced(async () => {
        const { numDeletedRows } = await store.deleteFrom('mosque_device_events')
          .where('id', 'in', (eb) => eb.selectFrom('mosque_device_events').select('id').where('id', '<', cut).orderBy('id').limit(AGE_CHUNK))
          .executeTakeFirst();
        const gone = Number(numDeletedRows);
        removed += gone;
        return gone === AGE_CHUNK;
      }, sliceMs, stopped);
      await sliced(async () => {
        const step = await orphanStep();
        removed += step.gone;
        return step.more;
      }, sliceMs, stopped);
      const due = touched === null ? (await store.selectFrom('devices').select('id').execute()).map((r) => r.id) : [...touched];
      const next = new Set<string>();
      touched = next;
      let i = 0;
      let done = false;
      try {
        await sliced(async () => {
          const id = due[i++];
          if (id !== undefined) removed += await capOf(id, cap);
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
