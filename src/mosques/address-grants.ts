import type { Selectable } from 'kysely';
import crypto from 'node:crypto';
import type { Store } from '../platform/store/store.ts';
import { transact, within, type Work } from './work.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { ActivityLog } from './activity.ts';
import type { AdminStore } from './admins.ts';
import type { Memberships } from './memberships.ts';
import { identifierHash, syntheticEmailForPhone } from '../platform/identifiers.ts';
import type { UserStore } from '../people/users.ts';
import type { AddressGrantsTable } from '../../generated/tables.ts';

export type GrantKind = 'membership' | 'admin' | 'owner';

/** A row of `address_grants` (generated/tables.ts), narrowed to the values written here. */
export type AddressGrantRow = Omit<Selectable<AddressGrantsTable>, 'kind' | 'status'> & { kind: GrantKind; status: 'pending' | 'approved' | null };

export type Contact = { channel: 'email'; email: string } | { channel: 'whatsapp'; phone: string };

/**
 * An account for an address nobody claims yet (an invitation creates the user if needed: docs/api.md, "Invitations"): no
 * password and nothing in it, so only whoever proves the address, with a sign-in code sent to it, gets in.
 * Looked for and made in one transaction of the user store: two invitations to a new address at once make one account.
 */
export async function claimUnclaimed(users: Pick<UserStore, 'transaction' | 'findProvenHolder' | 'listUnprovenClaimants' | 'create'>, contact: Contact): Promise<void> {
  const hash = identifierHash(contact.channel === 'email' ? contact.email : contact.phone);
  await users.transaction(async (trx) => {
    if ((await users.findProvenHolder(hash, trx)) || (await users.listUnprovenClaimants(hash, trx)).length > 0) return;
    if (contact.channel === 'email') {
      await users.create({ email: contact.email, emailHash: hash, phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' }, trx);
      return;
    }
    const email = syntheticEmailForPhone(hash);
    await users.create({ email, emailHash: identifierHash(email), phone: contact.phone, phoneHash: hash, passwordBcrypt: null, role: 'member' }, trx);
  });
}

export type NewGrant =
  | { kind: 'membership'; status: 'pending' | 'approved'; inviteId: string }
  | { kind: 'admin'; canTrigger: boolean; canManage: boolean }
  | { kind: 'owner' };

/**
 * What is addressed to an email or phone that no account has proven waits here, on the address
 * (docs/api.md, "Addresses: claims and proof"), and goes to the first account that proves it.
 */
export function createAddressGrants(deps: { store: Store; clock: Clock; activity: ActivityLog; memberships: Memberships; admins: AdminStore }) {
  const { store, activity, admins } = deps;
  const bit = (b: boolean) => (b ? 1 : 0);

  /** Gives one grant to the account; what it cannot give (a ban stands, the mosque has an owner) it gives as far as it can. */
  async function give(w: Work, grant: AddressGrantRow, userId: string): Promise<void> {
    const { q } = w;
    const actor = grant.granted_by;
    if (grant.kind === 'membership') {
      const given = await deps.memberships.invite(w, grant.mosque_id, userId, grant.status === 'approved', actor);
      if (grant.invite_id) await q.updateTable('invites').set({ user_id: userId }).where('id', '=', grant.invite_id).where('user_id', 'is', null).execute();
      if (!given.ok) await activity.record(q, { mosqueId: grant.mosque_id, actorUserId: null, kind: 'invite.refused', subjectId: grant.invite_id, data: { user_id: userId, reason: 'banned' } });
      return;
    }
    const hasOwner = await q.selectFrom('mosque_admins').select('user_id').where('mosque_id', '=', grant.mosque_id).where('is_owner', '=', 1).executeTakeFirst();
    const owner = grant.kind === 'owner' && !hasOwner;
    const flags = {
      is_owner: owner,
      can_trigger: grant.kind === 'owner' || grant.can_trigger === 1,
      can_manage: grant.kind === 'owner' || grant.can_manage === 1,
    };
    const current = await admins.find(grant.mosque_id, userId, q);
    if (current) {
      await admins.setFlags(w, grant.mosque_id, userId, {
        is_owner: current.is_owner === 1 || flags.is_owner,
        can_trigger: current.can_trigger === 1 || flags.can_trigger,
        can_manage: current.can_manage === 1 || flags.can_manage,
      });
    } else {
      await admins.insert(w, grant.mosque_id, userId, flags);
    }
    await activity.record(q, { mosqueId: grant.mosque_id, actorUserId: actor, kind: 'admin.added', subjectId: userId, data: { ...flags, by_address: true } });
    await deps.memberships.admitAdmin(w, grant.mosque_id, userId, actor);
  }

  return {
    /** Records a grant that waits on `addressHash`; the activity feed says so (without the address). */
    add(w: Work | undefined, mosqueId: string, addressHash: string, grant: NewGrant, actorId: string | null): Promise<string> {
      return within(store, w, async ({ q }) => {
        const id = crypto.randomUUID();
        await q.insertInto('address_grants').values({
          id, mosque_id: mosqueId, address_hash: addressHash, kind: grant.kind,
          status: grant.kind === 'membership' ? grant.status : null,
          can_trigger: grant.kind === 'admin' ? bit(grant.canTrigger) : 0,
          can_manage: grant.kind === 'admin' ? bit(grant.canManage) : 0,
          invite_id: grant.kind === 'membership' ? grant.inviteId : null,
          granted_by: actorId, created_at: toUnixSeconds(deps.clock()),
        }).execute();
        await activity.record(q, { mosqueId, actorUserId: actorId, kind: 'grant.waiting', subjectId: id, data: { kind: grant.kind } });
        return id;
      });
    },

    /** Grants of a mosque still waiting for their address to be proven. */
    listWaiting: async (mosqueId: string) => (await store.selectFrom('address_grants').selectAll()
      .where('mosque_id', '=', mosqueId).orderBy('created_at').orderBy('id').execute()) as AddressGrantRow[],

    /** The account just proved `addressHash`: everything that waited on it is its own now. */
    giveAll(addressHash: string, userId: string): Promise<number> {
      return transact(store, async (w) => {
        const grants = (await w.q.selectFrom('address_grants').selectAll().where('address_hash', '=', addressHash)
          .orderBy('created_at').orderBy('id').execute()) as AddressGrantRow[];
        await w.q.deleteFrom('address_grants').where('address_hash', '=', addressHash).execute();
        // One after another: each grant reads what the one before it wrote (the owner it made, the membership it raised).
        for (const grant of grants) await give(w, grant, userId);
        return grants.length;
      });
    },
  };
}

export type AddressGrants = ReturnType<typeof createAddressGrants>;
