import { Hono } from 'hono';
import * as v from 'valibot';
import type { Invites } from '../../src/mosques/invites.ts';
import { identifierHash } from '../../src/platform/identifiers.ts';
import type { AppEnv } from '../context.ts';
import { errorBody, unwrap } from '../errors.ts';
import { checkStanding, type GateDeps } from '../guards.ts';
import { createLimiter, type LimiterStore } from '../rate-limit.ts';
import { email, id, phone } from '../schemas.ts';
import { readJson } from '../validate.ts';

export const InviteCreate = v.pipe(
  v.object({ mosque_id: id, email: v.optional(email), whatsapp: v.optional(phone), auto_approve: v.optional(v.boolean()) }),
  v.check((b) => (b.email === undefined) !== (b.whatsapp === undefined), 'exactly one of email or whatsapp is required'),
);

interface InviteLimits {
  invitesPerMosquePerHour: number;
  invitesPerAddressPerDay: number;
  /** With REDIS_URL the budgets are counted in Redis: one budget for all processes. */
  rateLimitStore: LimiterStore;
}

/** POST /invites, by an admin of mosque_id (superadmin passes; docs/api.md, "Invitations"). */
export function inviteRoutes(deps: GateDeps & InviteLimits & { invites: Invites }) {
  const app = new Hono<AppEnv>();
  // SECURITY.md "Limits": an invitation sends a message to someone who asked for none, so it is budgeted per
  // mosque (a taken-over admin account) and per address (many mosques, one target).
  const perMosque = createLimiter(deps.invitesPerMosquePerHour, deps.rateLimitStore, 'invites-mosque', 3600);
  const perAddress = createLimiter(deps.invitesPerAddressPerDay, deps.rateLimitStore, 'invites-address', 86_400);

  app.post('/', async (c) => {
    const b = await readJson(c, InviteCreate);
    // The mosque is named in the body, not the path: the same standing check as mosqueGate's.
    const { mosque } = await checkStanding(deps, c, b.mosque_id, 'admin');
    const contact = b.email !== undefined ? { channel: 'email' as const, email: b.email } : { channel: 'whatsapp' as const, phone: b.whatsapp! };
    // The mosque's budget first: a mosque over its own must not use up an address's budget with refused tries.
    // The address is keyed by the SHA-256 of its normalized form, never in clear (Redis holds these keys).
    await perMosque(mosque.id);
    await perAddress(identifierHash(b.email ?? b.whatsapp!));
    const result = await deps.invites.invite(mosque, contact, b.auto_approve ?? false, c.var.user.id);
    // docs/api.md, "Errors": inviting a banned person is 409 membership_banned (the invite conflicts with the ban).
    // The error table's 403 for that code is the banned member's own join, so it is overridden here only.
    if (!result.ok && result.failure === 'membership_banned') return c.json(errorBody('membership_banned'), 409);
    return c.json(unwrap(result), 201);
  });

  return app;
}
