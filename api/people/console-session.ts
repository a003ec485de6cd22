import { Hono, type MiddlewareHandler } from 'hono';
import type { ConsoleSessions, Sessions } from '../../src/people/sessions.ts';
import type { AccessTokens } from '../../src/people/tokens.ts';
import { requestHeader, type AppContext, type AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { requireUser } from '../guards.ts';

/**
 * docs/api.md "Console sessions": the browser console's cookie, sent only to the two routes under this path (so no
 * other route can be reached with it: the rest of the API stays bearer-only, with nothing for CSRF to ride on).
 */
export const SESSION_PATH = '/api/v1/auth/session';
export const SESSION_COOKIE = 'minaret_console';
/** A header a cross-site form cannot send, and a cross-site fetch only after a CORS preflight this service never grants. */
export const CONSOLE_HEADER = 'x-minaret-console';

interface Deps {
  sessions: Sessions;
  consoleSessions: ConsoleSessions;
  tokens: AccessTokens;
  /** PUBLIC_URL's origin: when set, the only origin a console request may come from. */
  publicUrl: string | null;
  consoleSessionSettings: { absoluteSeconds: number };
}

const originOf = (text: string): string | null => {
  try {
    const url = new URL(text);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.origin : null;
  } catch {
    return null;
  }
};

/**
 * The origin this service is reached at: PUBLIC_URL's, else the one the request names (its Host, and https when a
 * TLS-ending proxy says so in X-Forwarded-Proto). A page on another site cannot make a browser send our Host with
 * its own Origin and our cookie at once: SameSite=Strict and the cookie's host see to the cookie.
 */
export function ownOrigin(c: AppContext, publicUrl: string | null): string | null {
  if (publicUrl) return publicUrl;
  const host = requestHeader(c, 'host');
  if (!host) return null;
  const https = requestHeader(c, 'x-forwarded-proto')?.split(',')[0]?.trim().toLowerCase() === 'https';
  return originOf(`${https ? 'https' : 'http'}://${host}`);
}

/** docs/console.md "Token storage": plain http is allowed for the cookie only on a loopback host (development). */
export function isLoopbackHttp(origin: string): boolean {
  const url = new URL(origin);
  if (url.protocol !== 'http:') return false;
  const host = url.hostname;
  return host === 'localhost' || host.endsWith('.localhost') || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) || host === '[::1]';
}

function cookie(value: string, maxAgeSeconds: number, secure: boolean): string {
  return [`${SESSION_COOKIE}=${value}`, `Path=${SESSION_PATH}`, `Max-Age=${maxAgeSeconds}`, 'HttpOnly', 'SameSite=Strict', ...(secure ? ['Secure'] : [])].join('; ');
}

/** The Set-Cookie that makes the browser forget the session cookie (sign-out, or a session that ended). */
export function clearedCookie(c: AppContext, publicUrl: string | null): string {
  const own = ownOrigin(c, publicUrl);
  return cookie('', 0, own === null || !isLoopbackHttp(own));
}

/** The cookie's value in the request, if any. */
function sessionCookieOf(c: AppContext): string | null {
  for (const part of (requestHeader(c, 'cookie') ?? '').split(/;\s*/)) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq) === SESSION_COOKIE) return part.slice(eq + 1);
  }
  return null;
}

/**
 * The CSRF rule of docs/api.md "Console sessions", ahead of anything that sets, uses or clears the cookie: the
 * console's own header, and an Origin that is this service's. A missing Origin is refused too: every browser sends
 * one on a POST, so only a client that is not a browser (and needs no cookie) could leave it out.
 */
export function consoleRequest(publicUrl: string | null): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    if (requestHeader(c, CONSOLE_HEADER) !== '1') throw new ApiError('forbidden', 'A console session request must carry the X-Minaret-Console: 1 header.');
    const origin = originOf(requestHeader(c, 'origin') ?? '');
    const own = ownOrigin(c, publicUrl);
    if (origin === null || own === null || origin !== own) throw new ApiError('forbidden', "A console session request must come from this service's own origin.");
    await next();
  };
}

/** POST /auth/session (open: a fresh token traded for the cookie) and POST /auth/session/token (a short-lived token). */
export function consoleSessionRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const sameOrigin = consoleRequest(deps.publicUrl);

  app.post('/session', sameOrigin, requireUser(deps.tokens), async (c) => {
    const origin = ownOrigin(c, deps.publicUrl)!;
    // A browser drops a Secure cookie set over plain http (but on a loopback host), so the session would be lost
    // with the token traded for it: say so, and the page keeps the token it has.
    if (origin.startsWith('http:') && !isLoopbackHttp(origin)) {
      throw new ApiError('forbidden', 'A console session needs https (or plain http on a loopback host); keep the bearer token.');
    }
    const opened = unwrap(await deps.sessions.openConsoleSession(c.var.user));
    c.header('Set-Cookie', cookie(opened.cookie, deps.consoleSessionSettings.absoluteSeconds, !isLoopbackHttp(origin)));
    return c.json(opened.token, 201);
  });

  app.post('/session/token', sameOrigin, async (c) => {
    const value = sessionCookieOf(c);
    // docs/api.md "Console sessions": a page with no cookie has nothing to restore; answering 401 made every
    // signed-out visit log a failed request in the browser.
    if (!value) return c.body(null, 204);
    const token = value ? await deps.consoleSessions.mint(value) : null;
    if (!token) throw new ApiError('unauthorized', 'No live console session: sign in again.', { headers: { 'Set-Cookie': clearedCookie(c, deps.publicUrl) } });
    return c.json(token, 200);
  });

  return app;
}
