import type { CalculationParameters } from 'adhan';
import { PRAYERS, scheduleFieldsOf, type AzaanRule, type IqamahRule, type MosqueRow, type Prayer, type ScheduleFields } from '../mosques/mosques.ts';
import { parametersFor, startsOn, type DayStarts } from './prayer-times.ts';
import { formatDate, localHhMm, parseHhMm, standardOffset, weekday, zonedInstant, type CivilDate } from './zone.ts';

export type SlotPrayer = Prayer | 'jumuah';
export type SlotSource = 'calculated' | 'timetable' | 'fixed';

/** A slot as derived from the mosque's fields (never stored; its outcome is). Times are Unix milliseconds. */
export interface Slot {
  mosqueId: string;
  date: string;
  prayer: SlotPrayer;
  index: number;
  startsAt: number;
  azaanAt: number;
  iqamahAt: number | null;
  azaanLocal: string;
  source: SlotSource;
}

/** One uploaded day: "HH:MM" local standard time per prayer (Mawaqit's calendar row). */
export type TimetableDay = Record<Prayer, string>;

/** What slot derivation needs of a mosque, parsed once per change of the row. */
export interface MosqueTimes {
  id: string;
  timezone: string;
  fields: ScheduleFields;
  params: CalculationParameters | null;
}

export function mosqueTimes(row: MosqueRow): MosqueTimes {
  const fields = scheduleFieldsOf(row);
  return { id: row.id, timezone: row.timezone, fields, params: fields.prayer_times ? parametersFor(fields.prayer_times) : null };
}

export const slotKey = (s: Pick<Slot, 'mosqueId' | 'date' | 'prayer' | 'index'>) => `${s.mosqueId}|${s.date}|${s.prayer}|${s.index}`;

/** The computed starts, or null when the mosque has no location or method. */
export function computedStarts(m: MosqueTimes, date: CivilDate): DayStarts | null {
  const { latitude, longitude } = m.fields;
  if (latitude === null || longitude === null || !m.params) return null;
  return startsOn(latitude, longitude, m.params, date);
}

/**
 * An uploaded day's starts: local standard time, so the zone's standard offset converts it (on a summer
 * date the clock shows an hour later). A prayer earlier than the one before it is after midnight.
 */
export function timetableStarts(row: TimetableDay, date: CivilDate, timezone: string): Record<Prayer, number> {
  const offset = standardOffset(date.y, timezone);
  const out = {} as Record<Prayer, number>;
  let previous = -Infinity;
  for (const prayer of PRAYERS) {
    const [hh, mm] = parseHhMm(row[prayer])!;
    let at = Date.UTC(date.y, date.m - 1, date.d, hh, mm) - offset;
    if (at < previous) at += 86_400_000;
    out[prayer] = previous = at;
  }
  return out;
}

function fixedAt(rule: string, date: CivilDate, tz: string): number {
  const [hh, mm] = parseHhMm(rule)!;
  return zonedInstant(date, hh, mm, tz);
}

function azaanFor(rule: AzaanRule | undefined, startsAt: number, date: CivilDate, tz: string): number {
  if (rule && 'fixed' in rule) return fixedAt(rule.fixed, date, tz);
  return startsAt + (rule?.offset_minutes ?? 0) * 60_000;
}

function iqamahFor(rule: IqamahRule | undefined, azaanAt: number, date: CivilDate, tz: string): number | null {
  if (!rule) return null;
  if ('fixed' in rule) return fixedAt(rule.fixed, date, tz);
  return azaanAt + rule.after_minutes * 60_000;
}

/** Every slot of a mosque on one of its calendar dates, in time order. Jumu'ah replaces Dhuhr on Fridays. */
export function slotsOn(m: MosqueTimes, date: CivilDate, timetable: TimetableDay | null): Slot[] {
  const starts = timetable ? timetableStarts(timetable, date, m.timezone) : computedStarts(m, date);
  if (!starts) return [];
  const tz = m.timezone;
  const day = formatDate(date);
  const slots: Slot[] = [];
  const push = (prayer: SlotPrayer, index: number, startsAt: number, azaanAt: number, iqamahAt: number | null, fixed: boolean) =>
    slots.push({
      mosqueId: m.id, date: day, prayer, index, startsAt, azaanAt, iqamahAt, azaanLocal: localHhMm(azaanAt, tz),
      source: fixed ? 'fixed' : timetable ? 'timetable' : 'calculated',
    });
  for (const prayer of PRAYERS) {
    const startsAt = starts[prayer];
    if (startsAt === null) continue;
    if (prayer === 'dhuhr' && weekday(date) === 5 && m.fields.jumuah.length > 0) {
      const after = m.fields.iqamah.dhuhr && 'after_minutes' in m.fields.iqamah.dhuhr ? m.fields.iqamah.dhuhr.after_minutes : null;
      m.fields.jumuah.forEach((time, index) => {
        const azaanAt = fixedAt(time, date, tz);
        push('jumuah', index, startsAt, azaanAt, after === null ? null : azaanAt + after * 60_000, true);
      });
      continue;
    }
    const rule = m.fields.azaan[prayer];
    const azaanAt = azaanFor(rule, startsAt, date, tz);
    push(prayer, 0, startsAt, azaanAt, iqamahFor(m.fields.iqamah[prayer], azaanAt, date, tz), rule !== undefined && 'fixed' in rule);
  }
  return slots.sort((a, b) => a.azaanAt - b.azaanAt);
}
