import type { Queries, Store } from '../platform/store/store.ts';
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
   * Issues a new login code for the user, replacing any earlier one. Resolves to the plain code to deliver.
   * `sentToHash`: the identifier hash of the address it goes to, which redeeming it proves.
   */
  issueLoginCode(userId: string, sentToHash: string | null): Promise<string>;
  /**
   * The right code, once: what it was sent to (its redemption proves that address). A wrong one uses up a
   * try, and the fifth wrong try burns the code; then null.
   */
  redeemLoginCode(userId: string, code: string): Promise<{ sentToHash: string | null } | null>;
  /** A dummy computation of the same cost as redeemLoginCode, for unknown accounts. */
  spendLikeRedeem(code: string): void;
  issueResetToken(userId: string, kind: ResetKind, ttlSeconds: number, sentToHash?: string | null): Promise<string>;
  /** The user id of an unused, unexpired token of this kind, without using it up; null otherwise. */
  findResetToken(token: string, kind: ResetKind): Promise<string | null>;
  /** The user of an unused, unexpired token of this kind and the address it went to, consumed by this call; null otherwise. */
  redeemResetToken(token: string, kind: ResetKind): Promise<{ userId: string; sentToHash: string | null } | null>;
  /** Every outstanding reset token of the user of this kind stops working (the account's sessions were ended). */
  revokeResetTokens(userId: string, kind: ResetKind, q?: Queries): Promise<void>;
}

export function createOneTimeCodes(store: Store, clock: Clock, key: Buffer): OneTimeCodes {
  const now = () => toUnixSeconds(clock());
  // The user id is part of the hashed text, so equal codes of two users never share a stored value.
  const codeHash = (userId: string, code: string) => keyedHash(key, `login_code|${userId}|${code}`);
  const deleteResetsOf = (q: Queries, userId: string, kind: ResetKind) =>
    q.deleteFrom('reset_tokens').where('user_id', '=', userId).where('kind', '=', kind).execute();

  return {
    async issueLoginCode(userId, sentToHash) {
      const code = randomDigits(6);
      const row = { code_hmac: codeHash(userId, code), attempts_left: LOGIN_CODE_ATTEMPTS, expires_at: now() + LOGIN_CODE_TTL_SECONDS, sent_to_hash: sentToHash };
      await store.insertInto('login_codes').values({ user_id: userId, ...row })
        .onConflict((oc) => oc.column('user_id').doUpdateSet(row)).execute();
      return code;
    },

    redeemLoginCode(userId, code) {
      const presented = codeHash(userId, code);
      // One transaction: two guesses at once must each spend a try, and a right code must redeem once.
      return store.transaction().execute(async (trx) => {
        const row = await trx.selectFrom('login_codes').select(['code_hmac', 'attempts_left', 'expires_at', 'sent_to_hash'])
          .where('user_id', '=', userId).executeTakeFirst();
        if (!row) return null;
        const deleteCode = async () => (await trx.deleteFrom('login_codes').where('user_id', '=', userId).executeTakeFirst()).numDeletedRows > 0n;
        if (row.expires_at <= now()) {
          await deleteCode();
          return null;
        }
        // The code redeems only if this transaction's delete took the row. SQLite runs one transaction at a time,
        // but on PostgreSQL (READ COMMITTED) two at once both read the row; the second's DELETE waits for the
        // first to commit and then removes nothing, and before this check both signed in.
        if (hexEquals(presented, row.code_hmac)) return (await deleteCode()) ? { sentToHash: row.sent_to_hash } : null;
        if (row.attempts_left <= 1) await deleteCode();
        else await trx.updateTable('login_codes').set((eb) => ({ attempts_left: eb('attempts_left', '-', 1) })).where('user_id', '=', userId).execute();
        return null;
      });
    },

    spendLikeRedeem(code) {
      hexEquals(codeHash('-', code), codeHash('-', '000000'));
    },

    async issueResetToken(userId, kind, ttlSeconds, sentToHash = null) {
      const token = randomToken(32);
      const expiresAt = now() + ttlSeconds;
      await store.transaction().execute(async (trx) => {
        // Only the newest reset link of a user works.
        await deleteResetsOf(trx, userId, kind);
        await trx.insertInto('reset_tokens')
          .values({ token_hmac: keyedHash(key, `reset|${token}`), user_id: userId, kind, expires_at: expiresAt, sent_to_hash: sentToHash }).execute();
      });
      return token;
    },

    async findResetToken(token, kind) {
      const row = await store.selectFrom('reset_tokens').select(['user_id', 'expires_at'])
        .where('token_hmac', '=', keyedHash(key, `reset|${token}`)).where('kind', '=', kind).executeTakeFirst();
      return row && row.expires_at > now() ? row.user_id : null;
    },

    async redeemResetToken(token, kind) {
      // Read and used up in one statement: two redemptions at once cannot both win.
      const row = await store.deleteFrom('reset_tokens').where('token_hmac', '=', keyedHash(key, `reset|${token}`)).where('kind', '=', kind)
        .returning(['user_id', 'expires_at', 'sent_to_hash']).executeTakeFirst();
      if (!row || row.expires_at <= now()) return null;
      return { userId: row.user_id, sentToHash: row.sent_to_hash };
    },

    async revokeResetTokens(userId, kind, q = store) {
      await deleteResetsOf(q, userId, kind);
    },
  };
}
