import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { identifierHash, isSyntheticEmail, lostClaimEmail } from '../platform/identifiers.ts';
import { noChanges, type ChangeListener, type ChangePublisher } from '../platform/changes.ts';

export type Role = 'member' | 'superadmin';

export interface UserRow {
  id: string;
  email: string;
  email_hash: string;
  phone: string | null;
  phone_hash: string | null;
  /** When the account proved the address; null: the address is only claimed (docs/api.md, "Addresses: claims and proof"). */
  email_proven_at: number | null;
  phone_proven_at: number | null;
  /** 1: someone signed in to the account while none of its addresses was proven. */
  used_unproven: number;
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
  /** Whether the account proved its email / phone; an unproven one is a claim that receives nothing addressed to it. */
  email_proven: boolean;
  phone_proven: boolean;
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
    email_proven: row.email_proven_at !== null,
    phone_proven: row.phone_proven_at !== null,
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
  /** Addresses the creator vouches for (the operator's CLI); otherwise both are claims. */
  proven?: { email?: boolean; phone?: boolean };
  /** The creator signs in to it at once (signup): see UserRow.used_unproven. */
  usedUnproven?: boolean;
}

/** Whether the account has proven an email or a phone. */
export function hasProvenAddress(row: Pick<UserRow, 'email_proven_at' | 'phone_proven_at'>): boolean {
  return row.email_proven_at !== null || row.phone_proven_at !== null;
}

/** Which of the account's addresses `hash` names, if any. */
export function addressKindOf(row: Pick<UserRow, 'email_hash' | 'phone_hash'>, hash: string): 'email' | 'phone' | null {
  if (row.email_hash === hash) return 'email';
  if (row.phone_hash === hash) return 'phone';
  return null;
}

/**
 * The user table plus the in-memory map of token versions that every authenticated request is checked
 * against (no query per request). Every write that touches a version goes through here, so the map
 * cannot drift from the table within one process.
 */
/** How an account is reached: what a mosque's admins see of a member or an admin. */
export interface Contact {
  email: string;
  phone: string | null;
}

export interface UserStore {
  findById(id: string): UserRow | null;
  /** The email and phone of each of these accounts, by id (another domain's list names its people by them). */
  contactsOf(ids: readonly string[]): Map<string, Contact>;
  /**
   * The account a sign-in with this identifier reaches: the one that proved the address, else the first
   * that claimed it (docs/api.md, "Addresses: claims and proof").
   */
  findByIdentifierHash(hash: string): UserRow | null;
  /** The account that proved this address, if any. */
  findProvenHolder(hash: string): UserRow | null;
  /** Every account claiming this address without having proven it, oldest first. */
  listUnprovenClaimants(hash: string): UserRow[];
  findByEmail(email: string): UserRow | null;
  create(user: NewUser): UserRow;
  /** Marks the address (`hash`, one of the account's) proven now. */
  markProven(id: string, hash: string): void;
  /** The account loses its claim to this address (another proved it): an email becomes a placeholder, a phone goes. Raises the token version. */
  dropClaim(id: string, hash: string): void;
  /** Someone signed in to the account while none of its addresses was proven. */
  markUsedUnproven(id: string): void;
  /**
   * The owner of the address took the account over without its token: the password whoever used it before
   * set goes, and with it every token (src/people/addresses/address-proof.ts).
   */
  resetAfterTakeover(id: string): void;
  /** Whether any superadmin exists (the first start in the browser: src/people/first-superadmin.ts). */
  hasSuperadmin(): boolean;
  /** Records that the address was told of a signup attempt now, unless it was within `gapSeconds`; true when recorded. */
  claimSignupNotice(addressHash: string, gapSeconds: number): boolean;
  setPassword(id: string, passwordBcrypt: string): void;
  /** Raises the user's token version: every access token issued before stops working at once. */
  revokeTokens(id: string): void;
  delete(id: string): boolean;
  list(limit: number, offset: number): UserRow[];
  /** Changes contact fields or role; a role or email change raises the token version (docs/api.md, "Signing in"). */
  update(id: string, fields: UserUpdate): UserRow;
  tokenVersion(id: string): number | undefined;
  /** Re-reads every token version (several processes sharing one database: see src/service.ts). */
  reloadVersions(): void;
  /** Re-reads one user's token version (another process changed the row: the change feed said so). */
  reloadVersion(id: string): void;
  /**
   * This cache's subscription to the change feed (src/platform/changes.ts): another process's change to a user
   * is read again (this process's own are current already); a resync reads every version.
   */
  followChanges: ChangeListener;
}

