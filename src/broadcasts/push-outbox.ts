import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { PushSubscriptions } from './push-subscriptions.ts';

/** The edge that talks to push services (notify/webpush.ts): one attempt at one delivery. */
export interface PushSender {
  /** `gone`: the subscription is dead (removed); `final`: this delivery must not be retried. */
  send(subscription: { endpoint: string; p256dh: string; auth: string }, payload: string): Promise<{ ok: true } | { ok: false; gone: boolean; final?: boolean; error: string }>;
}

export const MAX_PUSH_ATTEMPTS = 8;

/** "Send me a test notification" (the console): the same shape as a broadcast's push, so it proves the path. */
export const TEST_PUSH_PAYLOAD = { title: 'Minaret: test notification', body: 'Notifications work on this device.', kind: 'test' } as const;

interface OutboxRow {
  id: number;
  user_id: string;
  endpoint: string;
  payload: string;
  attempts: number;
}

/**
 * Web Push through a durable outbox: every delivery is a row before anything is sent, so a restart loses
 * none; failures retry with exponential backoff (5 s, 10 s, ... at most an hour); a subscription the push
 * service reports gone (404/410) is removed. At most `concurrency` sends are in flight; each free slot
 * takes the next due row, first attempts before retries, so a slow or dead push service met by retries
 * does not hold back a new broadcast's pushes (docs/decisions.md, "Push sending order").
 */
export function createPushOutbox(deps: { db: Db; clock: Clock; sender: PushSender; subscriptions: PushSubscriptions; logger: Logger; concurrency: number }) {
  const { db } = deps;
  const insert = db.prepare(
    `INSERT INTO push_outbox (broadcast_id, user_id, endpoint, payload, status, next_attempt_at, created_at, updated_at)
     VALUES (?, ?, ?, ?, 'queued', ?, ?, ?)`,
  );
  const due = db.prepare<[number, number], OutboxRow>(
    `SELECT id, user_id, endpoint, payload, attempts FROM push_outbox WHERE status = 'queued' AND next_attempt_at <= ?
     ORDER BY attempts > 0, id LIMIT ?`,
  );
  // Only a row still due is claimed: another process sharing the file (REDIS_URL) may have taken it meanwhile.
  const claim = db.prepare(
    "UPDATE push_outbox SET attempts = attempts + 1, next_attempt_at = ?, updated_at = ? WHERE id = ? AND status = 'queued' AND next_attempt_at <= ?",
  );
  const settle = db.prepare('UPDATE push_outbox SET status = ?, last_error = ?, updated_at = ? WHERE id = ?');
  const noteError = db.prepare('UPDATE push_outbox SET last_error = ? WHERE id = ?');
  const counts = db.prepare<[string], { status: string; n: number }>('SELECT status, count(*) AS n FROM push_outbox WHERE broadcast_id = ? GROUP BY status');
  const now = () => toUnixSeconds(deps.clock());
  const backoff = (attempts: number) => Math.min(3600, 5 * 2 ** (attempts - 1));
  let inFlight = 0;
  let idle: { promise: Promise<void>; resolve: () => void } | null = null;

  async function deliver(row: OutboxRow): Promise<void> {
    const sub = deps.subscriptions.find(row.endpoint);
    if (!sub) return void settle.run('failed', 'subscription removed', now(), row.id);
    const result = await deps.sender.send(sub, row.payload).catch((err: Error) => ({ ok: false as const, gone: false, final: false, error: err.message }));
    if (result.ok) return void settle.run('sent', null, now(), row.id);
    if (result.gone) {
      deps.subscriptions.forget(row.endpoint);
      return void settle.run('failed', 'gone', now(), row.id);
    }
    if (result.final || row.attempts + 1 >= MAX_PUSH_ATTEMPTS) settle.run('failed', result.error.slice(0, 500), now(), row.id);
    else noteError.run(result.error.slice(0, 500), row.id);
  }

  /** Fills the free slots with due rows; every finished send pumps again. */
  function pump(): void {
    const free = deps.concurrency - inFlight;
    if (free <= 0) return;
    const rows = due.all(now(), free);
    for (const row of rows) {
      // Claim first: the next attempt time moves out, so a later pump does not send the same row twice.
      if (claim.run(now() + backoff(row.attempts + 1), now(), row.id, now()).changes === 0) continue;
      inFlight++;
      deliver(row)
        .catch((err: Error) => deps.logger.error({ err: err.message, outbox_id: row.id }, 'push delivery failed'))
        .finally(() => {
          inFlight--;
          pumpSafely();
          if (inFlight === 0 && idle) {
            idle.resolve();
            idle = null;
          }
        });
    }
  }
  const pumpSafely = () => {
    try {
      pump();
    } catch (err) {
      deps.logger.error({ err: (err as Error).message }, 'push outbox failed');
    }
  };

  /** One row per subscription of each recipient, in one transaction. Returns how many were queued. */
  function enqueue(broadcastId: string | null, userIds: string[], payload: Record<string, unknown>): number {
    const body = JSON.stringify(payload);
    return db.transaction(() => {
      let queued = 0;
      for (const userId of userIds) {
        for (const sub of deps.subscriptions.listForUser(userId)) {
          insert.run(broadcastId, userId, sub.endpoint, body, now(), now(), now());
          queued++;
        }
      }
      return queued;
    })();
  }

  /** Starts what is due in the free slots; resolves once nothing is in flight. */
  function drain(): Promise<void> {
    pump();
    if (inFlight === 0) return Promise.resolve();
    if (!idle) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      idle = { promise, resolve };
    }
    return idle.promise;
  }

  return {
    enqueue,
    drain,

    /** A test notification to this user's own subscriptions only, through the outbox like any push; sent at once. */
    sendTest(userId: string): number {
      const queued = enqueue(null, [userId], TEST_PUSH_PAYLOAD);
      void drain().catch((err: Error) => deps.logger.error({ err: err.message }, 'push outbox failed'));
      return queued;
    },

    inFlight: () => inFlight,

    report(broadcastId: string): { queued: number; sent: number; failed: number } {
      const out = { queued: 0, sent: 0, failed: 0 };
      for (const { status, n } of counts.all(broadcastId)) out[status as keyof typeof out] = n;
      return out;
    },
  };
}

export type PushOutbox = ReturnType<typeof createPushOutbox>;
