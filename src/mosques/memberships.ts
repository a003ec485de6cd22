import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import type { ActivityLog } from './activity.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';
import type { MosqueRow } from './mosques.ts';
import type { UserStore } from '../people/users.ts';

export type MembershipStatus = 'pending' | 'approved' | 'rejected' | 'banned';
export const MEMBERSHIP_STATUSES = ['pending', 'approved', 'rejected', 'banned'] as const;
export const NOTIFY_TOGGLES = ['notify_azaan', 'notify_jummah', 'notify_waaz', 'notify_announcement'] as const;
export type NotifyToggle = (typeof NOTIFY_TOGGLES)[number];

export interface MembershipRow {
  id: string;
  mosque_id: string;
  user_id: string;
  status: MembershipStatus;
  notify_azaan: number;
  notify_jummah: number;
  notify_waaz: number;
  notify_announcement: number;
  created_at: number;
  updated_at: number;
}

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

/** A membership with its member's addresses: what a mosque's admins see of them. */
export type MemberRow = MembershipRow & { email: string; phone: string | null };

/** The order used by "never lower an existing membership" (invites). Banned is handled apart. */
const RANK: Record<MembershipStatus, number> = { rejected: 0, pending: 1, approved: 2, banned: -1 };

export interface MembershipChange {
  membership: MembershipRow;
  previousStatus: MembershipStatus | null;
  /** The membership no longer exists (removed by an admin). */
  removed?: boolean;
}

/** Told after every committed status change (entitlement reacts to it: a later issue). */
export type MembershipListener = (change: MembershipChange) => void;

