import { toIsoString } from '../platform/clock.ts';
import type { DeviceStore } from '../devices/devices.ts';
import type { Entitlement } from '../devices/entitlement.ts';
import type { Telemetry } from '../devices/telemetry/telemetry.ts';

/** What readiness asks of the devices (the device plane's `ports.readiness`). */
export type ReadinessDevices = Pick<DeviceStore, 'listForMosque'> & Pick<Telemetry, 'presence' | 'lastSeenMs'> & Pick<Entitlement, 'holdsLease'>;

const ERROR_STATES = new Set(['STREAM_ERROR', 'CONFIG_ERROR']);

export interface TransmitterState {
  id: string;
  name: string | null;
  connected: boolean;
  status: string;
  /** When it was last heard from (an offline transmitter's "since"). */
  last_seen_at: string | null;
  error: string | null;
}

export interface Readiness {
  ready: boolean;
  reason: 'transmitter_offline' | 'transmitter_error' | null;
  transmitters: TransmitterState[];
  /** Stream players of the mosque that are connected and hold a lease for it now. */
  players_ready: number;
}

/**
 * Whether a mosque can sound the azaan now: a transmitter connected and not in an error state. Asked at the
 * ready and missed checks only (twice per slot), so it may read the device rows; presence is the devices
 * domain's, which every process agrees on (a transmitter connected to another process counts).
 */
export function createReadiness(devices: ReadinessDevices) {
  return async (mosqueId: string): Promise<Readiness> => {
    const rows = await devices.listForMosque(mosqueId);
    const transmitters = rows.filter((r) => r.kind === 'transmitter').map((r): TransmitterState => {
      const { connected, status } = devices.presence(r);
      const seenMs = devices.lastSeenMs(r.id);
      return {
        id: r.id, name: r.name, connected, status,
        last_seen_at: seenMs !== null ? new Date(seenMs).toISOString() : r.last_seen_at === null ? null : toIsoString(r.last_seen_at),
        error: ERROR_STATES.has(status) ? (r.status_reason ?? status) : null,
      };
    });
    const players = rows.filter((r) => r.kind === 'stream_player' && devices.presence(r).connected && devices.holdsLease(r.id, mosqueId)).length;
    const healthy = transmitters.some((t) => t.connected && t.error === null);
    const reason = healthy ? null : transmitters.some((t) => t.connected) ? 'transmitter_error' : 'transmitter_offline';
    return { ready: healthy, reason, transmitters, players_ready: players };
  };
}

export type ReadinessCheck = ReturnType<typeof createReadiness>;
