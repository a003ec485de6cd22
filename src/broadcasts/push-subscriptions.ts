import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';

export interface PushSubscriptionRow {
  endpoint: string;
  user_id: string;
  p256dh: string;
  auth: string;
  created_at: number;
}

/** Web Push subscriptions registered by people's browsers and apps (delivery: the entitlement issue). */
export function createPushSubscriptions(db: Db, clock: Clock, maxPerUser: number) {
  const upsert = db.prepare(
    `INSERT INTO push_subscriptions (endpoint, user_id, p256dh, auth, created_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (endpoint) DO UPDATE SET user_id = excluded.user_id, p256dh = excluded.p256dh, auth = excluded.auth`,
  );
  const remove = db.prepare('DELETE FROM push_subscriptions WHERE endpoint = ? AND user_id = ?');
  const removeAny = db.prepare('DELETE FROM push_subscriptions WHERE endpoint = ?');
  const ofUser = db.prepare<[string], PushSubscriptionRow>('SELECT * FROM push_subscriptions WHERE user_id = ? ORDER BY created_at');
  const byEndpoint = db.prepare<[string], PushSubscriptionRow>('SELECT * FROM push_subscriptions WHERE endpoint = ?');
  const othersOfUser = db.prepare<[string, string], { n: number }>('SELECT count(*) AS n FROM push_subscriptions WHERE user_id = ? AND endpoint <> ?');
  // IMMEDIATE: with several processes on one file, two subscribes cannot both see room for one more.
  const saveWithinCap = db.transaction((userId: string, endpoint: string, p256dh: string, auth: string): Result<null> => {
    if (othersOfUser.get(userId, endpoint)!.n >= maxPerUser) {
      return fail('conflict', `At most ${maxPerUser} push subscriptions per user; remove one first.`);
    }
    upsert.run(endpoint, userId, p256dh, auth, toUnixSeconds(clock()));
    return ok(null);
  });
  return {
    /**
     * A browser re-subscribing with the same endpoint replaces its keys (and owner: the endpoint is the
     * device), and does not count twice. Beyond `maxPerUser` endpoints: conflict, nothing dropped
     * (docs/decisions.md, "The 11th push subscription is `409 conflict`, not "drop the oldest"").
     */
    save: (userId: string, endpoint: string, p256dh: string, auth: string): Result<null> => saveWithinCap.immediate(userId, endpoint, p256dh, auth),
    remove: (userId: string, endpoint: string) => remove.run(endpoint, userId).changes > 0,
    /** The push service said the subscription is gone (404/410). */
    forget: (endpoint: string) => void removeAny.run(endpoint),
    listForUser: (userId: string) => ofUser.all(userId),
    find: (endpoint: string) => byEndpoint.get(endpoint) ?? null,
  };
}

export type PushSubscriptions = ReturnType<typeof createPushSubscriptions>;
