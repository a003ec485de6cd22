import type { Config } from '../platform/config.ts';
import type { Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { Store } from '../platform/store/store.ts';
import type { ChangePublisher } from '../platform/changes.ts';
import type { Faults } from '../platform/faults.ts';
import type { Duties } from '../platform/store/duties.ts';
import { deriveKey } from '../platform/secrets.ts';
import type { People } from '../people/build.ts';
import type { PasswordHasher } from '../people/passwords.ts';
import { createUserAdmin } from '../people/admin/user-admin.ts';
import type { Mosques } from '../mosques/build.ts';
import type { MosqueRow } from '../mosques/mosques.ts';
import { createDevicePlane } from './device-plane.ts';
import { createPairings } from './pairing/pairing.ts';
import { createPresenceStory, type DeviceStatusEvent } from './stories/presence.ts';
import { membershipStory } from './stories/membership.ts';
import { accountDeletionStory } from './stories/account-deletion.ts';
import { followDeviceChanges } from './stories/shared-caches.ts';

/** How often expired device pairings are deleted (docs/api.md, "Pairing a device"). */
const PAIRING_PRUNE_MS = 10 * 60 * 1000;

export interface DevicesPorts {
  store: Store;
  clock: Clock;
  logger: Logger;
  faults: Faults;
  changes: ChangePublisher;
  duties: Pick<Duties, 'add'>;
  jwtSecret: string;
  hasher: PasswordHasher;
  people: Pick<People, 'users' | 'addressChange'>;
  mosques: Pick<Mosques, 'mosques' | 'admins' | 'activity' | 'memberships'>;
  /** The stream address configs carry (with ICECAST_URL, the mosque's mount, a player's with its lease). */
  streamUrl?: ((mosque: MosqueRow, lease: string | null) => string | null) | undefined;
  /** The mosque's open event streams (docs/api.md, "Live events of a mosque"). */
  announce: (mosqueId: string | null, event: () => DeviceStatusEvent) => void;
}

/**
 * The device plane, pairings and the devices' stories of earlier domains (docs/architecture.md, "Where each
 * story lives"): presence, a membership's change, an account's deletion (user admin is built here for it).
 */
export async function buildDevices(config: Config, p: DevicesPorts) {
  const { store, clock, mosques, people } = p;
  const plane = await createDevicePlane({
    ...(p.streamUrl && { streamUrl: p.streamUrl }),
    store, clock, config, logger: p.logger, faults: p.faults, mosques: mosques.mosques, admins: mosques.admins, activity: mosques.activity,
    membershipStatus: async (mosqueId, userId, q) => (await mosques.memberships.findFor(mosqueId, userId, q))?.status ?? null,
    membershipRemoved: (mosqueId, userId, q) => mosques.memberships.wasRemoved(mosqueId, userId, q),
    changes: p.changes, duties: p.duties,
  });
  const pairings = createPairings({
    store, clock, key: deriveKey(p.jwtSecret, 'device-pairing'), maxPending: config.pairing.maxPending,
    verbs: plane, mosques: mosques.mosques, admins: mosques.admins,
  });
  // Starts prune too; this clears what expired while nobody started one (once across nodes).
  p.duties.add('pairing prune', PAIRING_PRUNE_MS, () => pairings.prune());
  const presence = createPresenceStory({ plane, announce: p.announce, clock });
  plane.onStatusChange(presence.statusChanged);
  mosques.memberships.listen(membershipStory(plane));
  const userAdmin = createUserAdmin({
    users: people.users, admins: mosques.admins, hasher: p.hasher, addressChange: people.addressChange,
    beforeDelete: accountDeletionStory({ memberships: mosques.memberships, plane }),
  });
  return {
    plane, pairings, userAdmin,
    /** Another process changed a device: this one's caches follow (src/devices/stories/shared-caches.ts). */
    followChanges: followDeviceChanges(plane, (what, err) => void p.faults.report(what, err)),
    /**
     * Memory mode: every retained config is rebuilt before the broker listens. With REDIS_URL the configs outlive
     * this process in Redis; a pass here would push every one through the shared pub/sub to the devices connected
     * to the other processes (docs/decisions.md, "Device configs are rebuilt at start, not on connect").
     */
    async start(): Promise<void> {
      if (!config.redisUrl) {
        const startedAt = performance.now();
        const retained = await plane.retainAllConfigs();
        p.logger.info({ devices: retained.devices, leases_renewed: retained.renewed, ms: Math.round(performance.now() - startedAt) }, 'device configs retained');
      }
      plane.start();
    },
  };
}
