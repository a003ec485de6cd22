import type { Decision } from './entitlement.ts';

export type PlaybackState = 'playing' | 'ready' | 'muted' | 'unbound' | 'updating' | 'connecting' | 'error' | 'offline' | 'unknown';

export interface WhyFacts {
  kind: 'transmitter' | 'stream_player';
  enabled: boolean;
  mosqueId: string | null;
  /** Entitlement from the store (players only). */
  decision: Decision | null;
  membershipStatus: string | null;
  leaseExpiresAt: number | null;
  connected: boolean;
  lastSeenAt: number | null;
  status: string;
  statusReason: string | null;
  statusDetail: Record<string, unknown>;
  now: number;
}

export interface WhyAnswer {
  effective_playback_state: PlaybackState;
  deciding_field: string;
  reason: string;
  detail: Record<string, unknown>;
}

const BY_STATUS: Record<string, PlaybackState> = {
  PLAYING: 'playing',
  ONLINE: 'ready',
  MUTED: 'muted',
  UNBOUND: 'unbound',
  UPDATING: 'updating',
  CONNECTING: 'connecting',
  STREAM_ERROR: 'error',
  CONFIG_ERROR: 'error',
  OFFLINE: 'offline',
  UNKNOWN: 'unknown',
};

/** Every time in an HTTP body is ISO-8601 UTC (docs/api.md, "Base URL and conventions"); the facts carry Unix seconds. */
const isoOf = (seconds: number | null): string | null => (seconds === null ? null : new Date(seconds * 1000).toISOString());

/**
 * GET /devices/{id}/why: the first fact in the chain that decides, in this order (test/unit/why.test.ts holds it):
 * device enabled -> mosque binding -> membership -> lease -> presence/last_seen -> last status -> last error.
 * Pure: every fact is passed in, so each link is table-tested.
 */
export function explain(f: WhyFacts): WhyAnswer {
  const detail = {
    kind: f.kind, enabled: f.enabled, mosque_id: f.mosqueId, membership_status: f.membershipStatus,
    lease_expires_at: isoOf(f.leaseExpiresAt), connected: f.connected, last_seen_at: isoOf(f.lastSeenAt), status: f.status, status_reason: f.statusReason,
  };
  const answer = (state: PlaybackState, field: string, reason: string): WhyAnswer => ({ effective_playback_state: state, deciding_field: field, reason, detail });

  if (!f.enabled) return answer('unbound', 'device.enabled', 'device_disabled');
  if (f.mosqueId === null) return answer(f.kind === 'transmitter' ? 'unknown' : 'unbound', 'device.mosque_id', 'no_mosque');
  if (f.kind === 'stream_player' && f.decision && !f.decision.entitled) return answer('unbound', f.decision.decidingField, f.decision.reason);
  if (f.kind === 'stream_player' && (f.leaseExpiresAt === null || f.leaseExpiresAt <= f.now)) {
    // Entitled in the store, but the player holds no valid lease: it was offline when the old one ran out.
    return answer('unbound', 'lease.expires_at', 'lease_expired');
  }
  if (!f.connected && (f.status === 'OFFLINE' || f.status === 'UNKNOWN' || f.lastSeenAt === null)) {
    return answer(f.status === 'UNKNOWN' ? 'unknown' : 'offline', 'device.last_seen_at', f.statusReason ?? (f.lastSeenAt === null ? 'never_seen' : 'disconnected'));
  }
  const state = BY_STATUS[f.status] ?? 'unknown';
  if (state === 'error') {
    const error = typeof f.statusDetail.error === 'string' ? f.statusDetail.error : f.statusReason ?? f.status.toLowerCase();
    return answer('error', 'device.status_detail.error', error);
  }
  return answer(state, 'device.status', f.statusReason ?? f.status.toLowerCase());
}
