import { Hono } from 'hono';
import * as v from 'valibot';
import type { Sessions } from '../../src/people/sessions.ts';
import type { AccessTokens } from '../../src/people/tokens.ts';
import type { AppContext, AppEnv } from '../context.ts';
import { unwrap } from '../errors.ts';
import { requireUser } from '../guards.ts';
import { createLimiter, type LimiterStore } from '../rate-limit.ts';
import { hex64 } from '../schemas.ts';
import { readJson } from '../validate.ts';
import { clearedCookie } from './console-session.ts';

/** docs/api.md "Changing the password": the current password may be left out only by an account that has none. */
export const PasswordChange = v.object({ current_password_hash: v.optional(v.nullable(hex64)), new_password_hash: hex64 });

interface Deps {
  sessions: Sessions;
  tokens: AccessTokens;
  authIdentifierRateLimit: number;
  rateLimitStore: LimiterStore;
}

/**
 * POST /me/password, mounted beside the other /me routes (the bearer check is the one every non-public route
 * gets). Each try costs up to two bcrypt jobs, so it has the per-identifier auth limit, per account: a signed-in
 * script must not fill the hashing queue everyone's sign-in waits in.
 */
export function passwordRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const perAccount = createLimiter(deps.authIdentifierRateLimit, deps.rateLimitStore, 'password-change');

  app.post('/password', async (c) => {
    const body = await readJson(c, PasswordChange);
    await perAccount(c.var.user.id);
    const token = unwrap(await deps.sessions.changePassword(c.var.user, body.current_password_hash ?? null, body.new_password_hash));
    // [RFC 6749 §5.1] an answer carrying a token is never cached, as on the /auth routes.
    return c.json(token, 200, { 'Cache-Control': 'no-store', Pragma: 'no-cache' });
  });

  return app;
}

/**
 * POST /auth/logout and /auth/logout-all. Paths under /auth are public by default (api/index.ts), so these
 * two check the bearer token themselves; they carry the auth routes' security headers and address limit.
 * A token minted from a console session (docs/api.md "Console sessions") ends its session, and the answer
 * makes the browser forget the cookie; a token from a sign-in gets the same answer as ever.
 */
export function signOutRoutes(deps: Pick<Deps, 'sessions' | 'tokens'> & { publicUrl: string | null }) {
  const app = new Hono<AppEnv>();
  const signedIn = requireUser(deps.tokens);
  const forgetCookie = (c: AppContext) => {
    if (c.var.user.sid) c.header('Set-Cookie', clearedCookie(c, deps.publicUrl));
  };

  app.post('/logout', signedIn, async (c) => {
    await deps.sessions.logout(c.var.user);
    forgetCookie(c);
    return c.body(null, 204);
  });

  app.post('/logout-all', signedIn, async (c) => {
    await deps.sessions.logoutAll(c.var.user.id);
    forgetCookie(c);
    return c.body(null, 204);
  });

  return app;
}
