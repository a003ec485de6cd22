import type { MiddlewareHandler } from 'hono';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { ApiError } from './errors.ts';
import type { AppEnv } from './context.ts';

/**
 * Where the limits are counted: null in memory (one process); with REDIS_URL, the service's ioredis
 * connection (typed loosely: api/ does not import ioredis), so every process counts against one budget.
 */
export type LimiterStore = object | null;

/**
 * `points` per fixed window of `windowSeconds` (a minute unless said), from rate-limiter-flexible (a
 * well-kept library; no hand-rolled counters). A window starts with a key's first request. With a Redis
 * store, a request while Redis is away is counted in this process's memory instead (the insurance limiter),
 * at once rather than after a timeout: the limit then holds per process until Redis is back.
 */
export function createLimiter(points: number, store: LimiterStore = null, name = 'limit', windowSeconds = 60) {
  const inMemory = () => new RateLimiterMemory({ points, duration: windowSeconds });
  const limiter: RateLimiterAbstract = store
    ? new RateLimiterRedis({
        storeClient: store, points, duration: windowSeconds, keyPrefix: `minaret:rl:${name}`,
        rejectIfRedisNotReady: true, insuranceLimiter: inMemory(),
      })
    : inMemory();
  return async (key: string): Promise<void> => {
    try {
      await limiter.consume(key);
    } catch (res) {
      if (!(res instanceof RateLimiterRes)) throw res;
      const retryAfter = String(Math.max(1, Math.ceil(res.msBeforeNext / 1000)));
      throw new ApiError('rate_limited', undefined, { headers: { 'Retry-After': retryAfter } });
    }
  };
}

/** Limits every request under the path per client address. */
export function perAddressLimit(pointsPerMinute: number, store: LimiterStore = null, name = 'address'): MiddlewareHandler<AppEnv> {
  const consume = createLimiter(pointsPerMinute, store, name);
  return async (c, next) => {
    await consume(c.env.clientAddress());
    await next();
  };
}
