import type { Config } from '../config.ts';
import type { Clock } from '../clock.ts';
import type { Logger } from '../log.ts';
import type { Closer } from '../shutdown.ts';
import type { Faults } from '../faults.ts';
import type { Store } from '../store/store.ts';
import { createLocalChangeFeed, type ChangeFeed, type ChangeListener } from '../changes.ts';
import { connectRedis, createRedisChangeFeed, type RedisConnection } from '../net/redis-changes.ts';
import { createChangeLog } from '../store/change-log.ts';
import { createDuties, type Duties } from '../store/duties.ts';
import { createNotifier, type Transport } from '../notify.ts';
import { createAfterAnswer, idleAfterAnswer } from '../flow/after-answer.ts';

/** How often the change log's entries past CHANGE_LOG_KEEP_S are deleted (once across nodes: a periodic duty). */
const CHANGE_LOG_PRUNE_MS = 10 * 60 * 1000;

/**
 * What every domain is built on besides the store: messages to people (behind the Transport the edge hands in),
 * the work an answer must not wait for, the deployment's periodic duties and the change feed. Each closer is
 * registered as its part is made, so a failure halfway still closes what was made.
 */
export async function buildPlatform(
  config: Config,
  ports: { store: Store; faults: Faults; clock: Clock; logger: Logger; transport: Transport; notifyRetryBaseMs?: number | undefined },
  closers: Closer[],
) {
  const { store, faults, clock, logger } = ports;
  const messages = createNotifier(ports.transport, { logger, ...(ports.notifyRetryBaseMs ? { baseDelayMs: ports.notifyRetryBaseMs } : {}) });
  closers.push({ name: 'notifier', close: () => messages.close() });
  // Work an answer must not wait for (docs/api.md "Signing in"); stopped before the notifier it may still send through.
  const afterAnswer = createAfterAnswer(logger);
  closers.push({ name: 'work after answers', close: () => afterAnswer.idle() });
  const notifier = idleAfterAnswer(messages, afterAnswer);
  // The deployment's periodic duties, each run claimed once across nodes; started once everything they run is.
  const duties = createDuties({ store, clock, onError: (what, err) => void faults.report(what, err) });
  const { changes, redis, startFeed } = await openChangeFeed(config, { logger, faults, store, clock, duties });
  closers.push({ name: 'change feed', close: async () => {
    await changes.close();
    redis?.disconnect();
  } });
  return {
    notifier, afterAnswer, duties, changes, redis, startFeed,
    /**
     * Each in-memory cache follows the change feed itself (src/platform/changes.ts) from here on; with REDIS_URL,
     * the safety net under the feed: whatever a lost message or a Redis outage hid is read again this often.
     */
    follow(followers: Array<ChangeListener | null | undefined>, into: Closer[]): void {
      for (const follower of followers) {
        if (follower) changes.subscribe(follower);
      }
      if (!config.redisUrl) return;
      const reload = setInterval(() => changes.resync(), config.sharedCacheReloadS * 1000);
      reload.unref();
      into.push({ name: 'shared cache reload', close: () => clearInterval(reload) });
    },
  };
}

/**
 * The change feed (src/platform/changes.ts): in-process without REDIS_URL; else over Redis pub/sub on a
 * connection of its own, which the rate limiters share (api/rate-limit.ts).
 */
async function openChangeFeed(
  config: Config, deps: { logger: Logger; faults: Pick<Faults, 'report'>; store: Store; clock: Clock; duties: Duties },
): Promise<{ changes: ChangeFeed; redis: RedisConnection | null; startFeed(): void }> {
  const { logger, faults } = deps;
  const onError = (what: string, err: unknown) => void faults.report(what, err);
  if (!config.redisUrl) return { changes: createLocalChangeFeed((err) => onError('change listener', err)), redis: null, startFeed: () => undefined };
  const redis = await connectRedis(config.redisUrl, (err) => onError('redis connection', err));
  const log = { log: createChangeLog(deps.store), keepMs: config.changeLogKeepS * 1000, clock: deps.clock };
  deps.duties.add('change log prune', CHANGE_LOG_PRUNE_MS, () => log.log.prune(deps.clock() - log.keepMs));
  const feed = await createRedisChangeFeed({ conn: redis, logger, onError, log });
  return { changes: feed, redis, startFeed: () => feed.start() };
}
