import crypto from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import type { Queries, Store, StoreTransaction } from '../platform/store/store.ts';
import { prepared } from '../platform/store/prepared.ts';
import { afterCommit, inTransaction } from '../platform/store/after-commit.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { identifierHash, isSyntheticEmail, lostClaimEmail } from '../platform/identifiers.ts';
import { noChanges, type ChangeListener, type ChangePublisher } from '../platform/changes.ts';
import type { UsersTable } from '../../generated/tables.ts';

export type Role = 'member' | 'superadmin';

/**
 * A row of `users` (generated/tables.ts), its role narrowed to the values written here. `email_proven_at` and
 * `phone_proven_at`: when the account proved the address, null while it is only claimed (docs/api.md,
 * "Addresses: claims and proof"). `email_claim_order` / `phone_claim_order`: when the address was claimed, in one
 * number space (claims of one address are ordered by it). `used_unproven` is no longer read: an account with no
 * proven address holds nothing, so whoever used it before a proof has nothing to keep (docs/decisions.md,
 * "An account that has proven nothing holds nothing").
 */
export type UserRow = Omit<Selectable<UsersTable>, 'role'> & { role: Role };

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
}

/** Whether the account has proven an email or a phone. */
export function hasProvenAddress(row: Pick<UserRow, 'email_proven_at' | 'phone_proven_at'>): boolean {
  return row.email_proven_at !== null || row.phone_proven_at !== null;
}

/**
 * Whether the account may hold anything: a membership, an admin or owner row, a device, a push subscription
 * (docs/api.md, "Addresses: claims and proof"). An account whose every address is unproven holds nothing; a
 * superadmin is vouched for by the operator who made it.
 */
export function mayHold(row: Pick<UserRow, 'email_proven_at' | 'phone_proven_at' | 'role'>): boolean {
  return row.role === 'superadmin' || hasProvenAddress(row);
}

/** Which of the account's addresses `hash` names, if any. */
export function addressKindOf(row: Pick<UserRow, 'email_hash' | 'phone_hash'>, hash: string): 'email' | 'phone' | null {
  if (row.email_hash === hash) return 'email';
  if (row.phone_hash === hash) return 'phone';
  return null;
}

/**
 * How an account is reached: what a mosque's admins see of a member or an admin, with whether each address is
 * proven or only claimed (docs/api.md, "Addresses: claims and proof").
 */
export interface Contact {
  email: string;
  phone: string | null;
  email_proven: boolean;
  phone_proven: boolean;
}

/**
 * The user table plus the in-memory map of token versions that every authenticated request is checked
 * against (no query per request). Every write that touches a version goes through here, so the map
 * cannot drift from the table within one process. Methods taking `q` join the caller's transaction when it
 * was opened by `transaction` below (the map and the change feed hear of those writes once it commits).
 */
