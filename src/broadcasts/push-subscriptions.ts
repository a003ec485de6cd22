import type { Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import type { PushSubscriptionsTable } from '../../generated/tables.ts';

/** A row of `push_subscriptions` (generated/tables.ts). */
export type PushSubscriptionRow = Selectable<PushSubscriptionsTable>;

/**
 * A subscription as its owner reads it (docs/api.md, "Web Push, from a browser's side"): the endpoint in full, which
 * the owner needs to remove it, and never the keys, which only encrypt what is sent to it.
 */
export function toPushSubscription(row: PushSubscriptionRow) {
  return { endpoint: row.endpoint, created_at: toIsoString(row.created_at) };
}

/** Users named in one IN list: far below SQLite's and PostgreSQL's bound on parameters. */
const USERS_PER_QUERY = 500;

/** Web Push subscriptions registered by people's browsers and apps (delivery: the entitlement issue). */
export function createPushSubscriptions(store: Store, clock: Clock, maxPerUser: number) {
  return {
    /**
     * A browser re-subscribing with the same endpoint replaces its keys (and owner: the endpoint is the
     * device), and does not count twice. Beyond `maxPerUser` endpoints: conflict, nothing dropped
     * (docs/decisions.md, "The 11th push subscription is `409 conflict`, not "drop the oldest"").
     * The count and the write are one transaction (it begins IMMEDIATE): two subscribes, in this process or
     * another on the same file, cannot both see room for one more.
     */
    save: (userId: string, endpoint: string, p256dh: string, auth: string): Promise<Result<null>> =>
      store.transaction().execute(async (trx): Promise<Result<null>> => {
        const { n } = await trx.selectFrom('push_subscriptions').select((eb) => eb.fn.countAll<number>().as('n'))
          .where('user_id', '=', userId).where('endpoint', '<>', endpoint).executeTakeFirstOrThrow();
        if (Number(n) >= maxPerUser) return fail('conflict', `At most ${maxPerUser} push subscriptions per user; remove one first.`);
        await trx.insertInto('push_subscriptions')
          .values({ endpoint, user_id: userId, p256dh, auth, created_at: toUnixSeconds(clock()) })
          .onConflict((oc) => oc.column('endpoint').doUpdateSet((eb) => ({
            user_id: eb.ref('excluded.user_id'), p256dh: eb.ref('excluded.p256dh'), auth: eb.ref('excluded.auth'),
          })))
          .execute();
        return ok(null);
      }),
    async remove(userId: string, endpoint: string): Promise<boolean> {
      const r = await store.deleteFrom('push_subscriptions').where('endpoint', '=', endpoint).where('user_id', '=', userId).executeTakeFirst();
      return Number(r.numDeletedRows) > 0;
    },
    /**
     * Every subscription of the account ends: it changed hands or holds nothing any more (docs/api.md,
     * "Addresses: claims and proof"), so its azaans and alerts must not reach an earlier holder's browser.
     */
    async removeAllFor(userId: string): Promise<void> {
      await store.deleteFrom('push_subscriptions').where('user_id', '=', userId).execute();
    },
    /** The push service said the subscription is gone (404/410). */
    async forget(endpoint: string): Promise<void> {
      await store.deleteFrom('push_subscriptions').where('endpoint', '=', endpoint).execute();
    },
    /** Oldest first; the endpoint orders those made in the same second, so the owner's list stays put. */
    listForUser: (userId: string): Promise<PushSubscriptionRow[]> =>
      store.selectFrom('push_subscriptions').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('endpoint').execute(),
    /**
     * Every subscription of these users, grouped in the order the users are given, each user's oldest first
     * (what listForUser answers one by one), read in a query per USERS_PER_QUERY users. `q` may be the
     * caller's transaction.
     */
    async listForUsers(q: Queries, userIds: readonly string[]): Promise<PushSubscriptionRow[]> {
      const byUser = new Map<string, PushSubscriptionRow[]>();
      for (let i = 0; i < userIds.length; i += USERS_PER_QUERY) {
        const rows = await q.selectFrom('push_subscriptions').selectAll()
          .where('user_id', 'in', userIds.slice(i, i + USERS_PER_QUERY)).orderBy('created_at').execute();
        for (const row of rows) {
          const list = byUser.get(row.user_id);
          if (list) list.push(row);
          else byUser.set(row.user_id, [row]);
        }
      }
      return userIds.flatMap((id) => byUser.get(id) ?? []);
    },
    find: async (endpoint: string): Promise<PushSubscriptionRow | null> =>
      (await store.selectFrom('push_subscriptions').selectAll().where('endpoint', '=', endpoint).executeTakeFirst()) ?? null,
  };
}

export type PushSubscriptions = ReturnType<typeof createPushSubscriptions>;
