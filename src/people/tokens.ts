import crypto from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import type { Clock } from '../platform/clock.ts';
import { sha256Hex } from '../platform/identifiers.ts';
import type { Role, UserRow } from './users.ts';

export interface AccessClaims {
  id: string;
  email: string;
  role: Role;
  ver: number;
  iat: number;
  exp: number;
  /**
   * Hex SHA-256 of the token's `jti` ([RFC 7519 §4.1.7]), the key a signed-out token is kept under
   * (src/people/revoked-tokens.ts); for a token issued before tokens carried a jti, of the whole token.
   */
  tokenIdHash: string;
  /**
   * The console session the token was minted from (docs/api.md "Console sessions"); null for a token from a
   * sign-in. Signing such a token out ends its session too.
   */
  sid: string | null;
  /**
   * Unix seconds of the sign-in the token stems from, the `auth_time` claim of [OpenID Connect Core 1.0 §2]: the
   * token's own `iat` for a token from a sign-in, the opening sign-in's for one minted from a console session
   * (docs/api.md "Console sessions"). Every "fresh sign-in" rule reads this, never `iat`. A token issued before
   * tokens carried it counts from its `iat`.
   */
  authTime: number;
}

/**
 * A token minted from a console session is short-lived, names the session and carries the session's sign-in time;
 * a token that replaces one (a password change) may carry the sign-in time of the token it replaces.
 */
export interface IssueOptions {
  session?: { id: string; ttlSeconds: number };
  authTime?: number;
}

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  user: { id: string; email: string; role: Role };
}

export interface AccessTokens {
  issue(user: Pick<UserRow, 'id' | 'email' | 'role' | 'token_version'>, options?: IssueOptions): Promise<TokenResponse>;
  /**
   * The claims of a valid, unexpired, unrevoked token; null otherwise. A value, not a promise, when memory
   * answers (a token seen before, its user's version known): the per-request path of every signed-in route.
   */
  verify(token: string): AccessClaims | null | Promise<AccessClaims | null>;
}

interface Deps {
  secret: string;
  expireDays: number;
  clock: Clock;
  /**
   * The user's current token version, from memory (a promise for one memory does not know yet); undefined
   * when the user no longer exists.
   */
  currentVersion: (userId: string) => number | undefined | Promise<number | undefined>;
  /** Whether this one token was signed out, from memory (src/people/revoked-tokens.ts). */
  isRevoked?: (tokenIdHash: string) => boolean;
  cacheSize?: number;
}

/**
 * HS256 access tokens (docs/api.md, "Signing in"). jose's verify costs ~90 µs here, 27x a node:crypto HMAC (bench/RESULTS.md), so verified tokens are
 * cached (bounded, until their exp); the version check against memory still runs on every request.
 */
export function createAccessTokens(deps: Deps): AccessTokens {
  const key = new TextEncoder().encode(deps.secret);
  const ttlSeconds = deps.expireDays * 86_400;
  const cacheSize = deps.cacheSize ?? 10_000;
  const cache = new Map<string, AccessClaims>();

  const isRevoked = deps.isRevoked ?? (() => false);
  // Expiry, revocation and version, each from memory; only a version memory does not hold yet is a promise.
  const isCurrent = (claims: AccessClaims, nowSeconds: number): boolean | Promise<boolean> => {
    if (claims.exp <= nowSeconds || isRevoked(claims.tokenIdHash)) return false;
    const version = deps.currentVersion(claims.id);
    return version instanceof Promise ? version.then((v) => v === claims.ver) : version === claims.ver;
  };

  const remember = (token: string, claims: AccessClaims) => {
    if (cache.size >= cacheSize) cache.delete(cache.keys().next().value!);
    cache.set(token, claims);
  };

  const forget = (token: string) => {
    cache.delete(token);
    return null;
  };
  const verifyFresh = async (token: string, nowSeconds: number) => {
    const claims = await verifySignature(token, key, deps.clock);
    if (!claims || !(await isCurrent(claims, nowSeconds))) return null;
    remember(token, claims);
    return claims;
  };

  return {
    async issue(user, options) {
      const iat = Math.floor(deps.clock() / 1000);
      const ttl = options?.session?.ttlSeconds ?? ttlSeconds;
      const claims = {
        id: user.id, email: user.email, role: user.role, ver: user.token_version,
        auth_time: Math.min(options?.authTime ?? iat, iat),
        ...(options?.session && { sid: options.session.id }),
      };
      const token = await new SignJWT(claims)
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .setJti(crypto.randomBytes(16).toString('base64url'))
        .setIssuedAt(iat)
        .setExpirationTime(iat + ttl)
        .sign(key);
      return { access_token: token, token_type: 'Bearer', expires_in: ttl, user: { id: user.id, email: user.email, role: user.role } };
    },

    verify(token) {
      const nowSeconds = Math.floor(deps.clock() / 1000);
      const cached = cache.get(token);
      if (!cached) return verifyFresh(token, nowSeconds);
      const current = isCurrent(cached, nowSeconds);
      if (current === true) return cached;
      if (current === false) return forget(token);
      return current.then((ok) => (ok ? cached : forget(token)));
    },
  };
}

async function verifySignature(token: string, key: Uint8Array, clock: Clock): Promise<AccessClaims | null> {
  try {
    const { payload } = await jwtVerify(token, key, {
      algorithms: ['HS256'],
      requiredClaims: ['exp', 'iat'],
      currentDate: new Date(clock()),
    });
    const { id, email, role, ver, iat, exp, jti, sid, auth_time: authTime } = payload as Record<string, unknown>;
    if (typeof id !== 'string' || typeof email !== 'string' || typeof ver !== 'number') return null;
    if (role !== 'member' && role !== 'superadmin') return null;
    const tokenIdHash = sha256Hex(typeof jti === 'string' ? jti : token);
    const issuedAt = iat as number;
    return {
      id, email, role, ver, iat: issuedAt, exp: exp as number, tokenIdHash, sid: typeof sid === 'string' ? sid : null,
      // Never later than the token itself: a sign-in cannot happen after the token it gave.
      authTime: typeof authTime === 'number' && Number.isFinite(authTime) ? Math.min(authTime, issuedAt) : issuedAt,
    };
  } catch (err) {
    if (err instanceof joseErrors.JOSEError || err instanceof TypeError) return null;
    throw err;
  }
}
