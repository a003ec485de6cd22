import { PRAYERS, scheduleFieldsOf, type MosqueRow, type ScheduleFields } from '../mosques/mosques.ts';
import { toIsoString } from '../platform/clock.ts';
import type { OutcomeRow, ScheduleStore, SlotStatus } from './schedule-store.ts';
import { parametersFor } from './prayer-times.ts';
import { computedStarts, mosqueTimes, slotKey, slotsOn, timetableStarts, type Slot, type TimetableDay } from './slots.ts';
import type { TimetableRow } from './timetable.ts';
import { coveredLocally, type LocalPlay } from '../devices/timeline.ts';
import { addDays, formatDate, localHhMm, type CivilDate } from './zone.ts';

/** A slot as GET /mosques/{id}/schedule answers it (docs/schedule.md, "The schedule, for apps"). */
export interface SlotView {
  date: string;
  prayer: string;
  starts_at: string;
  azaan_at: string;
  iqamah_at: string | null;
  azaan_local: string;
  source: string;
  status: SlotStatus;
  broadcast_id: string | null;
  reason: string | null;
  report: unknown;
  readiness: unknown;
  auto_started: boolean;
  /**
   * Players that played their cached recording for this slot (docs/schedule.md, "Covered locally"), whether a
   * broadcast was started or not; null while the slot is upcoming.
   */
  covered_locally: number | null;
}

/**
 * Derived slots merged with their recorded outcomes. A slot with an outcome keeps the times it had then
 * (a later change of times moves only slots still to come). A past slot nobody checked (the service was
 * down, or the schedule was set up after it) is `missed` with reason `not_checked`.
 */
export async function viewSlots(opts: {
  row: MosqueRow;
  from: CivilDate;
  days: number;
  nowMs: number;
  graceMs: number;
  store: ScheduleStore;
  slotsOn: (row: MosqueRow, date: CivilDate) => Slot[];
  reportFor: (mosqueId: string, broadcastId: string) => Promise<unknown>;
  /** The mosque's players' local plays whose status arrived in [from, until] (Unix seconds, src/devices/timeline.ts). */
  localPlays?: (mosqueId: string, from: number, until: number) => Promise<LocalPlay[]>;
}): Promise<SlotView[]> {
  const { row, store } = opts;
  const dates = Array.from({ length: opts.days }, (_, i) => addDays(opts.from, i));
  const outcomes = new Map<string, OutcomeRow>();
  for (const o of await store.outcomesBetween(row.id, formatDate(dates[0]!), formatDate(dates.at(-1)!))) {
    outcomes.set(slotKey({ mosqueId: o.mosque_id, date: o.date, prayer: o.prayer as Slot['prayer'], index: o.idx }), o);
  }
  const out: Array<Promise<SlotView & { at: number }> | SlotView & { at: number }> = [];
  for (const date of dates) {
    for (const slot of opts.slotsOn(row, date)) {
      const key = slotKey(slot);
      const o = outcomes.get(key);
      outcomes.delete(key);
      out.push(o ? fromOutcome(o, row, opts.reportFor) : fromSlot(slot, opts.nowMs > slot.azaanAt + opts.graceMs));
    }
  }
  // Outcomes of slots that no longer derive (a Jumu'ah time since removed) stay in the record.
  for (const o of outcomes.values()) out.push(fromOutcome(o, row, opts.reportFor));
  const views = (await Promise.all(out)).sort((a, b) => a.at - b.at);
  await countCoveredLocally(views, opts);
  return views.map(({ at: _at, ...view }) => view);
}

/** A status may arrive this long after its slot (the player reconnects) and still count: its config held 48 h of slots. */
const LOCAL_LATE_S = 48 * 3600;

/**
 * Each past slot's `covered_locally`: the players whose local play is nearest it among the slots of the view,
 * within SCHEDULE_GRACE_MINUTES either side of its azaan (the window a start may come in). One read for the view.
 */
async function countCoveredLocally(views: Array<SlotView & { at: number }>, opts: { row: MosqueRow; nowMs: number; graceMs: number; localPlays?: (mosqueId: string, from: number, until: number) => Promise<LocalPlay[]> }): Promise<void> {
  const past = views.filter((v) => v.at <= opts.nowMs);
  if (!opts.localPlays || past.length === 0) return;
  const graceS = Math.ceil(opts.graceMs / 1000);
  const times = views.map((v) => Math.floor(v.at / 1000));
  const first = Math.floor(past[0]!.at / 1000);
  const last = Math.floor(past.at(-1)!.at / 1000);
  const plays = await opts.localPlays(opts.row.id, first - graceS, Math.min(Math.floor(opts.nowMs / 1000), last + LOCAL_LATE_S));
  for (const v of past) v.covered_locally = coveredLocally(plays, times, Math.floor(v.at / 1000), graceS, graceS).size;
}

