import type { Db } from '../platform/db.ts';
import type { ActivityLog } from './activity.ts';
import { toFlags, type Actor, type AdminFlags, type AdminRow, type AdminStore } from './admins.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import type { Memberships } from './memberships.ts';
import type { MosqueFields, MosqueRow, MosqueStore } from './mosques.ts';
import type { UserStore } from '../people/users.ts';
import { identifierHash } from '../platform/identifiers.ts';
import { claimUnclaimed, type AddressGrants, type NewGrant } from './address-grants.ts';

const ALL_FLAGS: AdminFlags = { is_owner: true, can_trigger: true, can_manage: true };

export interface AdminChange {
  can_trigger?: boolean;
  can_manage?: boolean;
  is_owner?: boolean;
}

/**
 * Mosques and their admins, each change with its activity entry in the same transaction.
 * Owner rules: a mosque always keeps exactly one owner; only a superadmin lowers the owner's flags;
 * ownership moves by setting is_owner on another admin (the owner or a superadmin may).
 */
/** Who a new owner or admin is: an account by id, or an address (docs/api.md, "Addresses: claims and proof"). */
export type Grantee = { userId: string } | { email: string };

export function createMosqueOps(deps: { db: Db; mosques: MosqueStore; admins: AdminStore; users: UserStore; activity: ActivityLog; memberships: Memberships;
  grants: AddressGrants;
  /** Called just before a mosque is deleted; the function it returns runs just after. */
  beforeDelete?: (mosqueId: string) => (() => void) | void;
  /** Told after a mosque's fields change (its devices' configs carry its stream). */
  onUpdated?: (before: MosqueRow, after: MosqueRow) => void;
}) {
  const { db, mosques, admins, activity } = deps;
  const tx = <T>(fn: () => T): T => db.transaction(fn)();

  function transferOwnership(mosqueId: string, to: AdminRow, actor: Actor): AdminRow {
    const current = admins.listForMosque(mosqueId).find((a) => a.is_owner === 1);
    if (current) admins.setFlags(mosqueId, current.user_id, { ...toFlags(current), is_owner: false });
    const owner = admins.setFlags(mosqueId, to.user_id, ALL_FLAGS);
    activity.recordSync({ mosqueId, actorUserId: actor.id, kind: 'admin.owner_changed', subjectId: to.user_id, data: { from: current?.user_id ?? null } });
    return owner;
  }

  /** The account a grantee names now: by id as given, by email only the account that proved it. */
  const accountOf = (who: Grantee): string | null =>
    'userId' in who ? who.userId : deps.users.findProvenHolder(identifierHash(who.email))?.id ?? null;

  function waitOn(mosqueId: string, email: string, grant: NewGrant, actor: Actor): void {
    claimUnclaimed(deps.users, { channel: 'email', email });
    deps.grants.add(mosqueId, identifierHash(email), grant, actor.id);
  }

  return {
    /** An owner named by an address nobody has proven waits on it: the mosque has no owner until someone proves it. */
    create(fields: MosqueFields, owner: Grantee | null, actor: Actor): Result<MosqueRow> {
      const ownerUserId = owner ? accountOf(owner) : null;
      if (owner && 'userId' in owner && !deps.users.findById(owner.userId)) return fail('not_found', 'No user has that owner_user_id.');
      return ok(tx(() => {
        const mosque = mosques.create(fields);
        activity.recordSync({ mosqueId: mosque.id, actorUserId: actor.id, kind: 'mosque.created', subjectId: mosque.id, data: { name: mosque.name } });
        if (owner && 'email' in owner && !ownerUserId) waitOn(mosque.id, owner.email, { kind: 'owner' }, actor);
        if (ownerUserId) {
          admins.insert(mosque.id, ownerUserId, ALL_FLAGS);
          activity.recordSync({ mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.added', subjectId: ownerUserId, data: { ...ALL_FLAGS } });
          deps.memberships.admitAdmin(mosque.id, ownerUserId, actor.id);
        }
        return mosque;
      }));
    },

    update(mosque: MosqueRow, fields: Partial<MosqueFields>, actor: Actor): MosqueRow {
      const updated = tx(() => {
        const row = mosques.update(mosque.id, fields);
        activity.recordSync({ mosqueId: mosque.id, actorUserId: actor.id, kind: 'mosque.updated', subjectId: mosque.id, data: { fields: Object.keys(fields) } });
        return row;
      });
      deps.onUpdated?.(mosque, updated);
      return updated;
    },

    rotateJoinCode(mosque: MosqueRow, actor: Actor): MosqueRow {
      return tx(() => {
        const updated = mosques.rotateJoinCode(mosque.id);
        activity.recordSync({ mosqueId: mosque.id, actorUserId: actor.id, kind: 'mosque.join_code_rotated', subjectId: mosque.id });
        return updated;
      });
    },

    delete(mosque: MosqueRow): void {
      const after = deps.beforeDelete?.(mosque.id);
      mosques.delete(mosque.id);
      after?.();
    },

    /** An admin named by an address nobody has proven waits on it (`waiting`), with the flags asked. */
    addAdmin(mosque: MosqueRow, who: Grantee, flags: { can_trigger: boolean; can_manage: boolean }, actor: Actor): Result<AdminRow | 'waiting'> {
      const userId = accountOf(who);
      if (!userId && 'email' in who) {
        tx(() => waitOn(mosque.id, who.email, { kind: 'admin', canTrigger: flags.can_trigger, canManage: flags.can_manage }, actor));
        return ok('waiting');
      }
      if (!userId || !deps.users.findById(userId)) return fail('not_found', 'No user has that user_id.');
      if (admins.find(mosque.id, userId)) return fail('conflict', 'That user is already an admin of this mosque.');
      return ok(tx(() => {
        const row = admins.insert(mosque.id, userId, { is_owner: false, ...flags });
        activity.recordSync({ mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.added', subjectId: userId, data: flags });
        // Removing the admin row later leaves this membership as it is (docs/decisions.md, "Owners and admins are members").
        deps.memberships.admitAdmin(mosque.id, userId, actor.id);
        return row;
      }));
    },

    updateAdmin(mosque: MosqueRow, userId: string, change: AdminChange, actor: Actor & { isOwner: boolean }): Result<AdminRow> {
      const row = admins.find(mosque.id, userId);
      if (!row) return fail('not_found');
      const lowersOwner = row.is_owner === 1 && (change.can_trigger === false || change.can_manage === false);
      if (lowersOwner && !actor.isSuperadmin) return fail('forbidden', 'Only a superadmin may demote the owner.');
      if (row.is_owner === 1 && change.is_owner === false) {
        return fail('conflict', 'A mosque always keeps one owner: make another admin the owner instead.');
      }
      const transfers = change.is_owner === true && row.is_owner === 0;
      if (transfers && !actor.isSuperadmin && !actor.isOwner) return fail('forbidden', 'Only the owner or a superadmin may hand over ownership.');
      return ok(tx(() => {
        let updated = admins.setFlags(mosque.id, userId, {
          is_owner: row.is_owner === 1,
          can_trigger: change.can_trigger ?? row.can_trigger === 1,
          can_manage: change.can_manage ?? row.can_manage === 1,
        });
        activity.recordSync({ mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.updated', subjectId: userId, data: { ...change } });
        if (transfers) updated = transferOwnership(mosque.id, updated, actor);
        return updated;
      }));
    },

    removeAdmin(mosque: MosqueRow, userId: string, actor: Actor): Result<void> {
      const row = admins.find(mosque.id, userId);
      if (!row) return fail('not_found');
      if (row.is_owner === 1) {
        if (!actor.isSuperadmin) return fail('forbidden', 'Only a superadmin may remove the owner.');
        return fail('conflict', 'A mosque always keeps one owner: make another admin the owner first.');
      }
      tx(() => {
        admins.remove(mosque.id, userId);
        activity.recordSync({ mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.removed', subjectId: userId });
      });
      return ok(undefined);
    },
  };
}

export type MosqueOps = ReturnType<typeof createMosqueOps>;
