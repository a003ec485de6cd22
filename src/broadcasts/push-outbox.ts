import { sql, type Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { PushSubscriptions } from './push-subscriptions.ts';
import { coalescedPass } from '../platform/flow/coalesced-pass.ts';
import type { PushOutboxTable } from '../../generated/tables.ts';

/** The edge that talks to push services (notify/webpush.ts): one attempt at one delivery. */
export interface PushSender {
  /** `gone`: the subscription is dead (removed); `final`: this delivery must not be retried. */
  send(subscription: { endpoint: string; p256dh: string; auth: string }, payload: string): Promise<{ ok: true } | { ok: false; gone: boolean; final?: boolean; error: string }>;
}

export const MAX_PUSH_ATTEMPTS = 8;
/**
 * How long a claimed row is left to its sender before another pass (of any process) may take it again: longer
 * than one send may last (notify/webpush.ts gives up after 10 s). A claim for no longer than the backoff (5 s
 * the first time) let a slow send be sent a second time while the first was still in flight.
 */
export const PUSH_CLAIM_S = 30;

/** "Send me a test notification" (the console): the same shape as a broadcast's push, so it proves the path. */
export const TEST_PUSH_PAYLOAD = { title: 'Minaret: test notification', body: 'Notifications work on this device.', kind: 'test' } as const;

/** The columns of `push_outbox` (generated/tables.ts) a delivery needs. */
type OutboxRow = Pick<Selectable<PushOutboxTable>, 'id' | 'user_id' | 'endpoint' | 'payload' | 'attempts'>;

/**
 * Web Push through a durable outbox: every delivery is a row before anything is sent, so a restart loses
 * none; failures retry with exponential backoff (5 s, 10 s, ... at most an hour); a subscription the push
 * service reports gone (404/410) is removed. At most `concurrency` sends are in flight; each free slot
 * takes the next due row, first attempts before retries, so a slow or dead push service met by retries
 * does not hold back a new broadcast's pushes (docs/decisions.md, "Push sending order").
 */
export function createPushOutbox(deps: { store: Store; clock: Clock; sender: PushSender; subscriptions: PushSubscriptions; logger: Logger; concurrency: number }) {
  const { store } = deps;
  const now = () => toUnixSeconds(deps.clock());
  const settle = async (id: number, status: 'sent' | 'failed', error: string | null) => {
    await store.updateTable('push_outbox').set({ status, last_error: error, updated_at: now() }).where('id', '=', id).execute();
  };
  const backoff = (attempts: number) => Math.min(3600, 5 * 2 ** (attempts - 1));
  /** The rows this process is sending: never claimed again while in flight, whatever the clock says. */
  const sending = new Set<number>();
  let inFlight = 0;
  let idle: { promise: Promise<void>; resolve: () => void } | null = null;

  /** `claimedAt`: when this attempt was claimed; a failed one is due again `backoff` after that. */
  async function deliver(row: OutboxRow, claimedAt: number): Promise<void> {
    const sub = await deps.subscriptions.find(row.endpoint);
    if (!sub) return settle(row.id, 'failed', 'subscription removed');
    const result = await deps.sender.send(sub, row.payload).catch((err: Error) => ({ ok: false as const, gone: false, final: false, error: err.message }));
    if (result.ok) return settle(row.id, 'sent', null);
    if (result.gone) {
      await deps.subscriptions.forget(row.endpoint);
      return settle(row.id, 'failed', 'gone');
    }
    if (result.final || row.attempts + 1 >= MAX_PUSH_ATTEMPTS) return settle(row.id, 'failed', result.error.slice(0, 500));
    await store.updateTable('push_outbox').set({ last_error: result.error.slice(0, 500), next_attempt_at: claimedAt + backoff(row.attempts + 1) })
      .where('id', '=', row.id).execute();
  }

  /** Fills the free slots with due rows; every finished send pumps again. */
  async function fill(): Promise<void> {
    const free = deps.concurrency - inFlight;
    if (free <= 0) return;
    const at = now();
    const rows: OutboxRow[] = await store.selectFrom('push_outbox').select(['id', 'user_id', 'endpoint', 'payload', 'attempts'])
      .where('status', '=', 'queued').where('next_attempt_at', '<=', at)
      .$if(sending.size > 0, (qb) => qb.where('id', 'not in', [...sending]))
      .orderBy(sql`attempts > 0`).orderBy('id').limit(free).execute();
    for (const row of rows) {
      // Claim first: the next attempt time moves out, so a later pass does not send the same row twice. Only
      // a row still due is claimed: another process sharing the file (REDIS_URL) may have taken it meanwhile.
      const claimedAt = now();
      const claimed = await store.updateTable('push_outbox')
        .set((eb) => ({ attempts: eb('attempts', '+', 1), next_attempt_at: claimedAt + Math.max(PUSH_CLAIM_S, backoff(row.attempts + 1)), updated_at: claimedAt }))
        .where('id', '=', row.id).where('status', '=', 'queued').where('next_attempt_at', '<=', now())
        .executeTakeFirst();
      if (Number(claimed.numUpdatedRows) === 0) continue;
      inFlight++;
      sending.add(row.id);
      deliver(row, claimedAt)
        .catch((err: Error) => deps.logger.error({ err: err.message, outbox_id: row.id }, 'push delivery failed'))
        .finally(() => {
          inFlight--;
          sending.delete(row.id);
          // Idle only once the pass this send started has found nothing more to send.
          void pumpSafely().then(() => {
            if (inFlight === 0 && idle) {
              idle.resolve();
              idle = null;
            }
          });
        });
    }
  }

  // One pass at a time: two passes overlapping would both count the same free slots.
  const pump = coalescedPass(fill);
  const pumpSafely = () => pump().catch((err: Error) => deps.logger.error({ err: err.message }, 'push outbox failed'));

  /** One row per subscription of each recipient, in one transaction. Returns how many were queued. */
  // Without a recipient or a subscription nothing is written and no transaction is opened: most members of a
  // mosque have no browser subscribed, and a thousand azaans starting in one minute each ask here.
  async function enqueue(broadcastId: string | null, userIds: string[], payload: Record<string, unknown>): Promise<number> {
    if (userIds.length === 0) return 0;
    const subs = await deps.subscriptions.listForUsers(store, userIds);
    if (subs.length === 0) return 0;
    const body = JSON.stringify(payload);
    const at = now();
    const rows = subs.map((sub) => ({
      broadcast_id: broadcastId, user_id: sub.user_id, endpoint: sub.endpoint, payload: body, status: 'queued', next_attempt_at: at, created_at: at, updated_at: at,
    }));
    // 8 parameters a row: 500 rows a statement stays far below either engine's bound on parameters. One
    // statement is atomic by itself; more share a transaction, so a broadcast's pushes are queued all or none.
    const write = async (q: Queries) => {
      for (let i = 0; i < rows.length; i += 500) await q.insertInto('push_outbox').values(rows.slice(i, i + 500)).execute();
    };
    await (rows.length <= 500 ? write(store) : store.transaction().execute(write));
    return rows.length;
  }

  /** Starts what is due in the free slots; resolves once nothing is in flight. */
  async function drain(): Promise<void> {
    await pump();
    if (inFlight === 0) return;
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
    async sendTest(userId: string): Promise<number> {
      const queued = await enqueue(null, [userId], TEST_PUSH_PAYLOAD);
      void drain().catch((err: Error) => deps.logger.error({ err: err.message }, 'push outbox failed'));
      return queued;
    },

    inFlight: () => inFlight,

    async report(broadcastId: string): Promise<{ queued: number; sent: number; failed: number }> {
      const out = { queued: 0, sent: 0, failed: 0 };
      const rows = await store.selectFrom('push_outbox').select((eb) => ['status', eb.fn.countAll<number>().as('n')])
        .where('broadcast_id', '=', broadcastId).groupBy('status').execute();
      for (const { status, n } of rows) out[status as keyof typeof out] = Number(n);
      return out;
    },
  };
}

export type PushOutbox = ReturnType<typeof createPushOutbox>;