/** Every write here is announced on `changes` (kind `user`) right after it commits. */
export function createUserStore(db: Db, clock: Clock, changes: ChangePublisher = noChanges): UserStore {
  const byId = db.prepare<[string], UserRow>('SELECT * FROM users WHERE id = ?');
  // One statement for a whole list: the ids travel as one JSON array (a mosque's members are hundreds).
  const contacts = db.prepare<[string], Contact & { id: string }>('SELECT id, email, phone FROM users WHERE id IN (SELECT value FROM json_each(?))');
  const provenHolder = db.prepare<[string, string], UserRow>(
    `SELECT * FROM users WHERE email_hash = ? AND email_proven_at IS NOT NULL
     UNION ALL SELECT * FROM users WHERE phone_hash = ? AND phone_proven_at IS NOT NULL LIMIT 1`,
  );
  const claimants = db.prepare<[string, string], UserRow>(
    `SELECT * FROM users WHERE rowid IN (SELECT rowid FROM users WHERE email_hash = ? AND email_proven_at IS NULL
                                         UNION SELECT rowid FROM users WHERE phone_hash = ? AND phone_proven_at IS NULL)
     ORDER BY created_at, rowid`,
  );
  const proveEmail = db.prepare('UPDATE users SET email_proven_at = ?, updated_at = ? WHERE id = ? AND email_hash = ?');
  const provePhone = db.prepare('UPDATE users SET phone_proven_at = ?, updated_at = ? WHERE id = ? AND phone_hash = ?');
  const loseEmail = db.prepare(
    `UPDATE users SET email = ?, email_hash = ?, email_proven_at = NULL, token_version = token_version + 1, updated_at = ?
     WHERE id = ? AND email_hash = ?`,
  );
  const losePhone = db.prepare(
    `UPDATE users SET phone = NULL, phone_hash = NULL, phone_proven_at = NULL, token_version = token_version + 1, updated_at = ?
     WHERE id = ? AND phone_hash = ?`,
  );
  const usedUnproven = db.prepare('UPDATE users SET used_unproven = 1 WHERE id = ? AND used_unproven = 0');
  const anySuperadmin = db.prepare<[], { one: number }>("SELECT 1 AS one FROM users WHERE role = 'superadmin' LIMIT 1");
  const takeover = db.prepare(
    'UPDATE users SET password_bcrypt = NULL, used_unproven = 0, token_version = token_version + 1, updated_at = ? WHERE id = ?',
  );
  const notice = db.prepare(
    `INSERT INTO signup_notices (address_hash, sent_at) VALUES (@hash, @now)
     ON CONFLICT (address_hash) DO UPDATE SET sent_at = excluded.sent_at WHERE signup_notices.sent_at <= @now - @gap`,
  );
  const byEmail = db.prepare<[string], UserRow>('SELECT * FROM users WHERE email = ?');
  const insert = db.prepare(
    `INSERT INTO users (id, email, email_hash, email_proven_at, phone, phone_hash, phone_proven_at, used_unproven, password_bcrypt, role,
                        token_version, created_at, updated_at)
     VALUES (@id, @email, @email_hash, @email_proven_at, @phone, @phone_hash, @phone_proven_at, @used_unproven, @password_bcrypt, @role,
             0, @now, @now)`,
  );
  const updatePassword = db.prepare(
    'UPDATE users SET password_bcrypt = ?, token_version = token_version + 1, updated_at = ? WHERE id = ?',
  );
  const bumpVersion = db.prepare('UPDATE users SET token_version = token_version + 1, updated_at = ? WHERE id = ?');
  const remove = db.prepare('DELETE FROM users WHERE id = ?');
  const page = db.prepare<[number, number], UserRow>('SELECT * FROM users ORDER BY created_at, rowid LIMIT ? OFFSET ?');
  const updateRow = db.prepare(
    `UPDATE users SET email = @email, email_hash = @email_hash, email_proven_at = @email_proven_at, phone = @phone, phone_hash = @phone_hash,
       phone_proven_at = @phone_proven_at, role = @role, password_bcrypt = @password_bcrypt, token_version = token_version + @bump,
       updated_at = @now WHERE id = @id`,
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
    contactsOf: (ids) => new Map(ids.length === 0 ? [] : contacts.all(JSON.stringify([...new Set(ids)])).map(({ id, email, phone }) => [id, { email, phone }])),
    findByIdentifierHash: (hash) => provenHolder.get(hash, hash) ?? claimants.get(hash, hash) ?? null,
    findProvenHolder: (hash) => provenHolder.get(hash, hash) ?? null,
    listUnprovenClaimants: (hash) => claimants.all(hash, hash),
    markProven(id, hash) {
      const now = toUnixSeconds(clock());
      proveEmail.run(now, now, id, hash);
      provePhone.run(now, now, id, hash);
      changed(id);
    },
    dropClaim(id, hash) {
      const now = toUnixSeconds(clock());
      const placeholder = lostClaimEmail(id);
      loseEmail.run(placeholder, identifierHash(placeholder), now, id, hash);
      losePhone.run(now, id, hash);
      refreshVersion(id);
      changed(id);
    },
    resetAfterTakeover(id) {
      takeover.run(toUnixSeconds(clock()), id);
      refreshVersion(id);
      changed(id);
    },
    hasSuperadmin: () => anySuperadmin.get() !== undefined,
    claimSignupNotice: (hash, gap) => notice.run({ hash, now: toUnixSeconds(clock()), gap }).changes > 0,
    markUsedUnproven(id) {
      if (usedUnproven.run(id).changes > 0) changed(id);
    },
    findByEmail: (email) => byEmail.get(email) ?? null,
    create(user) {
      const id = crypto.randomUUID();
      insert.run({
        id,
        email: user.email,
        email_hash: user.emailHash,
        phone: user.phone,
        phone_hash: user.phoneHash,
        email_proven_at: user.proven?.email && !isSyntheticEmail(user.email) ? toUnixSeconds(clock()) : null,
        phone_proven_at: user.proven?.phone && user.phone ? toUnixSeconds(clock()) : null,
        used_unproven: user.usedUnproven ? 1 : 0,
        password_bcrypt: user.passwordBcrypt,
        role: user.role,
        now: toUnixSeconds(clock()),
      });
      versions.set(id, 0);
      changed(id);
      return byId.get(id)!;
    },
    // A new password revokes every older token (docs/api.md, "Signing in").
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
    followChanges: {
      changed: (change, origin) => {
        if (origin === 'remote' && change.kind === 'user') refreshVersion(change.id);
      },
      resync: reloadVersions,
    },
    update(id, f) {
      const row = byId.get(id)!;
      const roleChanged = f.role !== undefined && f.role !== row.role;
      // A new address is a claim until proven; an email change, by anyone, ends every older token (the email is
      // where codes and reset links go: a session must not outlive the address it was opened under).
      const emailChanged = f.email !== undefined && f.email.emailHash !== row.email_hash;
      const phoneChanged = f.phone !== undefined && f.phone.phoneHash !== row.phone_hash;
      updateRow.run({
        id,
        email: f.email?.email ?? row.email,
        email_hash: f.email?.emailHash ?? row.email_hash,
        email_proven_at: emailChanged ? null : row.email_proven_at,
        phone: f.phone === undefined ? row.phone : f.phone.phone,
        phone_hash: f.phone === undefined ? row.phone_hash : f.phone.phoneHash,
        phone_proven_at: phoneChanged ? null : row.phone_proven_at,
        role: f.role ?? row.role,
        password_bcrypt: f.passwordBcrypt ?? row.password_bcrypt,
        bump: roleChanged || emailChanged || f.passwordBcrypt !== undefined ? 1 : 0,
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
