/**
 * --follow-schedule: the transmitter plays the azaan itself at each azaan_at of its mosque's schedule, by
 * publishing its own broadcast start (and a stop after --azaan-secs), or leaves out the prayers named by
 * --miss (to walk through a missed-azaan alert). Reads the schedule over HTTP with the person's token.
 */
import type { SimDevice } from './device.ts';

interface ScheduleSlot {
  date: string;
  prayer: string;
  azaan_at: string;
  azaan_local: string;
  status: string;
}

export interface FollowOptions {
  url: string;
  token: string;
  mosqueId: string;
  transmitter: SimDevice;
  miss: Set<string>;
  azaanSecs: number;
  log: (line: string) => void;
  /** The simulator's clock (tests line it up with a service on a manual clock). */
  now?: () => number;
}

/** How often the schedule is read again (a manager may change the times while the simulator runs). */
const REFRESH_MS = 5 * 60_000;

export function followSchedule(o: FollowOptions): { stop(): void } {
  const timers = new Map<string, NodeJS.Timeout>();
  const clock = o.now ?? Date.now;
  let stopped = false;

  async function fetchSlots(): Promise<ScheduleSlot[]> {
    const res = await fetch(`${o.url}/api/v1/mosques/${encodeURIComponent(o.mosqueId)}/schedule?days=2`, { headers: { authorization: `Bearer ${o.token}` } });
    if (res.status !== 200) throw new Error(`GET schedule -> HTTP ${res.status}`);
    return (await res.json()) as ScheduleSlot[];
  }

  async function play(slot: ScheduleSlot): Promise<void> {
    if (o.miss.has(slot.prayer)) return o.log(`schedule: leaving out ${slot.prayer} ${slot.date} ${slot.azaan_local} (--miss)`);
    const id = `sim-${slot.date}-${slot.prayer}-${clock().toString(36)}`;
    try {
      // With --source the audio goes to the mount first, so players that hear the start find it on air.
      if (o.transmitter.hasSource) o.transmitter.goOnAir(id);
      await o.transmitter.announceBroadcast(o.mosqueId, id, 'start');
      o.log(`schedule: ${slot.prayer} ${slot.date} ${slot.azaan_local}: broadcast ${id} started`);
      const end = setTimeout(() => {
        if (o.transmitter.hasSource) o.transmitter.goOffAir(id);
        o.transmitter.announceBroadcast(o.mosqueId, id, 'stop').then(() => o.log(`schedule: broadcast ${id} stopped`), (err: Error) => o.log(`schedule: stop failed: ${err.message}`));
      }, o.azaanSecs * 1000);
      end.unref();
    } catch (err) {
      o.log(`schedule: ${slot.prayer} ${slot.date}: could not announce (${(err as Error).message})`);
    }
  }

  async function refresh(): Promise<void> {
    if (stopped) return;
    let slots: ScheduleSlot[];
    try {
      slots = await fetchSlots();
    } catch (err) {
      return o.log(`schedule: ${(err as Error).message}`);
    }
    const now = clock();
    for (const slot of slots) {
      const key = `${slot.date}|${slot.prayer}|${slot.azaan_at}`;
      const at = Date.parse(slot.azaan_at);
      if (timers.has(key) || at <= now || at - now > 2 ** 31 - 1) continue;
      const timer = setTimeout(() => void play(slot), at - now);
      timer.unref();
      timers.set(key, timer);
    }
    const next = slots.filter((s) => Date.parse(s.azaan_at) > now)[0];
    if (next) o.log(`schedule: next azaan ${next.prayer} ${next.date} ${next.azaan_local}${o.miss.has(next.prayer) ? ' (will be left out)' : ''}`);
  }

  void refresh();
  const every = setInterval(() => void refresh(), REFRESH_MS);
  every.unref();
  return {
    stop() {
      stopped = true;
      clearInterval(every);
      for (const t of timers.values()) clearTimeout(t);
    },
  };
}
