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
  const limiter = buildLimiter(points, store, name, windowSeconds);
  return async (key: string): Promise<void> => {
    try {
      await limiter.consume(key);
    } catch (res) {
      if (!(res instanceof RateLimiterRes)) throw res;
      throw limited(res);
    }
  };
}

/**
 * The same limiter for failures only (wrong codes, RFC 8628 §5.1): `check` refuses once `points` failures are
 * counted in the window, without counting this request; `fail` counts one. A right answer costs nothing.
 */
export function createFailureLimiter(points: number, store: LimiterStore = null, name = 'failures', windowSeconds = 60) {
  const limiter = buildLimiter(points, store, name, windowSeconds);
  return {
    async check(key: string): Promise<void> {
      const res = await limiter.get(key);
      if (res && res.consumedPoints >= points) throw limited(res);
    },
    async fail(key: string): Promise<void> {
      await limiter.penalty(key, 1);
    },
  };
}

function buildLimiter(points: number, store: LimiterStore, name: string, windowSeconds: number): RateLimiterAbstract {
  const inMemory = () => new RateLimiterMemory({ points, duration: windowSeconds });
  return store
    ? new RateLimiterRedis({
        storeClient: store, points, duration: windowSeconds, keyPrefix: `minaret:rl:${name}`,
        rejectIfRedisNotReady: true, insuranceLimiter: inMemory(),
      })
    : inMemory();
}

const limited = (res: RateLimiterRes) =>
  new ApiError('rate_limited', undefined, { headers: { 'Retry-After': String(Math.max(1, Math.ceil(res.msBeforeNext / 1000))) } });

/** Limits every request under the path per client address. */
export function perAddressLimit(pointsPerMinute: number, store: LimiterStore = null, name = 'address'): MiddlewareHandler<AppEnv> {
  const consume = createLimiter(pointsPerMinute, store, name);
  return async (c, next) => {
    await consume(c.env.clientAddress());
    await next();
  };
}
