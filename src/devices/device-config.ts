import { invalid, ok, type Result } from '../platform/failure.ts';
import type { MosqueRow } from '../mosques/mosques.ts';
import type { Queries } from '../platform/store/store.ts';

/** Per-kind device settings (docs/firmware.md, "3.2 Heartbeat" for the cadence, "4.1 Config" for the topic). Pure. */
export type DeviceKind = 'transmitter' | 'stream_player';

export const HEARTBEAT = {
  transmitter: { default: 60, min: 15 },
  stream_player: { default: 300, min: 60 },
} as const satisfies Record<DeviceKind, { default: number; min: number }>;

export const MAX_HEARTBEAT_SECS = 3600;

/** docs/firmware.md, "3.2 Heartbeat": a per-kind minimum, so a request's shape cannot hold it (the kind is the device's). */
export function heartbeatFits(kind: DeviceKind, secs: number | undefined): Result<void> {
  if (secs === undefined || secs >= HEARTBEAT[kind].min) return ok(undefined);
  return invalid('config.heartbeat_secs', `must be at least ${HEARTBEAT[kind].min} for a ${kind}`);
}

/** Quiet hours as local wall-clock times in the mosque's time zone, e.g. {start: "23:00", end: "05:00"}. */
export interface QuietHours {
  start: string;
  end: string;
}

/** What an owner or manager sets; stored as JSON in devices.config. */
export interface DeviceSettings {
  heartbeat_secs?: number;
  log_enabled?: boolean;
  volume?: number;
  quiet_hours?: QuietHours | null;
}

export interface EffectiveSettings {
  heartbeat_secs: number;
  log_enabled: boolean;
  volume: number | null;
  quiet_hours: QuietHours | null;
}

export function effectiveSettings(kind: DeviceKind, s: DeviceSettings): EffectiveSettings {
  return {
    heartbeat_secs: Math.max(HEARTBEAT[kind].min, s.heartbeat_secs ?? HEARTBEAT[kind].default),
    log_enabled: s.log_enabled ?? false,
    volume: s.volume ?? null,
    quiet_hours: s.quiet_hours ?? null,
  };
}

/** What the backend adds for a device bound to a mosque (the entitlement issue adds leases). */
export interface Binding {
  mosque_id: string | null;
  stream_url: string | null;
  lease: { token: string; expires_at: number } | null;
  unbound_reason: string | null;
  /** docs/firmware.md, "The azaan without the network": for an entitled player whose mosque has a schedule. */
  offline?: OfflinePlan;
}

/** A prayer an offline slot is for: the five daily azaans, and Jumu'ah in place of Dhuhr on Fridays. */
export type OfflinePrayer = 'fajr' | 'dhuhr' | 'asr' | 'maghrib' | 'isha' | 'jumuah';

/** The config's `offline` (docs/firmware.md, "4.1 Config"): what a player plays when no broadcast start reaches it. */
export interface OfflinePlan {
  /** The azaan slots of the next OFFLINE_HORIZON_S, at Unix seconds, without the prayers the member turned off. */
  slots: Array<{ prayer: OfflinePrayer; at: number }>;
  /** The mosque's recorded azaan: where to fetch it (with `?lease=`), its hex SHA-256 and byte size; null when it has none. */
  recording: { url: string; sha256: string; size: number } | null;
  /** OFFLINE_GRACE_S: how long past a slot's `at` the player waits for the broadcast's `start`. */
  grace_s: number;
}

/**
 * 48 hours of slots outlive a lease's renewal (at half of LEASE_TTL_HOURS, 24 h by default, the slots recomputed
 * with it), so a player that keeps its config never runs out; at most OFFLINE_MAX_SLOTS keep the config small.
 */
export const OFFLINE_HORIZON_S = 48 * 3600;
export const OFFLINE_MAX_SLOTS = 12;

/**
 * The port through which a config learns a mosque's coming azaans and recording (schedule and audio are later
 * domains: src/service.ts wires it). `plan` reads through `q`; null when the mosque has no schedule.
 */
