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
  /**
   * Issues a new login code for the user, replacing any earlier one. Returns the plain code to deliver.
   * `sentToHash`: the identifier hash of the address it goes to, which redeeming it proves.
   */
  issueLoginCode(userId: string, sentToHash: string | null): string;
  /**
   * The right code, once: what it was sent to (its redemption proves that address). A wrong one uses up a
   * try, and the fifth wrong try burns the code; then null.
   */
  redeemLoginCode(userId: string, code: string): { sentToHash: string | null } | null;
  /** A dummy computation of the same cost as redeemLoginCode, for unknown accounts. */
  spendLikeRedeem(code: string): void;
  issueResetToken(userId: string, kind: ResetKind, ttlSeconds: number, sentToHash?: string | null): string;
  /** The user id of an unused, unexpired token of this kind, without using it up; null otherwise. */
  findResetToken(token: string, kind: ResetKind): string | null;
  /** The user of an unused, unexpired token of this kind and the address it went to, consumed by this call; null otherwise. */
  redeemResetToken(token: string, kind: ResetKind): { userId: string; sentToHash: string | null } | null;
  /** Every outstanding reset token of the user of this kind stops working (the account's sessions were ended). */
  revokeResetTokens(userId: string, kind: ResetKind): void;
}

export function createOneTimeCodes(db: Db, clock: Clock, key: Buffer): OneTimeCodes {
  const upsertCode = db.prepare(
    `INSERT INTO login_codes (user_id, code_hmac, attempts_left, expires_at, sent_to_hash) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (user_id) DO UPDATE SET code_hmac = excluded.code_hmac, attempts_left = excluded.attempts_left,
       expires_at = excluded.expires_at, sent_to_hash = excluded.sent_to_hash`,
  );
  const getCode = db.prepare<[string], { code_hmac: string; attempts_left: number; expires_at: number; sent_to_hash: string | null }>(
    'SELECT code_hmac, attempts_left, expires_at, sent_to_hash FROM login_codes WHERE user_id = ?',
  );
  const deleteCode = db.prepare('DELETE FROM login_codes WHERE user_id = ?');
  const spendTry = db.prepare('UPDATE login_codes SET attempts_left = attempts_left - 1 WHERE user_id = ?');
  const insertReset = db.prepare('INSERT INTO reset_tokens (token_hmac, user_id, kind, expires_at, sent_to_hash) VALUES (?, ?, ?, ?, ?)');
  const deleteResetsOf = db.prepare('DELETE FROM reset_tokens WHERE user_id = ? AND kind = ?');
  const peekReset = db.prepare<[string, string], { user_id: string; expires_at: number }>(
    'SELECT user_id, expires_at FROM reset_tokens WHERE token_hmac = ? AND kind = ?',
  );
  const claimReset = db.prepare<[string, string], { user_id: string; expires_at: number; sent_to_hash: string | null }>(
    'DELETE FROM reset_tokens WHERE token_hmac = ? AND kind = ? RETURNING user_id, expires_at, sent_to_hash',
  );
  const now = () => toUnixSeconds(clock());
  // The user id is part of the hashed text, so equal codes of two users never share a stored value.
  const codeHash = (userId: string, code: string) => keyedHash(key, `login_code|${userId}|${code}`);

  return {
    issueLoginCode(userId, sentToHash) {
      const code = randomDigits(6);
      upsertCode.run(userId, codeHash(userId, code), LOGIN_CODE_ATTEMPTS, now() + LOGIN_CODE_TTL_SECONDS, sentToHash);
      return code;
    },

    redeemLoginCode(userId, code) {
      const presented = codeHash(userId, code);
      const row = getCode.get(userId);
      if (!row) return null;
      if (row.expires_at <= now()) {
        deleteCode.run(userId);
        return null;
      }
      if (hexEquals(presented, row.code_hmac)) {
        deleteCode.run(userId);
        return { sentToHash: row.sent_to_hash };
      }
      if (row.attempts_left <= 1) deleteCode.run(userId);
      else spendTry.run(userId);
      return null;
    },

    spendLikeRedeem(code) {
      hexEquals(codeHash('-', code), codeHash('-', '000000'));
    },

    issueResetToken(userId, kind, ttlSeconds, sentToHash = null) {
      const token = randomToken(32);
      db.transaction(() => {
        // Only the newest reset link of a user works.
        deleteResetsOf.run(userId, kind);
        insertReset.run(keyedHash(key, `reset|${token}`), userId, kind, now() + ttlSeconds, sentToHash);
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
      return { userId: row.user_id, sentToHash: row.sent_to_hash };
    },

    revokeResetTokens(userId, kind) {
      deleteResetsOf.run(userId, kind);
    },
  };
}
