import { Hono } from 'hono';
import { toUser, type UserStore } from '../src/users.ts';
import { ApiError } from './errors.ts';
import type { AppEnv } from './context.ts';

/** CONTRACT 5: GET /me. Memberships and admin rows come with the people-and-mosques issue. */
export function meRoutes(deps: { users: UserStore }) {
  const app = new Hono<AppEnv>();
  app.get('/', (c) => {
    const row = deps.users.findById(c.var.user.id);
    if (!row) throw new ApiError('unauthorized');
    return c.json({ user: toUser(row), memberships: [], admin_of: [] });
  });
  return app;
}