export interface OfflinePlanner {
  plan(q: Queries, mosque: MosqueRow, ownerUserId: string, nowS: number): Promise<OfflinePlan | null>;
}

/** The retained payload on devices/{id}/config (docs/firmware.md, "4.1 Config"). Absent optional fields are left out. */
export function configPayload(kind: DeviceKind, version: number, s: DeviceSettings, b: Binding): Record<string, unknown> {
  const e = effectiveSettings(kind, s);
  return {
    v: '1.0',
    config_version: version,
    heartbeat_secs: e.heartbeat_secs,
    log_enabled: e.log_enabled,
    ...(e.volume !== null && { volume: e.volume }),
    ...(e.quiet_hours !== null && { quiet_hours: e.quiet_hours }),
    ...(b.mosque_id !== null && { mosque_id: b.mosque_id }),
    ...(b.stream_url !== null && { stream_url: b.stream_url }),
    ...(b.lease !== null && { lease: b.lease }),
    ...(b.unbound_reason !== null && { unbound_reason: b.unbound_reason }),
    ...(b.offline && { offline: b.offline }),
  };
}

/** A config's binding without its offline plan. */
export type HeldBinding = Omit<Binding, 'offline'>;

/**
 * Whether `retained` (the bytes the broker keeps on devices/{id}/config) is the config this device would be given
 * now (docs/decisions.md, "Device configs are rebuilt at start, not on connect"): its settings and binding as
 * configPayload writes them today, its offline plan aside. The plan changes only with a new config_version (the
 * mosque's schedule or recording changed: a refresh) or a new lease (renewed with fresh slots), both compared here.
 * Anything unreadable or written otherwise is not the config: the caller builds and publishes it again.
 */
export function retainedIsCurrent(retained: Buffer, kind: DeviceKind, version: number, s: DeviceSettings, b: HeldBinding): boolean {
  let held: unknown;
  try {
    held = JSON.parse(retained.toString('utf8'));
  } catch {
    return false;
  }
  if (held === null || typeof held !== 'object') return false;
  const rest: Record<string, unknown> = { ...held };
  delete rest['offline'];
  return JSON.stringify(rest) === JSON.stringify(configPayload(kind, version, s, b));
}

export const STATUSES = {
  transmitter: ['CONNECTING', 'ONLINE', 'PLAYING', 'UPDATING', 'STREAM_ERROR', 'CONFIG_ERROR', 'OFFLINE'],
  stream_player: ['CONNECTING', 'ONLINE', 'PLAYING', 'UPDATING', 'STREAM_ERROR', 'CONFIG_ERROR', 'OFFLINE', 'UNBOUND', 'MUTED'],
} as const satisfies Record<DeviceKind, readonly string[]>;

export function isStatusOf(kind: DeviceKind, status: string): boolean {
  return (STATUSES[kind] as readonly string[]).includes(status);
}

/** Typed device payloads; their shapes are validated at the broker edge (broker/payloads.ts). */
export interface StatusReport {
  v: '1.0';
  status: string;
  prev?: string | undefined;
  reason?: string | undefined;
  fw?: string | undefined;
  mac?: string | undefined;
  ssid?: string | undefined;
  ip?: string | undefined;
  rssi?: number | undefined;
  temp_c?: number | undefined;
  uptime_s?: number | undefined;
  config_version?: number | undefined;
  detail?: Record<string, unknown> | undefined;
  ts: number;
}

export interface HeartbeatReport {
  v: '1.0';
  status: string;
  rssi?: number | undefined;
  ip?: string | undefined;
  uptime_s?: number | undefined;
  free_heap?: number | undefined;
  volume?: number | undefined;
  config_version?: number | undefined;
  ts: number;
}

export interface LogReport {
  v: '1.0';
  level: string;
  msg: string;
  ts: number;
}

/** A hardware revision as devices report it (pairing, get_state): short, and safe in a path. */
export const HW_REV = /^[A-Za-z0-9._-]{1,64}$/;
