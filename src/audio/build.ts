import type { Config } from '../platform/config.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { Store } from '../platform/store/store.ts';
import { deriveKey } from '../platform/secrets.ts';
import type { Mosques } from '../mosques/build.ts';
import type { DevicePlane } from '../devices/device-plane.ts';
import type { AudioServer } from './audio-server.ts';
import { createAudio, type Audio } from './audio.ts';
import { createRecordings, leaseAdmission } from './recordings.ts';
import { leaseFacts } from './lease-admission.ts';

export interface AudioPorts {
  store: Store;
  clock: Clock;
  logger: Logger;
  jwtSecret: string;
  mosques: Pick<Mosques, 'mosques' | 'admins' | 'memberships' | 'activity'>;
  plane: Pick<DevicePlane, 'ports'>;
  /** Icecast's admin API (icecast/, handed in by the service) when ICECAST_URL is set; else null and no gate. */
  server: AudioServer | null;
  onError: (what: string, err: unknown) => void;
}

/** The gated audio server (when ICECAST_URL is set) and the recorded azaan with its download's lease rule. */
export function buildAudio(config: Config, p: AudioPorts) {
  const { plane, mosques, clock } = p;
  const recordings = createRecordings({ store: p.store, clock, activity: mosques.activity });
  const membershipStatus = async (mosqueId: string, userId: string) => (await mosques.memberships.findFor(mosqueId, userId))?.status ?? null;
  // Started once the plane runs (src/service.ts, "Start"); built here because the schedule asks it what was on air.
  const audio = p.server ? buildGate(config, { ...p, server: p.server }, membershipStatus) : null;
  // Players fetch the recorded azaan with their lease, by the rule the Icecast listener gate applies (src/audio/lease-admission.ts).
  const admitRecording = leaseAdmission(() => leaseFacts({
    nowSeconds: toUnixSeconds(clock()), verifyLease: plane.ports.audio.verifyLease, device: plane.ports.audio.devices.info, lease: plane.ports.audio.lease,
    membershipStatus,
  }));
  return { audio, recordings, admitRecording };
}

/**
 * The audio gate when ICECAST_URL is set (docs/operator.md#audio-icecast): Icecast's admin API behind the
 * AudioServer port, and the facts admission is decided from, read from memory and the store when asked.
 */
function buildGate(
  config: Config, p: AudioPorts & { server: AudioServer }, membershipStatus: Parameters<typeof createAudio>[0]['membershipStatus'],
): Audio | null {
  if (!config.icecast) return null;
  const { mosques, plane } = p;
  return createAudio({
    store: p.store, clock: p.clock, logger: p.logger, onError: p.onError,
    server: p.server,
    publicBase: config.icecast.url,
    ticketKey: deriveKey(p.jwtSecret, 'listen-tickets'),
    retentionDays: config.deviceEventsRetentionDays,
    mosqueExists: async (id) => (await mosques.mosques.findById(id)) !== null,
    devices: plane.ports.audio.devices,
    verifyLease: plane.ports.audio.verifyLease,
    lease: plane.ports.audio.lease,
    membershipStatus,
    isAdmin: async (mosqueId, userId) => (await mosques.admins.find(mosqueId, userId)) !== null,
  });
}
