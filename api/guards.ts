import type { MiddlewareHandler } from 'hono';
import { standingOf, type Actor, type AdminStore, type Standing } from '../src/mosques/admins.ts';
import type { Memberships } from '../src/mosques/memberships.ts';
import type { MosqueRow, MosqueStore } from '../src/mosques/mosques.ts';
import type { AccessClaims, AccessTokens } from '../src/people/tokens.ts';
import { mayHold, type UserStore } from '../src/people/users.ts';
import { ApiError } from './errors.ts';
import { requestHeader, type AppContext, type AppEnv } from './context.ts';

// RFC 9110 §11.1: the scheme is case-insensitive ("bearer", "BEARER") and one or more spaces follow it.
const BEARER = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$/i;

/** The JWT of an `Authorization: Bearer <jwt>` header, or null when the header is absent or not that. */
export function bearerToken(c: AppContext): string | null {
  return BEARER.exec(requestHeader(c, 'authorization') ?? '')?.[1] ?? null;
}

/**
 * A valid, unexpired, unrevoked access token; the claims go to c.var.user. No await when the token check answers
 * from memory (src/people/tokens.ts): every signed-in request passes here.
 */
export function requireUser(tokens: AccessTokens): MiddlewareHandler<AppEnv> {
  const admit = (c: AppContext, claims: AccessClaims | null, next: () => Promise<void>) => {
    if (!claims) throw new ApiError('unauthorized');
    c.set('user', claims);
    return next();
  };
  return (c, next) => {
    const token = bearerToken(c);
    const claims = token ? tokens.verify(token) : null;
    return claims instanceof Promise ? claims.then((known) => admit(c, known, next)) : admit(c, claims, next);
  };
}

/** Superadmin-only routes are gated here, all-or-nothing, from the token alone (docs/walkthrough.md, "3. The mosque and its members": a superadmin from the token's role). */
export const superadminOnly: MiddlewareHandler<AppEnv> = async (c, next) => {
  if (c.var.user.role !== 'superadmin') throw new ApiError('forbidden');
  await next();
};

/**
 * Routes by which an account would gain something (a membership, a device, a push subscription): an account whose
 * every address is unproven holds nothing (docs/api.md, "Addresses: claims and proof"), so it is told to confirm
 * one first. One read of the caller's row; these routes are not hot.
 */
export function holderOnly(users: Pick<UserStore, 'findById'>): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const row = await users.findById(c.var.user.id);
    if (!row) throw new ApiError('unauthorized');
    if (!mayHold(row)) throw new ApiError('address_unproven');
    await next();
  };
}

export function actorOf(c: AppContext): Actor {
  const user = c.get('user');
  return { id: user.id, isSuperadmin: user.role === 'superadmin' };
}

/** The standing a route needs in the mosque named by :id. `member` only needs the mosque to exist. */
export type Gate = 'member' | keyof Omit<Standing, 'superadmin'>;

export interface GateDeps {
  mosques: MosqueStore;
  admins: AdminStore;
  memberships: Memberships;
}

/**
 * Loads the mosque and checks the caller's standing there: the token's role for superadmin (no query),
 * and the caller's admin row for this mosque (one indexed query, read on every request so a change of
 * flags applies to the very next one). A caller who is neither admin nor member gets 404, as if the
 * mosque did not exist; a member or an admin lacking the flag gets 403. The mosque, admin and membership
 * reads are queries compiled once (src/platform/store/prepared.ts): this runs on every mosque route.
 */
export async function checkStanding(deps: GateDeps, c: AppContext, mosqueId: string, gate: Gate): Promise<{ mosque: MosqueRow; standing: Standing }> {
  const mosque = await deps.mosques.findById(mosqueId);
  if (!mosque) throw new ApiError('not_found');
  const actor = actorOf(c);
  const standing = standingOf(actor, actor.isSuperadmin ? null : await deps.admins.find(mosque.id, actor.id));
  if (gate !== 'member' && !standing[gate]) {
    const visible = standing.admin || (await deps.memberships.findFor(mosque.id, actor.id)) !== null;
    throw new ApiError(visible ? 'forbidden' : 'not_found');
  }
  return { mosque, standing };
}

/** The same check for the mosque named by the route's :id; sets c.var.mosque and c.var.standing. */
export function mosqueGate(deps: GateDeps, gate: Gate): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const { mosque, standing } = await checkStanding(deps, c, c.req.param('id') ?? '', gate);
    c.set('mosque', mosque);
    c.set('standing', standing);
    await next();
  };
}
