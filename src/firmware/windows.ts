import type { MosqueRow } from '../mosques/mosques.ts';
import type { Slot } from '../schedule/slots.ts';
import { addDays, civilDateAt, type CivilDate } from '../schedule/zone.ts';

/**
 * Prayer-aware windows (docs/api.md, "Firmware updates"): a device is offered an update only while its mosque has
 * no broadcast live and its nearest azaan, iqamah or Jumu'ah, before or after now, is more than
 * FIRMWARE_QUIET_MINUTES away. A reboot during the azaan is the one failure a mosque will not forgive.
 */

/** The instants a reboot must keep clear of: every azaan and iqamah of the slots (Jumu'ah is a slot of its own). */
export function quietTimes(slots: readonly Slot[]): number[] {
  return slots.flatMap((s) => (s.iqamahAt === null ? [s.azaanAt] : [s.azaanAt, s.iqamahAt]));
}

/** Pure: whether the window is open at `now` (Unix ms). */
export function windowOpen(now: number, times: readonly number[], live: boolean, quietMs: number): boolean {
  if (live) return false;
  return times.every((t) => Math.abs(t - now) > quietMs);
}

export interface WindowDeps {
  findMosque: (id: string) => Promise<MosqueRow | null>;
  slotsOn: (row: MosqueRow, date: CivilDate) => Slot[];
  liveBroadcast: (mosqueId: string) => Promise<unknown>;
  quietMs: number;
}

/**
 * One tick's answers, each mosque asked once: yesterday's, today's and tomorrow's slots in the mosque's zone
 * cover any quiet time near now (a quiet period is far shorter than a day). A device bound to no mosque: always open.
 */
export function windowsAt(deps: WindowDeps, now: number): (mosqueId: string | null) => Promise<boolean> {
  const answers = new Map<string, Promise<boolean>>();
  const ask = async (mosqueId: string): Promise<boolean> => {
    const mosque = await deps.findMosque(mosqueId);
    if (!mosque) return true;
    const today = civilDateAt(now, mosque.timezone);
    const slots = [-1, 0, 1].flatMap((n) => deps.slotsOn(mosque, addDays(today, n)));
    return windowOpen(now, quietTimes(slots), (await deps.liveBroadcast(mosqueId)) !== null, deps.quietMs);
  };
  return (mosqueId) => {
    if (mosqueId === null) return Promise.resolve(true);
    let answer = answers.get(mosqueId);
    if (!answer) answers.set(mosqueId, (answer = ask(mosqueId)));
    return answer;
  };
}
