import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import type { ActivityLog } from './activity.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import { identifierHash, syntheticEmailForPhone } from '../platform/identifiers.ts';
import { toMembership, type Membership, type Memberships } from './memberships.ts';
import type { MosqueRow } from './mosques.ts';
import type { Notifier } from '../platform/notify.ts';
import type { UserRow, UserStore } from '../people/users.ts';

export interface InviteRow {
  id: string;
  mosque_id: string;
  user_id: string;
  invited_by: string | null;
  channel: 'email' | 'whatsapp';
  contact: string;
  auto_approve: number;
  created_at: number;
}

export interface Invite {
  id: string;
  mosque_id: string;
  user_id: string;
  invited_by: string | null;
  channel: 'email' | 'whatsapp';
  contact: string;
  auto_approve: boolean;
  created_at: string;
}

export function toInvite(row: InviteRow): Invite {
  return { ...row, auto_approve: row.auto_approve === 1, created_at: toIsoString(row.created_at) };
}

export type InviteContact = { channel: 'email'; email: string } | { channel: 'whatsapp'; phone: string };

interface Deps {
  db: Db;
  clock: Clock;
  users: UserStore;
  memberships: Memberships;
  activity: ActivityLog;
  notifier: Notifier;
}

/**
 * POST /invites (seed "Membership status"): finds or creates the invited person, gives them a membership
 * (approved when auto_approve is asked, else pending; never lower than what they have; banned refused),
 * and tells them by email or WhatsApp.
 */
export function createInvites(deps: Deps) {
  const insert = deps.db.prepare(
    `INSERT INTO invites (id, mosque_id, user_id, invited_by, channel, contact, auto_approve, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const byId = deps.db.prepare<[string], InviteRow>('SELECT * FROM invites WHERE id = ?');

  function findOrCreateUser(contact: InviteContact): UserRow {
    const normalized = contact.channel === 'email' ? contact.email : contact.phone;
    const hash = identifierHash(normalized);
    const existing = deps.users.findByIdentifierHash(hash);
    if (existing) return existing;
    if (contact.channel === 'email') {
      return deps.users.create({ email: contact.email, emailHash: hash, phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' });
    }
    const email = syntheticEmailForPhone(hash);
    return deps.users.create({ email, emailHash: identifierHash(email), phone: contact.phone, phoneHash: hash, passwordBcrypt: null, role: 'member' });
  }

  return {
    invite(mosque: MosqueRow, contact: InviteContact, autoApprove: boolean, actorId: string): Result<{ invite: Invite; membership: Membership }> {
      const result = deps.db.transaction(() => {
        const user = findOrCreateUser(contact);
        const membership = deps.memberships.invite(mosque.id, user.id, autoApprove, actorId);
        if (!membership.ok) return membership;
        const id = crypto.randomUUID();
        const to = contact.channel === 'email' ? contact.email : contact.phone;
        insert.run(id, mosque.id, user.id, actorId, contact.channel, to, autoApprove ? 1 : 0, toUnixSeconds(deps.clock()));
        deps.activity.record({ mosqueId: mosque.id, actorUserId: actorId, kind: 'invite.sent', subjectId: id, data: { user_id: user.id, channel: contact.channel, auto_approve: autoApprove } });
        return ok({ invite: toInvite(byId.get(id)!), membership: toMembership(membership.value) });
      })();
      if (!result.ok) return fail(result.failure);
      const { invite } = result.value;
      const state = result.value.membership.status === 'approved' ? 'You are a member.' : 'An admin will approve your membership.';
      deps.notifier.send({
        channel: invite.channel,
        to: invite.contact,
        purpose: 'invite',
        text: `You are invited to ${mosque.name} on Minaret. ${state} Sign in with a code sent to this ${invite.channel === 'email' ? 'address' : 'number'}.`,
      });
      return result;
    },
  };
}

export type Invites = ReturnType<typeof createInvites>;
