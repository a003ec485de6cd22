import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { isSyntheticEmail } from '../platform/identifiers.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';

export type Role = 'member' | 'superadmin';

export interface UserRow {
  id: string;
  email: string;
  email_hash: string;
  phone: string | null;
  phone_hash: string | null;
  password_bcrypt: string | null;
  role: Role;
  token_version: number;
  created_at: number;
  updated_at: number;
}

/** The public shape of a user in HTTP bodies. */
export interface User {
  id: string;
  email: string;
  phone: string | null;
  role: Role;
  has_password: boolean;
  email_is_placeholder: boolean;
  created_at: string;
}

export function toUser(row: UserRow): User {
  return {
    id: row.id,
    email: row.email,
    phone: row.phone,
    role: row.role,
    has_password: row.password_bcrypt !== null,
    email_is_placeholder: isSyntheticEmail(row.email),
    created_at: toIsoString(row.created_at),
  };
}

export interface UserUpdate {
  email?: { email: string; emailHash: string };
  phone?: { phone: string | null; phoneHash: string | null };
  role?: Role;
  passwordBcrypt?: string;
}

export interface NewUser {
  email: string;
  emailHash: string;
  phone: string | null;
  phoneHash: string | null;
  passwordBcrypt: string | null;
  role: Role;
}

/**
 * The user table plus the in-memory map of token versions that every authenticated request is checked
 * against (no query per request). Every write that touches a version goes through here, so the map
 * cannot drift from the table within one process.
 */
export interface UserStore {
  findById(id: string): UserRow | null;
  findByIdentifierHash(hash: string): UserRow | null;
  findByEmail(email: string): UserRow | null;
  create(user: NewUser): UserRow;
  setPassword(id: string, passwordBcrypt: string): void;
  /** Raises the user's token version: every access token issued before stops working at once. */
  revokeTokens(id: string): void;
  delete(id: string): boolean;
  list(limit: number, offset: number): UserRow[];
  /** Changes contact fields or role; a role change raises the token version (contract 3). */
  update(id: string, fields: UserUpdate): UserRow;
  tokenVersion(id: string): number | undefined;
  /** Re-reads every token version (several processes sharing one database: see src/service.ts). */
  reloadVersions(): void;
  /** Re-reads one user's token version (another process changed the row: the change feed said so). */
  reloadVersion(id: string): void;
}

/** Every write here is announced on `changes` (kind `user`) right after it commits. */
export function createUserStore(db: Db, clock: Clock, changes: ChangePublisher = noChanges): UserStore {
  const byId = db.prepare<[string], UserRow>('SELECT * FROM users WHERE id = ?');
  const byIdentifier = db.prepare<[string, string], UserRow>(
    'SELECT * FROM users WHERE email_hash = ? UNION ALL SELECT * FROM users WHERE phone_hash = ? LIMIT 1',
  );
  const byEmail = db.prepare<[string], UserRow>('SELECT * FROM users WHERE email = ?');
  const insert = db.prepare(
    `INSERT INTO users (id, email, email_hash, phone, phone_hash, password_bcrypt, role, token_version, created_at, updated_at)
     VALUES (@id, @email, @email_hash, @phone, @phone_hash, @password_bcrypt, @role, 0, @now, @now)`,
  );
  const updatePassword = db.prepare(
    'UPDATE users SET password_bcrypt = ?, token_version = token_version + 1, updated_at = ? WHERE id = ?',
  );
  const bumpVersion = db.prepare('UPDATE users SET token_version = token_version + 1, updated_at = ? WHERE id = ?');
  const remove = db.prepare('DELETE FROM users WHERE id = ?');
  const page = db.prepare<[number, number], UserRow>('SELECT * FROM users ORDER BY created_at, rowid LIMIT ? OFFSET ?');
  const updateRow = db.prepare(
    `UPDATE users SET email = @email, email_hash = @email_hash, phone = @phone, phone_hash = @phone_hash, role = @role,
       password_bcrypt = @password_bcrypt, token_version = token_version + @bump, updated_at = @now WHERE id = @id`,
  );

  // id -> token version; null marks a user known to be gone. A miss (a user created by the CLI while the
  // service runs) costs one query, then lives here: tokens are verified before this is asked, so a miss
  // cannot be forced by an anonymous caller.
  const versions = new Map<string, number | null>();
  const versionOf = db.prepare<[string], { token_version: number }>('SELECT token_version FROM users WHERE id = ?');
  const allVersions = db.prepare<[], { id: string; token_version: number }>('SELECT id, token_version FROM users');
  const reloadVersions = () => {
    versions.clear();
    for (const row of allVersions.iterate()) versions.set(row.id, row.token_version);
  };
  reloadVersions();
  const refreshVersion = (id: string) => {
    const row = versionOf.get(id);
    versions.set(id, row ? row.token_version : null);
  };
  const changed = (id: string) => changes.publish({ kind: 'user', id });

  return {
    findById: (id) => byId.get(id) ?? null,
    findByIdentifierHash: (hash) => byIdentifier.get(hash, hash) ?? null,
    findByEmail: (email) => byEmail.get(email) ?? null,
    create(user) {
      const id = crypto.randomUUID();
      insert.run({
        id,
        email: user.email,
        email_hash: user.emailHash,
        phone: user.phone,
        phone_hash: user.phoneHash,
        password_bcrypt: user.passwordBcrypt,
        role: user.role,
        now: toUnixSeconds(clock()),
      });
      versions.set(id, 0);
      changed(id);
      return byId.get(id)!;
    },
    // A new password revokes every older token (contract 3).
    setPassword(id, passwordBcrypt) {
      updatePassword.run(passwordBcrypt, toUnixSeconds(clock()), id);
      refreshVersion(id);
      changed(id);
    },
    revokeTokens(id) {
      bumpVersion.run(toUnixSeconds(clock()), id);
      refreshVersion(id);
      changed(id);
    },
    delete(id) {
      const removed = remove.run(id).changes > 0;
      versions.set(id, null);
      if (removed) changed(id);
      return removed;
    },
    list: (limit, offset) => page.all(limit, offset),
    reloadVersions,
    reloadVersion: refreshVersion,
    update(id, f) {
      const row = byId.get(id)!;
      const roleChanged = f.role !== undefined && f.role !== row.role;
      updateRow.run({
        id,
        email: f.email?.email ?? row.email,
        email_hash: f.email?.emailHash ?? row.email_hash,
        phone: f.phone === undefined ? row.phone : f.phone.phone,
        phone_hash: f.phone === undefined ? row.phone_hash : f.phone.phoneHash,
        role: f.role ?? row.role,
        password_bcrypt: f.passwordBcrypt ?? row.password_bcrypt,
        bump: roleChanged || f.passwordBcrypt !== undefined ? 1 : 0,
        now: toUnixSeconds(clock()),
      });
      refreshVersion(id);
      changed(id);
      return byId.get(id)!;
    },
    tokenVersion(id) {
      let version = versions.get(id);
      if (version === undefined) {
        version = versionOf.get(id)?.token_version ?? null;
        versions.set(id, version);
      }
      return version ?? undefined;
    },
  };
}
