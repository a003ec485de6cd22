import type { OfflinePlan, OfflinePlanner } from '../devices/device-config.ts';
import { OFFLINE_HORIZON_S, OFFLINE_MAX_SLOTS } from '../devices/device-config.ts';
import type { MosqueRow } from '../mosques/mosques.ts';
import type { Queries } from '../platform/store/store.ts';
import type { Slot } from './slots.ts';
import { addDays, civilDateAt, type CivilDate } from './zone.ts';

/** The member's two toggles that decide which azaans their players keep (docs/api.md, "Memberships"). */
export interface AzaanToggles {
  notify_azaan: number;
  notify_jummah: number;
}

/**
 * The story of a player's offline plan (docs/firmware.md, "The azaan without the network"), the port the devices
 * declare (src/devices/device-config.ts, OfflinePlanner) written here, where the slots are derived: the mosque's
 * azaan slots of the next 48 hours that the member has not turned off, its recorded azaan, and the grace. Asked
 * only when a config is built (a change, a lease renewal), never per packet: the slots come from the scheduler's
 * memory; the membership and the recording's metadata are one read each, through the config's transaction.
 */
export function createOfflinePlanner(deps: {
  slotsOn: (row: MosqueRow, date: CivilDate) => Slot[];
  toggles: (mosqueId: string, userId: string, q: Queries) => Promise<AzaanToggles | null>;
  recording: (mosqueId: string, q: Queries) => Promise<{ sha256: string; bytes: number } | null>;
  /** The download address without a lease (the player adds `?lease=`, docs/api.md "Recorded azaan"). */
  recordingUrl: (mosqueId: string) => string;
  graceS: number;
}): OfflinePlanner {
  return {
    async plan(q, mosque, ownerUserId, nowS): Promise<OfflinePlan | null> {
      const today = civilDateAt(nowS * 1000, mosque.timezone);
      const derived = [0, 1, 2].flatMap((n) => deps.slotsOn(mosque, addDays(today, n)));
      if (derived.length === 0) return null; // no location, method or timetable: no schedule to follow
      const toggles = await deps.toggles(mosque.id, ownerUserId, q);
      const wanted = (s: Slot) => (s.prayer === 'jumuah' ? toggles?.notify_jummah : toggles?.notify_azaan) === 1;
      // A slot whose grace is still running stays: a config pushed in those seconds must not take it away.
      const from = nowS - deps.graceS;
      const slots = derived
        .map((s) => ({ prayer: s.prayer, at: Math.floor(s.azaanAt / 1000) }))
        .filter((s, i) => s.at >= from && s.at < nowS + OFFLINE_HORIZON_S && wanted(derived[i]!))
        .slice(0, OFFLINE_MAX_SLOTS);
      const stored = await deps.recording(mosque.id, q);
      return {
        slots,
        recording: stored ? { url: deps.recordingUrl(mosque.id), sha256: stored.sha256, size: stored.bytes } : null,
        grace_s: deps.graceS,
      };
    },
  };
}
