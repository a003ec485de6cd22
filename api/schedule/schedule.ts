import { Hono } from 'hono';
import * as v from 'valibot';
import type { Clock } from '../../src/platform/clock.ts';
import type { Scheduler } from '../../src/schedule/scheduler.ts';
import type { DevicePlane } from '../../src/devices/device-plane.ts';
import type { ScheduleStore } from '../../src/schedule/schedule-store.ts';
import { toIcs } from '../../src/schedule/ics.ts';
import { checkTimetable, onLines, parseTimetableCsv } from '../../src/schedule/timetable.ts';
import { previewSlots, timetableWarnings, viewSlots } from '../../src/schedule/view.ts';
import { addDays, civilDateAt, formatDate, parseDate } from '../../src/schedule/zone.ts';
import type { AppContext, AppEnv } from '../context.ts';
import { ApiError } from '../errors.ts';
import { checkStanding, mosqueGate, type GateDeps } from '../guards.ts';
import { readJson, readQuery } from '../validate.ts';
import { scheduleEntries, scheduleOf } from '../mosques/mosques.ts';
import { timezone } from '../schemas.ts';

const civilDate = v.pipe(v.string(), v.regex(/^\d{4}-\d{2}-\d{2}$/, 'must be YYYY-MM-DD'), v.check((s) => parseDate(s) !== null, 'is not a date'));
export const ScheduleQuery = v.object({
  date: v.optional(civilDate),
  days: v.optional(v.pipe(v.string(), v.regex(/^\d+$/, 'must be a whole number from 1 to 31'), v.transform(Number), v.minValue(1, 'must be at least 1'), v.maxValue(31, 'must be at most 31')), '1'),
});
/** The settings PATCH /mosques/{id} takes, checked by the same rules, plus the date to preview. */
export const SchedulePreview = v.object({ timezone: v.optional(timezone), date: v.optional(civilDate), ...scheduleEntries });
export const TimetableJson = v.array(v.record(v.string(), v.unknown()));
const CSV_TYPE = /^text\/csv\s*(;|$)/i;
export const ICS_DAYS = 30;

interface Deps extends GateDeps {
  clock: Clock;
  scheduler: Scheduler;
  scheduleStore: ScheduleStore;
  graceMs: number;
  reportFor: (mosqueId: string, broadcastId: string) => Promise<unknown>;
  plane: Pick<DevicePlane, 'localPlays'>;
}

/** The azaan schedule of a mosque, its ICS feed and its uploaded timetables (docs/schedule.md, "The schedule, for apps"). */
export function scheduleRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();

  /** Members (approved) and admins; a pending member sees 403, anyone else 404 (the mosque stays hidden). */
  const memberOrAdmin = async (c: AppContext) => {
    const { mosque, standing } = await checkStanding(deps, c, c.req.param('id') ?? '', 'member');
    if (standing.admin) return mosque;
    const membership = await deps.memberships.findFor(mosque.id, c.var.user.id);
    if (membership?.status === 'approved') return mosque;
    throw new ApiError(membership && membership.status !== 'banned' ? 'forbidden' : 'not_found');
  };

  app.get('/:id/schedule', async (c) => {
    const mosque = await memberOrAdmin(c);
    const q = readQuery(c, ScheduleQuery);
    const now = deps.clock();
    const from = q.date ? parseDate(q.date)! : civilDateAt(now, mosque.timezone);
    return c.json(await viewSlots({ row: mosque, from, days: q.days, nowMs: now, graceMs: deps.graceMs, store: deps.scheduleStore, slotsOn: deps.scheduler.slotsOn, reportFor: deps.reportFor, localPlays: deps.plane.localPlays }));
  });

  app.get('/:id/schedule.ics', async (c) => {
    const mosque = await memberOrAdmin(c);
    const now = deps.clock();
    const today = civilDateAt(now, mosque.timezone);
    const slots = Array.from({ length: ICS_DAYS }, (_, i) => deps.scheduler.slotsOn(mosque, addDays(today, i))).flat();
    const host = new URL(c.req.url).hostname || 'minaret';
    return c.body(toIcs(mosque, slots, now, host), 200, { 'content-type': 'text/calendar; charset=utf-8', 'content-disposition': `inline; filename="${mosque.id}.ics"` });
  });

  // docs/schedule.md, "Previewing settings": a manager sees the times a location and method give before saving
  // them (a wrong method or a swapped sign moves every azaan). Computes only; nothing is stored or scheduled.
  app.post('/:id/schedule/preview', mosqueGate(deps, 'manager'), async (c) => {
    const b = await readJson(c, SchedulePreview);
    const mosque = c.var.mosque;
    const zone = b.timezone ?? mosque.timezone;
    const date = b.date ? parseDate(b.date)! : civilDateAt(deps.clock(), zone);
    const slots = previewSlots(mosque, scheduleOf(b) ?? {}, zone, date, deps.scheduleStore.timetableDay(mosque.id, date.m, date.d));
    return c.json({ date: formatDate(date), timezone: zone, slots });
  });

  app.put('/:id/timetable/:month', mosqueGate(deps, 'manager'), async (c) => {
    const month = monthOf(c.req.param('month'));
    let input: Array<Record<string, unknown>>;
    let lines: number[] | null = null;
    if (CSV_TYPE.test(c.req.header('content-type') ?? '')) {
      const parsed = parseTimetableCsv(await c.req.text());
      if (parsed.problems.length > 0) throw new ApiError('validation_failed', 'The CSV does not match Day,Fajr,Shuruk,Duhr,Asr,Maghrib,Isha.', { details: parsed.problems });
      input = parsed.rows;
      lines = parsed.lines;
    } else {
      // JSON rows use the contract's prayer names; readJson answers 415 for any other type.
      input = (await readJson(c, TimetableJson)).map((r) => ('duhr' in r && !('dhuhr' in r) ? { ...r, dhuhr: r.duhr } : r));
    }
    const { rows, problems } = checkTimetable(month, input);
    if (problems.length > 0) throw new ApiError('validation_failed', undefined, { details: lines ? onLines(problems, lines) : problems });
    const now = deps.clock();
    await deps.scheduleStore.replaceMonth(c.var.mosque.id, month, rows, now);
    deps.scheduler.timesChanged(c.var.mosque.id);
    const year = civilDateAt(now, c.var.mosque.timezone).y;
    return c.json({ month, days: rows.length, warnings: timetableWarnings(c.var.mosque, month, year, rows) });
  });

  app.delete('/:id/timetable/:month', mosqueGate(deps, 'manager'), async (c) => {
    const month = monthOf(c.req.param('month'));
    if (!(await deps.scheduleStore.deleteMonth(c.var.mosque.id, month, deps.clock()))) throw new ApiError('not_found', 'No timetable is uploaded for that month.');
    deps.scheduler.timesChanged(c.var.mosque.id);
    return c.body(null, 204);
  });

  return app;
}

/** Mawaqit's calendar: a month 1..12 that recurs every year. */
function monthOf(raw: string): number {
  if (/^(0?[1-9]|1[0-2])$/.test(raw)) return Number(raw);
  throw new ApiError('validation_failed', undefined, { details: [{ path: 'month', message: 'must be a month from 1 to 12' }] });
}
