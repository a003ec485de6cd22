/**
 * Pure rules over the config a device receives (docs/firmware.md, "4.1 Config" and "5. The lease"): its shape,
 * entitlement, the reason a player is unbound, and quiet hours. Time comes in as an argument.
 */
import type { DeviceConfig, DeviceKind, DeviceLease } from './types.ts';

/** docs/firmware.md, "3.2 Heartbeat": the defaults and minimums of heartbeat_secs. */
export const DEFAULT_HEARTBEAT_S: Record<DeviceKind, number> = { transmitter: 60, stream_player: 300 };
export const MIN_HEARTBEAT_S: Record<DeviceKind, number> = { transmitter: 15, stream_player: 60 };
export const UNBOUND_REASONS = ['awaiting_approval', 'membership_lapsed', 'no_mosque', 'lease_expired'] as const;

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
export const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);
const HHMM = /^([01]\d|2[0-3]):([0-5]\d)$/;

/** The keys a config cannot be applied with (docs/firmware.md, "4.1 Config": CONFIG_ERROR names them), or null. */
export function validateConfig(v: unknown): { keys: string[]; error: string } | null {
  if (!isObject(v)) return { keys: [], error: 'not_an_object' };
  const bad: string[] = [];
  if (!isInt(v['config_version']) || v['config_version'] < 0) bad.push('config_version');
  const optional = (key: string, ok: (x: unknown) => boolean): void => {
    if (v[key] !== undefined && !ok(v[key])) bad.push(key);
  };
  optional('v', (x) => typeof x === 'string');
  optional('heartbeat_secs', (x) => isInt(x) && x > 0);
  optional('log_enabled', (x) => typeof x === 'boolean');
  optional('volume', (x) => isInt(x) && x >= 0 && x <= 100);
  optional('quiet_hours', (x) => x === null || (isObject(x) && (quietHoursOf(x) !== null || (x['start'] === undefined && x['end'] === undefined))) || Array.isArray(x));
  optional('mosque_id', (x) => x === null || typeof x === 'string');
  optional('stream_url', (x) => x === null || typeof x === 'string');
  optional('unbound_reason', (x) => x === null || typeof x === 'string');
  optional('lease', (x) => x === null || (isObject(x) && typeof x['token'] === 'string' && Number.isFinite(leaseExpiresMs(x as unknown as DeviceLease))));
  return bad.length ? { keys: bad, error: 'invalid_value' } : null;
}

/** Lease expiry in ms. The contract says Unix seconds; an ISO string or a millisecond figure is tolerated. */
export function leaseExpiresMs(lease: { expires_at: unknown }): number {
  const e = lease.expires_at;
  if (typeof e === 'number') return e > 1e12 ? e : e * 1000;
  if (typeof e === 'string') return Date.parse(e);
  return Number.NaN;
}

/** The claims of a JWT, unverified (the device only reads mosque_id from it as a fallback). */
export function jwtClaims(token: string): Record<string, unknown> | null {
  const part = token.split('.')[1];
  if (!part) return null;
  try {
    const claims: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return isObject(claims) ? claims : null;
  } catch {
    return null;
  }
}

/** docs/firmware.md, "4.1 Config": a player is entitled while its config carries stream_url and a live lease. */
export function isEntitled(kind: DeviceKind, cfg: DeviceConfig | null, unbindFloor: number, nowMs: number): boolean {
  if (!cfg || kind !== 'stream_player') return false;
  if (cfg.config_version <= unbindFloor) return false;
  if (typeof cfg.stream_url !== 'string' || cfg.stream_url === '') return false;
  const lease = cfg.lease;
  if (!lease || typeof lease.token !== 'string' || lease.token === '') return false;
  return leaseExpiresMs(lease) > nowMs;
}

/** docs/firmware.md, "3.1 Status": the UNBOUND reason is copied from the config's unbound_reason. */
export function unboundReason(cfg: DeviceConfig | null, unbindFloor: number, nowMs: number): string {
  if (!cfg || cfg.config_version <= unbindFloor) return 'no_mosque';
  if (typeof cfg.unbound_reason === 'string' && cfg.unbound_reason !== '') return cfg.unbound_reason;
  if (typeof cfg.mosque_id !== 'string' || cfg.mosque_id === '') return 'no_mosque';
  if (typeof cfg.stream_url === 'string' && cfg.stream_url !== '' && cfg.lease && leaseExpiresMs(cfg.lease) <= nowMs) return 'lease_expired';
  return 'awaiting_approval';
}

export function mosqueOf(cfg: DeviceConfig): string | null {
  if (typeof cfg.mosque_id === 'string' && cfg.mosque_id !== '') return cfg.mosque_id;
  const claim = cfg.lease ? jwtClaims(cfg.lease.token)?.['mosque_id'] : undefined;
  return typeof claim === 'string' && claim !== '' ? claim : null;
}

export interface QuietHours {
  start: string;
  end: string;
}

function quietHoursOf(x: unknown): QuietHours | null {
  if (!isObject(x) || typeof x['start'] !== 'string' || typeof x['end'] !== 'string') return null;
  return HHMM.test(x['start']) && HHMM.test(x['end']) ? { start: x['start'], end: x['end'] } : null;
}

const minutesOf = (hhmm: string): number => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

/**
 * Why the player must be silent now (docs/firmware.md, "3.1 Status": MUTED, reason quiet_hours or manual), with
 * when that ends as the MUTED detail's `until`; null when it may play. Quiet hours are local wall-clock times and
 * may wrap midnight (23:00 to 05:00); a volume of 0 is the owner's mute. `local` is the device's local time.
 */
export function muteOf(cfg: DeviceConfig | null, local: Date): { reason: string; until?: string } | null {
  if (!cfg) return null;
  const qh = quietHoursOf(cfg.quiet_hours);
  if (qh && qh.start !== qh.end) {
    const now = local.getHours() * 60 + local.getMinutes();
    const [start, end] = [minutesOf(qh.start), minutesOf(qh.end)];
    const inside = start < end ? now >= start && now < end : now >= start || now < end;
    if (inside) return { reason: 'quiet_hours', until: qh.end };
  }
  if (cfg.volume === 0) return { reason: 'manual' };
  return null;
}

/** Milliseconds from `local` to the next quiet-hours edge (start or end), or null without quiet hours. */
export function msToNextQuietEdge(cfg: DeviceConfig | null, local: Date): number | null {
  const qh = cfg ? quietHoursOf(cfg.quiet_hours) : null;
  if (!qh || qh.start === qh.end) return null;
  const nowMs = (local.getHours() * 60 + local.getMinutes()) * 60_000 + local.getSeconds() * 1000 + local.getMilliseconds();
  const until = (hhmm: string): number => {
    const d = minutesOf(hhmm) * 60_000 - nowMs;
    return d > 0 ? d : d + 86_400_000;
  };
  return Math.min(until(qh.start), until(qh.end));
}

/** What get_state reports as config_schema (docs/firmware.md, "4.2 Commands"). */
export function configSchema(kind: DeviceKind): Record<string, unknown> {
  return {
    heartbeat_secs: { type: 'integer', minimum: MIN_HEARTBEAT_S[kind], default: DEFAULT_HEARTBEAT_S[kind] },
    log_enabled: { type: 'boolean', default: false },
    volume: { type: 'integer', minimum: 0, maximum: 100 },
    quiet_hours: {
      type: ['object', 'null'],
      properties: { start: { type: 'string', pattern: '^\\d{2}:\\d{2}$' }, end: { type: 'string', pattern: '^\\d{2}:\\d{2}$' } },
    },
  };
}