export interface UserStore {
  findById(id: string, q?: Queries): Promise<UserRow | null>;
  /**
   * The account a sign-in with this identifier reaches: the one that proved the address, else the first
   * that claimed it (docs/api.md, "Addresses: claims and proof").
   */
  findByIdentifierHash(hash: string): Promise<UserRow | null>;
  /** The account that proved this address, if any. */
  findProvenHolder(hash: string, q?: Queries): Promise<UserRow | null>;
  /** Every account claiming this address without having proven it, in the order the claims were made. */
  listUnprovenClaimants(hash: string, q?: Queries): Promise<UserRow[]>;
  findByEmail(email: string): Promise<UserRow | null>;
  /** The email and phone of each of these accounts and whether each is proven, by id (another domain's list names its people by them). */
  contactsOf(ids: readonly string[], q?: Queries): Promise<Map<string, Contact>>;
  create(user: NewUser, q?: Queries): Promise<UserRow>;
  /** Marks the address (`hash`, one of the account's) proven now. */
  markProven(id: string, hash: string, q?: Queries): Promise<void>;
  /** The account loses its claim to this address (another proved it): an email becomes a placeholder, a phone goes. Raises the token version. */
  dropClaim(id: string, hash: string, q?: Queries): Promise<void>;
  /**
   * The owner of the address took the account over without its token: the password whoever used it before
   * set goes, and with it every token and console session (src/people/addresses/address-proof.ts).
   */
  resetAfterTakeover(id: string, q?: Queries): Promise<void>;
  /** Whether any superadmin exists (the first start in the browser: src/people/admin/first-superadmin.ts). */
  hasSuperadmin(): Promise<boolean>;
  /** Records that the address was told of a signup attempt now, unless it was within `gapSeconds`; true when recorded. */
  claimSignupNotice(addressHash: string, gapSeconds: number): Promise<boolean>;
  setPassword(id: string, passwordBcrypt: string): Promise<void>;
  /** Raises the user's token version: every access token issued before stops working at once. */
  revokeTokens(id: string): Promise<void>;
  delete(id: string): Promise<boolean>;
  list(limit: number, offset: number): Promise<UserRow[]>;
  /**
   * Changes contact fields or role; a role or email change raises the token version (docs/api.md, "Signing in"),
   * and so does a change that leaves the account with no proven address. A new address is a claim made now.
   * Answers the row before and after.
   */
  update(id: string, fields: UserUpdate): Promise<{ before: UserRow; after: UserRow }>;
  /**
   * In memory: asked on every authenticated request. A user memory does not know yet (created by another
   * process or the CLI a moment ago) is read once from the store: then the answer is a promise.
   */
  tokenVersion(id: string): number | undefined | Promise<number | undefined>;
  /** Re-reads every token version (several processes sharing one database: see src/service.ts). */
  reloadVersions(): Promise<void>;
  /** Re-reads one user's token version (another process changed the row: the change feed said so). */
  reloadVersion(id: string): Promise<void>;
  /**
   * This cache's subscription to the change feed (src/platform/changes.ts): another process's change to a user
   * is read again (this process's own are current already); a resync reads every version.
   */
  followChanges: ChangeListener;
  /**
   * Runs `fn` in one store transaction; the version map and the change feed hear of the writes made through
   * its `trx` only after the commit (a rolled-back write never reaches them).
   */
  transaction<T>(fn: (trx: StoreTransaction) => Promise<T>): Promise<T>;
}

/**
 * Every write here is announced on `changes` (kind `user`) right after it commits. Resolves once every token
 * version is in memory.
 */
