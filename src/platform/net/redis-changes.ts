import crypto from 'node:crypto';
import type { Redis } from 'ioredis';
import { createListeners, decodeChanges, encodeChanges, type Change, type ChangeFeed } from '../changes.ts';
import type { Clock } from '../clock.ts';
import type { Logger } from '../log.ts';
import type { ChangeLog } from '../store/change-log.ts';
import { coalescedPass } from '../flow/coalesced-pass.ts';

/** The one channel every process of a deployment publishes its changes on and listens to. */
export const CHANGES_CHANNEL = 'minaret:changes';

/** How long the start waits for the subscription before going on without it (the poll covers the gap). */
const SUBSCRIBE_WAIT_MS = 3000;
/** While the subscription is down, the change log is read this often, so caches still follow within a second. */
const LOG_POLL_MS = 1000;
/**
 * A catch-up reads again this many entries below the highest number seen. On PostgreSQL a number is drawn
 * before its INSERT commits, so a lower number can become visible just after a higher one; applying an entry
 * twice is harmless (a listener reloads the row), missing one is not.
 */
const LOG_SLACK = 1000;
/** Entries per read of the log. */
const LOG_PAGE = 1000;
/** More entries than this behind: one full reload is cheaper than reloading entry by entry. */
const LOG_CATCH_UP_MAX = 20_000;

/** The one Redis connection of a process (the feed and the API's rate limiters share it). */
export type RedisConnection = Redis;

/**
 * A connection to REDIS_URL with no offline queue: while Redis is away a command fails at once (the limiters
 * fall back to memory, the feed to its change log in the store) instead of queueing. ioredis is loaded only
 * here and only then (~40 modules a single process never needs).
 */
export async function connectRedis(url: string, onError: (err: Error) => void): Promise<Redis> {
  const { Redis: RedisClient } = await import('ioredis');
  const redis = new RedisClient(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  redis.on('error', onError);
  return redis;
}

export interface ChangeFeedLog {
  log: ChangeLog;
  /** Entries older than this are pruned (src/platform/boot/platform.ts); a process away for longer reloads everything instead. */
  keepMs: number;
  clock: Clock;
}

/**
 * The change feed over Redis pub/sub (REDIS_URL). `conn` is the service's command connection (created with
 * enableOfflineQueue off, so a publish while Redis is away fails at once instead of piling up); the feed
 * subscribes on a duplicate of it, because a subscribed connection can run no other command.
 *
 * Redis pub/sub delivers at most once: a message sent while a subscriber is away is gone. So each turn's
 * changes are also written to the store's numbered change log (docs/decisions.md, "The change log"), and:
 * - the subscriber, while its subscription is down, reads the log every second, and once more when it is
 *   back, from the highest number it saw; only a gap longer than the log keeps makes it reload everything;
 * - the publisher, back after publishes failed, sends one `catchUp` message that makes every process read the
 *   log (or `resync`, reload everything, when its log writes failed too);
 * - the poll the service starts (SHARED_CACHE_RELOAD_S) stays as the last safety net.
 * Without `log` (tools, tests of the feed alone) a gap is covered by reloading everything.
 */
export async function createRedisChangeFeed(deps: {
  conn: Redis; logger: Logger; onError: (what: string, err: unknown) => void; channel?: string; log?: ChangeFeedLog;
}): Promise<ChangeFeed & { start(): void }> {
  const channel = deps.channel ?? CHANGES_CHANNEL;
  const from = crypto.randomUUID();
  const listeners = createListeners((err) => deps.onError('change listener', err));
  const sub = deps.conn.duplicate({ autoResubscribe: false, enableOfflineQueue: true });
  sub.on('error', (err: Error) => deps.onError('redis change feed', err));
  const reader = deps.log ? createLogReader(deps.log, from, listeners, deps.logger, deps.onError) : null;
  // Where the log stood as this process starts: its caches load after this, so everything before is in them.
  if (reader) await reader.init();

  let started = false;
  let missedBeforeStart = false;
  let subscribed = false;
  let everSubscribed = false;
  let publishFailed = false;
  let logFailed = false;
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
    // Back after a loss: whatever was published meanwhile is lost to this process, but not to the log.
    if (!started) missedBeforeStart = true;
    else if (reader) {
      deps.logger.warn({ channel }, 'change feed back: reading the changes made meanwhile from the change log');
      void reader.catchUp();
    } else {
      deps.logger.warn({ channel }, 'change feed back: reloading every cache from the database');
      listeners.resync();
    }
  };
  sub.on('ready', () => void resubscribe());
  sub.on('close', () => {
    if (!subscribed || closed) return;
    subscribed = false;
    reader?.lost();
    deps.logger.warn({ channel }, reader
      ? 'change feed lost (Redis unreachable): other processes\' changes are read from the change log until it is back'
      : 'change feed lost (Redis unreachable): other processes\' changes arrive by the poll until it is back');
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
    if (message.seqs) reader?.saw(message.seqs);
    if (message.catchUp && !message.resync) {
      if (reader) void reader.catchUp();
      else listeners.resync();
    }
  });
  deps.conn.on('ready', () => {
    if (!publishFailed) return;
    // What this process changed meanwhile is in the log, unless writing there failed too.
    const tell = logFailed || !reader ? { resync: true as const } : { catchUp: true as const };
    deps.conn.publish(channel, encodeChanges({ v: 1, from, ...tell, changes: [] })).then(
      () => {
        publishFailed = false;
        logFailed = false;
      },
      () => undefined, // still failing: the next 'ready' tries again
    );
  });

  // The changes of one turn go out as one message, after the turn's transactions have all committed.
  const pending = new Map<string, Change>();
  let logPoll: NodeJS.Timeout | null = null;
  // Logged first, so the message can carry the entries' numbers (a receiver's catch-up starts above them).
  const flush = async () => {
    const changes = [...pending.values()];
    pending.clear();
    let seqs: number[] = [];
    if (deps.log) {
      try {
        seqs = await deps.log.log.append(from, changes, deps.log.clock());
      } catch (err) {
        // The write itself committed; only other processes' catch-up misses it, and the poll covers that.
        logFailed = true;
        deps.onError('change log append', err);
      }
    }
    if (deps.conn.status !== 'ready') {
      publishFailed = true;
      return;
    }
    try {
      await deps.conn.publish(channel, encodeChanges({ v: 1, from, changes, ...(seqs.length > 0 && { seqs }) }));
    } catch (err) {
      publishFailed = true;
      deps.onError('redis change feed publish', err);
    }
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
      if (pending.size === 0) queueMicrotask(() => void flush());
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
      if (!reader) return;
      // Every second while the subscription is down, the log stands in for it.
      logPoll = setInterval(() => {
        if (!subscribed || deps.conn.status !== 'ready') void reader.catchUp();
      }, LOG_POLL_MS);
      logPoll.unref();
    },
    async close() {
      closed = true;
      if (logPoll) clearInterval(logPoll);
      sub.disconnect();
    },
  };
}

