/**
 * Calendar dates and wall-clock times in a mosque's IANA zone, with Intl.DateTimeFormat only (Node ships the
 * tz database; no extra library). A civil date is {y, m, d} with m 1..12; instants are Unix milliseconds.
 */
export interface CivilDate {
  y: number;
  m: number;
  d: number;
}

interface Fields extends CivilDate {
  hh: number;
  mm: number;
  ss: number;
}

// One formatter per zone: constructing one costs far more than formatting with it.
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterFor(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', { timeZone: tz, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    formatters.set(tz, f);
  }
  return f;
}

function fieldsAt(ms: number, tz: string): Fields {
  const out: Record<string, number> = {};
  for (const p of formatterFor(tz).formatToParts(ms)) if (p.type !== 'literal') out[p.type] = Number(p.value);
  return { y: out.year!, m: out.month!, d: out.day!, hh: out.hour! % 24, mm: out.minute!, ss: out.second! };
}

function formattedOffset(ms: number, tz: string): number {
  const f = fieldsAt(ms, tz);
  const whole = Math.floor(ms / 1000) * 1000;
  return Date.UTC(f.y, f.m - 1, f.d, f.hh, f.mm, f.ss) - whole;
}

// Offsets per zone and quarter hour: formatToParts costs microseconds, and a year of slots for a thousand
// mosques asks millions of times. A quarter whose two ends disagree holds a transition and is not cached.
const QUARTER_MS = 15 * 60_000;
const offsets = new Map<string, Map<number, number>>();

/** The zone's offset from UTC at an instant, in milliseconds (positive east of Greenwich). */
export function offsetAt(ms: number, tz: string): number {
  const quarter = Math.floor(ms / QUARTER_MS);
  let cache = offsets.get(tz);
  const hit = cache?.get(quarter);
  if (hit !== undefined) return hit;
  const start = formattedOffset(quarter * QUARTER_MS, tz);
  if (start !== formattedOffset((quarter + 1) * QUARTER_MS - 1000, tz)) return formattedOffset(ms, tz);
  if (!cache || cache.size > 100_000) offsets.set(tz, (cache = new Map()));
  cache.set(quarter, start);
  return start;
}

/** The calendar date at an instant in the zone. */
export function civilDateAt(ms: number, tz: string): CivilDate {
  const local = new Date(ms + offsetAt(ms, tz));
  return { y: local.getUTCFullYear(), m: local.getUTCMonth() + 1, d: local.getUTCDate() };
}

/** "HH:MM" on the zone's wall clock at an instant. */
export function localHhMm(ms: number, tz: string): string {
  const local = new Date(ms + offsetAt(ms, tz));
  return `${String(local.getUTCHours()).padStart(2, '0')}:${String(local.getUTCMinutes()).padStart(2, '0')}`;
}

/**
 * The instant a wall-clock time happens on a date in the zone. A time inside a spring-forward gap lands
 * after the gap (02:30 becomes 03:30); a repeated time in the autumn takes its first occurrence.
 */
export function zonedInstant(date: CivilDate, hh: number, mm: number, tz: string): number {
  const naive = Date.UTC(date.y, date.m - 1, date.d, hh, mm);
  const before = naive - offsetAt(naive - 14 * 3600_000, tz);
  const after = naive - offsetAt(naive + 14 * 3600_000, tz);
  const holds = (t: number) => offsetAt(t, tz) === naive - t;
  if (holds(before) && holds(after)) return Math.min(before, after);
  if (holds(after)) return after;
  return before; // valid, or in the gap: the offset before the gap carries it past the gap
}

/**
 * The zone's standard (winter) offset in a year: the smaller of January's and July's, so it holds for both
 * hemispheres. Mawaqit's timetables are in standard time ("without daylight saving").
 */
export function standardOffset(year: number, tz: string): number {
  return Math.min(offsetAt(Date.UTC(year, 0, 1), tz), offsetAt(Date.UTC(year, 6, 1), tz));
}

export function formatDate(d: CivilDate): string {
  return `${d.y}-${String(d.m).padStart(2, '0')}-${String(d.d).padStart(2, '0')}`;
}

export function parseDate(s: string): CivilDate | null {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return null;
  const date = { y: Number(m[1]), m: Number(m[2]), d: Number(m[3]) };
  const check = new Date(Date.UTC(date.y, date.m - 1, date.d));
  return check.getUTCMonth() === date.m - 1 && check.getUTCDate() === date.d ? date : null;
}

export function addDays(d: CivilDate, n: number): CivilDate {
  const t = new Date(Date.UTC(d.y, d.m - 1, d.d + n));
  return { y: t.getUTCFullYear(), m: t.getUTCMonth() + 1, d: t.getUTCDate() };
}

/** 0 = Sunday ... 5 = Friday. */
export function weekday(d: CivilDate): number {
  return new Date(Date.UTC(d.y, d.m - 1, d.d)).getUTCDay();
}

/** "HH:MM" (00:00..23:59) -> [hh, mm], or null. */
export function parseHhMm(s: string): [number, number] | null {
  const m = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(s.trim());
  return m ? [Number(m[1]), Number(m[2])] : null;
}