export async function createUserStore(
  store: Store, clock: Clock, changes: ChangePublisher = noChanges,
  /** Where a reload the feed started and no caller awaits reports its failure. */
  onError: (what: string, err: unknown) => void = () => undefined,
): Promise<UserStore> {
  const now = () => toUnixSeconds(clock());

  // What a write tells the map and the feed waits for the COMMIT of the transaction it was made in
  // (src/platform/store/after-commit.ts); a write on the store itself is told at once.

  // id -> token version; null marks a user known to be gone. A miss (a user created by the CLI while the
  // service runs) costs one query, then lives here: tokens are verified before this is asked, so a miss
  // cannot be forced by an anonymous caller.
  let versions = new Map<string, number | null>();
  // Ids whose version was set while a full reload was reading: the reload keeps what they were set to.
  const reloads = new Set<Set<string>>();
  const setVersion = (id: string, version: number | null) => {
    versions.set(id, version);
    for (const touched of reloads) touched.add(id);
  };
  const reloadVersions = async () => {
    const touched = new Set<string>();
    reloads.add(touched);
    try {
      const rows = await store.selectFrom('users').select(['id', 'token_version']).execute();
      // Built aside and swapped in whole: a request checked while the rows are read still sees the old map.
      const next = new Map<string, number | null>();
      for (const row of rows) next.set(row.id, row.token_version);
      for (const id of touched) next.set(id, versions.get(id) ?? null);
      versions = next;
    } finally {
      reloads.delete(touched);
    }
  };
  await reloadVersions();
  const refreshVersion = async (id: string, q: Queries = store) => {
    const row = await q.selectFrom('users').select('token_version').where('id', '=', id).executeTakeFirst();
    afterCommit(q, () => setVersion(id, row ? row.token_version : null));
  };
  const changed = (id: string, q: Queries = store) => afterCommit(q, () => changes.publish({ kind: 'user', id }));
  /** A write that raised the version returned the row's new one (none: the user is gone). */
  const versionWritten = (id: string, row: { token_version: number } | undefined, q: Queries = store) => {
    afterCommit(q, () => setVersion(id, row ? row.token_version : null));
    changed(id, q);
  };

  const byVersion = prepared<{ id: string }, { token_version: number }>(store, ['id'], (v) =>
    store.selectFrom('users').select('token_version').where('id', '=', v.id));
  const byId = (q: Queries, id: string) => q.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst() as Promise<UserRow | undefined>;
  const provenHolder = (q: Queries, hash: string) => q.selectFrom('users').selectAll().where('email_hash', '=', hash).where('email_proven_at', 'is not', null)
    .unionAll((eb) => eb.selectFrom('users').selectAll().where('phone_hash', '=', hash).where('phone_proven_at', 'is not', null))
    .limit(1).executeTakeFirst() as Promise<UserRow | undefined>;
  // Ordered by when each claim was made (docs/api.md, "Addresses: claims and proof"), the account's age only
  // breaking a tie (two claims written at once on PostgreSQL may take the same number).
  const claimants = (q: Queries, hash: string) => q.selectFrom('users').selectAll()
    .select(sql<number>`CASE WHEN email_hash = ${hash} THEN email_claim_order ELSE phone_claim_order END`.as('claim_order'))
    .where((eb) => eb.or([
      eb.and([eb('email_hash', '=', hash), eb('email_proven_at', 'is', null)]),
      eb.and([eb('phone_hash', '=', hash), eb('phone_proven_at', 'is', null)]),
    ]))
    .orderBy('claim_order').orderBy('claim_seq');

  return {
    findById: async (id, q = store) => (await byId(q, id)) ?? null,
    findByIdentifierHash: async (hash) => (await provenHolder(store, hash)) ?? withoutOrder((await claimants(store, hash).executeTakeFirst()) as ClaimRow | undefined) ?? null,
    findProvenHolder: async (hash, q = store) => (await provenHolder(q, hash)) ?? null,
    listUnprovenClaimants: async (hash, q = store) => ((await claimants(q, hash).execute()) as ClaimRow[]).map((r) => withoutOrder(r)!),
    async markProven(id, hash, q = store) {
      const at = now();
      await q.updateTable('users').set({ email_proven_at: at, updated_at: at }).where('id', '=', id).where('email_hash', '=', hash).execute();
      await q.updateTable('users').set({ phone_proven_at: at, updated_at: at }).where('id', '=', id).where('phone_hash', '=', hash).execute();
      changed(id, q);
    },
    async dropClaim(id, hash, q = store) {
      const at = now();
      const placeholder = lostClaimEmail(id);
      await q.updateTable('users')
        .set((eb) => ({ email: placeholder, email_hash: identifierHash(placeholder), email_proven_at: null, token_version: eb('token_version', '+', 1), updated_at: at }))
        .where('id', '=', id).where('email_hash', '=', hash).execute();
      await q.updateTable('users')
        .set((eb) => ({ phone: null, phone_hash: null, phone_proven_at: null, token_version: eb('token_version', '+', 1), updated_at: at }))
        .where('id', '=', id).where('phone_hash', '=', hash).execute();
      await refreshVersion(id, q);
      changed(id, q);
    },
    async resetAfterTakeover(id, q = store) {
      const row = await q.updateTable('users')
        .set((eb) => ({ password_bcrypt: null, used_unproven: 0, token_version: eb('token_version', '+', 1), updated_at: now() }))
        .where('id', '=', id).returning('token_version').executeTakeFirst();
      versionWritten(id, row, q);
    },
    hasSuperadmin: async () => (await store.selectFrom('users').select('id').where('role', '=', 'superadmin').limit(1).executeTakeFirst()) !== undefined,
    async claimSignupNotice(hash, gap) {
      const at = now();
      const result = await store.insertInto('signup_notices').values({ address_hash: hash, sent_at: at })
        .onConflict((oc) => oc.column('address_hash').doUpdateSet({ sent_at: at }).where('signup_notices.sent_at', '<=', at - gap))
        .executeTakeFirst();
      return (result.numInsertedOrUpdatedRows ?? 0n) > 0n;
    },
    findByEmail: async (email) => ((await store.selectFrom('users').selectAll().where('email', '=', email).executeTakeFirst()) as UserRow | undefined) ?? null,
    async contactsOf(ids, q = store) {
      const found = new Map<string, Contact>();
      const unique = [...new Set(ids)];
      for (let i = 0; i < unique.length; i += CONTACTS_PER_QUERY) {
        const rows = await q.selectFrom('users').select(['id', 'email', 'phone', 'email_proven_at', 'phone_proven_at'])
          .where('id', 'in', paddedIds(unique.slice(i, i + CONTACTS_PER_QUERY))).execute();
        for (const r of rows) found.set(r.id, { email: r.email, phone: r.phone, email_proven: r.email_proven_at !== null, phone_proven: r.phone_proven_at !== null });
      }
      return found;
    },
    async create(user, q = store) {
      const row = await q.insertInto('users').values({ ...newUserRow(user, clock), email_claim_order: nextClaimOrder(), phone_claim_order: nextClaimOrder() })
        .returningAll().executeTakeFirstOrThrow() as UserRow;
      afterCommit(q, () => setVersion(row.id, 0));
      changed(row.id, q);
      return row;
    },
    // A new password revokes every older token (docs/api.md, "Signing in").
    async setPassword(id, passwordBcrypt) {
      const row = await store.updateTable('users')
        .set((eb) => ({ password_bcrypt: passwordBcrypt, token_version: eb('token_version', '+', 1), updated_at: now() }))
        .where('id', '=', id).returning('token_version').executeTakeFirst();
      versionWritten(id, row);
    },
    async revokeTokens(id) {
      const row = await store.updateTable('users').set((eb) => ({ token_version: eb('token_version', '+', 1), updated_at: now() }))
        .where('id', '=', id).returning('token_version').executeTakeFirst();
      versionWritten(id, row);
    },
    async delete(id) {
      const result = await store.deleteFrom('users').where('id', '=', id).executeTakeFirst();
      const removed = result.numDeletedRows > 0n;
      setVersion(id, null);
      if (removed) changed(id);
      return removed;
    },
    list: (limit, offset) => store.selectFrom('users').selectAll().orderBy('created_at').orderBy('claim_seq').limit(limit).offset(offset).execute() as Promise<UserRow[]>,
    reloadVersions,
    reloadVersion: (id) => refreshVersion(id),
    followChanges: {
      changed: (change, origin) => {
        if (origin === 'remote' && change.kind === 'user') void refreshVersion(change.id).catch((err: unknown) => onError('token version reload', err));
      },
      resync: () => void reloadVersions().catch((err: unknown) => onError('token versions reload', err)),
    },
    async update(id, f) {
      // Read and written in one transaction, the row locked as it is read (FOR UPDATE: on PostgreSQL, READ
      // COMMITTED, two updates at once both read the old row and the second wrote over the first's fields;
      // SQLite's write lock from BEGIN already kept them apart, and its dialect leaves the clause out).
      const updated = await store.transaction().execute(async (trx) => {
        const row = (await trx.selectFrom('users').selectAll().where('id', '=', id).forUpdate().executeTakeFirst() as UserRow | undefined)!;
        const roleChanged = f.role !== undefined && f.role !== row.role;
        // A new address is a claim until proven; an email change, by anyone, ends every older token (the email is
        // where codes and reset links go: a session must not outlive the address it was opened under).
        const emailChanged = f.email !== undefined && f.email.emailHash !== row.email_hash;
        const phoneChanged = f.phone !== undefined && f.phone.phoneHash !== row.phone_hash;
        const emptied = hasProvenAddress(row) && !hasProvenAddress({
          email_proven_at: emailChanged ? null : row.email_proven_at, phone_proven_at: phoneChanged ? null : row.phone_proven_at,
        });
        const bump = roleChanged || emailChanged || emptied || f.passwordBcrypt !== undefined ? 1 : 0;
        const after = await trx.updateTable('users').set((eb) => ({
          email: f.email?.email ?? row.email,
          email_hash: f.email?.emailHash ?? row.email_hash,
          email_proven_at: emailChanged ? null : row.email_proven_at,
          email_claim_order: emailChanged ? nextClaimOrder() : row.email_claim_order,
          phone: f.phone === undefined ? row.phone : f.phone.phone,
          phone_hash: f.phone === undefined ? row.phone_hash : f.phone.phoneHash,
          phone_proven_at: phoneChanged ? null : row.phone_proven_at,
          phone_claim_order: phoneChanged ? nextClaimOrder() : row.phone_claim_order,
          role: f.role ?? row.role,
          password_bcrypt: f.passwordBcrypt ?? row.password_bcrypt,
          token_version: eb('token_version', '+', bump),
          updated_at: now(),
        })).where('id', '=', id).returningAll().executeTakeFirstOrThrow() as UserRow;
        return { before: row, after };
      });
      versionWritten(id, updated.after);
      return updated;
    },
    tokenVersion(id) {
      const version = versions.get(id);
      if (version !== undefined) return version ?? undefined;
      return byVersion.run(store, { id }).then(({ rows }) => {
        // A write of this process that landed meanwhile is newer than what was read: it stays.
        if (!versions.has(id)) setVersion(id, rows[0]?.token_version ?? null);
        return versions.get(id) ?? undefined;
      });
    },
    transaction: (fn) => inTransaction(store, fn),
  };
}