/** Every write is announced on `changes` (kind `standing`, the member's user id): /me lists memberships. */
export function createMemberships(deps: { db: Db; clock: Clock; activity: ActivityLog; users: Pick<UserStore, 'contactsOf'>; onChange?: MembershipListener; changes?: ChangePublisher }) {
  const { db, activity } = deps;
  const changes = deps.changes ?? noChanges;
  const changed = (userId: string) => changes.publish({ kind: 'standing', id: userId });
  const byId = db.prepare<[string], MembershipRow>('SELECT * FROM memberships WHERE id = ?');
  const byPair = db.prepare<[string, string], MembershipRow>('SELECT * FROM memberships WHERE mosque_id = ? AND user_id = ?');
  const insert = db.prepare(
    `INSERT INTO memberships (id, mosque_id, user_id, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)`,
  );
  const setStatus = db.prepare('UPDATE memberships SET status = ?, updated_at = ? WHERE id = ?');
  const ofMosque = db.prepare<[string], MembershipRow>('SELECT * FROM memberships WHERE mosque_id = ? ORDER BY created_at, id');
  const ofMosqueByStatus = db.prepare<[string, string], MembershipRow>('SELECT * FROM memberships WHERE mosque_id = ? AND status = ? ORDER BY created_at, id');
  /** Each membership with its member's email and phone, which the people's store keeps (one statement for the list). */
  const withMembers = (rows: MembershipRow[]): MemberRow[] => {
    const contacts = deps.users.contactsOf(rows.map((r) => r.user_id));
    return rows.flatMap((r) => {
      const c = contacts.get(r.user_id);
      return c ? [{ ...r, email: c.email, phone: c.phone }] : [];
    });
  };
  // Who a broadcast of each kind notifies: the approved members with that toggle on (one statement per toggle).
  const notified = new Map(NOTIFY_TOGGLES.map((toggle) => [toggle,
    db.prepare<[string], { user_id: string }>(`SELECT user_id FROM memberships WHERE mosque_id = ? AND status = 'approved' AND ${toggle} = 1`)] as const));
  const ofUser = db.prepare<[string], MembershipRow>('SELECT * FROM memberships WHERE user_id = ? ORDER BY created_at, id');
  const setToggles = db.prepare(
    `UPDATE memberships SET notify_azaan = COALESCE(@notify_azaan, notify_azaan), notify_jummah = COALESCE(@notify_jummah, notify_jummah),
       notify_waaz = COALESCE(@notify_waaz, notify_waaz), notify_announcement = COALESCE(@notify_announcement, notify_announcement),
       updated_at = @now WHERE id = @id`,
  );
  const remove = db.prepare('DELETE FROM memberships WHERE id = ?');
  const removedEntry = db.prepare<[string, string], { by_self: number }>('SELECT by_self FROM membership_removals WHERE mosque_id = ? AND user_id = ?');
  const noteRemoval = db.prepare(
    `INSERT INTO membership_removals (mosque_id, user_id, removed_at, by_self) VALUES (?, ?, ?, ?)
     ON CONFLICT DO UPDATE SET removed_at = excluded.removed_at, by_self = excluded.by_self`,
  );
  const clearRemoval = db.prepare('DELETE FROM membership_removals WHERE mosque_id = ? AND user_id = ?');
  const now = () => toUnixSeconds(deps.clock());
  const notify = (change: MembershipChange) => {
    if (change.previousStatus !== change.membership.status) deps.onChange?.(change);
  };

  /** Creates or moves a membership to `status`, with its activity entry, in one transaction. */
  function put(mosqueId: string, userId: string, status: MembershipStatus, actorId: string | null, kind: string): MembershipChange {
    const change = db.transaction((): MembershipChange => {
      const existing = byPair.get(mosqueId, userId);
      if (existing) {
        if (existing.status !== status) setStatus.run(status, now(), existing.id);
      } else {
        insert.run(crypto.randomUUID(), mosqueId, userId, status, now(), now());
        clearRemoval.run(mosqueId, userId);
      }
      const membership = byPair.get(mosqueId, userId)!;
      const previousStatus = existing?.status ?? null;
      if (previousStatus !== status) {
        activity.recordSync({ mosqueId, actorUserId: actorId, kind, subjectId: membership.id, data: { user_id: userId, from: previousStatus, to: status } });
      }
      return { membership, previousStatus };
    })();
    changed(userId);
    notify(change);
    return change;
  }

  return {
    /** Whether an admin removed this user's membership of the mosque and it was not re-created since (one key lookup). */
    wasRemoved: (mosqueId: string, userId: string) => removedEntry.get(mosqueId, userId) !== undefined,
    findById: (id: string) => byId.get(id) ?? null,
    /** The users of the mosque's approved members who have `toggle` on: whom a broadcast's push reaches. */
    notifiedMembers: (mosqueId: string, toggle: NotifyToggle): string[] => notified.get(toggle)!.all(mosqueId).map((r) => r.user_id),
    findFor: (mosqueId: string, userId: string) => byPair.get(mosqueId, userId) ?? null,
    /** The membership with its member's email and phone, for the mosque's admins (docs/api.md, "Memberships"). */
    findWithMember: (id: string) => {
      const row = byId.get(id);
      return row ? (withMembers([row])[0] ?? null) : null;
    },
    listForMosque: (mosqueId: string, status: MembershipStatus | null) =>
      withMembers(status ? ofMosqueByStatus.all(mosqueId, status) : ofMosque.all(mosqueId)),
    listForUser: (userId: string) => ofUser.all(userId),

    /**
     * Self-service join (docs/walkthrough.md, "3. The mosque and its members"): pending, or approved when the mosque auto-approves. An existing
     * membership is returned as it is; a rejected one may reapply; a banned one is refused.
     */
    join(mosque: MosqueRow, userId: string): Result<{ membership: MembershipRow; created: boolean }> {
      const existing = byPair.get(mosque.id, userId);
      if (existing?.status === 'banned') return fail('membership_banned');
      if (existing && existing.status !== 'rejected') return ok({ membership: existing, created: false });
      // docs/api.md, "Memberships": someone an admin removed asks again; auto-approval does not undo the removal.
      const removed = !existing && removedEntry.get(mosque.id, userId)?.by_self === 0;
      const status = mosque.auto_approve_members === 1 && !removed ? 'approved' : 'pending';
      const { membership } = put(mosque.id, userId, status, userId, 'membership.joined');
      return ok({ membership, created: !existing });
    },

    /**
     * An admin enrols a user: always approved (there is no admin-initiated pending state). Enrolment never
     * lifts a ban, not even a superadmin's: a ban is lifted only by a status change, and nobody but a
     * superadmin enrols themselves (docs/decisions.md, "Enrolment never lifts a ban.").
     */
    enrol(mosqueId: string, userId: string, actor: { id: string; isSuperadmin: boolean }): Result<{ membership: MembershipRow; created: boolean }> {
      if (userId === actor.id && !actor.isSuperadmin) return fail('forbidden', 'Only a superadmin may enrol themselves.');
      const existing = byPair.get(mosqueId, userId);
      if (existing?.status === 'banned') return fail('membership_banned', 'This user is banned from the mosque; change the membership status to lift the ban.');
      const { membership } = put(mosqueId, userId, 'approved', actor.id, 'membership.enrolled');
      return ok({ membership, created: !existing });
    },

    /**
     * An owner or admin of a mosque is one of its members (docs/decisions.md, "Owners and admins are members"): approved, unless banned, which only a
     * status change lifts. Never lowers a membership; returns it as it ends up (null when none could be made).
     */
    admitAdmin(mosqueId: string, userId: string, actorId: string | null): MembershipRow | null {
      const existing = byPair.get(mosqueId, userId);
      if (existing?.status === 'banned' || existing?.status === 'approved') return existing;
      return put(mosqueId, userId, 'approved', actorId, 'membership.admin_admitted').membership;
    },

    /** An invite never lowers a membership; a banned one is refused. */
    invite(mosqueId: string, userId: string, autoApprove: boolean, actorId: string | null): Result<MembershipRow> {
      const existing = byPair.get(mosqueId, userId);
      if (existing?.status === 'banned') return fail('membership_banned');
      const wanted: MembershipStatus = autoApprove ? 'approved' : 'pending';
      if (existing && RANK[existing.status] >= RANK[wanted]) return ok(existing);
      return ok(put(mosqueId, userId, wanted, actorId, 'membership.invited').membership);
    },

    /** Admins and superadmins only: the caller has checked the standing (docs/api.md, "Memberships"). */
    changeStatus(membership: MembershipRow, status: MembershipStatus, actorId: string): MembershipRow {
      return put(membership.mosque_id, membership.user_id, status, actorId, 'membership.status_changed').membership;
    },

    /** The member's own four toggles (docs/walkthrough.md, "3. The mosque and its members"). */
    setToggles(membership: MembershipRow, toggles: Partial<Record<NotifyToggle, boolean>>, actorId: string): MembershipRow {
      const keys = NOTIFY_TOGGLES.filter((k) => toggles[k] !== undefined);
      if (keys.length === 0) return membership;
      const bits = Object.fromEntries(NOTIFY_TOGGLES.map((k) => [k, toggles[k] === undefined ? null : toggles[k] ? 1 : 0]));
      db.transaction(() => {
        setToggles.run({ ...bits, now: now(), id: membership.id });
        activity.recordSync({ mosqueId: membership.mosque_id, actorUserId: actorId, kind: 'membership.notifications_changed', subjectId: membership.id, data: toggles });
      })();
      changed(membership.user_id);
      return byId.get(membership.id)!;
    },

    /** The user is being deleted (the database removes the rows): each mosque's feed says so. */
    noteUserDeleted(userId: string, actorId: string | null): void {
      for (const m of ofUser.all(userId)) {
        activity.recordSync({ mosqueId: m.mosque_id, actorUserId: actorId, kind: 'membership.removed', subjectId: m.id, data: { user_id: userId, reason: 'user_deleted' } });
        deps.onChange?.({ membership: m, previousStatus: m.status, removed: true });
      }
    },

    /** Removes a membership (an admin's act); entitlement treats it as lapsed. */
    remove(membership: MembershipRow, actorId: string | null, reason?: string): void {
      db.transaction(() => {
        remove.run(membership.id);
        noteRemoval.run(membership.mosque_id, membership.user_id, now(), actorId === membership.user_id ? 1 : 0);
        const data = { user_id: membership.user_id, ...(reason && { reason }) };
        activity.recordSync({ mosqueId: membership.mosque_id, actorUserId: actorId, kind: 'membership.removed', subjectId: membership.id, data });
      })();
      changed(membership.user_id);
      deps.onChange?.({ membership, previousStatus: membership.status, removed: true });
    },
  };
}

export type Memberships = ReturnType<typeof createMemberships>;
