import crypto from 'node:crypto';
import type { Store } from '../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { OneTimeCodes } from './codes.ts';
import { fail, failUntil, ok, type Result } from '../platform/failure.ts';
import { guessSubject, type GuessBudget } from './guess-budget.ts';
import { sha256Hex } from '../platform/identifiers.ts';
import type { Notifier, PageUrl } from '../platform/notify.ts';
import type { PasswordHasher } from './passwords.ts';
import { hexEquals, randomDigits, randomToken } from '../platform/secret-codes.ts';
import { deriveKey } from '../platform/secrets.ts';
import type { AccessTokens, TokenResponse } from './tokens.ts';
import type { UserRow, UserStore } from './users.ts';
import { destination } from './auth.ts';

export const SESSION_TTL_SECONDS = 10 * 60;
export const RESET_TOKEN_TTL_SECONDS = 15 * 60;
export const CLOCK_TOLERANCE_SECONDS = 300;
const SESSION_ATTEMPTS = 5;

type Purpose = 'login' | 'reset';

export interface SessionGrant {
  session_token: string;
  expires_in: number;
}

export interface VerifyInput {
  sessionToken: string;
  timestamp: number;
  hmac: string;
}

interface Deps {
  store: Store;
  users: UserStore;
  codes: OneTimeCodes;
  hasher: PasswordHasher;
  guesses: GuessBudget;
  tokens: AccessTokens;
  notifier: Notifier;
  pageUrl: PageUrl;
  clock: Clock;
}

/** A pending session, real or decoy, as checkSession sees it. */
interface PendingSession {
  /** The guess budget it draws on. */
  subject: string;
  userId: string | null;
  otpSealed: string | null;
  attemptsLeft: number;
  expiresAt: number;
  /** Deletes the session; false when it was gone already (another request spent it first). */
  remove(): Promise<boolean>;
  spendTry(): Promise<unknown>;
}

/**
 * The superadmin two-step login and reset (docs/api.md, "Signing in", step 5). The client never sends the OTP: it
 * proves it with HMAC-SHA256(session_token, "otp|timestamp"). The server keeps SHA-256 of the session token
 * and the OTP sealed under a key derived from that token, so a database dump alone reveals neither.
 */
