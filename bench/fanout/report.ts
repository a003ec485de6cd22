/**
 * The parts of a fan-out bench's bench/RESULTS.md subsection that bench/broadcast.ts and
 * bench/firmware/firmware.ts write alike: the subsection's head, the per-run lists under the table, and the
 * write itself (one subsection per player count, a rerun replacing its own).
 */
import path from 'node:path';
import { RESULTS_FILE, fmt, machine, writeSubsection } from '../support.ts';
import type { FanoutRun } from './players.ts';

export const num = (n: number) => n.toLocaleString('en-US');

/** The subsection's heading (its first word a player count, which orders the subsections) and the run's facts. */
export function head(title: string, date: string, command: string): string[] {
  return [`### ${title}`, '', `- Date: ${date}`, `- Command: \`${command}\``, ...machine()];
}

/** One figure of each run, in run order, as the bench formats its milliseconds. */
export const perRun = (runs: FanoutRun[], f: (r: FanoutRun) => number, ms: (x: number) => string) => runs.map((r) => ms(f(r))).join(' / ');

/** Players reached of those expected, per run. */
export const delivered = (runs: FanoutRun[]) => runs.map((r) => `${num(r.received)}/${num(r.expected)}`).join(', ');

/** Cores other processes took during each run's fan-out. */
export const otherCores = (runs: FanoutRun[]) => runs.map((r) => (r.cpu.bgCores === null ? 'n/a' : fmt(r.cpu.bgCores, 2))).join(', ');

/** Writes `text` as its player count's subsection of `section`, in player-count order. */
export function writeFanoutSubsection(section: string, intro: string, text: string): void {
  writeSubsection(section, intro, text, (s) => Number((s.match(/^### ([\d,]+) players/)?.[1] ?? '0').replace(/,/g, '')));
  console.log(`(written to ${path.relative(process.cwd(), RESULTS_FILE)} under "${section}")`);
}
