import type { Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import type { MosqueStore, Prayer } from '../mosques/mosques.ts';
import type { Slot, SlotSource, TimetableDay } from './slots.ts';
import type { ScheduleSlotsTable } from '../../generated/tables.ts';

export type SlotStatus = 'upcoming' | 'ready' | 'not_ready' | 'live' | 'done' | 'missed';

/** A row of `schedule_slots` (generated/tables.ts), its source and status narrowed to the values written here. */
export type OutcomeRow = Omit<Selectable<ScheduleSlotsTable>, 'source' | 'status'> & { source: SlotSource; status: Exclude<SlotStatus, 'upcoming'> };

export interface Outcome {
  status: OutcomeRow['status'];
  reason?: string | null;
  readiness?: Record<string, unknown> | null;
  broadcastId?: string | null;
  autoStarted?: boolean;
}

const seconds = (ms: number) => Math.floor(ms / 1000);

/** A slot's key columns and times, as both writes of an outcome insert them. */
function slotColumns(slot: Slot) {
  return {
    mosque_id: slot.mosqueId, date: slot.date, prayer: slot.prayer, idx: slot.index,
    starts_at: seconds(slot.startsAt), azaan_at: seconds(slot.azaanAt), iqamah_at: slot.iqamahAt === null ? null : seconds(slot.iqamahAt),
    source: slot.source,
  };
}

/** How long an auto_start claim without its broadcast holds: a start takes well under a second. */
export const AUTO_START_CLAIM_S = 15;

/**
 * Uploaded timetables and the recorded outcome of each slot (the only part of a slot that is stored).
 * Replacing or deleting a month moves the mosque's schedule "since" (src/mosques/mosques.ts) in the same
 * transaction. Resolves once the uploaded timetables are in memory.
 */
export async function createScheduleStore(store: Store, mosques: Pick<MosqueStore, 'scheduleChanged'>) {
  const slots = () => store.selectFrom('schedule_slots').selectAll().$castTo<OutcomeRow>();

  // Which mosques have which months uploaded, kept in memory: the scheduler asks on every planning pass.
  // Read whole at start; a replaced or deleted month is set from what was written, once it is committed.
  const uploaded = new Map<string, Map<number, Map<number, TimetableDay>>>();
  const setMonth = (mosqueId: string, month: number, rows: Array<TimetableDay & { day: number }>) => {
    let months = uploaded.get(mosqueId);
    if (rows.length === 0) return void months?.delete(month);
    if (!months) uploaded.set(mosqueId, (months = new Map()));
    months.set(month, new Map(rows.map(({ day, fajr, dhuhr, asr, maghrib, isha }) => [day, { fajr, dhuhr, asr, maghrib, isha }])));
  };
  const all = await store.selectFrom('schedule_timetables').select(['mosque_id', 'month', 'day', 'fajr', 'dhuhr', 'asr', 'maghrib', 'isha']).execute();
  const byMonth = new Map<string, { mosqueId: string; month: number; rows: Array<TimetableDay & { day: number }> }>();
  for (const { mosque_id, month, ...day } of all) {
    const key = `${mosque_id}|${month}`;
    const entry = byMonth.get(key) ?? { mosqueId: mosque_id, month, rows: [] };
    entry.rows.push(day);
    byMonth.set(key, entry);
  }
  for (const { mosqueId, month, rows } of byMonth.values()) setMonth(mosqueId, month, rows);
  // Two writes of one month may finish their awaits in another order than they committed: each takes a number
  // while it holds the mosque's row (the last write of its transaction), and memory takes only a newer one's rows.
  let written = 0;
  const applied = new Map<string, number>();
  const setMonthIfNewer = (mosqueId: string, month: number, order: number, rows: Array<TimetableDay & { day: number }>) => {
    const key = `${mosqueId}|${month}`;
    if ((applied.get(key) ?? 0) > order) return;
    applied.set(key, order);
    setMonth(mosqueId, month, rows);
  };

  return {
    timetableDay(mosqueId: string, month: number, day: number): TimetableDay | null {
      return uploaded.get(mosqueId)?.get(month)?.get(day) ?? null;
    },
    hasTimetable: (mosqueId: string) => (uploaded.get(mosqueId)?.size ?? 0) > 0,
    /** Every mosque with at least one month uploaded. */
    timetableMosques: (): string[] => [...uploaded].filter(([, months]) => months.size > 0).map(([id]) => id),

    /** Replaces a month in one transaction; the schedule's "since" moves so no past event fires for it. */
    async replaceMonth(mosqueId: string, month: number, rows: Array<TimetableDay & { day: number; shuruk: string | null }>, nowMs: number): Promise<void> {
      const order = await store.transaction().execute(async (trx) => {
        await trx.deleteFrom('schedule_timetables').where('mosque_id', '=', mosqueId).where('month', '=', month).execute();
        if (rows.length > 0) {
          await trx.insertInto('schedule_timetables').values(rows.map((r) => ({
            mosque_id: mosqueId, month, day: r.day, fajr: r.fajr, shuruk: r.shuruk, dhuhr: r.dhuhr, asr: r.asr, maghrib: r.maghrib, isha: r.isha,
          }))).execute();
        }
        await mosques.scheduleChanged(trx, mosqueId, seconds(nowMs));
        return ++written;
      });
      setMonthIfNewer(mosqueId, month, order, rows);
    },
    async deleteMonth(mosqueId: string, month: number, nowMs: number): Promise<boolean> {
      const { removed, order } = await store.transaction().execute(async (trx) => {
        const r = await trx.deleteFrom('schedule_timetables').where('mosque_id', '=', mosqueId).where('month', '=', month).executeTakeFirst();
        const removed = r.numDeletedRows > 0n;
        if (removed) await mosques.scheduleChanged(trx, mosqueId, seconds(nowMs));
        return { removed, order: removed ? ++written : 0 };
      });
      // Nothing removed: memory holds nothing of that month either (it follows this process's commits).
      if (removed) setMonthIfNewer(mosqueId, month, order, []);
      return removed;
    },
    forgetMosque: (mosqueId: string) => void uploaded.delete(mosqueId),

    outcome: async (slot: Slot): Promise<OutcomeRow | null> =>
      (await slots().where('mosque_id', '=', slot.mosqueId).where('date', '=', slot.date).where('prayer', '=', slot.prayer).where('idx', '=', slot.index)
        .executeTakeFirst()) ?? null,
    outcomesBetween: (mosqueId: string, from: string, to: string): Promise<OutcomeRow[]> =>
      slots().where('mosque_id', '=', mosqueId).where('date', '>=', from).where('date', '<=', to).execute(),
    findByBroadcast: async (mosqueId: string, broadcastId: string): Promise<OutcomeRow | null> =>
      (await slots().where('mosque_id', '=', mosqueId).where('broadcast_id', '=', broadcastId).executeTakeFirst()) ?? null,

    /** Records (or moves on) a slot's outcome, with the slot's times as they are now. */
    async record(slot: Slot, o: Outcome, nowMs: number): Promise<void> {
      await store.insertInto('schedule_slots')
        .values({
          ...slotColumns(slot), status: o.status, reason: o.reason ?? null, readiness: o.readiness ? JSON.stringify(o.readiness) : null,
          broadcast_id: o.broadcastId ?? null, auto_started: o.autoStarted ? 1 : 0, updated_at: seconds(nowMs),
        })
        .onConflict((oc) => oc.columns(['mosque_id', 'date', 'prayer', 'idx']).doUpdateSet((eb) => ({
          status: eb.ref('excluded.status'),
          // A slot that went live or was done has no reason left; otherwise a new reason replaces the old one.
          reason: eb.case().when('excluded.status', 'in', ['live', 'done']).then(null)
            .else(eb.fn.coalesce('excluded.reason', 'schedule_slots.reason')).end(),
          readiness: eb.fn.coalesce('excluded.readiness', 'schedule_slots.readiness'),
          broadcast_id: eb.fn.coalesce('excluded.broadcast_id', 'schedule_slots.broadcast_id'),
          // Once auto-started, always: the larger of the two (SQLite's max(a, b) is PostgreSQL's greatest).
          auto_started: eb.case().when('excluded.auto_started', '>', eb.ref('schedule_slots.auto_started')).then(eb.ref('excluded.auto_started'))
            .else(eb.ref('schedule_slots.auto_started')).end(),
          updated_at: eb.ref('excluded.updated_at'),
        })))
        .execute();
    },

    /**
     * True for exactly one caller, in whichever process, while the slot has no broadcast: that caller starts
     * the azaan. A start that then fails gives the claim back (releaseAutoStart), so the next pass tries again.
     * The auto_start claim is one write that only one process can win (several processes share the store
     * under REDIS_URL, each with its own scheduler, and their timers fire at the same azaan_at). A claim that
     * is AUTO_START_CLAIM_S old without a broadcast belongs to a process that died between its claim and its
     * start: the next pass of any process may claim it again (docs/operator.md, "Several hosts").
     */
    async claimAutoStart(slot: Slot, nowMs: number): Promise<boolean> {
      const now = seconds(nowMs);
      const r = await store.insertInto('schedule_slots')
        .values({ ...slotColumns(slot), status: 'ready', auto_started: 1, updated_at: now })
        .onConflict((oc) => oc.columns(['mosque_id', 'date', 'prayer', 'idx'])
          .doUpdateSet((eb) => ({ auto_started: 1, updated_at: eb.ref('excluded.updated_at') }))
          .where((eb) => eb.or([eb('schedule_slots.auto_started', '=', 0), eb('schedule_slots.updated_at', '<=', now - AUTO_START_CLAIM_S)]))
          .where('schedule_slots.broadcast_id', 'is', null)
          .where('schedule_slots.status', 'not in', ['live', 'done', 'missed']))
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },
    /**
     * Whether the auto_start claim made at `claimedMs` is still the claimer's: no broadcast yet, not taken over
     * (a takeover writes its own time). On PostgreSQL the UPDATE also locks the row until `q`'s transaction ends,
     * so a takeover's claim waits for the start it would race. Given the broadcast being started in `q`, the
     * same write records the slot as served by it (live, no reason left), so the start's transaction holds the
     * slot's outcome too.
     */
    async holdsAutoStart(slot: Slot, claimedMs: number, q: Queries, broadcastId?: string): Promise<boolean> {
      const r = await q.updateTable('schedule_slots')
        .set((eb) => (broadcastId === undefined ? { updated_at: eb.ref('updated_at') } : { status: 'live', reason: null, broadcast_id: broadcastId }))
        .where('mosque_id', '=', slot.mosqueId).where('date', '=', slot.date).where('prayer', '=', slot.prayer).where('idx', '=', slot.index)
        .where('auto_started', '=', 1).where('broadcast_id', 'is', null).where('updated_at', '=', seconds(claimedMs))
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },
    /** Given the claim's time, only that claim is given back: not one another process took over meanwhile. */
    async releaseAutoStart(slot: Slot, claimedMs?: number): Promise<void> {
      await store.updateTable('schedule_slots').set({ auto_started: 0 })
        .where('mosque_id', '=', slot.mosqueId).where('date', '=', slot.date).where('prayer', '=', slot.prayer).where('idx', '=', slot.index)
        .where('broadcast_id', 'is', null)
        .$if(claimedMs !== undefined, (qb) => qb.where('updated_at', '=', seconds(claimedMs!)))
        .execute();
    },

    /** True only the first time for this slot and kind: the caller sends the alert then, never again. */
    async claimAlert(slot: Slot, kind: 'azaan_not_ready' | 'azaan_missed', nowMs: number): Promise<boolean> {
      const r = await store.insertInto('schedule_alerts')
        .values({ mosque_id: slot.mosqueId, date: slot.date, prayer: slot.prayer, idx: slot.index, kind, sent_at: seconds(nowMs) })
        .onConflict((oc) => oc.doNothing())
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },
  };
}

export type ScheduleStore = Awaited<ReturnType<typeof createScheduleStore>>;
export type { Prayer };
