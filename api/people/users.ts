import { Hono } from 'hono';
import * as v from 'valibot';
import type { UserAdmin } from '../../src/people/admin/user-admin.ts';
import { toUser, type UserStore } from '../../src/people/users.ts';
import type { AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { superadminOnly } from '../guards.ts';
import { email, hex64, limit, offset, phone } from '../schemas.ts';
import { readJson, readQuery } from '../validate.ts';

const role = v.picklist(['member', 'superadmin']);
export const UserCreate = v.pipe(
  v.object({ email: v.optional(v.nullable(email)), phone: v.optional(v.nullable(phone)), password_hash: v.optional(v.nullable(hex64)), role: v.optional(role) }),
  v.check((b) => Boolean(b.email || b.phone), 'one of email or phone is required'),
);
export const UserUpdate = v.object({ email: v.optional(email), phone: v.optional(v.nullable(phone)), password_hash: v.optional(hex64), role: v.optional(role) });
export const UserQuery = v.object({
  limit: limit(50, 200),
  offset,
});

/** User administration, superadmin only, gated once for the whole route (docs/walkthrough.md, "3. The mosque and its members"). */
export function userRoutes(deps: { users: UserStore; userAdmin: UserAdmin }) {
  const app = new Hono<AppEnv>();
  app.use('*', superadminOnly);

  app.get('/', async (c) => {
    const q = readQuery(c, UserQuery);
    return c.json((await deps.users.list(q.limit, q.offset)).map(toUser));
  });

  app.post('/', async (c) => {
    const b = await readJson(c, UserCreate);
    const row = unwrap(await deps.userAdmin.create({ email: b.email ?? null, phone: b.phone ?? null, passwordHash: b.password_hash ?? null, role: b.role ?? 'member' }));
    return c.json(toUser(row), 201);
  });

  app.get('/:id', async (c) => {
    const row = await deps.users.findById(c.req.param('id'));
    if (!row) throw new ApiError('not_found');
    return c.json(toUser(row));
  });

  app.patch('/:id', async (c) => {
    const b = await readJson(c, UserUpdate);
    const fields = {
      ...(b.email !== undefined && { email: b.email }),
      ...(b.phone !== undefined && { phone: b.phone }),
      ...(b.password_hash !== undefined && { passwordHash: b.password_hash }),
      ...(b.role !== undefined && { role: b.role }),
    };
    return c.json(toUser(unwrap(await deps.userAdmin.update(c.req.param('id'), fields))));
  });

  app.delete('/:id', async (c) => {
    unwrap(await deps.userAdmin.delete(c.req.param('id'), c.var.user.id));
    return c.body(null, 204);
  });

  return app;
}
