import type { Db } from '../platform/db.ts';
import type { MosqueStore, Prayer } from '../mosques/mosques.ts';
import type { Slot, SlotSource, TimetableDay } from './slots.ts';

export type SlotStatus = 'upcoming' | 'ready' | 'not_ready' | 'live' | 'done' | 'missed';

export interface OutcomeRow {
  mosque_id: string;
  date: string;
  prayer: string;
  idx: number;
  starts_at: number;
  azaan_at: number;
  iqamah_at: number | null;
  source: SlotSource;
  status: Exclude<SlotStatus, 'upcoming'>;
  reason: string | null;
  readiness: string | null;
  broadcast_id: string | null;
  auto_started: number;
  updated_at: number;
}

export interface Outcome {
  status: OutcomeRow['status'];
  reason?: string | null;
  readiness?: Record<string, unknown> | null;
  broadcastId?: string | null;
  autoStarted?: boolean;
}

const seconds = (ms: number) => Math.floor(ms / 1000);

/** Uploaded timetables and the recorded outcome of each slot (the only part of a slot that is stored). */
export function createScheduleStore(db: Db, mosques: Pick<MosqueStore, 'scheduleChangedSync'>) {
  const monthRows = db.prepare<[string, number], TimetableDay & { day: number }>('SELECT day, fajr, dhuhr, asr, maghrib, isha FROM schedule_timetables WHERE mosque_id = ? AND month = ?');
  const deleteMonth = db.prepare('DELETE FROM schedule_timetables WHERE mosque_id = ? AND month = ?');
  const insertDay = db.prepare(
    'INSERT INTO schedule_timetables (mosque_id, month, day, fajr, shuruk, dhuhr, asr, maghrib, isha) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
  );
  const one = db.prepare<[string, string, string, number], OutcomeRow>('SELECT * FROM schedule_slots WHERE mosque_id = ? AND date = ? AND prayer = ? AND idx = ?');
  const range = db.prepare<[string, string, string], OutcomeRow>('SELECT * FROM schedule_slots WHERE mosque_id = ? AND date BETWEEN ? AND ?');
  const byBroadcast = db.prepare<[string, string], OutcomeRow>('SELECT * FROM schedule_slots WHERE mosque_id = ? AND broadcast_id = ?');
  const upsert = db.prepare(
    `INSERT INTO schedule_slots (mosque_id, date, prayer, idx, starts_at, azaan_at, iqamah_at, source, status, reason, readiness, broadcast_id, auto_started, updated_at)
     VALUES (@mosque_id, @date, @prayer, @idx, @starts_at, @azaan_at, @iqamah_at, @source, @status, @reason, @readiness, @broadcast_id, @auto_started, @now)
     ON CONFLICT (mosque_id, date, prayer, idx) DO UPDATE SET status = excluded.status,
       reason = CASE WHEN excluded.status IN ('live', 'done') THEN NULL ELSE COALESCE(excluded.reason, reason) END,
       readiness = COALESCE(excluded.readiness, readiness), broadcast_id = COALESCE(excluded.broadcast_id, broadcast_id),
       auto_started = MAX(auto_started, excluded.auto_started), updated_at = excluded.updated_at`,
  );
  // The auto_start claim: one write that only one process can win (several processes share this file under
  // REDIS_URL, each with its own scheduler, and their timers fire at the same azaan_at).
  const claimStart = db.prepare(
    `INSERT INTO schedule_slots (mosque_id, date, prayer, idx, starts_at, azaan_at, iqamah_at, source, status, auto_started, updated_at)
     VALUES (@mosque_id, @date, @prayer, @idx, @starts_at, @azaan_at, @iqamah_at, @source, 'ready', 1, @now)
     ON CONFLICT (mosque_id, date, prayer, idx) DO UPDATE SET auto_started = 1, updated_at = excluded.updated_at
     WHERE schedule_slots.auto_started = 0 AND schedule_slots.broadcast_id IS NULL AND schedule_slots.status NOT IN ('live', 'done', 'missed')`,
  );
  const releaseStart = db.prepare('UPDATE schedule_slots SET auto_started = 0 WHERE mosque_id = ? AND date = ? AND prayer = ? AND idx = ? AND broadcast_id IS NULL');
  const alert = db.prepare('INSERT OR IGNORE INTO schedule_alerts (mosque_id, date, prayer, idx, kind, sent_at) VALUES (?, ?, ?, ?, ?, ?)');
  // Which mosques have which months uploaded, kept in memory: the scheduler asks on every planning pass.
  const uploaded = new Map<string, Map<number, Map<number, TimetableDay>>>();
  const loadAll = db.prepare<[], { mosque_id: string; month: number }>('SELECT DISTINCT mosque_id, month FROM schedule_timetables');
  const cache = (mosqueId: string, month: number) => {
    const rows = monthRows.all(mosqueId, month);
    let months = uploaded.get(mosqueId);
    if (rows.length === 0) return void months?.delete(month);
    if (!months) uploaded.set(mosqueId, (months = new Map()));
    months.set(month, new Map(rows.map(({ day, ...times }) => [day, times])));
  };
  for (const { mosque_id, month } of loadAll.all()) cache(mosque_id, month);

  return {
    timetableDay(mosqueId: string, month: number, day: number): TimetableDay | null {
      return uploaded.get(mosqueId)?.get(month)?.get(day) ?? null;
    },
    hasTimetable: (mosqueId: string) => (uploaded.get(mosqueId)?.size ?? 0) > 0,
    /** Every mosque with at least one month uploaded. */
    timetableMosques: (): string[] => [...uploaded].filter(([, months]) => months.size > 0).map(([id]) => id),

    /** Replaces a month in one transaction; the schedule's "since" moves so no past event fires for it. */
    replaceMonth(mosqueId: string, month: number, rows: Array<TimetableDay & { day: number; shuruk: string | null }>, nowMs: number): void {
      db.transaction(() => {
        deleteMonth.run(mosqueId, month);
        for (const r of rows) insertDay.run(mosqueId, month, r.day, r.fajr, r.shuruk, r.dhuhr, r.asr, r.maghrib, r.isha);
        mosques.scheduleChangedSync(mosqueId, seconds(nowMs));
      })();
      cache(mosqueId, month);
    },
    deleteMonth(mosqueId: string, month: number, nowMs: number): boolean {
      const removed = db.transaction(() => {
        const n = deleteMonth.run(mosqueId, month).changes;
        if (n > 0) mosques.scheduleChangedSync(mosqueId, seconds(nowMs));
        return n > 0;
      })();
      cache(mosqueId, month);
      return removed;
    },
    forgetMosque: (mosqueId: string) => void uploaded.delete(mosqueId),

    outcome: (slot: Slot) => one.get(slot.mosqueId, slot.date, slot.prayer, slot.index) ?? null,
    outcomesBetween: (mosqueId: string, from: string, to: string) => range.all(mosqueId, from, to),
    findByBroadcast: (mosqueId: string, broadcastId: string) => byBroadcast.get(mosqueId, broadcastId) ?? null,

    /** Records (or moves on) a slot's outcome, with the slot's times as they are now. */
    record(slot: Slot, o: Outcome, nowMs: number): void {
      upsert.run({
        mosque_id: slot.mosqueId, date: slot.date, prayer: slot.prayer, idx: slot.index,
        starts_at: seconds(slot.startsAt), azaan_at: seconds(slot.azaanAt), iqamah_at: slot.iqamahAt === null ? null : seconds(slot.iqamahAt),
        source: slot.source, status: o.status, reason: o.reason ?? null, readiness: o.readiness ? JSON.stringify(o.readiness) : null,
        broadcast_id: o.broadcastId ?? null, auto_started: o.autoStarted ? 1 : 0, now: seconds(nowMs),
      });
    },

    /**
     * True for exactly one caller, in whichever process, while the slot has no broadcast: that caller starts
     * the azaan. A start that then fails gives the claim back (releaseAutoStart), so the next pass tries again.
     */
    claimAutoStart(slot: Slot, nowMs: number): boolean {
      return claimStart.run({
        mosque_id: slot.mosqueId, date: slot.date, prayer: slot.prayer, idx: slot.index,
        starts_at: seconds(slot.startsAt), azaan_at: seconds(slot.azaanAt), iqamah_at: slot.iqamahAt === null ? null : seconds(slot.iqamahAt),
        source: slot.source, now: seconds(nowMs),
      }).changes === 1;
    },
    releaseAutoStart(slot: Slot): void {
      releaseStart.run(slot.mosqueId, slot.date, slot.prayer, slot.index);
    },

    /** True only the first time for this slot and kind: the caller sends the alert then, never again. */
    claimAlert(slot: Slot, kind: 'azaan_not_ready' | 'azaan_missed', nowMs: number): boolean {
      return alert.run(slot.mosqueId, slot.date, slot.prayer, slot.index, kind, seconds(nowMs)).changes === 1;
    },
  };
}

export type ScheduleStore = ReturnType<typeof createScheduleStore>;
export type { Prayer };