/**
 * The subscriber's side of the change log: the highest number this process has seen (from messages and from
 * reads), the numbers just below it already applied, and the catch-up that applies the rest, once at a time.
 */
function createLogReader(
  feedLog: ChangeFeedLog, self: string, listeners: ReturnType<typeof createListeners>, logger: Logger,
  onError: (what: string, err: unknown) => void,
) {
  const { log, clock, keepMs } = feedLog;
  /** null: unknown (the log could not be read), so the next catch-up reloads everything. */
  let cursor: number | null = null;
  const applied = new Set<number>();
  let lostAt: number | null = null;

  const advance = (seq: number) => {
    applied.add(seq);
    if (cursor === null || seq > cursor) cursor = seq;
  };
  const forget = () => {
    if (cursor === null || applied.size <= 2 * LOG_SLACK) return;
    for (const seq of applied) if (seq <= cursor - LOG_SLACK) applied.delete(seq);
  };
  const reloadAll = async (why: string) => {
    // The position first: while the store is away this throws, and nothing reloads from a store that cannot answer.
    const head = await log.head();
    logger.warn({ why }, 'change feed: reloading every cache from the database');
    listeners.resync();
    applied.clear();
    cursor = head;
  };
  const pass = async () => {
    if (cursor === null) return reloadAll('the change log\'s position was unknown');
    if (lostAt !== null && clock() - lostAt > keepMs) return reloadAll('away longer than the change log keeps');
    let after = Math.max(0, cursor - LOG_SLACK);
    let fresh = 0;
    for (;;) {
      const page = await log.since(after, LOG_PAGE);
      for (const entry of page) {
        after = entry.seq;
        if (applied.has(entry.seq)) continue;
        advance(entry.seq);
        if (entry.origin === self) continue;
        if (++fresh > LOG_CATCH_UP_MAX) return reloadAll('too far behind the change log');
        listeners.changed({ kind: entry.kind, id: entry.id }, 'remote');
      }
      if (page.length < LOG_PAGE) break;
    }
    forget();
    lostAt = null;
    if (fresh > 0) logger.info({ changes: fresh, seq: cursor }, 'change feed: caught up from the change log');
  };

  return {
    async init() {
      try {
        cursor = await log.head();
      } catch (err) {
        onError('change log', err); // unknown: the first catch-up reloads everything
      }
    },
    /** The subscription is down from now: a gap longer than the log keeps is not read entry by entry. */
    lost() {
      lostAt ??= clock();
    },
    /** Numbers a message carried: their changes were applied as the message arrived. */
    saw(seqs: readonly number[]) {
      for (const seq of seqs) advance(seq);
      forget();
    },
    /** Applies every entry not seen yet; a call while one runs makes it run once more after. */
    catchUp: coalescedPass(async () => {
      try {
        await pass();
      } catch (err) {
        onError('change log catch-up', err); // the next poll, message or reconnect tries again
      }
    }),
  };
}
