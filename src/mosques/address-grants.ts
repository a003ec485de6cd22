import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { ActivityLog } from './activity.ts';
import type { AdminStore } from './admins.ts';
import type { Memberships } from './memberships.ts';
import { identifierHash, syntheticEmailForPhone } from '../platform/identifiers.ts';
import type { UserStore } from '../people/users.ts';

export type GrantKind = 'membership' | 'admin' | 'owner';

export interface AddressGrantRow {
  id: string;
  mosque_id: string;
  address_hash: string;
  kind: GrantKind;
  status: 'pending' | 'approved' | null;
  can_trigger: number;
  can_manage: number;
  invite_id: string | null;
  granted_by: string | null;
  created_at: number;
}

export type Contact = { channel: 'email'; email: string } | { channel: 'whatsapp'; phone: string };

/**
 * An account for an address nobody claims yet (an invitation creates the user if needed: docs/api.md, "Invitations"): no
 * password and nothing in it, so only whoever proves the address, with a sign-in code sent to it, gets in.
 */
export function claimUnclaimed(users: UserStore, contact: Contact): void {
  const hash = identifierHash(contact.channel === 'email' ? contact.email : contact.phone);
  if (users.findByIdentifierHash(hash)) return;
  if (contact.channel === 'email') {
    users.create({ email: contact.email, emailHash: hash, phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' });
    return;
  }
  const email = syntheticEmailForPhone(hash);
  users.create({ email, emailHash: identifierHash(email), phone: contact.phone, phoneHash: hash, passwordBcrypt: null, role: 'member' });
}

export type NewGrant =
  | { kind: 'membership'; status: 'pending' | 'approved'; inviteId: string }
  | { kind: 'admin'; canTrigger: boolean; canManage: boolean }
  | { kind: 'owner' };

/**
 * What is addressed to an email or phone that no account has proven waits here, on the address
 * (docs/api.md, "Addresses: claims and proof"), and goes to the first account that proves it.
 */
export function createAddressGrants(deps: { db: Db; clock: Clock; activity: ActivityLog; memberships: Memberships; admins: AdminStore }) {
  const { db, activity, admins } = deps;
  const insert = db.prepare(
    `INSERT INTO address_grants (id, mosque_id, address_hash, kind, status, can_trigger, can_manage, invite_id, granted_by, created_at)
     VALUES (@id, @mosque_id, @address_hash, @kind, @status, @can_trigger, @can_manage, @invite_id, @granted_by, @created_at)`,
  );
  const ofAddress = db.prepare<[string], AddressGrantRow>('SELECT * FROM address_grants WHERE address_hash = ? ORDER BY created_at, id');
  const removeOfAddress = db.prepare('DELETE FROM address_grants WHERE address_hash = ?');
  const waitingOfMosque = db.prepare<[string], AddressGrantRow>('SELECT * FROM address_grants WHERE mosque_id = ? ORDER BY created_at, id');
  const inviteGranted = db.prepare('UPDATE invites SET user_id = ? WHERE id = ? AND user_id IS NULL');
  const hasOwner = db.prepare<[string], { one: number }>('SELECT 1 AS one FROM mosque_admins WHERE mosque_id = ? AND is_owner = 1');
  const bit = (b: boolean) => (b ? 1 : 0);

  /** Gives one grant to the account; what it cannot give (a ban stands, the mosque has an owner) it gives as far as it can. */
  function give(grant: AddressGrantRow, userId: string): void {
    const actor = grant.granted_by;
    if (grant.kind === 'membership') {
      const given = deps.memberships.invite(grant.mosque_id, userId, grant.status === 'approved', actor);
      if (grant.invite_id) inviteGranted.run(userId, grant.invite_id);
      if (!given.ok) activity.recordSync({ mosqueId: grant.mosque_id, actorUserId: null, kind: 'invite.refused', subjectId: grant.invite_id, data: { user_id: userId, reason: 'banned' } });
      return;
    }
    const owner = grant.kind === 'owner' && !hasOwner.get(grant.mosque_id);
    const flags = {
      is_owner: owner,
      can_trigger: grant.kind === 'owner' || grant.can_trigger === 1,
      can_manage: grant.kind === 'owner' || grant.can_manage === 1,
    };
    const current = admins.find(grant.mosque_id, userId);
    if (current) {
      admins.setFlags(grant.mosque_id, userId, {
        is_owner: current.is_owner === 1 || flags.is_owner,
        can_trigger: current.can_trigger === 1 || flags.can_trigger,
        can_manage: current.can_manage === 1 || flags.can_manage,
      });
    } else {
      admins.insert(grant.mosque_id, userId, flags);
    }
    activity.recordSync({ mosqueId: grant.mosque_id, actorUserId: actor, kind: 'admin.added', subjectId: userId, data: { ...flags, by_address: true } });
    deps.memberships.admitAdmin(grant.mosque_id, userId, actor);
  }

  return {
    /** Records a grant that waits on `addressHash`; the activity feed says so (without the address). */
    add(mosqueId: string, addressHash: string, grant: NewGrant, actorId: string | null): string {
      const id = crypto.randomUUID();
      insert.run({
        id, mosque_id: mosqueId, address_hash: addressHash, kind: grant.kind,
        status: grant.kind === 'membership' ? grant.status : null,
        can_trigger: grant.kind === 'admin' ? bit(grant.canTrigger) : 0,
        can_manage: grant.kind === 'admin' ? bit(grant.canManage) : 0,
        invite_id: grant.kind === 'membership' ? grant.inviteId : null,
        granted_by: actorId, created_at: toUnixSeconds(deps.clock()),
      });
      activity.recordSync({ mosqueId, actorUserId: actorId, kind: 'grant.waiting', subjectId: id, data: { kind: grant.kind } });
      return id;
    },

    /** Grants of a mosque still waiting for their address to be proven. */
    listWaiting: (mosqueId: string) => waitingOfMosque.all(mosqueId),

    /** The account just proved `addressHash`: everything that waited on it is its own now. */
    giveAll(addressHash: string, userId: string): number {
      return db.transaction(() => {
        const grants = ofAddress.all(addressHash);
        removeOfAddress.run(addressHash);
        for (const grant of grants) give(grant, userId);
        return grants.length;
      })();
    },
  };
}

export type AddressGrants = ReturnType<typeof createAddressGrants>;
