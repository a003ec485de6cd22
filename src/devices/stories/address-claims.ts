import type { ActivityLog } from '../../mosques/activity.ts';
import type { AddressGrants } from '../../mosques/address-grants.ts';
import type { AdminStore } from '../../mosques/admins.ts';
import type { Memberships } from '../../mosques/memberships.ts';
import type { AddressProven } from '../../people/addresses/address-proof.ts';
import type { DevicePlane } from '../device-plane.ts';
import type { Store } from '../../platform/store/store.ts';
import { transact } from '../../mosques/work.ts';


/**
 * The story of an address proven for the first time, or of an account letting its last proven address go
 * (docs/api.md, "Addresses: claims and proof"), told by src/people/addresses/address-proof.ts after its commit:
 * whatever a revoked account holds goes (its push subscriptions, its devices cut off at once, its memberships and
 * admin rows removed, each noted in the mosque's activity feed with the event's reason); then what waited on a
 * proven address is given to the account that proved it.
 */
export function createAddressClaims(deps: {
  store: Store;
  grants: AddressGrants;
  memberships: Memberships;
  admins: AdminStore;
  activity: ActivityLog;
  plane: Pick<DevicePlane, 'removeOwnedBy'>;
  /** The account's Web Push subscriptions end (a later domain's store, handed in by src/service.ts). */
  forgetPushSubscriptions: (userId: string) => Promise<void>;
}) {
  async function revokeGains(userId: string, reason: string): Promise<void> {
    // Push first: an azaan or alert sent meanwhile must not reach a browser of whoever held the account before.
    await deps.forgetPushSubscriptions(userId);
    // Each device's feed entry is written in its delete's transaction (the plane notes it with the reason).
    await deps.plane.removeOwnedBy(userId, reason);
    for (const membership of await deps.memberships.listForUser(userId)) await deps.memberships.remove(membership, null, reason);
    for (const admin of await deps.admins.listForUser(userId)) {
      await transact(deps.store, async (w) => {
        await deps.admins.remove(w, admin.mosque_id, userId);
        await deps.activity.record(w.q, { mosqueId: admin.mosque_id, actorUserId: null, kind: 'admin.removed', subjectId: userId, data: { reason, was_owner: admin.is_owner === 1 } });
      });
    }
  }

  return async (event: AddressProven): Promise<void> => {
    for (const userId of event.revoked) await revokeGains(userId, event.reason);
    if (event.addressHash !== null) await deps.grants.giveAll(event.addressHash, event.userId);
  };
}
