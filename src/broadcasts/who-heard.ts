import type { ListenerSessionRow, RefusalCount } from '../audio/listener-sessions.ts';
import type { Clock } from '../platform/clock.ts';
import type { Fanout } from './broadcast-fanout.ts';
import type { BroadcastRow, Broadcasts, DeliveryReport, Listeners } from './broadcasts.ts';

/** At most this many listeners are named one by one in a report; the totals count them all. */
export const HEARD_LIST_MAX = 1000;

/** What the audio gate records (src/audio/listener-sessions.ts) that the report reads. */
export interface HeardSource {
  listSessions(mosqueId: string, fromS: number, toS: number): Promise<ListenerSessionRow[]>;
  countRefusals(mosqueId: string, fromS: number, toS: number): Promise<RefusalCount[]>;
}

/**
 * The listeners of one broadcast: every session that overlapped it, each counted for the part that did
 * (a player that joined before the start or stayed after the stop heard only the broadcast's part).
 */
export async function whoHeard(source: HeardSource, b: BroadcastRow, nowS: number): Promise<Listeners> {
  const from = b.started_at;
  const to = b.stopped_at ?? nowS;
  const byListener = new Map<string, { device_id: string | null; user_id: string | null; seconds: number }>();
  // While it is live, a listener admitted in this very second is one who hears it (the on-air count has them already).
  for (const s of await source.listSessions(b.mosque_id, from, b.stopped_at ?? nowS + 1)) {
    const heard = Math.max(0, Math.min(s.ended_at ?? nowS, to) - Math.max(s.started_at, from));
    const key = s.device_id ? `d:${s.device_id}` : `u:${s.user_id}`;
    const entry = byListener.get(key) ?? { device_id: s.device_id, user_id: s.user_id, seconds: 0 };
    entry.seconds += heard;
    byListener.set(key, entry);
  }
  const all = [...byListener.values()].sort((a, b2) => b2.seconds - a.seconds);
  const refused: Record<string, number> = {};
  for (const r of await source.countRefusals(b.mosque_id, from, to + 1)) if (r.kind === 'listener') refused[r.reason] = (refused[r.reason] ?? 0) + r.count;
  return {
    admitted: { devices: all.filter((l) => l.device_id).length, members: all.filter((l) => l.user_id).length },
    seconds: all.reduce((sum, l) => sum + l.seconds, 0),
    refused,
    heard: all.slice(0, HEARD_LIST_MAX),
    truncated: all.length > HEARD_LIST_MAX,
  };
}

/**
 * A broadcast's delivery report (docs/api.md, "Broadcasts and their delivery report"): the devices' own
 * reports, and with an audio server (`heard`) who it admitted and for how long.
 */
export function createDeliveryReports(deps: { fanout: Pick<Fanout, 'report'>; broadcasts: Pick<Broadcasts, 'find'>; heard: HeardSource | null; clock: Clock }) {
  const report = async (b: BroadcastRow): Promise<DeliveryReport> => {
    const devices = await deps.fanout.report(b);
    return deps.heard ? { ...devices, listeners: await whoHeard(deps.heard, b, Math.floor(deps.clock() / 1000)) } : devices;
  };
  return {
    report,
    /** The report of one broadcast of the mosque, or null when it has none by that id. */
    async reportFor(mosqueId: string, broadcastId: string): Promise<DeliveryReport | null> {
      const b = await deps.broadcasts.find(mosqueId, broadcastId);
      return b ? report(b) : null;
    },
  };
}
