import type { Selectable } from 'kysely';
import crypto from 'node:crypto';
import type { Queries, Store } from '../platform/store/store.ts';
import { prepared } from '../platform/store/prepared.ts';
import { transact, transactRacingInsert, within, type Work } from './work.ts';
import type { ActivityLog } from './activity.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';
import type { MosqueRow } from './mosques.ts';
import type { Contact, UserStore } from '../people/users.ts';
import type { MembershipsTable } from '../../generated/tables.ts';

export type MembershipStatus = 'pending' | 'approved' | 'rejected' | 'banned';
export const MEMBERSHIP_STATUSES = ['pending', 'approved', 'rejected', 'banned'] as const;
export const NOTIFY_TOGGLES = ['notify_azaan', 'notify_jummah', 'notify_waaz', 'notify_announcement'] as const;
export type NotifyToggle = (typeof NOTIFY_TOGGLES)[number];

/** A row of `memberships` (generated/tables.ts), narrowed to the values written here. */
export type MembershipRow = Omit<Selectable<MembershipsTable>, 'status'> & { status: MembershipStatus };

export interface Membership {
  id: string;
  mosque_id: string;
  user_id: string;
  status: MembershipStatus;
  notify_azaan: boolean;
  notify_jummah: boolean;
  notify_waaz: boolean;
  notify_announcement: boolean;
  created_at: string;
  updated_at: string;
}

export function toMembership(row: MembershipRow): Membership {
  return {
    id: row.id,
    mosque_id: row.mosque_id,
    user_id: row.user_id,
    status: row.status,
    notify_azaan: row.notify_azaan === 1,
    notify_jummah: row.notify_jummah === 1,
    notify_waaz: row.notify_waaz === 1,
    notify_announcement: row.notify_announcement === 1,
    created_at: toIsoString(row.created_at),
    updated_at: toIsoString(row.updated_at),
  };
}

/** A membership with its member's addresses and whether each is proven: what a mosque's admins see of them. */
export type MemberRow = MembershipRow & Contact;

/** The activity kind of a person's own join: the one way to approval that does not lift an admin's removal. */
const JOINED = 'membership.joined';

/** The order used by "never lower an existing membership" (invites). Banned is handled apart. */
const RANK: Record<MembershipStatus, number> = { rejected: 0, pending: 1, approved: 2, banned: -1 };

export interface MembershipChange {
  membership: MembershipRow;
  previousStatus: MembershipStatus | null;
  /** The membership no longer exists (removed by an admin). */
  removed?: boolean;
  /** Only the member's notify toggles changed (docs/firmware.md, "The azaan without the network": their players' slots follow them). */
  togglesChanged?: boolean;
}

/**
 * Told after every committed status change: approval, ban, rejection, removal; and of a change of the notify
 * toggles (`togglesChanged`). A later domain's story
 * listens (src/devices/stories/membership.ts: the member's players get their new config).
 */
export type MembershipListener = (change: MembershipChange) => void;

/**
 * Every write is announced on `changes` (kind `standing`, the member's user id) once it commits: /me lists
 * memberships. Writers join the caller's `Work` when given one (the listeners are told after that commit).
 */
