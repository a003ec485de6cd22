import { PRAYERS, type Prayer } from '../mosques/mosques.ts';
import type { TimetableDay } from './slots.ts';
import { parseHhMm } from './zone.ts';

export type TimetableRow = TimetableDay & { day: number; shuruk: string | null };
export interface RowProblem {
  path: string;
  message: string;
}

const DAYS_IN_MONTH = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const COLUMNS = ['day', 'fajr', 'shuruk', 'dhuhr', 'asr', 'maghrib', 'isha'] as const;

/**
 * Mawaqit's calendar CSV: `Day,Fajr,Shuruk,Duhr,Asr,Maghrib,Isha`, one row per day, "HH:MM" local standard
 * time. A header row is optional; `;` works as separator too (spreadsheets in many locales write it).
 */
export function parseTimetableCsv(text: string): { rows: Array<Record<string, string>>; lines: number[]; problems: RowProblem[] } {
  const rows: Array<Record<string, string>> = [];
  const lines: number[] = [];
  const problems: RowProblem[] = [];
  let first = true;
  // Lines are counted as an editor numbers them (blank ones too), so "line 14" is the line a person opens.
  text.replace(/^\uFEFF/, '').split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '') return;
    const cells = line.split(/[;,]/).map((c) => c.trim().replace(/^"|"$/g, ''));
    const header = first && /^day$/i.test(cells[0] ?? '');
    first = false;
    if (header) return;
    if (cells.length !== COLUMNS.length) return void problems.push({ path: `line ${i + 1}`, message: `expected ${COLUMNS.length} columns (Day,Fajr,Shuruk,Duhr,Asr,Maghrib,Isha)` });
    rows.push(Object.fromEntries(COLUMNS.map((c, k) => [c, cells[k]!])));
    lines.push(i + 1);
  });
  return { rows, lines, problems };
}

/**
 * docs/schedule.md, "Uploading a timetable": a CSV's problems name the file's line (`line 14.fajr`), which a
 * person can find, rather than the row's index among the parsed rows.
 */
export function onLines(problems: RowProblem[], lines: number[]): RowProblem[] {
  return problems.map((p) => {
    const m = /^(\d+)(\..*)?$/.exec(p.path);
    const line = m ? lines[Number(m[1])] : undefined;
    return line === undefined ? p : { ...p, path: `line ${line}${m![2] ?? ''}` };
  });
}

/** Checks rows (from CSV or JSON) for a month: days 1..n once each, every time "HH:MM". */
export function checkTimetable(month: number, input: Array<Record<string, unknown>>): { rows: TimetableRow[]; problems: RowProblem[] } {
  const problems: RowProblem[] = [];
  const rows: TimetableRow[] = [];
  const seen = new Set<number>();
  input.forEach((raw, i) => {
    const day = Number(raw.day);
    if (!Number.isInteger(day) || day < 1 || day > DAYS_IN_MONTH[month - 1]!) return void problems.push({ path: `${i}.day`, message: `must be a day of month ${month}` });
    if (seen.has(day)) return void problems.push({ path: `${i}.day`, message: 'appears twice' });
    seen.add(day);
    const times = {} as Record<Prayer, string>;
    for (const prayer of PRAYERS) {
      const value = typeof raw[prayer] === 'string' ? (raw[prayer] as string).trim() : '';
      if (!parseHhMm(value)) problems.push({ path: `${i}.${prayer}`, message: 'expected "HH:MM"' });
      times[prayer] = value;
    }
    const shuruk = typeof raw.shuruk === 'string' && parseHhMm(raw.shuruk) ? raw.shuruk.trim() : null;
    rows.push({ day, shuruk, ...times });
  });
  if (input.length === 0) problems.push({ path: '', message: 'no rows' });
  return { rows, problems };
}
