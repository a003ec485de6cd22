import { Hono } from 'hono';
import * as v from 'valibot';
import { toFlags, type AdminStore } from '../../src/mosques/admins.ts';
import { toMembership, type Memberships } from '../../src/mosques/memberships.ts';
import type { PushSubscriptions } from '../../src/broadcasts/push-subscriptions.ts';
import { checkPushEndpoint } from '../../src/broadcasts/push-endpoint.ts';
import { toUser, type UserStore } from '../../src/people/users.ts';
import type { AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { httpUrl } from '../schemas.ts';
import { createLimiter } from '../rate-limit.ts';
import { readJson } from '../validate.ts';

const key = v.pipe(v.string(), v.regex(/^[A-Za-z0-9_-]+=*$/, 'must be base64url'), v.minLength(8, 'is too short'), v.maxLength(256, 'is too long'));
export const PushSubscription = v.object({
  // Issue 9: checked without DNS here; the address it resolves to is checked again on every send.
  endpoint: v.pipe(
    v.string(),
    v.maxLength(2048, 'is too long'),
    v.check((u) => checkPushEndpoint(u).ok, (issue) => pushEndpointReason(issue.input)),
  ),
  keys: v.object({ p256dh: key, auth: key }),
});
function pushEndpointReason(input: unknown): string {
  const checked = typeof input === 'string' ? checkPushEndpoint(input) : null;
  return checked && !checked.ok ? checked.reason : 'must be an https URL';
}
export const PushUnsubscribe = v.object({ endpoint: httpUrl });

/** Test notifications per user and minute: enough to try again after fixing a setting, too few to spam a push service. */
export const TEST_PUSHES_PER_MINUTE = 3;

interface Deps {
  users: UserStore;
  admins: AdminStore;
  memberships: Memberships;
  pushSubscriptions: PushSubscriptions;
  sendTestPush: (userId: string) => number;
}

/** CONTRACT 5: GET /me, GET /me/memberships, POST and DELETE /me/push-subscriptions; the console's test push. */
export function meRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const testLimit = createLimiter(TEST_PUSHES_PER_MINUTE);

  app.get('/', (c) => {
    const row = deps.users.findById(c.get('user').id);
    if (!row) throw new ApiError('unauthorized');
    return c.json({
      user: toUser(row),
      memberships: deps.memberships.listForUser(row.id).map(toMembership),
      admin_of: deps.admins.listForUser(row.id).map((a) => ({ mosque_id: a.mosque_id, ...toFlags(a) })),
    });
  });

  app.get('/memberships', (c) => c.json(deps.memberships.listForUser(c.var.user.id).map(toMembership)));

  app.post('/push-subscriptions', async (c) => {
    const b = await readJson(c, PushSubscription);
    unwrap(deps.pushSubscriptions.save(c.var.user.id, b.endpoint, b.keys.p256dh, b.keys.auth));
    return c.json({ endpoint: b.endpoint }, 201);
  });

  // Only the caller's own subscriptions: nobody can make another person's phone ring.
  app.post('/push-subscriptions/test', async (c) => {
    await testLimit(c.var.user.id);
    return c.json({ queued: deps.sendTestPush(c.var.user.id) }, 202);
  });

  app.delete('/push-subscriptions', async (c) => {
    const b = await readJson(c, PushUnsubscribe);
    if (!deps.pushSubscriptions.remove(c.var.user.id, b.endpoint)) throw new ApiError('not_found');
    return c.body(null, 204);
  });

  return app;
}
