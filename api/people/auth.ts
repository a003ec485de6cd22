import { Hono, type MiddlewareHandler } from 'hono';
import * as v from 'valibot';
import type { PeopleAuth } from '../../src/people/auth.ts';
import { identifierHash } from '../../src/platform/identifiers.ts';
import type { SuperadminAuth } from '../../src/people/superadmin.ts';
import type { FirstSuperadmin } from '../../src/people/admin/first-superadmin.ts';
import { ApiError, unwrap } from '../errors.ts';
import type { AppEnv } from '../context.ts';
import { createLimiter, perAddressLimit, type LimiterStore } from '../rate-limit.ts';
import { readJson } from '../validate.ts';
import { email, hex64, phone } from '../schemas.ts';

const channel = v.optional(v.nullable(v.picklist(['email', 'sms'])));
const opaqueToken = v.pipe(v.string(), v.minLength(1, 'must not be empty'), v.maxLength(256, 'is too long'));


export const Signup = v.pipe(
  v.object({ email: v.optional(v.nullable(email)), phone: v.optional(v.nullable(phone)), password_hash: v.optional(v.nullable(hex64)) }),
  v.check((b) => Boolean(b.email || b.phone), 'one of email or phone is required'),
);
export const Login = v.object({ identifier_hash: hex64, password_hash: hex64 });
export const CodeRequest = v.object({ identifier_hash: hex64, channel });
export const CodeVerify = v.object({ identifier_hash: hex64, code: v.pipe(v.string(), v.regex(/^\d{6}$/, 'must be 6 digits')) });
export const Reset = v.object({ token: opaqueToken, password_hash: hex64 });
export const SuperadminForgot = v.object({ identifier_hash: hex64 });
export const SessionVerify = v.object({
  session_token: opaqueToken,
  timestamp: v.pipe(v.number(), v.integer('must be whole Unix seconds'), v.safeInteger()),
  hmac: hex64,
});
export const SuperadminReset = v.object({ reset_token: opaqueToken, password_hash: hex64 });
export const SetupBody = v.object({ token: opaqueToken, email, password_hash: hex64 });

/**
 * Security headers on every auth response, errors and 404s included (test/api/http-edges.test.ts holds them).
 * Mounted by createApi ahead of the body limit: a 413 is refused before this router is reached.
 */
export const authSecurityHeaders: MiddlewareHandler<AppEnv> = async (c, next) => {
  await next();
  c.res.headers.set('Strict-Transport-Security', 'max-age=31536000; includeSubDomains');
  c.res.headers.set('X-Content-Type-Options', 'nosniff');
  c.res.headers.set('Cache-Control', 'no-store, no-cache, must-revalidate');
  c.res.headers.set('Pragma', 'no-cache');
};

interface Deps {
  peopleAuth: PeopleAuth;
  firstSuperadmin: FirstSuperadmin;
  superadminAuth: SuperadminAuth;
  authRateLimit: number;
  authIdentifierRateLimit: number;
  /** With REDIS_URL, the limits are counted in Redis: one budget for all processes. */
  rateLimitStore: LimiterStore;
}

/** Every route under /api/v1/auth (docs/api.md, "Signing in"). */
export function authRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const { peopleAuth, superadminAuth } = deps;
  const perIdentifier = createLimiter(deps.authIdentifierRateLimit, deps.rateLimitStore, 'auth-identifier');

  app.use('*', perAddressLimit(deps.authRateLimit, deps.rateLimitStore, 'auth-address'));

  app.post('/signup', async (c) => {
    const body = await readJson(c, Signup);
    await perIdentifier(identifierHash(body.email ?? body.phone!));
    const outcome = unwrap(
      await peopleAuth.signup({ email: body.email ?? null, phone: body.phone ?? null, passwordHash: body.password_hash ?? null }),
    );
    return c.json(outcome.token, outcome.created ? 201 : 200);
  });

  app.post('/login', async (c) => {
    const body = await readJson(c, Login);
    await perIdentifier(body.identifier_hash);
    return c.json(unwrap(await peopleAuth.login(body.identifier_hash, body.password_hash)), 200);
  });

  app.post('/login-code', async (c) => {
    const body = await readJson(c, CodeRequest);
    await perIdentifier(body.identifier_hash);
    await peopleAuth.requestLoginCode(body.identifier_hash, body.channel ?? null);
    return c.json({ status: 'accepted' }, 202);
  });

  app.post('/login-code/verify', async (c) => {
    const body = await readJson(c, CodeVerify);
    await perIdentifier(body.identifier_hash);
    return c.json(unwrap(await peopleAuth.verifyLoginCode(body.identifier_hash, body.code)), 200);
  });

  app.post('/forgot-password', async (c) => {
    const body = await readJson(c, CodeRequest);
    await perIdentifier(body.identifier_hash);
    await peopleAuth.requestPasswordReset(body.identifier_hash, body.channel ?? null);
    return c.json({ status: 'accepted' }, 202);
  });

  app.post('/reset-password', async (c) => {
    const body = await readJson(c, Reset);
    unwrap(await peopleAuth.resetPassword(body.token, body.password_hash));
    return c.json({ status: 'password_reset' }, 200);
  });

  app.post('/superadmin-2fa', async (c) => {
    const body = await readJson(c, Login);
    await perIdentifier(body.identifier_hash);
    return c.json(unwrap(await superadminAuth.startLogin(body.identifier_hash, body.password_hash)), 200);
  });

  app.post('/superadmin-2fa/verify', async (c) => {
    const body = await readJson(c, SessionVerify);
    const input = { sessionToken: body.session_token, timestamp: body.timestamp, hmac: body.hmac };
    return c.json(unwrap(await superadminAuth.verifyLogin(input)), 200);
  });

  app.post('/superadmin-forgot', async (c) => {
    const body = await readJson(c, SuperadminForgot);
    await perIdentifier(body.identifier_hash);
    return c.json(await superadminAuth.startReset(body.identifier_hash), 200);
  });

  app.post('/superadmin-forgot/verify', async (c) => {
    const body = await readJson(c, SessionVerify);
    const input = { sessionToken: body.session_token, timestamp: body.timestamp, hmac: body.hmac };
    return c.json(unwrap(await superadminAuth.verifyReset(input)), 200);
  });

  // docs/operator.md, "The first superadmin": open while none exists, with the token of the link the process logged.
  // Closed is an answer, not a 404: the console's /setup page asks it signed out, and a signed-out page makes no failing request.
  app.get('/setup', async (c) => c.json({ status: (await deps.firstSuperadmin.isOpen()) ? 'open' : 'closed' }, 200));

  app.post('/setup', async (c) => {
    const body = await readJson(c, SetupBody);
    const user = unwrap(await deps.firstSuperadmin.create(body.token, body.email, body.password_hash));
    return c.json({ user: { id: user.id, email: user.email, role: user.role } }, 201);
  });

  app.post('/superadmin-reset-password', async (c) => {
    const body = await readJson(c, SuperadminReset);
    unwrap(await superadminAuth.resetPassword(body.reset_token, body.password_hash));
    return c.json({ status: 'password_reset' }, 200);
  });

  return app;
}
