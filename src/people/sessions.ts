import type { Selectable } from 'kysely';
import crypto from 'node:crypto';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Store } from '../platform/store/store.ts';
import { fail, failUntil, ok, type Result } from '../platform/failure.ts';
import { sha256Hex } from '../platform/identifiers.ts';
import { hexEquals } from '../platform/secret-codes.ts';
import { guessSubject, type GuessBudget } from './guess-budget.ts';
import type { PasswordHasher } from './passwords.ts';
import type { RevokedTokens } from './revoked-tokens.ts';
import type { AccessClaims, AccessTokens, TokenResponse } from './tokens.ts';
import type { UserStore } from './users.ts';
import type { ConsoleSessionsTable } from '../../generated/tables.ts';

/**
 * How recent a sign-in must be for an account without a password to set its first one without a current
 * password (docs/api.md "Changing the password"): a token lifts a stolen laptop's session for days, a sign-in
 * code proves the mailbox or phone now.
 */
export const FRESH_SIGN_IN_SECONDS = 10 * 60;

/**
 * Every "fresh sign-in" rule asks this: it reads the token's sign-in time (`auth_time`, [OpenID Connect Core 1.0
 * §2]), never its `iat`, since a console session mints tokens with a new `iat` for days (docs/api.md "Console
 * sessions").
 */
export const isFreshSignIn = (claims: Pick<AccessClaims, 'authTime'>, nowSeconds: number) => nowSeconds - claims.authTime <= FRESH_SIGN_IN_SECONDS;

interface Deps {
  users: UserStore;
  hasher: PasswordHasher;
  guesses: GuessBudget;
  tokens: AccessTokens;
  revoked: RevokedTokens;
  /** The superadmin two-step flow's pending sessions and reset tokens (src/people/superadmin.ts). */
  superadmin: { endPendingSessions(userId: string): Promise<void> };
  consoleSessions: ConsoleSessions;
  clock: Clock;
}

/** The caller's own sessions: change the password, sign out this token, sign out everywhere. */
export function createSessions(deps: Deps) {
  const { users, hasher, guesses } = deps;

  /** What every older credential of the account loses once its token version was raised. */
  const endPending = async (userId: string) => {
    await deps.revoked.forgetUser(userId);
    await deps.superadmin.endPendingSessions(userId);
    // Refused by version already (mint checks it); the rows go now rather than when next presented.
    await deps.consoleSessions.endAllFor(userId);
  };

  /** Guard for `current === null`: allowed only for an account without a password, from a fresh sign-in. */
  function mayOmitCurrent(hasPassword: boolean, claims: AccessClaims): Result<void> {
    if (hasPassword) return fail('invalid_credentials', 'current_password_hash is required: this account has a password.');
    if (!isFreshSignIn(claims, toUnixSeconds(deps.clock()))) {
      return fail('forbidden', 'Setting a first password needs a sign-in from the last 10 minutes: sign in with a code, then try again.');
    }
    return ok(undefined);
  }

  /**
   * A wrong current password counts against the account's hourly guess budget (src/people/guess-budget.ts);
   * past it, 429 until the oldest wrong guess ages out, without looking at the password.
   */
  async function changePassword(claims: AccessClaims, current: string | null, next: string): Promise<Result<TokenResponse>> {
    const user = await users.findById(claims.id);
    if (!user) return fail('unauthorized');
    const subject = guessSubject('password_change', user.id, '');
    const wait = await guesses.lockedFor(subject);
    if (wait > 0) return failUntil('rate_limited', wait);
    if (current === null) {
      const allowed = mayOmitCurrent(user.password_bcrypt !== null, claims);
      if (!allowed.ok) return allowed;
    } else {
      const checked = await hasher.verify(current, user.password_bcrypt);
      if (!checked.ok) return checked;
      if (!checked.value) {
        await guesses.recordWrong(subject);
        return fail('invalid_credentials');
      }
    }
    const hashed = await hasher.hash(next);
    if (!hashed.ok) return hashed;
    await users.setPassword(user.id, hashed.value); // raises the token version: every older token ends
    await endPending(user.id);
    const changed = await users.findById(user.id);
    // The right current password is a sign-in now; a first password set without one keeps the sign-in it rode on,
    // or its new token would stretch those 10 minutes.
    const authTime = current === null ? claims.authTime : undefined;
    return changed ? ok(await deps.tokens.issue(changed, { ...(authTime !== undefined && { authTime }) })) : fail('unauthorized');
  }

  /** Every token of the account, and every pending superadmin sign-in or reset, stops working. */
  async function logoutAll(userId: string): Promise<void> {
    await users.revokeTokens(userId);
    await endPending(userId);
  }

  /**
   * This token stops working, in every process (the change feed carries it); the account's others go on. A token
   * minted from a console session ends that session too: signing out of the console is signing out of its cookie.
   */
  async function logout(claims: AccessClaims): Promise<void> {
    if (claims.sid) await deps.consoleSessions.end(claims.sid);
    if (await deps.revoked.revoke(claims.id, claims.tokenIdHash, claims.exp) === 'over_cap') await logoutAll(claims.id);
  }

  /**
   * docs/api.md "Console sessions": a token from a sign-in in the last 10 minutes is traded for a session cookie and
   * dies in the trade, so the page holds short-lived tokens only. The new session keeps that sign-in's time, so a
   * token minted from it can open another only within the same 10 minutes (and the trade ends the one it came
   * from): no chain of sessions outlives the sign-in that began it by more than that.
   */
  async function openConsoleSession(claims: AccessClaims): Promise<Result<{ cookie: string; token: TokenResponse }>> {
    if (!isFreshSignIn(claims, toUnixSeconds(deps.clock()))) {
      return fail('forbidden', 'A console session needs a sign-in from the last 10 minutes: sign in again.');
    }
    await logout(claims);
    const cookie = await deps.consoleSessions.open(claims.id, claims.authTime);
    const token = cookie ? await deps.consoleSessions.mint(cookie) : null;
    return cookie && token ? ok({ cookie, token }) : fail('unauthorized');
  }

  return { changePassword, logout, logoutAll, openConsoleSession };
}