type ClaimRow = UserRow & { claim_order: number };

/** A claimant's row without the order it was listed by. */
function withoutOrder(row: ClaimRow | undefined): UserRow | undefined {
  if (!row) return undefined;
  const { claim_order: _order, ...user } = row;
  return user;
}

/**
 * The next number of the claims' one order: past every claim made yet. Evaluated by the write that makes the
 * claim, so on SQLite, one writer at a time, no two claims share one.
 */
function nextClaimOrder() {
  return sql<number>`(SELECT COALESCE(MAX(n), 0) + 1 FROM (SELECT MAX(email_claim_order) AS n FROM users UNION ALL SELECT MAX(phone_claim_order) FROM users) AS claims)`;
}

/** The row `create` inserts (token_version starts at 0). */
function newUserRow(user: NewUser, clock: Clock) {
  const at = toUnixSeconds(clock());
  return {
    id: crypto.randomUUID(),
    email: user.email,
    email_hash: user.emailHash,
    phone: user.phone,
    phone_hash: user.phoneHash,
    email_proven_at: user.proven?.email && !isSyntheticEmail(user.email) ? at : null,
    phone_proven_at: user.proven?.phone && user.phone ? at : null,
    password_bcrypt: user.passwordBcrypt,
    role: user.role,
    token_version: 0,
    created_at: at,
    updated_at: at,
  };
}

/**
 * A mosque's members are hundreds: their contacts are read this many ids a query (both engines bound the
 * parameters of one statement).
 */
const CONTACTS_PER_QUERY = 512;

/**
 * The ids padded with their first to the next power of two: `IN (?, ...)` has one SQL text per length, and the
 * connection keeps a prepared statement per text (src/platform/store/sqlite-dialect.ts), so lists of any length
 * share ten of them.
 */
function paddedIds(ids: string[]): string[] {
  let size = 1;
  while (size < ids.length) size *= 2;
  return ids.concat(Array<string>(size - ids.length).fill(ids[0]!));
}
