/**
 * The azaan without the network (docs/firmware.md, "4.1 Config": an entitled stream player's `offline`): the shape
 * of the config's `offline` field, and the pure rules over it (which slot is next, whether a slot may play). Time
 * comes in as an argument; the timer, the download and the sound are device/offline.ts's.
 */
import { isInt, isObject, leaseExpiresMs, muteOf } from './config.ts';
import type { DeviceConfig } from './types.ts';

export const PRAYERS = ['fajr', 'dhuhr', 'asr', 'maghrib', 'isha', 'jumuah'] as const;
export type Prayer = (typeof PRAYERS)[number];
export const DEFAULT_GRACE_S = 10;
/** A slot found this long past its grace (a board asleep, a clock set late) is over: the azaan would come too late. */
export const LATE_LIMIT_S = 120;

export interface Slot {
  prayer: Prayer;
  /** Unix seconds. */
  at: number;
}

export interface RecordingRef {
  url: string;
  sha256: string;
  size: number;
}

export interface OfflinePlan {
  slots: Slot[];
  recording: RecordingRef | null;
  grace_s: number;
}

const SHA256_HEX = /^[0-9a-f]{64}$/;
const isPrayer = (v: unknown): v is Prayer => typeof v === 'string' && (PRAYERS as readonly string[]).includes(v);

function recordingOf(v: unknown): RecordingRef | null | undefined {
  if (v === null || v === undefined) return null;
  if (!isObject(v) || typeof v['url'] !== 'string' || typeof v['sha256'] !== 'string' || !isInt(v['size'])) return undefined;
  if (!/^https?:\/\//.test(v['url']) || !SHA256_HEX.test(v['sha256'].toLowerCase()) || v['size'] <= 0) return undefined;
  return { url: v['url'], sha256: v['sha256'].toLowerCase(), size: v['size'] };
}

/**
 * The config's `offline` as a plan: null when it has none, undefined when its shape is wrong (the config is then
 * refused, docs/firmware.md "4.1 Config": CONFIG_ERROR names `offline`). Slots come sorted; a prayer outside the
 * list is a wrong shape, not a slot to guess at.
 */
export function offlinePlanOf(v: unknown): OfflinePlan | null | undefined {
  if (v === undefined || v === null) return null;
  if (!isObject(v) || !Array.isArray(v['slots'])) return undefined;
  const slots: Slot[] = [];
  for (const s of v['slots']) {
    if (!isObject(s) || !isPrayer(s['prayer']) || !isInt(s['at']) || s['at'] <= 0) return undefined;
    slots.push({ prayer: s['prayer'], at: s['at'] });
  }
  const recording = recordingOf(v['recording']);
  if (recording === undefined) return undefined;
  const grace = v['grace_s'] ?? DEFAULT_GRACE_S;
  if (!isInt(grace) || grace < 0 || grace > 600) return undefined;
  return { slots: slots.sort((a, b) => a.at - b.at), recording, grace_s: grace };
}

/** The first slot whose play is still ahead or still due at `nowS` (not past its grace by LATE_LIMIT_S), after `doneAt`. */
export function nextSlot(plan: OfflinePlan, nowS: number, doneAt: number): Slot | null {
  return plan.slots.find((s) => s.at > doneAt && s.at + plan.grace_s + LATE_LIMIT_S > nowS) ?? null;
}

/**
 * Why a slot's local azaan must not play, from the config alone (the device's state is the caller's), or null.
 * docs/firmware.md, "3.1 Status" and "5. The lease": nothing past the lease, while muted (volume 0, quiet hours),
 * or for a slot the config no longer lists.
 */
export function slotRefusal(cfg: DeviceConfig | null, slot: Slot, now: Date): string | null {
  if (!cfg) return 'no_config';
  if (typeof cfg.stream_url !== 'string' || cfg.stream_url === '' || !cfg.lease) return 'unbound';
  if (leaseExpiresMs(cfg.lease) <= now.getTime()) return 'lease_expired';
  const mute = muteOf(cfg, now);
  if (mute) return mute.reason === 'quiet_hours' ? 'quiet_hours' : 'muted';
  const plan = offlinePlanOf(cfg['offline']);
  if (!plan || !plan.slots.some((s) => s.at === slot.at && s.prayer === slot.prayer)) return 'slot_not_listed';
  return null;
}

/** validateConfig's verdict on `offline` (kept here so config.ts and this file do not import each other). */
export function offlineProblem(v: unknown): { keys: string[]; error: string } | null {
  return isObject(v) && offlinePlanOf(v['offline']) === undefined ? { keys: ['offline'], error: 'invalid_value' } : null;
}
