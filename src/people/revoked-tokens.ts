import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import { noChanges, type ChangeListener, type ChangePublisher } from '../platform/changes.ts';

/**
 * Signed-out access tokens beyond their owner's current version: one process or several may hold a token
 * still inside its exp and its version that was ended alone (POST /auth/logout). At most this many per
 * user are kept; the next sign-out raises the user's token version instead (every token of the account
 * ends), so the table and the memory below grow with people, not with how often a script signs out.
 */
export const MAX_REVOKED_PER_USER = 100;
const PRUNE_EVERY_SECONDS = 60;

export type RevokeOutcome = 'revoked' | 'over_cap';

/**
 * The revoked_tokens table plus the set every authenticated request is checked against, in memory (no query
 * per request, like the token versions in users.ts). Rows hold a hash of the token's id and its expiry only.
 */
export interface RevokedTokens {
  isRevoked(tokenIdHash: string): boolean;
  /** Ends one token until its expiry; `over_cap` writes nothing: the caller ends all the user's tokens instead. */
  revoke(userId: string, tokenIdHash: string, expiresAt: number): RevokeOutcome;
  /** Drops the user's rows once their token version was raised (those tokens are refused by version anyway). */
  forgetUser(userId: string): void;
  /** Another process revoked this token: the change feed named it; read its row. */
  reload(tokenIdHash: string): void;
  /** Re-reads every row (the feed was away, or the safety-net poll ran). */
  reloadAll(): void;
  /** This cache's subscription to the change feed: another process's revocation is read; a resync reads all. */
  followChanges: ChangeListener;
}

/** Every revocation is announced on `changes` (kind `token`, the id's hash) right after it commits. */
export function createRevokedTokens(db: Db, clock: Clock, changes: ChangePublisher = noChanges): RevokedTokens {
  const insert = db.prepare('INSERT OR IGNORE INTO revoked_tokens (token_id_hash, user_id, expires_at) VALUES (?, ?, ?)');
  const countOf = db.prepare<[string, number], { n: number }>('SELECT COUNT(*) AS n FROM revoked_tokens WHERE user_id = ? AND expires_at > ?');
  const one = db.prepare<[string], { expires_at: number }>('SELECT expires_at FROM revoked_tokens WHERE token_id_hash = ?');
  const live = db.prepare<[number], { token_id_hash: string; expires_at: number }>('SELECT token_id_hash, expires_at FROM revoked_tokens WHERE expires_at > ?');
  const removeUser = db.prepare('DELETE FROM revoked_tokens WHERE user_id = ?');
  const prune = db.prepare('DELETE FROM revoked_tokens WHERE expires_at <= ?');
  const now = () => toUnixSeconds(clock());

  // token id hash -> exp. An expired entry only costs memory (its token fails the exp check first): it goes
  // with the next prune, which runs on writes and full reloads, never on the per-request path.
  const revoked = new Map<string, number>();
  let prunedAt = 0;
  const pruneExpired = (at: number) => {
    prunedAt = at;
    prune.run(at);
    for (const [hash, exp] of revoked) if (exp <= at) revoked.delete(hash);
  };
  const reloadAll = () => {
    const at = now();
    revoked.clear();
    for (const row of live.iterate(at)) revoked.set(row.token_id_hash, row.expires_at);
  };
  reloadAll();
  const reloadOne = (hash: string) => {
    const row = one.get(hash);
    if (row && row.expires_at > now()) revoked.set(hash, row.expires_at);
  };

  return {
    isRevoked: (hash) => revoked.has(hash),
    revoke(userId, hash, expiresAt) {
      const at = now();
      if (at - prunedAt >= PRUNE_EVERY_SECONDS) pruneExpired(at);
      if (countOf.get(userId, at)!.n >= MAX_REVOKED_PER_USER) return 'over_cap';
      insert.run(hash, userId, expiresAt);
      revoked.set(hash, expiresAt);
      changes.publish({ kind: 'token', id: hash });
      return 'revoked';
    },
    forgetUser(userId) {
      removeUser.run(userId);
    },
    reload: reloadOne,
    reloadAll,
    followChanges: {
      changed: (change, origin) => {
        if (origin === 'remote' && change.kind === 'token') reloadOne(change.id);
      },
      resync: reloadAll,
    },
  };
}
