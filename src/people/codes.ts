import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import { hexEquals, keyedHash, randomDigits, randomToken } from '../platform/secret-codes.ts';

export const LOGIN_CODE_TTL_SECONDS = 15 * 60;
export const LOGIN_CODE_ATTEMPTS = 5;

export type ResetKind = 'member' | 'superadmin';

/**
 * One-time secrets kept only as keyed hashes: 6-digit login codes (one outstanding per user, 5 tries)
 * and password reset tokens (single use). The key is a server secret, so a dump of the database alone
 * cannot be brute-forced offline.
 */
export interface OneTimeCodes {
  /** Issues a new login code for the user, replacing any earlier one. Returns the plain code to deliver. */
  issueLoginCode(userId: string): string;
  /** True once for the right code; a wrong one uses up a try, and the fifth wrong try burns the code. */
  redeemLoginCode(userId: string, code: string): boolean;
  /** A dummy computation of the same cost as redeemLoginCode, for unknown accounts. */
  spendLikeRedeem(code: string): void;
  issueResetToken(userId: string, kind: ResetKind, ttlSeconds: number): string;
  /** The user id of an unused, unexpired token of this kind, without using it up; null otherwise. */
  findResetToken(token: string, kind: ResetKind): string | null;
  /** The user id of an unused, unexpired token of this kind, consumed by this call; null otherwise. */
  redeemResetToken(token: string, kind: ResetKind): string | null;
  /** Every outstanding reset token of the user of this kind stops working (the account's sessions were ended). */
  revokeResetTokens(userId: string, kind: ResetKind): void;
}

export function createOneTimeCodes(db: Db, clock: Clock, key: Buffer): OneTimeCodes {
  const upsertCode = db.prepare(
    `INSERT INTO login_codes (user_id, code_hmac, attempts_left, expires_at) VALUES (?, ?, ?, ?)
     ON CONFLICT (user_id) DO UPDATE SET code_hmac = excluded.code_hmac, attempts_left = excluded.attempts_left, expires_at = excluded.expires_at`,
  );
  const getCode = db.prepare<[string], { code_hmac: string; attempts_left: number; expires_at: number }>(
    'SELECT code_hmac, attempts_left, expires_at FROM login_codes WHERE user_id = ?',
  );
  const deleteCode = db.prepare('DELETE FROM login_codes WHERE user_id = ?');
  const spendTry = db.prepare('UPDATE login_codes SET attempts_left = attempts_left - 1 WHERE user_id = ?');
  const insertReset = db.prepare('INSERT INTO reset_tokens (token_hmac, user_id, kind, expires_at) VALUES (?, ?, ?, ?)');
  const deleteResetsOf = db.prepare('DELETE FROM reset_tokens WHERE user_id = ? AND kind = ?');
  const peekReset = db.prepare<[string, string], { user_id: string; expires_at: number }>(
    'SELECT user_id, expires_at FROM reset_tokens WHERE token_hmac = ? AND kind = ?',
  );
  const claimReset = db.prepare<[string, string], { user_id: string; expires_at: number }>(
    'DELETE FROM reset_tokens WHERE token_hmac = ? AND kind = ? RETURNING user_id, expires_at',
  );
  const now = () => toUnixSeconds(clock());
  // The user id is part of the hashed text, so equal codes of two users never share a stored value.
  const codeHash = (userId: string, code: string) => keyedHash(key, `login_code|${userId}|${code}`);

  return {
    issueLoginCode(userId) {
      const code = randomDigits(6);
      upsertCode.run(userId, codeHash(userId, code), LOGIN_CODE_ATTEMPTS, now() + LOGIN_CODE_TTL_SECONDS);
      return code;
    },

    redeemLoginCode(userId, code) {
      const presented = codeHash(userId, code);
      const row = getCode.get(userId);
      if (!row) return false;
      if (row.expires_at <= now()) {
        deleteCode.run(userId);
        return false;
      }
      if (hexEquals(presented, row.code_hmac)) {
        deleteCode.run(userId);
        return true;
      }
      if (row.attempts_left <= 1) deleteCode.run(userId);
      else spendTry.run(userId);
      return false;
    },

    spendLikeRedeem(code) {
      hexEquals(codeHash('-', code), codeHash('-', '000000'));
    },

    issueResetToken(userId, kind, ttlSeconds) {
      const token = randomToken(32);
      db.transaction(() => {
        // Only the newest reset link of a user works.
        deleteResetsOf.run(userId, kind);
        insertReset.run(keyedHash(key, `reset|${token}`), userId, kind, now() + ttlSeconds);
      })();
      return token;
    },

    findResetToken(token, kind) {
      const row = peekReset.get(keyedHash(key, `reset|${token}`), kind);
      return row && row.expires_at > now() ? row.user_id : null;
    },

    redeemResetToken(token, kind) {
      const row = claimReset.get(keyedHash(key, `reset|${token}`), kind);
      if (!row || row.expires_at <= now()) return null;
      return row.user_id;
    },

    revokeResetTokens(userId, kind) {
      deleteResetsOf.run(userId, kind);
    },
  };
}