export function createMemberships(deps: { store: Store; clock: Clock; activity: ActivityLog; users: Pick<UserStore, 'contactsOf'>; changes?: ChangePublisher }) {
  const { store, activity } = deps;
  const listeners: MembershipListener[] = [];
  const tell = (change: MembershipChange) => {
    for (const l of listeners) l(change);
  };
  const changes = deps.changes ?? noChanges;
  const changed = (userId: string) => changes.publish({ kind: 'standing', id: userId });

  const byId = async (q: Queries, id: string) =>
    (await q.selectFrom('memberships').selectAll().where('id', '=', id).executeTakeFirst()) as MembershipRow | undefined;
  // Compiled once: a mosque route a caller lacks the standing for reads their membership (api/guards.ts checkStanding).
  const byPairQuery = prepared<{ mosqueId: string; userId: string }, MembershipRow>(store, ['mosqueId', 'userId'], (v) =>
    store.selectFrom('memberships').selectAll().where('mosque_id', '=', v.mosqueId).where('user_id', '=', v.userId).$castTo<MembershipRow>());
  const byPair = async (q: Queries, mosqueId: string, userId: string): Promise<MembershipRow | undefined> => (await byPairQuery.run(q, { mosqueId, userId })).rows[0];
  const ofUser = async (q: Queries, userId: string) =>
    (await q.selectFrom('memberships').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute()) as MembershipRow[];
  const removedEntry = (q: Queries, mosqueId: string, userId: string) =>
    q.selectFrom('membership_removals').select('by_self').where('mosque_id', '=', mosqueId).where('user_id', '=', userId).executeTakeFirst();
  /** Each membership with its member's email and phone and their proof, which the people's store keeps (a statement per 512 members). */
  const withMembers = async (rows: MembershipRow[]): Promise<MemberRow[]> => {
    const contacts = await deps.users.contactsOf(rows.map((r) => r.user_id));
    return rows.flatMap((r) => {
      const c = contacts.get(r.user_id);
      return c ? [{ ...r, ...c }] : [];
    });
  };
  const now = () => toUnixSeconds(deps.clock());
  const notify = (change: MembershipChange) => {
    if (change.previousStatus !== change.membership.status) tell(change);
  };

  /**
   * Creates or moves a membership to `status`, with its activity entry, in the caller's transaction; the
   * change is announced once that commits.
   */
  async function put({ q, afterCommit }: Work, mosqueId: string, userId: string, status: MembershipStatus, actorId: string | null, kind: string, existing: MembershipRow | undefined): Promise<MembershipChange> {
    if (existing) {
      if (existing.status !== status) await q.updateTable('memberships').set({ status, updated_at: now() }).where('id', '=', existing.id).execute();
    } else {
      await q.insertInto('memberships').values({ id: crypto.randomUUID(), mosque_id: mosqueId, user_id: userId, status, created_at: now(), updated_at: now() }).execute();
    }
    // docs/api.md, "Memberships": an admin's removal outlives the membership; only the mosque approving the
    // person lifts it (an admin's approval or enrolment, an invitation, adding them as an admin), never their own join.
    if (status === 'approved' && kind !== JOINED) {
      await q.deleteFrom('membership_removals').where('mosque_id', '=', mosqueId).where('user_id', '=', userId).execute();
    }
    const membership = (await byPair(q, mosqueId, userId))!;
    const previousStatus = existing?.status ?? null;
    if (previousStatus !== status) {
      await activity.record(q, { mosqueId, actorUserId: actorId, kind, subjectId: membership.id, data: { user_id: userId, from: previousStatus, to: status } });
    }
    const change = { membership, previousStatus };
    afterCommit(() => {
      changed(userId);
      notify(change);
    });
    return change;
  }

  return {
    /** Adds a listener told after every committed status change (see MembershipListener). */
    listen: (listener: MembershipListener) => void listeners.push(listener),
    /**
     * Whether this user's membership of the mosque was ever removed, by an admin or by leaving, and no admin approved
     * them since (one key lookup). Entitlement asks only while there is no membership: "removed" against "never joined".
     */
    wasRemoved: async (mosqueId: string, userId: string, q: Queries = store) => (await removedEntry(q, mosqueId, userId)) !== undefined,
    findById: async (id: string) => (await byId(store, id)) ?? null,
    /** The users of the mosque's approved members who have `toggle` on: whom a broadcast's push reaches. */
    notifiedMembers: async (mosqueId: string, toggle: NotifyToggle): Promise<string[]> => {
      const rows = await store.selectFrom('memberships').select('user_id')
        .where('mosque_id', '=', mosqueId).where('status', '=', 'approved').where(toggle, '=', 1).execute();
      return rows.map((r) => r.user_id);
    },
    findFor: async (mosqueId: string, userId: string, q: Queries = store) => (await byPair(q, mosqueId, userId)) ?? null,
    /** The membership with its member's email and phone, for the mosque's admins (docs/api.md, "Memberships"). */
    findWithMember: async (id: string) => {
      const row = await byId(store, id);
      return row ? ((await withMembers([row]))[0] ?? null) : null;
    },
    listForMosque: async (mosqueId: string, status: MembershipStatus | null) => {
      let query = store.selectFrom('memberships').selectAll().where('mosque_id', '=', mosqueId);
      if (status) query = query.where('status', '=', status);
      return withMembers((await query.orderBy('created_at').orderBy('id').execute()) as MembershipRow[]);
    },
    listForUser: (userId: string) => ofUser(store, userId),

    /**
     * Self-service join (docs/walkthrough.md, "3. The mosque and its members"): pending, or approved when the mosque auto-approves. An existing
     * membership is returned as it is; a rejected one may reapply; a banned one is refused. Read and written in
     * one transaction, so a status changed meanwhile is seen.
     */
    join(mosque: MosqueRow, userId: string): Promise<Result<{ membership: MembershipRow; created: boolean }>> {
      return transactRacingInsert(store, async (w): Promise<Result<{ membership: MembershipRow; created: boolean }>> => {
        const existing = await byPair(w.q, mosque.id, userId);
        if (existing?.status === 'banned') return fail('membership_banned');
        if (existing && existing.status !== 'rejected') return ok({ membership: existing, created: false });
        // docs/api.md, "Memberships": someone an admin removed asks again; auto-approval does not undo the removal.
        // A rejected member reapplying is asked about too: the removal stands until an admin approves them.
        const removed = (await removedEntry(w.q, mosque.id, userId))?.by_self === 0;
        const status = mosque.auto_approve_members === 1 && !removed ? 'approved' : 'pending';
        const { membership } = await put(w, mosque.id, userId, status, userId, JOINED, existing);
        return ok({ membership, created: !existing });
      });
    },

    /**
     * An admin enrols a user: always approved (there is no admin-initiated pending state). Enrolment never
     * lifts a ban, not even a superadmin's: a ban is lifted only by a status change, and nobody but a
     * superadmin enrols themselves (docs/decisions.md, "Enrolment never lifts a ban.").
     */
    async enrol(mosqueId: string, userId: string, actor: { id: string; isSuperadmin: boolean }): Promise<Result<{ membership: MembershipRow; created: boolean }>> {
      if (userId === actor.id && !actor.isSuperadmin) return fail('forbidden', 'Only a superadmin may enrol themselves.');
      return transactRacingInsert(store, async (w): Promise<Result<{ membership: MembershipRow; created: boolean }>> => {
        const existing = await byPair(w.q, mosqueId, userId);
        if (existing?.status === 'banned') return fail('membership_banned', 'This user is banned from the mosque; change the membership status to lift the ban.');
        const { membership } = await put(w, mosqueId, userId, 'approved', actor.id, 'membership.enrolled', existing);
        return ok({ membership, created: !existing });
      });
    },

    /**
     * An owner or admin of a mosque is one of its members (docs/decisions.md, "Owners and admins are members"): approved, unless banned, which only a
     * status change lifts. Never lowers a membership; returns it as it ends up (null when none could be made).
     */
    admitAdmin(w: Work | undefined, mosqueId: string, userId: string, actorId: string | null): Promise<MembershipRow | null> {
      return within(store, w, async (w) => {
        const existing = await byPair(w.q, mosqueId, userId);
        if (existing?.status === 'banned' || existing?.status === 'approved') return existing;
        return (await put(w, mosqueId, userId, 'approved', actorId, 'membership.admin_admitted', existing)).membership;
      });
    },

    /** An invite never lowers a membership; a banned one is refused. */
    invite(w: Work | undefined, mosqueId: string, userId: string, autoApprove: boolean, actorId: string | null): Promise<Result<MembershipRow>> {
      return within(store, w, async (w): Promise<Result<MembershipRow>> => {
        const existing = await byPair(w.q, mosqueId, userId);
        if (existing?.status === 'banned') return fail('membership_banned');
        const wanted: MembershipStatus = autoApprove ? 'approved' : 'pending';
        if (existing && RANK[existing.status] >= RANK[wanted]) return ok(existing);
        return ok((await put(w, mosqueId, userId, wanted, actorId, 'membership.invited', existing)).membership);
      });
    },

    /** Admins and superadmins only: the caller has checked the standing (docs/api.md, "Memberships"). */
    async changeStatus(membership: MembershipRow, status: MembershipStatus, actorId: string): Promise<MembershipRow> {
      return transact(store, async (w) => {
        const existing = await byPair(w.q, membership.mosque_id, membership.user_id);
        return (await put(w, membership.mosque_id, membership.user_id, status, actorId, 'membership.status_changed', existing)).membership;
      });
    },

    /** The member's own four toggles (docs/walkthrough.md, "3. The mosque and its members"). */
    async setToggles(membership: MembershipRow, toggles: Partial<Record<NotifyToggle, boolean>>, actorId: string): Promise<MembershipRow> {
      const keys = NOTIFY_TOGGLES.filter((k) => toggles[k] !== undefined);
      if (keys.length === 0) return membership;
      const bits = Object.fromEntries(keys.map((k) => [k, toggles[k] ? 1 : 0])) as Partial<Record<NotifyToggle, number>>;
      return transact(store, async ({ q, afterCommit }) => {
        await q.updateTable('memberships').set({ ...bits, updated_at: now() }).where('id', '=', membership.id).execute();
        await activity.record(q, { mosqueId: membership.mosque_id, actorUserId: actorId, kind: 'membership.notifications_changed', subjectId: membership.id, data: toggles });
        const updated = (await byId(q, membership.id))!;
        afterCommit(() => {
          changed(membership.user_id);
          if (keys.some((k) => k === 'notify_azaan' || k === 'notify_jummah')) tell({ membership: updated, previousStatus: updated.status, togglesChanged: true });
        });
        return updated;
      });
    },

    /**
     * The user is being deleted (the database removes the rows): each mosque's feed says so, in the deletion's
     * transaction when it passes one; the listeners hear of it once that commits.
     */
    async noteUserDeleted(userId: string, actorId: string | null, q: Queries = store): Promise<void> {
      const removed = await ofUser(q, userId);
      for (const m of removed) {
        await activity.record(q, { mosqueId: m.mosque_id, actorUserId: actorId, kind: 'membership.removed', subjectId: m.id, data: { user_id: userId, reason: 'user_deleted' } });
      }
      for (const m of removed) tell({ membership: m, previousStatus: m.status, removed: true });
    },

    /** Removes a membership (an admin's act); entitlement treats it as lapsed. */
    async remove(membership: MembershipRow, actorId: string | null, reason?: string): Promise<void> {
      await transact(store, async ({ q }) => {
        await q.deleteFrom('memberships').where('id', '=', membership.id).execute();
        const removal = { mosque_id: membership.mosque_id, user_id: membership.user_id, removed_at: now(), by_self: actorId === membership.user_id ? 1 : 0 };
        // Leaving never turns an admin's standing removal into the member's own: 0 (an admin's) wins the product.
        await q.insertInto('membership_removals').values(removal)
          .onConflict((oc) => oc.columns(['mosque_id', 'user_id']).doUpdateSet((eb) => ({
            removed_at: removal.removed_at, by_self: eb(eb.ref('membership_removals.by_self'), '*', eb.ref('excluded.by_self')),
          }))).execute();
        const data = { user_id: membership.user_id, ...(reason && { reason }) };
        await activity.record(q, { mosqueId: membership.mosque_id, actorUserId: actorId, kind: 'membership.removed', subjectId: membership.id, data });
      });
      changed(membership.user_id);
      tell({ membership, previousStatus: membership.status, removed: true });
    },
  };
}

export type Memberships = ReturnType<typeof createMemberships>;
