import type { ActivityLog } from '../mosques/activity.ts';
import type { AddressGrants } from '../mosques/address-grants.ts';
import type { AdminStore } from '../mosques/admins.ts';
import type { Memberships } from '../mosques/memberships.ts';
import type { AddressProven } from '../people/addresses/address-proof.ts';
import type { DevicePlane } from './device-plane.ts';
import type { Store } from '../platform/store/store.ts';
import { transact } from '../mosques/work.ts';

/** Why the feed says a membership, an admin row or a device went. */
export const CLAIM_LOST = 'address_claim_lost';

/**
 * The story of an address proven for the first time (docs/api.md, "Addresses: claims and proof"), told by
 * src/people/addresses/address-proof.ts after its commit: whatever an account gained while its claim was unproven,
 * and lost with the claim, goes (its devices cut off at once, its memberships and admin rows removed, each
 * noted in the mosque's activity feed); then what waited on the address is given to the account that proved it.
 */
export function createAddressClaims(deps: {
  store: Store;
  grants: AddressGrants;
  memberships: Memberships;
  admins: AdminStore;
  activity: ActivityLog;
  plane: Pick<DevicePlane, 'removeOwnedBy'>;
}) {
  async function revokeGains(userId: string): Promise<void> {
    // Each device's feed entry is written in its delete's transaction (the plane notes it with the reason).
    await deps.plane.removeOwnedBy(userId, CLAIM_LOST);
    for (const membership of await deps.memberships.listForUser(userId)) await deps.memberships.remove(membership, null, CLAIM_LOST);
    for (const admin of await deps.admins.listForUser(userId)) {
      await transact(deps.store, async (w) => {
        await deps.admins.remove(w, admin.mosque_id, userId);
        await deps.activity.record(w.q, { mosqueId: admin.mosque_id, actorUserId: null, kind: 'admin.removed', subjectId: userId, data: { reason: CLAIM_LOST, was_owner: admin.is_owner === 1 } });
      });
    }
  }

  return async (event: AddressProven): Promise<void> => {
    for (const userId of event.revoked) await revokeGains(userId);
    await deps.grants.giveAll(event.addressHash, event.userId);
  };
}
