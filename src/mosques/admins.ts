import type { Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import { prepared } from '../platform/store/prepared.ts';
import { within, type Work } from './work.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';
import type { Contact, UserStore } from '../people/users.ts';
import type { MosqueAdminsTable } from '../../generated/tables.ts';

/** A row of `mosque_admins` (generated/tables.ts). */
export type AdminRow = Selectable<MosqueAdminsTable>;

export interface AdminFlags {
  is_owner: boolean;
  can_trigger: boolean;
  can_manage: boolean;
}

export interface Admin extends AdminFlags {
  user_id: string;
  email: string;
}

export function toFlags(row: AdminRow): AdminFlags {
  return { is_owner: row.is_owner === 1, can_trigger: row.can_trigger === 1, can_manage: row.can_manage === 1 };
}

/** Who is asking: the token's id and whether its role is superadmin (no query for that: docs/walkthrough.md, "3. The mosque and its members"). */
export interface Actor {
  id: string;
  isSuperadmin: boolean;
}

/**
 * A caller's standing in one mosque (docs/walkthrough.md, "3. The mosque and its members"). A superadmin passes every per-mosque
 * check without a row; there is no global mosque-admin role.
 */
export interface Standing {
  superadmin: boolean;
  admin: boolean;
  trigger: boolean;
  manager: boolean;
  owner: boolean;
}

export function standingOf(actor: Actor, row: AdminRow | null): Standing {
  const s = actor.isSuperadmin;
  return {
    superadmin: s,
    admin: s || row !== null,
    trigger: s || row?.can_trigger === 1,
    manager: s || row?.can_manage === 1,
    owner: s || row?.is_owner === 1,
  };
}

/**
 * The mosque_admins table. A writer joins its caller's `Work` when given one (its announcement waits for that
 * commit), else runs alone.
 */
export interface AdminStore {
  find(mosqueId: string, userId: string, q?: Queries): Promise<AdminRow | null>;
  /** Each admin with their email and whether their addresses are proven (docs/api.md, "Addresses: claims and proof"). */
  listForMosque(mosqueId: string, q?: Queries): Promise<Array<AdminRow & Omit<Contact, 'phone'>>>;
  listForUser(userId: string): Promise<AdminRow[]>;
  insert(w: Work | undefined, mosqueId: string, userId: string, flags: AdminFlags): Promise<AdminRow>;
  setFlags(w: Work | undefined, mosqueId: string, userId: string, flags: AdminFlags): Promise<AdminRow>;
  remove(w: Work | undefined, mosqueId: string, userId: string): Promise<void>;
  /** Mosques where the user is the owner (a user who owns a mosque cannot simply be deleted). */
  ownedBy(userId: string): Promise<string[]>;
}

/** Every write is announced on `changes` (kind `standing`, the user's id) once it commits: /me shows a user's admin rows. */
export function createAdminStore(
  store: Store, clock: Clock, users: Pick<UserStore, 'contactsOf'>, changes: ChangePublisher = noChanges,
): AdminStore {
  const bit = (b: boolean) => (b ? 1 : 0);
  const now = () => toUnixSeconds(clock());
  const changed = (userId: string) => changes.publish({ kind: 'standing', id: userId });
  // Compiled once: every mosque route reads the caller's admin row (api/guards.ts checkStanding).
  const oneQuery = prepared<{ mosqueId: string; userId: string }, AdminRow>(store, ['mosqueId', 'userId'], (v) =>
    store.selectFrom('mosque_admins').selectAll().where('mosque_id', '=', v.mosqueId).where('user_id', '=', v.userId));
  const one = async (q: Queries, mosqueId: string, userId: string): Promise<AdminRow | undefined> => (await oneQuery.run(q, { mosqueId, userId })).rows[0];
  // Each admin with their email, which the people's store keeps: the owner first, then by when and by email.
  const withEmails = (rows: AdminRow[], contacts: Map<string, Contact>) => {
    return rows.flatMap((r) => {
      const c = contacts.get(r.user_id);
      return c ? [{ ...r, email: c.email, email_proven: c.email_proven, phone_proven: c.phone_proven }] : [];
    }).sort((a, b) => b.is_owner - a.is_owner || a.created_at - b.created_at || (a.email < b.email ? -1 : a.email > b.email ? 1 : 0));
  };

  return {
    find: async (mosqueId, userId, q = store) => (await one(q, mosqueId, userId)) ?? null,
    async listForMosque(mosqueId, q = store) {
      const rows = await q.selectFrom('mosque_admins').selectAll().where('mosque_id', '=', mosqueId)
        .orderBy('is_owner', 'desc').orderBy('created_at').execute();
      return withEmails(rows, await users.contactsOf(rows.map((r) => r.user_id), q));
    },
    listForUser: (userId) => store.selectFrom('mosque_admins').selectAll().where('user_id', '=', userId).orderBy('created_at').execute(),
    insert: (w, mosqueId, userId, f) => within(store, w, async ({ q, afterCommit }) => {
      await q.insertInto('mosque_admins').values({
        mosque_id: mosqueId, user_id: userId, is_owner: bit(f.is_owner), can_trigger: bit(f.can_trigger), can_manage: bit(f.can_manage), created_at: now(), updated_at: now(),
      }).execute();
      afterCommit(() => changed(userId));
      return (await one(q, mosqueId, userId))!;
    }),
    setFlags: (w, mosqueId, userId, f) => within(store, w, async ({ q, afterCommit }) => {
      await q.updateTable('mosque_admins').set({ is_owner: bit(f.is_owner), can_trigger: bit(f.can_trigger), can_manage: bit(f.can_manage), updated_at: now() })
        .where('mosque_id', '=', mosqueId).where('user_id', '=', userId).execute();
      afterCommit(() => changed(userId));
      return (await one(q, mosqueId, userId))!;
    }),
    remove: (w, mosqueId, userId) => within(store, w, async ({ q, afterCommit }) => {
      await q.deleteFrom('mosque_admins').where('mosque_id', '=', mosqueId).where('user_id', '=', userId).execute();
      afterCommit(() => changed(userId));
    }),
    async ownedBy(userId) {
      const rows = await store.selectFrom('mosque_admins').select('mosque_id').where('user_id', '=', userId).where('is_owner', '=', 1).execute();
      return rows.map((r) => r.mosque_id);
    },
  };
}
