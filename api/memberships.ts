import { Hono } from 'hono';
import * as v from 'valibot';
import { standingOf } from '../src/admins.ts';
import type { AdminStore } from '../src/admins.ts';
import { MEMBERSHIP_STATUSES, NOTIFY_TOGGLES, toMembership, type MembershipRow, type Memberships } from '../src/memberships.ts';
import type { MosqueStore } from '../src/mosques.ts';
import type { AppContext, AppEnv } from './context.ts';
import { ApiError, unwrap } from './errors.ts';
import { actorOf } from './guards.ts';
import { readJson, parseOrThrow } from './validate.ts';

export const JoinByCode = v.object({ code: v.pipe(v.string(), v.minLength(1, 'must not be empty'), v.maxLength(32, 'is too long')) });
export const MembershipPatch = v.strictObject({
  status: v.optional(v.picklist(MEMBERSHIP_STATUSES)),
  notify_azaan: v.optional(v.boolean()),
  notify_jummah: v.optional(v.boolean()),
  notify_waaz: v.optional(v.boolean()),
  notify_announcement: v.optional(v.boolean()),
});

interface Deps {
  mosques: MosqueStore;
  admins: AdminStore;
  memberships: Memberships;
}

/** CONTRACT 5: POST /join, PATCH and DELETE /memberships/{id}. */
export function membershipRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();

  /** The membership and what the caller may do with it; 404 when the caller may not see it. */
  const load = (c: AppContext) => {
    const membership = deps.memberships.findById(c.req.param('id') ?? '');
    if (!membership) throw new ApiError('not_found');
    const actor = actorOf(c);
    const isSelf = membership.user_id === actor.id;
    const isAdmin = standingOf(actor, actor.isSuperadmin ? null : deps.admins.find(membership.mosque_id, actor.id)).admin;
    if (!isSelf && !isAdmin) throw new ApiError('not_found');
    return { membership, isSelf, isAdmin };
  };

  app.post('/join', async (c) => {
    const b = await readJson(c, JoinByCode);
    const mosque = deps.mosques.findByJoinCode(b.code);
    if (!mosque) throw new ApiError('not_found', 'No mosque has that join code.');
    const { membership, created } = unwrap(deps.memberships.join(mosque, c.var.user.id));
    return c.json(toMembership(membership), created ? 201 : 200);
  });

  // Seed rule 1: a member edits only the four notify toggles of their own membership; an admin of its
  // mosque (or a superadmin) only its status. Any other key from that caller: 403, nothing changed.
  app.patch('/memberships/:id', async (c) => {
    const { membership, isSelf, isAdmin } = load(c);
    const body = await readJson(c, v.record(v.string(), v.unknown()));
    const allowed = new Set<string>([...(isSelf ? NOTIFY_TOGGLES : []), ...(isAdmin ? ['status'] : [])]);
    const refused = Object.keys(body).filter((k) => !allowed.has(k));
    if (refused.length > 0) throw new ApiError('forbidden', `You may not change: ${refused.join(', ')}.`);
    if (Object.keys(body).length === 0) throw new ApiError('validation_failed', 'Nothing to change.', { details: [{ path: '', message: 'empty body' }] });
    const patch = parseOrThrow(MembershipPatch, body);
    let row: MembershipRow = deps.memberships.setToggles(membership, patch, c.var.user.id);
    if (patch.status) row = deps.memberships.changeStatus(row, patch.status, c.var.user.id);
    return c.json(toMembership(row));
  });

  // Leaving (self) or removing (admin). A banned member cannot remove their own ban this way.
  app.delete('/memberships/:id', (c) => {
    const { membership, isAdmin } = load(c);
    if (!isAdmin && membership.status === 'banned') throw new ApiError('forbidden', 'A banned membership can only be removed by an admin.');
    deps.memberships.remove(membership, c.var.user.id);
    return c.body(null, 204);
  });

  return app;
}
