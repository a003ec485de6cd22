import type { Memberships } from '../../mosques/memberships.ts';
import type { BeforeUserDelete } from '../../people/admin/user-admin.ts';
import type { DevicePlane } from '../device-plane.ts';

/**
 * The story of an account deleted by a superadmin (`DELETE /api/v1/users/{id}`, docs/openapi.json), told by
 * src/people/admin/user-admin.ts around its delete (the database removes the memberships, admin rows and devices with the row):
 * 1. before: each mosque's activity feed notes the membership that goes, and its listeners hear of it;
 *    the devices the account owns are listed;
 * 2. after: those devices are cut off and forgotten (their connections close, their caches let go).
 */
export function accountDeletionStory(deps: { memberships: Pick<Memberships, 'noteUserDeleted'>; plane: Pick<DevicePlane, 'beforeUserDelete'> }): BeforeUserDelete {
  return async (userId, actorId) => {
    await deps.memberships.noteUserDeleted(userId, actorId);
    return deps.plane.beforeUserDelete(userId);
  };
}
