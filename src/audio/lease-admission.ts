import type { DeviceInfo } from '../devices/devices.ts';
import type { Lease } from '../devices/entitlement.ts';
import type { LeaseClaims } from '../devices/leases.ts';
import type { MembershipStatus } from '../mosques/memberships.ts';

/**
 * The one rule for a presented entitlement lease (SECURITY.md, "The audio gate"; docs/api.md, "Recorded azaan"):
 * every door that takes a lease (Icecast's listener_add, the recorded azaan's download, any later one) asks
 * `admitLease` and only maps its outcome, so a lease one door refuses no other door admits, for the same reason.
 */
export type LeaseRefusal =
  | 'bad_lease' | 'other_mosque' | 'lease_expired' | 'unknown_device' | 'not_a_player' | 'device_disabled'
  | 'membership_not_approved' | 'lease_superseded';

export type LeaseAdmission = { ok: true; deviceId: string; expiresAt: number } | { ok: false; reason: LeaseRefusal; deviceId?: string };

/** What the rule is decided from: memory (devices, leases) and the store (memberships), read when asked. */
export interface LeaseFacts {
  nowSeconds: number;
  /** The claims of a lease the lease key signed (src/devices/leases.ts), null for anything else. */
  verifyLease(token: string): LeaseClaims | null;
  device(id: string): DeviceInfo | null;
  /** The lease token the player holds now for this mosque, unexpired (null: none; it was dropped, or never issued). */
  heldLease(deviceId: string, mosqueId: string): string | null;
  membershipStatus(mosqueId: string, userId: string): Promise<MembershipStatus | null>;
}

/** The facts from the device plane's ports (src/devices/device-plane.ts `ports.audio`) at this moment. */
export function leaseFacts(deps: {
  nowSeconds: number;
  verifyLease: LeaseFacts['verifyLease'];
  device: LeaseFacts['device'];
  lease: (deviceId: string) => Lease | null;
  membershipStatus: LeaseFacts['membershipStatus'];
}): LeaseFacts {
  return {
    nowSeconds: deps.nowSeconds,
    verifyLease: deps.verifyLease,
    device: deps.device,
    heldLease: (deviceId, mosqueId) => {
      const lease = deps.lease(deviceId);
      return lease && lease.mosqueId === mosqueId && lease.expiresAt > deps.nowSeconds ? lease.token : null;
    },
    membershipStatus: deps.membershipStatus,
  };
}

/**
 * Whether `token` admits its player to `mosqueId` now. The signature and claims first (what the token says), then
 * the player's standing now (a lease alone is not enough: a ban after it was issued closes the door at once), and
 * last that it is the very lease the player holds: one a rotated password superseded, or the entitlement
 * dropped, is refused though its signature and expiry still hold.
 */
export async function admitLease(token: string, mosqueId: string, facts: LeaseFacts): Promise<LeaseAdmission> {
  const claims = facts.verifyLease(token);
  if (!claims) return { ok: false, reason: 'bad_lease' };
  const deviceId = claims.sub;
  if (claims.mosqueId !== mosqueId) return { ok: false, reason: 'other_mosque', deviceId };
  if (claims.exp <= facts.nowSeconds) return { ok: false, reason: 'lease_expired', deviceId };
  const device = facts.device(deviceId);
  if (!device) return { ok: false, reason: 'unknown_device', deviceId };
  const standing = await playerStanding(device, mosqueId, facts);
  if (standing) return { ok: false, reason: standing, deviceId };
  if (facts.heldLease(deviceId, mosqueId) !== token) return { ok: false, reason: 'lease_superseded', deviceId };
  return { ok: true, deviceId, expiresAt: claims.exp };
}

/**
 * A player's own standing for a mosque now (docs/api.md, "Devices, from the app's side": enabled, bound to the
 * mosque, its owner's membership approved): null when it may listen. Also what an admitted listener is rechecked by.
 */
export async function playerStanding(device: DeviceInfo, mosqueId: string, facts: Pick<LeaseFacts, 'membershipStatus'>): Promise<LeaseRefusal | null> {
  if (device.kind !== 'stream_player') return 'not_a_player';
  if (!device.enabled) return 'device_disabled';
  if (device.mosqueId !== mosqueId) return 'other_mosque';
  if (!device.ownerUserId || (await facts.membershipStatus(mosqueId, device.ownerUserId)) !== 'approved') return 'membership_not_approved';
  return null;
}
