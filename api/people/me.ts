import { Hono } from 'hono';
import * as v from 'valibot';
import { toFlags, type AdminStore } from '../../src/mosques/admins.ts';
import { toMembership, type Memberships } from '../../src/mosques/memberships.ts';
import { toPushSubscription, type PushSubscriptions } from '../../src/broadcasts/push-subscriptions.ts';
import { checkPushEndpoint } from '../../src/broadcasts/push-endpoint.ts';
import { toUser, type UserStore } from '../../src/people/users.ts';
import type { AddressChange } from '../../src/people/addresses/address-change.ts';
import type { PeopleAuth } from '../../src/people/auth.ts';
import type { AccessTokens } from '../../src/people/tokens.ts';
import type { ChangeFeed } from '../../src/platform/changes.ts';
import type { AppContext, AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { holderOnly } from '../guards.ts';
import { isSyntheticEmail } from '../../src/platform/identifiers.ts';
import { email, hex64, httpUrl, phone } from '../schemas.ts';
import { createLimiter, type LimiterStore } from '../rate-limit.ts';
import { readJson } from '../validate.ts';

const key = v.pipe(v.string(), v.regex(/^[A-Za-z0-9_-]+=*$/, 'must be base64url'), v.minLength(8, 'is too short'), v.maxLength(256, 'is too long'));
export const PushSubscription = v.object({
  // docs/decisions.md, "Push endpoints": checked without DNS here; the address it resolves to is checked again on every send.
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
export const AddressConfirm = v.object({ channel: v.picklist(['email', 'sms']) });
export const AddressVerify = v.object({ code: v.pipe(v.string(), v.regex(/^\d{6}$/, 'must be 6 digits')) });
export const MeUpdate = v.pipe(
  v.object({
    email: v.optional(email),
    phone: v.optional(v.nullable(phone)),
    // docs/api.md, "Changing your email or phone": an account with a proven address shows the change is its own.
    current_password_hash: v.optional(v.nullable(hex64)),
    code: v.optional(v.nullable(v.pipe(v.string(), v.regex(/^\d{6}$/, 'must be 6 digits')))),
  }),
  v.check((b) => b.email !== undefined || b.phone !== undefined, 'give email or phone'),
);

/** Confirmation codes a person may ask for per minute: a retry or two, never a way to flood an inbox. */
export const CONFIRMATIONS_PER_MINUTE = 3;

/** Address changes a person may try per minute (each may cost a bcrypt comparison of the current password). */
export const ADDRESS_CHANGES_PER_MINUTE = 5;
/**
 * Confirmation codes one email or phone may be sent per minute, by every account that claims it together
 * (docs/api.md, "Addresses: claims and proof"): several accounts claiming one address must not multiply the mail.
 */
export const CONFIRMATIONS_PER_ADDRESS_PER_MINUTE = 3;

/** Test notifications per user and minute: enough to try again after fixing a setting, too few to spam a push service. */
export const TEST_PUSHES_PER_MINUTE = 3;

interface Deps {
  users: UserStore;
  addressChange: AddressChange;
  peopleAuth: PeopleAuth;
  tokens: AccessTokens;
  admins: AdminStore;
  memberships: Memberships;
  pushSubscriptions: PushSubscriptions;
  sendTestPush: (userId: string) => Promise<number>;
  changes: Pick<ChangeFeed, 'subscribe'>;
  /** With REDIS_URL, the per-address limit is counted in Redis (under the address's hash): one budget for all processes. */
  rateLimitStore: LimiterStore;
}

/** Bodies kept at most; past it the oldest goes (a burst of sign-ins must not grow memory without bound). */
export const ME_CACHE_SIZE = 10_000;

/**
 * GET /me's body per user, as JSON text (three SQLite reads were ~18 % of the request). An entry
 * goes whenever the change feed names its user (row, memberships, admin rows) or a mosque goes away (its
 * rows cascade), in this process at once and in the others when the message arrives; everything goes on a
 * resync. Entries are filled only from the database, never from a message, so a lost message leaves an
 * entry stale until the next resync (the poll), never wrong in another way.
 */
function createMeCache(deps: Deps, read: (userId: string) => Promise<string | null>) {
  const bodies = new Map<string, string>();
  // Raised by every invalidation: a body read while one arrived may be stale and is answered but not kept.
  let epoch = 0;
  deps.changes.subscribe({
    changed(change) {
      epoch++;
      if (change.kind === 'user' || change.kind === 'standing') bodies.delete(change.id);
      else if (change.kind === 'mosque') bodies.clear();
    },
    resync: () => {
      epoch++;
      bodies.clear();
    },
  });
  const fill = async (userId: string): Promise<string | null> => {
    const before = epoch;
    const body = await read(userId);
    if (body === null || epoch !== before) return body;
    if (bodies.size >= ME_CACHE_SIZE) bodies.delete(bodies.keys().next().value!);
    bodies.set(userId, body);
    return body;
  };
  // A kept body is answered as a value, not a promise: GET /me is what the signed-in console asks most.
  return (userId: string): string | Promise<string | null> => bodies.get(userId) ?? fill(userId);
}

/** GET /me, GET /me/memberships, POST and DELETE /me/push-subscriptions; the console's test push. */
export function meRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const testLimit = createLimiter(TEST_PUSHES_PER_MINUTE);
  const confirmLimit = createLimiter(CONFIRMATIONS_PER_MINUTE);
  // Each change may cost a bcrypt comparison: a signed-in script must not fill the queue everyone's sign-in waits in.
  const changeLimit = createLimiter(ADDRESS_CHANGES_PER_MINUTE);
  const confirmAddressLimit = createLimiter(CONFIRMATIONS_PER_ADDRESS_PER_MINUTE, deps.rateLimitStore, 'confirm-address');

  const me = createMeCache(deps, async (userId) => {
    const row = await deps.users.findById(userId);
    if (!row) return null;
    return JSON.stringify({
      user: toUser(row),
      memberships: (await deps.memberships.listForUser(row.id)).map(toMembership),
      admin_of: (await deps.admins.listForUser(row.id)).map((a) => ({ mosque_id: a.mosque_id, ...toFlags(a) })),
    });
  });

  const answer = (c: AppContext, body: string | null): Response => {
    if (body === null) throw new ApiError('unauthorized');
    return c.body(body, 200, { 'Content-Type': 'application/json' });
  };
  app.get('/', (c): Response | Promise<Response> => {
    const body = me(c.get('user').id);
    return typeof body === 'string' ? answer(c, body) : body.then((read) => answer(c, read));
  });

  // docs/api.md, "Changing your email or phone": the new address is a claim until proven; on a proven account
  // the change needs the current password (or a code sent to a proven address); an email change ends every
  // older token (a stolen session must not quietly move the account); the answer carries a fresh one.
  app.patch('/', async (c) => {
    const b = await readJson(c, MeUpdate);
    await changeLimit(c.var.user.id);
    const fields = { ...(b.email !== undefined && { email: b.email }), ...(b.phone !== undefined && { phone: b.phone }) };
    const shown = { currentPasswordHash: b.current_password_hash ?? null, code: b.code ?? null };
    const updated = unwrap(await deps.addressChange.changeOwn(c.var.user.id, fields, shown));
    // The new token keeps the sign-in time of the one it replaces: a change is not a fresh sign-in (docs/api.md,
    // "Console sessions").
    return c.json(await deps.tokens.issue(updated, { authTime: c.var.user.authTime }), 200);
  });

  // docs/api.md, "Addresses: claims and proof": a 6-digit code to the account's own email or phone.
  app.post('/addresses/confirm', async (c) => {
    const b = await readJson(c, AddressConfirm);
    await confirmLimit(c.var.user.id);
    const address = await confirmedAddressHash(deps.users, c.var.user.id, b.channel);
    if (address) await confirmAddressLimit(address);
    unwrap(await deps.peopleAuth.requestAddressConfirmation(c.var.user.id, b.channel));
    return c.json({ status: 'accepted' }, 202);
  });

  app.post('/addresses/verify', async (c) => {
    const b = await readJson(c, AddressVerify);
    return c.json(toUser(unwrap(await deps.peopleAuth.confirmAddress(c.var.user.id, b.code))), 200);
  });

  app.get('/memberships', async (c) => c.json((await deps.memberships.listForUser(c.var.user.id)).map(toMembership)));

  // Only the caller's own, oldest first: the list they manage (docs/api.md, "Web Push, from a browser's side").
  app.get('/push-subscriptions', async (c) => c.json((await deps.pushSubscriptions.listForUser(c.var.user.id)).map(toPushSubscription)));

  app.post('/push-subscriptions', holderOnly(deps.users), async (c) => {
    const b = await readJson(c, PushSubscription);
    unwrap(await deps.pushSubscriptions.save(c.var.user.id, b.endpoint, b.keys.p256dh, b.keys.auth));
    return c.json({ endpoint: b.endpoint }, 201);
  });

  // Only the caller's own subscriptions: nobody can make another person's phone ring.
  app.post('/push-subscriptions/test', async (c) => {
    await testLimit(c.var.user.id);
    return c.json({ queued: await deps.sendTestPush(c.var.user.id) }, 202);
  });

  app.delete('/push-subscriptions', async (c) => {
    const b = await readJson(c, PushUnsubscribe);
    if (!(await deps.pushSubscriptions.remove(c.var.user.id, b.endpoint))) throw new ApiError('not_found');
    return c.body(null, 204);
  });

  return app;
}

/** identifier_hash of the address a confirmation code would go to; null when the account has none there (a placeholder is none). */
async function confirmedAddressHash(users: Pick<UserStore, 'findById'>, userId: string, channel: 'email' | 'sms'): Promise<string | null> {
  const row = await users.findById(userId);
  if (!row) return null;
  if (channel === 'sms') return row.phone_hash;
  return isSyntheticEmail(row.email) ? null : row.email_hash;
}
