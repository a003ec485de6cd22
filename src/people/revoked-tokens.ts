import type { Store } from '../platform/store/store.ts';
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
  revoke(userId: string, tokenIdHash: string, expiresAt: number): Promise<RevokeOutcome>;
  /** Drops the user's rows once their token version was raised (those tokens are refused by version anyway). */
  forgetUser(userId: string): Promise<void>;
  /** Another process revoked this token: the change feed named it; read its row. */
  reload(tokenIdHash: string): Promise<void>;
  /** Re-reads every row (the feed was away, or the safety-net poll ran). */
  reloadAll(): Promise<void>;
  /** This cache's subscription to the change feed: another process's revocation is read; a resync reads all. */
  followChanges: ChangeListener;
}

/**
 * Every revocation is announced on `changes` (kind `token`, the id's hash) right after it commits. Resolves once
 * the live rows are in memory.
 */
export async function createRevokedTokens(
  store: Store, clock: Clock, changes: ChangePublisher = noChanges,
  /** Where a reload the feed started and no caller awaits reports its failure. */
  onError: (what: string, err: unknown) => void = () => undefined,
): Promise<RevokedTokens> {
  const now = () => toUnixSeconds(clock());

  // token id hash -> exp. An expired entry only costs memory (its token fails the exp check first): it goes
  // with the next prune, which runs on writes and full reloads, never on the per-request path.
  let revoked = new Map<string, number>();
  let prunedAt = 0;
  const pruneExpired = async (at: number) => {
    prunedAt = at;
    await store.deleteFrom('revoked_tokens').where('expires_at', '<=', at).execute();
    for (const [hash, exp] of revoked) if (exp <= at) revoked.delete(hash);
  };
  const reloadAll = async () => {
    const rows = await store.selectFrom('revoked_tokens').select(['token_id_hash', 'expires_at']).where('expires_at', '>', now()).execute();
    // Built aside and swapped in whole: a request checked while the rows are read still sees the old set.
    const next = new Map<string, number>();
    for (const row of rows) next.set(row.token_id_hash, row.expires_at);
    // A revocation this process made while the rows were read is kept (it may have committed after the read).
    for (const [hash, exp] of revoked) if (!next.has(hash) && exp > now()) next.set(hash, exp);
    revoked = next;
  };
  await reloadAll();
  const reloadOne = async (hash: string) => {
    const row = await store.selectFrom('revoked_tokens').select('expires_at').where('token_id_hash', '=', hash).executeTakeFirst();
    if (row && row.expires_at > now()) revoked.set(hash, row.expires_at);
  };

  return {
    isRevoked: (hash) => revoked.has(hash),
    async revoke(userId, hash, expiresAt) {
      const at = now();
      if (at - prunedAt >= PRUNE_EVERY_SECONDS) await pruneExpired(at);
      const { n } = await store.selectFrom('revoked_tokens').select((eb) => eb.fn.countAll<number>().as('n'))
        .where('user_id', '=', userId).where('expires_at', '>', at).executeTakeFirstOrThrow();
      if (Number(n) >= MAX_REVOKED_PER_USER) return 'over_cap';
      await store.insertInto('revoked_tokens').values({ token_id_hash: hash, user_id: userId, expires_at: expiresAt })
        .onConflict((oc) => oc.doNothing()).execute();
      revoked.set(hash, expiresAt);
      changes.publish({ kind: 'token', id: hash });
      return 'revoked';
    },
    async forgetUser(userId) {
      await store.deleteFrom('revoked_tokens').where('user_id', '=', userId).execute();
    },
    reload: reloadOne,
    reloadAll,
    followChanges: {
      changed: (change, origin) => {
        if (origin === 'remote' && change.kind === 'token') void reloadOne(change.id).catch((err: unknown) => onError('revoked token reload', err));
      },
      resync: () => void reloadAll().catch((err: unknown) => onError('revoked tokens reload', err)),
    },
  };
}