export function createSuperadminAuth(deps: Deps) {
  const { store, users, hasher, notifier } = deps;
  const nowSeconds = () => toUnixSeconds(deps.clock());

  /** Opens a new session for the user; any earlier pending session of that purpose stops working. */
  async function openSession(user: UserRow, purpose: Purpose): Promise<SessionGrant> {
    const sessionToken = randomToken(32);
    const otp = randomDigits(6);
    const row = { session_hash: sha256Hex(sessionToken), user_id: user.id, purpose, otp_sealed: sealOtp(sessionToken, otp), attempts_left: SESSION_ATTEMPTS, expires_at: nowSeconds() + SESSION_TTL_SECONDS };
    await store.transaction().execute(async (trx) => {
      await trx.deleteFrom('superadmin_sessions').where('user_id', '=', user.id).where('purpose', '=', purpose).execute();
      await trx.insertInto('superadmin_sessions').values(row).execute();
    });
    const what = purpose === 'login' ? 'sign-in' : 'password reset';
    const to = destination(user, null);
    if (!to) return { session_token: sessionToken, expires_in: SESSION_TTL_SECONDS };
    // The code is typed on the page that asked for it: the superadmin sign-in (or the tool that started the reset).
    const link = deps.pageUrl('/superadmin');
    notifier.send({
      channel: to.channel,
      to: to.to,
      purpose: purpose === 'login' ? 'superadmin_otp' : 'superadmin_reset',
      text: `Your Minaret superadmin ${what} code is ${otp}. It expires in 10 minutes. Minaret: ${link}`,
      code: otp,
      link,
    });
    return { session_token: sessionToken, expires_in: SESSION_TTL_SECONDS };
  }

  /** A real session of this purpose, or (reset only) a decoy handed out for an identifier without a superadmin. */
  async function findPending(hash: string, purpose: Purpose): Promise<PendingSession | null> {
    const row = await store.selectFrom('superadmin_sessions').select(['user_id', 'otp_sealed', 'attempts_left', 'expires_at'])
      .where('session_hash', '=', hash).where('purpose', '=', purpose).executeTakeFirst();
    if (row) {
      return {
        subject: guessSubject(purpose === 'login' ? 'superadmin_login' : 'superadmin_reset', row.user_id, ''),
        userId: row.user_id, otpSealed: row.otp_sealed, attemptsLeft: row.attempts_left, expiresAt: row.expires_at,
        remove: async () => (await store.deleteFrom('superadmin_sessions').where('session_hash', '=', hash).executeTakeFirst()).numDeletedRows > 0n,
        spendTry: () => store.updateTable('superadmin_sessions').set((eb) => ({ attempts_left: eb('attempts_left', '-', 1) }))
          .where('session_hash', '=', hash).execute(),
      };
    }
    const decoy = purpose === 'reset'
      ? await store.selectFrom('superadmin_decoy_sessions').select(['identifier_hash', 'attempts_left', 'expires_at']).where('session_hash', '=', hash).executeTakeFirst()
      : undefined;
    if (!decoy) return null;
    return {
      subject: guessSubject('superadmin_reset', null, decoy.identifier_hash),
      userId: null, otpSealed: null, attemptsLeft: decoy.attempts_left, expiresAt: decoy.expires_at,
      remove: async () => (await store.deleteFrom('superadmin_decoy_sessions').where('session_hash', '=', hash).executeTakeFirst()).numDeletedRows > 0n,
      spendTry: () => store.updateTable('superadmin_decoy_sessions').set((eb) => ({ attempts_left: eb('attempts_left', '-', 1) }))
        .where('session_hash', '=', hash).execute(),
    };
  }

  /**
   * The user id of the session once the digest proves the OTP; the session is spent either way on success.
   * Wrong digests count against the account's hourly guess budget; past it, 429 until the oldest ages out.
   */
  async function checkSession(input: VerifyInput, purpose: Purpose): Promise<Result<string>> {
    if (Math.abs(nowSeconds() - input.timestamp) > CLOCK_TOLERANCE_SECONDS) return fail('stale_timestamp');
    const session = await findPending(sha256Hex(input.sessionToken), purpose);
    if (!session) return fail('invalid_otp');
    if (session.expiresAt <= nowSeconds()) {
      await session.remove();
      return fail('invalid_otp');
    }
    const wait = await deps.guesses.lockedFor(session.subject);
    if (wait > 0) return failUntil('rate_limited', wait);
    const otp = session.otpSealed === null ? null : openOtp(input.sessionToken, session.otpSealed);
    const expected = crypto.createHmac('sha256', input.sessionToken).update(`${otp}|${input.timestamp}`).digest('hex');
    if (otp !== null && session.userId !== null && hexEquals(expected, input.hmac.toLowerCase())) {
      // Only the request whose delete took the row wins: two verifies at once both read the session above, and
      // on PostgreSQL (a pool, each on a connection of its own) both reached this line and both got a token;
      // SQLite's one connection ran them in an order that hid it.
      return (await session.remove()) ? ok(session.userId) : fail('invalid_otp');
    }
    await deps.guesses.recordWrong(session.subject);
    if (session.attemptsLeft <= 1) await session.remove();
    else await session.spendTry();
    return fail('invalid_otp');
  }

  /** A decoy looks and behaves like a real session (5 tries, superseded by the next one, same budget rule). */
  async function openDecoy(identifier: string): Promise<SessionGrant> {
    const sessionToken = randomToken(32);
    const now = nowSeconds();
    const decoy = { session_hash: sha256Hex(sessionToken), attempts_left: SESSION_ATTEMPTS, expires_at: now + SESSION_TTL_SECONDS };
    await store.transaction().execute(async (trx) => {
      await trx.deleteFrom('superadmin_decoy_sessions').where('expires_at', '<=', now).execute();
      await trx.insertInto('superadmin_decoy_sessions').values({ ...decoy, identifier_hash: identifier })
        .onConflict((oc) => oc.column('identifier_hash').doUpdateSet(decoy)).execute();
    });
    return { session_token: sessionToken, expires_in: SESSION_TTL_SECONDS };
  }

  const findSuperadmin = async (userId: string) => {
    const user = await users.findById(userId);
    return user && user.role === 'superadmin' ? user : null;
  };

  return {
    async startLogin(identifier: string, passwordHash: string): Promise<Result<SessionGrant>> {
      const user = await users.findByIdentifierHash(identifier);
      const usable = user?.role === 'superadmin' ? user.password_bcrypt : null;
      const checked = await hasher.verify(passwordHash, usable);
      if (!checked.ok) return checked;
      if (!checked.value) return fail('invalid_credentials');
      return ok(await openSession(user!, 'login'));
    },

    async verifyLogin(input: VerifyInput): Promise<Result<TokenResponse>> {
      const checked = await checkSession(input, 'login');
      if (!checked.ok) return checked;
      const user = await findSuperadmin(checked.value);
      return user ? ok(await deps.tokens.issue(user)) : fail('invalid_otp');
    },

    /** Always a session of the same shape; only a real superadmin's one can ever verify (a decoy otherwise). */
    async startReset(identifier: string): Promise<SessionGrant> {
      const user = await users.findByIdentifierHash(identifier);
      if (user?.role === 'superadmin') return openSession(user, 'reset');
      return openDecoy(identifier);
    },

    async verifyReset(input: VerifyInput): Promise<Result<{ reset_token: string; expires_in: number }>> {
      const checked = await checkSession(input, 'reset');
      if (!checked.ok) return checked;
      if (!(await findSuperadmin(checked.value))) return fail('invalid_otp');
      const resetToken = await deps.codes.issueResetToken(checked.value, 'superadmin', RESET_TOKEN_TTL_SECONDS);
      return ok({ reset_token: resetToken, expires_in: RESET_TOKEN_TTL_SECONDS });
    },

    /**
     * Every pending two-step sign-in or reset of the user stops working: its session, and a reset token
     * already won by one (docs/api.md "Signing out": logout-all and a password change end them).
     */
    async endPendingSessions(userId: string): Promise<void> {
      await store.transaction().execute(async (trx) => {
        await trx.deleteFrom('superadmin_sessions').where('user_id', '=', userId).execute();
        await deps.codes.revokeResetTokens(userId, 'superadmin', trx);
      });
    },

    /** The new password takes effect only here, and every older token of the superadmin stops working. */
    async resetPassword(resetToken: string, passwordHash: string): Promise<Result<void>> {
      // Used up only once the new hash is ready: a busy hasher leaves the token valid for a retry.
      if (!(await deps.codes.findResetToken(resetToken, 'superadmin'))) return fail('invalid_token');
      const hashed = await hasher.hash(passwordHash);
      if (!hashed.ok) return hashed;
      const redeemed = await deps.codes.redeemResetToken(resetToken, 'superadmin');
      const user = redeemed ? await findSuperadmin(redeemed.userId) : null;
      if (!user) return fail('invalid_token');
      await users.setPassword(user.id, hashed.value);
      return ok(undefined);
    },
  };
}

export type SuperadminAuth = ReturnType<typeof createSuperadminAuth>;

function sealKey(sessionToken: string): Buffer {
  return deriveKey(sessionToken, 'superadmin-otp-seal');
}

function sealOtp(sessionToken: string, otp: string): string {
  const iv = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', sealKey(sessionToken), iv);
  const body = Buffer.concat([cipher.update(otp, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url');
}

function openOtp(sessionToken: string, sealed: string): string | null {
  try {
    const raw = Buffer.from(sealed, 'base64url');
    const decipher = crypto.createDecipheriv('aes-256-gcm', sealKey(sessionToken), raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  } catch {
    return null;
  }
}
