import type { Selectable } from 'kysely';
import crypto from 'node:crypto';
import type { Store } from '../platform/store/store.ts';
import { transact } from './work.ts';
import type { ActivityLog } from './activity.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import { identifierHash } from '../platform/identifiers.ts';
import { toMembership, type Membership, type Memberships } from './memberships.ts';
import type { MosqueRow } from './mosques.ts';
import type { Notifier, PageUrl } from '../platform/notify.ts';
import type { UserStore } from '../people/users.ts';
import { claimUnclaimed, type AddressGrants, type Contact } from './address-grants.ts';
import type { InvitesTable } from '../../generated/tables.ts';

/**
 * A row of `invites` (generated/tables.ts), its channel narrowed to the values written here. `user_id`: the
 * account it went to, null while it waits for someone to prove the address.
 */
export type InviteRow = Omit<Selectable<InvitesTable>, 'channel'> & { channel: 'email' | 'whatsapp' };

export interface Invite {
  id: string;
  mosque_id: string;
  user_id: string | null;
  invited_by: string | null;
  channel: 'email' | 'whatsapp';
  contact: string;
  auto_approve: boolean;
  /** True while no account has proven the address: the membership is made when one does. */
  waiting_for_proof: boolean;
  created_at: string;
}

export function toInvite(row: InviteRow): Invite {
  return { ...row, auto_approve: row.auto_approve === 1, waiting_for_proof: row.user_id === null, created_at: toIsoString(row.created_at) };
}

export type InviteContact = Contact;

interface Deps {
  store: Store;
  clock: Clock;
  users: UserStore;
  memberships: Memberships;
  grants: AddressGrants;
  activity: ActivityLog;
  notifier: Notifier;
  pageUrl: PageUrl;
}

/**
 * POST /invites (docs/api.md, "Invitations"): the membership (approved when
 * auto_approve is asked, else pending; never lower than what they have; banned refused) goes to the account
 * that proved the address, or waits on the address until one does. An address nobody has claimed gets an
 * account, which whoever proves the address signs in to.
 */
export function createInvites(deps: Deps) {
  return {
    async invite(mosque: MosqueRow, contact: InviteContact, autoApprove: boolean, actorId: string): Promise<Result<{ invite: Invite; membership: Membership | null }>> {
      const to = contact.channel === 'email' ? contact.email : contact.phone;
      const hash = identifierHash(to);
      const holder = await deps.users.findProvenHolder(hash);
      // The account for an address nobody claims is made first, in the user store's own transaction (its cache
      // and feed hear of it after that commit): it holds nothing, so a failure of the invitation below leaves
      // only what the next invitation to the address would make.
      if (!holder) await claimUnclaimed(deps.users, contact);
      const result = await transact(deps.store, async (w): Promise<Result<{ invite: Invite; membership: Membership | null }>> => {
        const id = crypto.randomUUID();
        let membership: Membership | null = null;
        if (holder) {
          const given = await deps.memberships.invite(w, mosque.id, holder.id, autoApprove, actorId);
          if (!given.ok) return fail(given.failure);
          membership = toMembership(given.value);
        }
        await w.q.insertInto('invites').values({
          id, mosque_id: mosque.id, user_id: holder?.id ?? null, invited_by: actorId, channel: contact.channel, contact: to,
          auto_approve: autoApprove ? 1 : 0, created_at: toUnixSeconds(deps.clock()),
        }).execute();
        if (!holder) await deps.grants.add(w, mosque.id, hash, { kind: 'membership', status: autoApprove ? 'approved' : 'pending', inviteId: id }, actorId);
        await deps.activity.record(w.q, { mosqueId: mosque.id, actorUserId: actorId, kind: 'invite.sent', subjectId: id, data: { user_id: holder?.id ?? null, channel: contact.channel, auto_approve: autoApprove } });
        const row = (await w.q.selectFrom('invites').selectAll().where('id', '=', id).executeTakeFirstOrThrow()) as InviteRow;
        return ok({ invite: toInvite(row), membership });
      });
      if (!result.ok) return result;
      const { invite, membership } = result.value;
      const state = membership?.status === 'approved' || (!membership && autoApprove) ? 'You will be a member.' : 'An admin will approve your membership.';
      // Home lists the membership; opened signed out it asks for the sign-in first and comes back (docs/console.md).
      const link = deps.pageUrl('/');
      deps.notifier.send({
        channel: invite.channel,
        to: invite.contact,
        purpose: 'invite',
        text: `You are invited to ${mosque.name} on Minaret. ${state} Open ${link} and sign in with a code sent to this ${invite.channel === 'email' ? 'address' : 'number'}.`,
        link,
      });
      return result;
    },
  };
}

export type Invites = ReturnType<typeof createInvites>;
