import type { MiddlewareHandler } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { resolveClientAddress, type TrustProxy } from '../src/platform/net/client-address.ts';
import { ApiError } from './errors.ts';
import { requestHeader, type AppContext, type AppEnv } from './context.ts';

/**
 * Where the limits are counted: null in memory (one process); with REDIS_URL, the service's ioredis
 * connection (typed loosely: api/ does not import ioredis), so every process counts against one budget.
 */
export type LimiterStore = object | null;

/**
 * Fixed-window limits from rate-limiter-flexible (a well-kept library; no hand-rolled counters). With a
 * Redis store, a request while Redis is away is counted in this process's memory instead (the insurance
 * limiter), at once rather than after a timeout: the limit then holds per process until Redis is back.
 */
export function createLimiter(pointsPerMinute: number, store: LimiterStore = null, name = 'limit') {
  const inMemory = () => new RateLimiterMemory({ points: pointsPerMinute, duration: 60 });
  const limiter: RateLimiterAbstract = store
    ? new RateLimiterRedis({
        storeClient: store, points: pointsPerMinute, duration: 60, keyPrefix: `minaret:rl:${name}`,
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

/** The peer of the socket (the last hop, a proxy or the client itself). */
export function socketAddress(c: AppContext): string | undefined {
  try {
    return getConnInfo(c).remote.address;
  } catch {
    return undefined;
  }
}

/** The client of this request as TRUST_PROXY decides (whether X-Forwarded-For counts); resolved once per request. */
export function clientAddressOf(c: AppContext, trust: TrustProxy): string {
  return resolveClientAddress(socketAddress(c), requestHeader(c, 'x-forwarded-for'), trust);
}

/** Limits every request under the path per client address. */
export function perAddressLimit(pointsPerMinute: number, store: LimiterStore = null, name = 'address'): MiddlewareHandler<AppEnv> {
  const consume = createLimiter(pointsPerMinute, store, name);
  return async (c, next) => {
    await consume(c.get('clientAddress'));
    await next();
  };
}
