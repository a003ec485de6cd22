import { Hono } from 'hono';
import * as v from 'valibot';
import type { Invites } from '../../src/mosques/invites.ts';
import type { AppEnv } from '../context.ts';
import { errorBody, unwrap } from '../errors.ts';
import { checkStanding, type GateDeps } from '../guards.ts';
import { email, id, phone } from '../schemas.ts';
import { readJson } from '../validate.ts';

export const InviteCreate = v.pipe(
  v.object({ mosque_id: id, email: v.optional(email), whatsapp: v.optional(phone), auto_approve: v.optional(v.boolean()) }),
  v.check((b) => (b.email === undefined) !== (b.whatsapp === undefined), 'exactly one of email or whatsapp is required'),
);

/** CONTRACT 5: POST /invites, by an admin of mosque_id (superadmin passes). */
export function inviteRoutes(deps: GateDeps & { invites: Invites }) {
  const app = new Hono<AppEnv>();

  app.post('/', async (c) => {
    const b = await readJson(c, InviteCreate);
    // The mosque is named in the body, not the path: the same standing check as mosqueGate's.
    const { mosque } = checkStanding(deps, c, b.mosque_id, 'admin');
    const contact = b.email !== undefined ? { channel: 'email' as const, email: b.email } : { channel: 'whatsapp' as const, phone: b.whatsapp! };
    const result = deps.invites.invite(mosque, contact, b.auto_approve ?? false, c.var.user.id);
    // Contract 5: inviting a banned person is 409 membership_banned (the invite conflicts with the ban).
    // The error table's 403 for that code is the banned member's own join, so it is overridden here only.
    if (!result.ok && result.failure === 'membership_banned') return c.json(errorBody('membership_banned'), 409);
    return c.json(unwrap(result), 201);
  });

  return app;
}
