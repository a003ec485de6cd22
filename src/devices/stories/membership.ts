import type { MembershipChange } from '../../mosques/memberships.ts';
import type { DevicePlane } from '../device-plane.ts';

/**
 * The story of a member approved, banned, rejected or removed (docs/api.md, "Memberships"), told by
 * src/mosques/memberships.ts after the commit: the member's stream players in that mosque whose lease no
 * longer matches their standing get their new config at once (the plane's `membershipChanged`), so a ban
 * takes a player off the air without waiting for its lease to run out.
 */
export function membershipStory(plane: Pick<DevicePlane, 'membershipChanged'>): (change: MembershipChange) => void {
  return (change) => plane.membershipChanged(change);
}