export type Sessions = ReturnType<typeof createSessions>;

/** docs/api.md "Console sessions": CONSOLE_SESSION_* and CONSOLE_TOKEN_TTL_MINUTES, in seconds. */
export interface ConsoleSessionSettings {
  idleSeconds: number;
  absoluteSeconds: number;
  tokenTtlSeconds: number;
  maxPerUser: number;
}

/** A row of `console_sessions` (generated/tables.ts). */
type ConsoleSessionRow = Selectable<ConsoleSessionsTable>;

/** The cookie's value: `<id>.<secret>`, 128 random bits of id and 256 of secret, base64url. */
const COOKIE_VALUE = /^([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;

export interface ConsoleSessions {
  /**
   * A new session of the user at their current token version, opened by the sign-in at `authTime` (Unix seconds),
   * which every token minted from it carries; the cookie value, or null when the user is gone.
   */
  open(userId: string, authTime: number): Promise<string | null>;
  /** A short-lived token from a live session, which counts as used now; null (and the row gone) otherwise. */
  mint(cookie: string): Promise<TokenResponse | null>;
  /** Whether the user's session is live now (an open event stream asks: it outlives the token it opened with). */
  isLive(sessionId: string, userId: string): Promise<boolean>;
  end(sessionId: string): Promise<void>;
  endAllFor(userId: string): Promise<void>;
}

/**
 * The console_sessions table. Only a SHA-256 of each secret is kept and compared in constant time (ARCHITECTURE
 * "Secrets": a 256-bit random secret needs no bcrypt). Nothing is held in memory: a session is read once per
 * minted token (every few minutes per open page), never per API request, so every process sees the same rows.
 */
export function createConsoleSessions(deps: {
  store: Store;
  users: Pick<UserStore, 'findById' | 'tokenVersion'>;
  tokens: AccessTokens;
  clock: Clock;
  settings: ConsoleSessionSettings;
}): ConsoleSessions {
  const { store, settings } = deps;
  const byId = (id: string) => store.selectFrom('console_sessions').selectAll().where('id', '=', id).executeTakeFirst();
  const remove = async (id: string) => {
    await store.deleteFrom('console_sessions').where('id', '=', id).execute();
  };
  const now = () => toUnixSeconds(deps.clock());
  const isLive = async (row: ConsoleSessionRow, at: number) =>
    row.expires_at > at && row.last_used_at + settings.idleSeconds > at && (await deps.users.tokenVersion(row.user_id)) === row.token_version;

  return {
    async open(userId, authTime) {
      const version = await deps.users.tokenVersion(userId);
      if (version === undefined) return null;
      const at = now();
      const id = crypto.randomBytes(16).toString('base64url');
      const secret = crypto.randomBytes(32).toString('base64url');
      // One transaction: the eviction below counts the session just opened, never one opened beside it.
      await store.transaction().execute(async (trx) => {
        await trx.deleteFrom('console_sessions').where((eb) => eb.or([eb('expires_at', '<=', at), eb('last_used_at', '<=', at - settings.idleSeconds)])).execute();
        await trx.insertInto('console_sessions').values({
          id, secret_hash: sha256Hex(secret), user_id: userId, token_version: version, created_at: at, last_used_at: at, expires_at: at + settings.absoluteSeconds,
          auth_time: Math.min(authTime, at),
        }).execute();
        // The newest `maxPerUser` by use stay; a person signing in on an eleventh browser ends the one unused longest.
        await trx.deleteFrom('console_sessions').where('user_id', '=', userId).where('id', 'not in', (eb) => eb.selectFrom('console_sessions')
          .select('id').where('user_id', '=', userId).orderBy('last_used_at', 'desc').orderBy('created_at', 'desc').limit(settings.maxPerUser)).execute();
      });
      return `${id}.${secret}`;
    },

    async mint(cookie) {
      const parts = COOKIE_VALUE.exec(cookie);
      const row = parts ? await byId(parts[1]!) : undefined;
      // A wrong secret leaves the row alone: the id travels in tokens (`sid`), so knowing it must not end a session.
      if (!row || !hexEquals(sha256Hex(parts![2]!), row.secret_hash)) return null;
      const at = now();
      const user = await deps.users.findById(row.user_id);
      if (!user || !(await isLive(row, at))) {
        await remove(row.id);
        return null;
      }
      await store.updateTable('console_sessions').set({ last_used_at: at }).where('id', '=', row.id).execute();
      // Never past the session's own end.
      return deps.tokens.issue(user, { session: { id: row.id, ttlSeconds: Math.min(settings.tokenTtlSeconds, row.expires_at - at) }, authTime: row.auth_time });
    },

    async isLive(sessionId, userId) {
      const row = await byId(sessionId);
      return row !== undefined && row.user_id === userId && (await isLive(row, now()));
    },

    end: remove,
    async endAllFor(userId) {
      await store.deleteFrom('console_sessions').where('user_id', '=', userId).execute();
    },
  };
}
