import type { Store } from '../platform/store/store.ts';
import { transact, type Work } from './work.ts';
import type { ActivityLog } from './activity.ts';
import { toFlags, type Actor, type AdminFlags, type AdminRow, type AdminStore } from './admins.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import type { Memberships } from './memberships.ts';
import type { MosqueFields, MosqueRow, MosqueStore } from './mosques.ts';
import { mayHold, type UserStore } from '../people/users.ts';
import { identifierHash } from '../platform/identifiers.ts';
import { claimUnclaimed, type AddressGrants, type NewGrant } from './address-grants.ts';
import type { AfterAnswer } from '../platform/flow/after-answer.ts';

/** Why an account named by id that has proven nothing is refused a membership, an admin row or a mosque. */
export const UNPROVEN_TARGET = 'That account has not confirmed an email or phone yet, so it can hold nothing: name it by its address '
  + '(an invitation, an admin or owner by email), which waits until the address is confirmed.';

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

export function createMosqueOps(deps: { store: Store; mosques: MosqueStore; admins: AdminStore; users: UserStore; activity: ActivityLog; memberships: Memberships;
  grants: AddressGrants;
  /** Where naming an admin by email does its work: after the answer (docs/api.md, "Addresses: claims and proof"). */
  afterAnswer: AfterAnswer;
  /** Called just before a mosque is deleted; the function it returns runs just after. */
  beforeDelete?: (mosqueId: string) => Promise<(() => Promise<void>) | void> | (() => void) | void;
  /** Told after a mosque's fields change (its devices' configs carry its stream). */
  onUpdated?: (before: MosqueRow, after: MosqueRow) => Promise<void> | void;
}) {
  const { store, mosques, admins, activity } = deps;
  const tx = <T>(fn: (w: Work) => Promise<T>): Promise<T> => transact(store, fn);

  async function transferOwnership(w: Work, mosqueId: string, to: AdminRow, actor: Actor): Promise<AdminRow> {
    const current = (await admins.listForMosque(mosqueId, w.q)).find((a) => a.is_owner === 1);
    if (current) await admins.setFlags(w, mosqueId, current.user_id, { ...toFlags(current), is_owner: false });
    const owner = await admins.setFlags(w, mosqueId, to.user_id, ALL_FLAGS);
    await activity.record(w.q, { mosqueId, actorUserId: actor.id, kind: 'admin.owner_changed', subjectId: to.user_id, data: { from: current?.user_id ?? null } });
    return owner;
  }

  /**
   * An account named by id that has proven nothing: it holds nothing (docs/api.md, "Addresses: claims and proof"),
   * so naming it is refused with what to do instead; null for a known account that may hold.
   */
  const refusedTarget = async (userId: string, field: string): Promise<Result<never> | null> => {
    const row = await deps.users.findById(userId);
    if (!row) return fail('not_found', `No user has that ${field}.`);
    return mayHold(row) ? null : fail('conflict', UNPROVEN_TARGET);
  };

  /** The account a grantee names now: by id as given, by email only the account that proved it. */
  const accountOf = async (who: Grantee): Promise<string | null> =>
    'userId' in who ? who.userId : (await deps.users.findProvenHolder(identifierHash(who.email)))?.id ?? null;

  /**
   * What is granted to an address nobody has proven waits on it. The address's account (one with nothing in it)
   * is made before the transaction, in the user store's own (its cache and feed hear of it after that commit);
   * the grant is written in the caller's.
   */
  const claimFor = (email: string) => claimUnclaimed(deps.users, { channel: 'email', email });
  const waitOn = (w: Work, mosqueId: string, email: string, grant: NewGrant, actor: Actor) =>
    deps.grants.add(w, mosqueId, identifierHash(email), grant, actor.id);

  const ops = {
    /** An owner named by an address nobody has proven waits on it: the mosque has no owner until someone proves it. */
    async create(fields: MosqueFields, owner: Grantee | null, actor: Actor): Promise<Result<MosqueRow>> {
      const ownerUserId = owner ? await accountOf(owner) : null;
      const refused = owner && 'userId' in owner ? await refusedTarget(owner.userId, 'owner_user_id') : null;
      if (refused) return refused;
      const waits = owner && 'email' in owner && !ownerUserId ? owner.email : null;
      if (waits !== null) await claimFor(waits);
      return ok(await tx(async (w) => {
        const mosque = await mosques.create(w, fields);
        await activity.record(w.q, { mosqueId: mosque.id, actorUserId: actor.id, kind: 'mosque.created', subjectId: mosque.id, data: { name: mosque.name } });
        if (waits !== null) await waitOn(w, mosque.id, waits, { kind: 'owner' }, actor);
        if (ownerUserId) {
          await admins.insert(w, mosque.id, ownerUserId, ALL_FLAGS);
          await activity.record(w.q, { mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.added', subjectId: ownerUserId, data: { ...ALL_FLAGS } });
          await deps.memberships.admitAdmin(w, mosque.id, ownerUserId, actor.id);
        }
        return mosque;
      }));
    },

    async update(mosque: MosqueRow, fields: Partial<MosqueFields>, actor: Actor): Promise<MosqueRow> {
      const updated = await tx(async (w) => {
        const row = await mosques.update(w, mosque.id, fields);
        await activity.record(w.q, { mosqueId: mosque.id, actorUserId: actor.id, kind: 'mosque.updated', subjectId: mosque.id, data: { fields: Object.keys(fields) } });
        return row;
      });
      await deps.onUpdated?.(mosque, updated);
      return updated;
    },

    rotateJoinCode(mosque: MosqueRow, actor: Actor): Promise<MosqueRow> {
      return tx(async (w) => {
        const updated = await mosques.rotateJoinCode(w, mosque.id);
        await activity.record(w.q, { mosqueId: mosque.id, actorUserId: actor.id, kind: 'mosque.join_code_rotated', subjectId: mosque.id });
        return updated;
      });
    },

    async delete(mosque: MosqueRow): Promise<void> {
      const after = await deps.beforeDelete?.(mosque.id);
      await mosques.delete(mosque.id);
      await after?.();
    },

    /**
     * docs/api.md, "Addresses: claims and proof": an admin named by email is added after the answer, which is the
     * same whether or not an account holds the address: the holder's row, or the grant that waits on the address.
     * Adding someone who is an admin already changes nothing (the caller lists the admins to see them).
     */
    addAdminByEmail(mosque: MosqueRow, email: string, flags: { can_trigger: boolean; can_manage: boolean }, actor: Actor): void {
      deps.afterAnswer.defer('admin by email', () => ops.addAdmin(mosque, { email }, flags, actor));
    },

    /** An admin named by an address nobody has proven waits on it (`waiting`), with the flags asked. */
    async addAdmin(mosque: MosqueRow, who: Grantee, flags: { can_trigger: boolean; can_manage: boolean }, actor: Actor): Promise<Result<AdminRow | 'waiting'>> {
      const userId = await accountOf(who);
      if (!userId && 'email' in who) {
        await claimFor(who.email);
        await tx((w) => waitOn(w, mosque.id, who.email, { kind: 'admin', canTrigger: flags.can_trigger, canManage: flags.can_manage }, actor));
        return ok('waiting');
      }
      if (!userId) return fail('not_found', 'No user has that user_id.');
      const refused = await refusedTarget(userId, 'user_id');
      if (refused) return refused;
      return tx(async (w): Promise<Result<AdminRow | 'waiting'>> => {
        // Checked in the transaction that inserts: two requests adding the same admin cannot both pass.
        if (await admins.find(mosque.id, userId, w.q)) return fail('conflict', 'That user is already an admin of this mosque.');
        const row = await admins.insert(w, mosque.id, userId, { is_owner: false, ...flags });
        await activity.record(w.q, { mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.added', subjectId: userId, data: flags });
        // Removing the admin row later leaves this membership as it is (docs/decisions.md, "Owners and admins are members").
        await deps.memberships.admitAdmin(w, mosque.id, userId, actor.id);
        return ok(row);
      });
    },

    updateAdmin(mosque: MosqueRow, userId: string, change: AdminChange, actor: Actor & { isOwner: boolean }): Promise<Result<AdminRow>> {
      // The row is read, judged and written in one transaction: a flag changed meanwhile is judged as it stands.
      return tx(async (w): Promise<Result<AdminRow>> => {
        const row = await admins.find(mosque.id, userId, w.q);
        if (!row) return fail('not_found');
        const lowersOwner = row.is_owner === 1 && (change.can_trigger === false || change.can_manage === false);
        if (lowersOwner && !actor.isSuperadmin) return fail('forbidden', 'Only a superadmin may demote the owner.');
        if (row.is_owner === 1 && change.is_owner === false) {
          return fail('conflict', 'A mosque always keeps one owner: make another admin the owner instead.');
        }
        const transfers = change.is_owner === true && row.is_owner === 0;
        if (transfers && !actor.isSuperadmin && !actor.isOwner) return fail('forbidden', 'Only the owner or a superadmin may hand over ownership.');
        let updated = await admins.setFlags(w, mosque.id, userId, {
          is_owner: row.is_owner === 1,
          can_trigger: change.can_trigger ?? row.can_trigger === 1,
          can_manage: change.can_manage ?? row.can_manage === 1,
        });
        await activity.record(w.q, { mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.updated', subjectId: userId, data: { ...change } });
        if (transfers) updated = await transferOwnership(w, mosque.id, updated, actor);
        return ok(updated);
      });
    },

    removeAdmin(mosque: MosqueRow, userId: string, actor: Actor): Promise<Result<void>> {
      return tx(async (w): Promise<Result<void>> => {
        const row = await admins.find(mosque.id, userId, w.q);
        if (!row) return fail('not_found');
        if (row.is_owner === 1) {
          if (!actor.isSuperadmin) return fail('forbidden', 'Only a superadmin may remove the owner.');
          return fail('conflict', 'A mosque always keeps one owner: make another admin the owner first.');
        }
        await admins.remove(w, mosque.id, userId);
        await activity.record(w.q, { mosqueId: mosque.id, actorUserId: actor.id, kind: 'admin.removed', subjectId: userId });
        return ok(undefined);
      });
    },
  };
  return ops;
}

export type MosqueOps = ReturnType<typeof createMosqueOps>;
