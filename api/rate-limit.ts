import type { MiddlewareHandler } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { ApiError } from './errors.ts';
import type { AppContext, AppEnv } from './context.ts';

/**
 * Fixed-window limits from rate-limiter-flexible (a well-kept library; no hand-rolled counters).
 * Memory only: with several processes behind REDIS_URL each process counts its own share.
 */
export function createLimiter(pointsPerMinute: number) {
  const limiter = new RateLimiterMemory({ points: pointsPerMinute, duration: 60 });
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

export function clientAddress(c: AppContext): string {
  try {
    return getConnInfo(c).remote.address ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Limits every request under the path per client address. */
export function perAddressLimit(pointsPerMinute: number): MiddlewareHandler<AppEnv> {
  const consume = createLimiter(pointsPerMinute);
  return async (c, next) => {
    await consume(clientAddress(c));
    await next();
  };
}
