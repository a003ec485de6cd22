import type { MiddlewareHandler } from 'hono';
import type { AccessTokens } from '../src/tokens.ts';
import { ApiError } from './errors.ts';
import type { AppEnv } from './context.ts';

const BEARER = /^Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$/;

/** A valid, unexpired, unrevoked access token (contract 3); the claims go to c.var.user. */
export function requireUser(tokens: AccessTokens): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const match = BEARER.exec(c.req.header('authorization') ?? '');
    const claims = match ? await tokens.verify(match[1]!) : null;
    if (!claims) throw new ApiError('unauthorized');
    c.set('user', claims);
    await next();
  };
}

/** Superadmin-only routes are gated here, all-or-nothing, from the token alone (seed, rule 6). */
export const superadminOnly: MiddlewareHandler<AppEnv> = async (c, next) => {
  if (c.var.user.role !== 'superadmin') throw new ApiError('forbidden');
  await next();
};
