import type { MiddlewareHandler } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { resolveClientAddress, type TrustProxy } from '../src/platform/net/client-address.ts';
import { ApiError } from './errors.ts';
import { requestHeader, type AppContext, type AppEnv } from './context.ts';

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
export function perAddressLimit(pointsPerMinute: number): MiddlewareHandler<AppEnv> {
  const consume = createLimiter(pointsPerMinute);
  return async (c, next) => {
    await consume(c.get('clientAddress'));
    await next();
  };
}
