import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';

export interface PushSubscriptionRow {
  endpoint: string;
  user_id: string;
  p256dh: string;
  auth: string;
  created_at: number;
}

/** Web Push subscriptions registered by people's browsers and apps (delivery: the entitlement issue). */
export function createPushSubscriptions(db: Db, clock: Clock) {
  const upsert = db.prepare(
    `INSERT INTO push_subscriptions (endpoint, user_id, p256dh, auth, created_at) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (endpoint) DO UPDATE SET user_id = excluded.user_id, p256dh = excluded.p256dh, auth = excluded.auth`,
  );
  const remove = db.prepare('DELETE FROM push_subscriptions WHERE endpoint = ? AND user_id = ?');
  const removeAny = db.prepare('DELETE FROM push_subscriptions WHERE endpoint = ?');
  const ofUser = db.prepare<[string], PushSubscriptionRow>('SELECT * FROM push_subscriptions WHERE user_id = ? ORDER BY created_at');
  const byEndpoint = db.prepare<[string], PushSubscriptionRow>('SELECT * FROM push_subscriptions WHERE endpoint = ?');
  return {
    /** A browser re-subscribing with the same endpoint replaces its keys (and owner: the endpoint is the device). */
    save: (userId: string, endpoint: string, p256dh: string, auth: string) =>
      void upsert.run(endpoint, userId, p256dh, auth, toUnixSeconds(clock())),
    remove: (userId: string, endpoint: string) => remove.run(endpoint, userId).changes > 0,
    /** The push service said the subscription is gone (404/410). */
    forget: (endpoint: string) => void removeAny.run(endpoint),
    listForUser: (userId: string) => ofUser.all(userId),
    find: (endpoint: string) => byEndpoint.get(endpoint) ?? null,
  };
}

export type PushSubscriptions = ReturnType<typeof createPushSubscriptions>;