function fromSlot(s: Slot, past: boolean): SlotView & { at: number } {
  return {
    at: s.azaanAt, date: s.date, prayer: s.prayer, starts_at: new Date(s.startsAt).toISOString(), azaan_at: new Date(s.azaanAt).toISOString(),
    iqamah_at: s.iqamahAt === null ? null : new Date(s.iqamahAt).toISOString(), azaan_local: s.azaanLocal, source: s.source,
    status: past ? 'missed' : 'upcoming', broadcast_id: null, reason: past ? 'not_checked' : null, report: null, readiness: null, auto_started: false, covered_locally: null,
  };
}

async function fromOutcome(o: OutcomeRow, row: MosqueRow, reportFor: (mosqueId: string, broadcastId: string) => Promise<unknown>): Promise<SlotView & { at: number }> {
  return {
    at: o.azaan_at * 1000, date: o.date, prayer: o.prayer, starts_at: toIsoString(o.starts_at), azaan_at: toIsoString(o.azaan_at),
    iqamah_at: o.iqamah_at === null ? null : toIsoString(o.iqamah_at), azaan_local: localHhMm(o.azaan_at * 1000, row.timezone), source: o.source,
    status: o.status, broadcast_id: o.broadcast_id, reason: o.reason,
    report: o.broadcast_id === null ? null : await reportFor(row.id, o.broadcast_id),
    readiness: o.readiness === null ? null : JSON.parse(o.readiness), auto_started: o.auto_started === 1, covered_locally: null,
  };
}

/** Uploaded rows more than 30 minutes from the computed starts (the usual daylight-saving mistake). */
export function timetableWarnings(row: MosqueRow, month: number, year: number, rows: TimetableRow[]) {
  const times = mosqueTimes(row);
  const warnings: Array<{ day: number; prayer: string; uploaded: string; computed: string; difference_minutes: number }> = [];
  for (const r of rows) {
    const date = { y: year, m: month, d: r.day };
    const computed = computedStarts(times, date);
    if (!computed) continue;
    const uploaded = timetableStarts(r, date, row.timezone);
    for (const prayer of PRAYERS) {
      const c = computed[prayer];
      if (c === null) continue;
      const diff = Math.round((uploaded[prayer] - c) / 60_000);
      if (Math.abs(diff) > 30) warnings.push({ day: r.day, prayer, uploaded: r[prayer], computed: standardHhMm(c, uploaded[prayer], r[prayer]), difference_minutes: diff });
    }
  }
  return warnings;
}

/** The computed start on the same standard-time clock the upload uses. */
function standardHhMm(computedMs: number, uploadedMs: number, uploaded: string): string {
  const [hh, mm] = uploaded.split(':').map(Number) as [number, number];
  const minutes = ((hh * 60 + mm + Math.round((computedMs - uploadedMs) / 60_000)) % 1440 + 1440) % 1440;
  return `${String(Math.floor(minutes / 60)).padStart(2, '0')}:${String(minutes % 60).padStart(2, '0')}`;
}

/** One slot of a preview: what the schedule would be on that date with the settings asked about. */
export interface SlotPreview {
  prayer: string;
  starts_at: string;
  azaan_at: string;
  iqamah_at: string | null;
  azaan_local: string;
  iqamah_local: string | null;
  source: string;
}

/**
 * docs/schedule.md, "Previewing settings": the slots of one date with `change` laid over the mosque's saved
 * fields (and `timezone` over its zone), computed here and stored nowhere. Derived apart from the scheduler's
 * cache, which is keyed by the saved row.
 */
export function previewSlots(row: MosqueRow, change: Partial<ScheduleFields>, timezone: string, date: CivilDate, timetable: TimetableDay | null): SlotPreview[] {
  const fields = { ...scheduleFieldsOf(row), ...change };
  const times = { id: row.id, timezone, fields, params: fields.prayer_times ? parametersFor(fields.prayer_times) : null };
  return slotsOn(times, date, timetable).map((s) => ({
    prayer: s.prayer, starts_at: new Date(s.startsAt).toISOString(), azaan_at: new Date(s.azaanAt).toISOString(),
    iqamah_at: s.iqamahAt === null ? null : new Date(s.iqamahAt).toISOString(), azaan_local: s.azaanLocal,
    iqamah_local: s.iqamahAt === null ? null : localHhMm(s.iqamahAt, timezone), source: s.source,
  }));
}
