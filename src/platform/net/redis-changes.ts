import crypto from 'node:crypto';
import type { Redis } from 'ioredis';
import { createListeners, decodeChanges, encodeChanges, type Change, type ChangeFeed } from '../changes.ts';
import type { Logger } from '../log.ts';

/** The one channel every process of a deployment publishes its changes on and listens to. */
export const CHANGES_CHANNEL = 'minaret:changes';

/** How long the start waits for the subscription before going on without it (the poll covers the gap). */
const SUBSCRIBE_WAIT_MS = 3000;

/**
 * The change feed over Redis pub/sub (REDIS_URL). `conn` is the service's command connection (created with
 * enableOfflineQueue off, so a publish while Redis is away fails at once instead of piling up); the feed
 * subscribes on a duplicate of it, because a subscribed connection can run no other command.
 *
 * Redis pub/sub delivers at most once: a message sent while a subscriber is away is gone. So:
 * - the subscriber, back after a loss, resubscribes and tells its process to reload everything;
 * - the publisher, back after publishes failed, sends one `resync` message that makes every process do so;
 * - the poll in src/service.ts stays as the safety net for anything else.
 */
export async function createRedisChangeFeed(deps: { conn: Redis; logger: Logger; onError: (what: string, err: unknown) => void; channel?: string }): Promise<ChangeFeed & { start(): void }> {
  const channel = deps.channel ?? CHANGES_CHANNEL;
  const from = crypto.randomUUID();
  const listeners = createListeners((err) => deps.onError('change listener', err));
  const sub = deps.conn.duplicate({ autoResubscribe: false, enableOfflineQueue: true });
  sub.on('error', (err: Error) => deps.onError('redis change feed', err));

  let started = false;
  let missedBeforeStart = false;
  let subscribed = false;
  let everSubscribed = false;
  let publishFailed = false;
  let closed = false;

  const resubscribe = async () => {
    try {
      await sub.subscribe(channel);
    } catch (err) {
      deps.onError('redis change feed', err); // the next 'ready' tries again
      return;
    }
    const again = everSubscribed;
    subscribed = true;
    everSubscribed = true;
    if (!again) return;
    // Back after a loss: whatever was published meanwhile is lost to this process.
    deps.logger.warn({ channel }, 'change feed back: reloading every cache from the database');
    if (started) listeners.resync();
    else missedBeforeStart = true;
  };
  sub.on('ready', () => void resubscribe());
  sub.on('close', () => {
    if (!subscribed || closed) return;
    subscribed = false;
    deps.logger.warn({ channel }, 'change feed lost (Redis unreachable): other processes\' changes arrive by the poll until it is back');
  });
  sub.on('message', (from_: string, text: string) => {
    if (from_ !== channel) return;
    const message = decodeChanges(text);
    if (!message || message.from === from) return;
    if (!started) {
      missedBeforeStart = true; // the listeners are not all in place yet: start() reloads everything
      return;
    }
    if (message.resync) listeners.resync();
    for (const change of message.changes) listeners.changed(change, 'remote');
  });
  deps.conn.on('ready', () => {
    if (!publishFailed) return;
    deps.conn.publish(channel, encodeChanges({ v: 1, from, resync: true, changes: [] })).then(
      () => void (publishFailed = false),
      () => undefined, // still failing: the next 'ready' tries again
    );
  });

  // The changes of one turn go out as one message, after the turn's transactions have all committed.
  const pending = new Map<string, Change>();
  const flush = () => {
    const changes = [...pending.values()];
    pending.clear();
    if (deps.conn.status !== 'ready') {
      publishFailed = true;
      return;
    }
    deps.conn.publish(channel, encodeChanges({ v: 1, from, changes })).catch((err: unknown) => {
      publishFailed = true;
      deps.onError('redis change feed publish', err);
    });
  };

  await Promise.race([
    new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (subscribed || closed) {
          clearInterval(poll);
          resolve();
        }
      }, 10);
      poll.unref();
    }),
    new Promise<void>((resolve) => setTimeout(resolve, SUBSCRIBE_WAIT_MS).unref()),
  ]);
  if (!subscribed) deps.logger.warn({ channel }, 'change feed not subscribed yet (Redis unreachable): starting on the poll');

  return {
    publish(change) {
      listeners.changed(change, 'local');
      if (pending.size === 0) queueMicrotask(flush);
      pending.set(`${change.kind}:${change.id}`, change);
    },
    subscribe: listeners.add,
    resync: listeners.resync,
    state: () => (subscribed && deps.conn.status === 'ready' ? 'ok' : 'down'),
    /** Every listener is in place: anything that arrived before is covered by one full reload. */
    start() {
      started = true;
      if (missedBeforeStart) listeners.resync();
      missedBeforeStart = false;
    },
    async close() {
      closed = true;
      sub.disconnect();
    },
  };
}
