import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';
import type { SyncUserReads } from '../people/users.ts';

export interface AdminRow {
  mosque_id: string;
  user_id: string;
  is_owner: number;
  can_trigger: number;
  can_manage: number;
  created_at: number;
  updated_at: number;
}

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

export interface AdminStore {
  find(mosqueId: string, userId: string): AdminRow | null;
  listForMosque(mosqueId: string): Array<AdminRow & { email: string }>;
  listForUser(userId: string): AdminRow[];
  insert(mosqueId: string, userId: string, flags: AdminFlags): AdminRow;
  setFlags(mosqueId: string, userId: string, flags: AdminFlags): AdminRow;
  remove(mosqueId: string, userId: string): void;
  /** Mosques where the user is the owner (a user who owns a mosque cannot simply be deleted). */
  ownedBy(userId: string): string[];
}

/** Every write is announced on `changes` (kind `standing`, the user's id): /me shows a user's admin rows. */
export function createAdminStore(db: Db, clock: Clock, users: Pick<SyncUserReads, 'contactsOf'>, changes: ChangePublisher = noChanges): AdminStore {
  const one = db.prepare<[string, string], AdminRow>('SELECT * FROM mosque_admins WHERE mosque_id = ? AND user_id = ?');
  const ofMosque = db.prepare<[string], AdminRow>('SELECT * FROM mosque_admins WHERE mosque_id = ? ORDER BY is_owner DESC, created_at');
  const ofUser = db.prepare<[string], AdminRow>('SELECT * FROM mosque_admins WHERE user_id = ? ORDER BY created_at');
  const insert = db.prepare(
    `INSERT INTO mosque_admins (mosque_id, user_id, is_owner, can_trigger, can_manage, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?, ?)`,
  );
  const update = db.prepare(
    'UPDATE mosque_admins SET is_owner = ?, can_trigger = ?, can_manage = ?, updated_at = ? WHERE mosque_id = ? AND user_id = ?',
  );
  const remove = db.prepare('DELETE FROM mosque_admins WHERE mosque_id = ? AND user_id = ?');
  const owned = db.prepare<[string], { mosque_id: string }>('SELECT mosque_id FROM mosque_admins WHERE user_id = ? AND is_owner = 1');
  const bit = (b: boolean) => (b ? 1 : 0);
  const now = () => toUnixSeconds(clock());
  const changed = (userId: string) => changes.publish({ kind: 'standing', id: userId });

  return {
    find: (mosqueId, userId) => one.get(mosqueId, userId) ?? null,
    // Each admin with their email, which the people's store keeps: the owner first, then by when and by email.
    listForMosque: (mosqueId) => {
      const rows = ofMosque.all(mosqueId);
      const contacts = users.contactsOf(rows.map((r) => r.user_id));
      return rows.flatMap((r) => {
        const c = contacts.get(r.user_id);
        return c ? [{ ...r, email: c.email }] : [];
      }).sort((a, b) => b.is_owner - a.is_owner || a.created_at - b.created_at || (a.email < b.email ? -1 : a.email > b.email ? 1 : 0));
    },
    listForUser: (userId) => ofUser.all(userId),
    insert(mosqueId, userId, f) {
      insert.run(mosqueId, userId, bit(f.is_owner), bit(f.can_trigger), bit(f.can_manage), now(), now());
      changed(userId);
      return one.get(mosqueId, userId)!;
    },
    setFlags(mosqueId, userId, f) {
      update.run(bit(f.is_owner), bit(f.can_trigger), bit(f.can_manage), now(), mosqueId, userId);
      changed(userId);
      return one.get(mosqueId, userId)!;
    },
    remove(mosqueId, userId) {
      remove.run(mosqueId, userId);
      changed(userId);
    },
    ownedBy: (userId) => owned.all(userId).map((r) => r.mosque_id),
  };
}
