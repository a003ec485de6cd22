import { Hono } from 'hono';
import * as v from 'valibot';
import type { Invites } from '../src/invites.ts';
import type { AppEnv } from './context.ts';
import { unwrap } from './errors.ts';
import { checkStanding, type GateDeps } from './guards.ts';
import { email, id, phone } from './schemas.ts';
import { readJson } from './validate.ts';

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
    const result = unwrap(deps.invites.invite(mosque, contact, b.auto_approve ?? false, c.var.user.id));
    return c.json(result, 201);
  });

  return app;
}
