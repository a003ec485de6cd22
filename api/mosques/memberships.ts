import { Hono } from 'hono';
import * as v from 'valibot';
import { standingOf } from '../../src/mosques/admins.ts';
import type { AdminStore } from '../../src/mosques/admins.ts';
import { MEMBERSHIP_STATUSES, NOTIFY_TOGGLES, toMembership, type MemberRow, type MembershipRow, type Memberships } from '../../src/mosques/memberships.ts';
import type { ActivityLog } from '../../src/mosques/activity.ts';
import type { DevicePlane } from '../../src/devices/device-plane.ts';
import { isSyntheticEmail } from '../../src/platform/identifiers.ts';
import type { MosqueStore } from '../../src/mosques/mosques.ts';
import type { AppContext, AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { actorOf, holderOnly } from '../guards.ts';
import type { UserStore } from '../../src/people/users.ts';
import { readJson, parseOrThrow } from '../validate.ts';
import { createFailureLimiter, type LimiterStore } from '../rate-limit.ts';

export const JoinByCode = v.object({ code: v.pipe(v.string(), v.minLength(1, 'must not be empty'), v.maxLength(32, 'is too long')) });
export const MembershipPatch = v.strictObject({
  status: v.optional(v.picklist(MEMBERSHIP_STATUSES)),
  notify_azaan: v.optional(v.boolean()),
  notify_jummah: v.optional(v.boolean()),
  notify_waaz: v.optional(v.boolean()),
  notify_announcement: v.optional(v.boolean()),
});

// First only the keys, to answer 403 for a key the caller may not send before judging values. An array
// passes valibot's record (its indexes become keys "0", "1", ... and drew a 403), so it is refused before.
const PatchKeys = v.pipe(v.unknown(), v.check((b) => !Array.isArray(b), 'must be a JSON object'), v.record(v.string(), v.unknown()));

interface Deps {
  users: Pick<UserStore, 'findById'>;
  mosques: MosqueStore;
  admins: AdminStore;
  memberships: Memberships;
  activity: ActivityLog;
  plane: Pick<DevicePlane, 'playersOf'>;
  rateLimitStore: LimiterStore;
}

/** docs/api.md "Join links": wrong join codes one client address may look up in JOIN_LOOKUP_WINDOW_S before 429. */
export const JOIN_LOOKUP_WRONG_PER_ADDRESS = 10;
const JOIN_LOOKUP_WINDOW_S = 600;
/** The lookup path is public (a join link opened signed out names its mosque). */
export const JOIN_LOOKUP_PATH = /^\/api\/v1\/join\/[^/]+$/;

/** How many of a membership's own activity entries GET /memberships/{id} returns (newest first). */
const HISTORY_LIMIT = 100;

/**
 * A membership as a mosque's admins see it: with the member's email and phone, and whether each is proven (an
 * unproven one is only a claim: docs/api.md, "Addresses: claims and proof"). A phone-only account's
 * placeholder email is flagged, so a console shows the phone instead (docs/console.md, "Users").
 */
export function memberBody(r: MemberRow) {
  return {
    ...toMembership(r), user_email: r.email, user_email_is_placeholder: isSyntheticEmail(r.email), user_phone: r.phone,
    email_proven: r.email_proven, phone_proven: r.phone_proven,
  };
}

/** POST /join, PATCH and DELETE /memberships/{id} (docs/api.md, "Memberships"). */
export function membershipRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();

  /** The membership and what the caller may do with it; 404 when the caller may not see it. */
  const load = async (c: AppContext) => {
    const membership = await deps.memberships.findById(c.req.param('id') ?? '');
    if (!membership) throw new ApiError('not_found');
    const actor = actorOf(c);
    const isSelf = membership.user_id === actor.id;
    const isAdmin = standingOf(actor, actor.isSuperadmin ? null : await deps.admins.find(membership.mosque_id, actor.id)).admin;
    if (!isSelf && !isAdmin) throw new ApiError('not_found');
    // Admins included, nobody but a superadmin changes the status of their own membership: an admin banned from
    // a mosque must not lift their own ban (docs/decisions.md, "Nobody but a superadmin changes the status of their own membership").
    // The owner's own membership is theirs like the owner row is (only a superadmin demotes or removes the
    // owner): a plain admin must not ban the owner from their own mosque's azaan.
    const ofOwner = (await deps.admins.find(membership.mosque_id, membership.user_id))?.is_owner === 1;
    const mayChangeStatus = isAdmin && (!isSelf || actor.isSuperadmin) && (!ofOwner || isSelf || actor.isSuperadmin);
    // The refusal in words an admin can act on (docs/api.md, "Memberships").
    const refusal = !isAdmin ? null : isSelf ? 'Only a superadmin may change their own membership.' : ofOwner ? "Only a superadmin may change the owner's membership." : null;
    return { membership, isSelf, isAdmin, mayChangeStatus, refusal };
  };

  // docs/api.md, "Memberships": one member as the mosque's admins see them, read-only. Membership of a
  // mosque says what someone believes, so only its admins (and superadmins) read it here; the member
  // reads their own through /me, and anyone else is told 404 as for an unknown id.
  app.get('/memberships/:id', async (c) => {
    const { membership, isAdmin } = await load(c);
    if (!isAdmin) throw new ApiError('forbidden', 'Only an admin of the mosque may read this.');
    const member = (await deps.memberships.findWithMember(membership.id))!;
    const admin = await deps.admins.find(membership.mosque_id, membership.user_id);
    return c.json({
      ...memberBody(member),
      admin: admin && { is_owner: admin.is_owner === 1, can_trigger: admin.can_trigger === 1, can_manage: admin.can_manage === 1 },
      history: await deps.activity.listForSubject(membership.mosque_id, membership.id, HISTORY_LIMIT),
      players: await deps.plane.playersOf(membership.user_id, membership.mosque_id),
    });
  });

  // docs/api.md "Join links": the mosque a code invites to, by name only, for whoever holds the code; wrong codes
  // count against the client address as wrong pairing codes do, so the lookup is no cheaper way to guess codes.
  const wrongLookups = createFailureLimiter(JOIN_LOOKUP_WRONG_PER_ADDRESS, deps.rateLimitStore, 'join-lookup-address', JOIN_LOOKUP_WINDOW_S);
  app.get('/join/:code', async (c) => {
    const address = c.env.clientAddress();
    await wrongLookups.check(address);
    const code = c.req.param('code');
    const mosque = code.length <= 32 ? await deps.mosques.findByJoinCode(code) : null;
    c.header('Cache-Control', 'no-store');
    if (!mosque) {
      await wrongLookups.fail(address);
      throw new ApiError('not_found', 'No mosque has that join code.');
    }
    return c.json({ mosque_name: mosque.name });
  });

  app.post('/join', holderOnly(deps.users), async (c) => {
    const b = await readJson(c, JoinByCode);
    const mosque = await deps.mosques.findByJoinCode(b.code);
    if (!mosque) throw new ApiError('not_found', 'No mosque has that join code.');
    const { membership, created } = unwrap(await deps.memberships.join(mosque, c.var.user.id));
    return c.json(toMembership(membership), created ? 201 : 200);
  });

  // docs/walkthrough.md, "3. The mosque and its members": a member edits only the four notify toggles of their own membership; an admin of its
  // mosque (or a superadmin) only its status. Any other key from that caller: 403, nothing changed.
  app.patch('/memberships/:id', async (c) => {
    const { membership, isSelf, mayChangeStatus, refusal } = await load(c);
    const body = await readJson(c, PatchKeys);
    const allowed = new Set<string>([...(isSelf ? NOTIFY_TOGGLES : []), ...(mayChangeStatus ? ['status'] : [])]);
    const refused = Object.keys(body).filter((k) => !allowed.has(k));
    if (refused.includes('status') && refusal) throw new ApiError('forbidden', refusal);
    if (refused.length > 0) throw new ApiError('forbidden', `You may not change: ${refused.join(', ')}.`);
    if (Object.keys(body).length === 0) throw new ApiError('validation_failed', 'Nothing to change.', { details: [{ path: '', message: 'empty body' }] });
    const patch = parseOrThrow(MembershipPatch, body);
    let row: MembershipRow = await deps.memberships.setToggles(membership, patch, c.var.user.id);
    if (patch.status) row = await deps.memberships.changeStatus(row, patch.status, c.var.user.id);
    return c.json(toMembership(row));
  });

  // Leaving (self) or removing (admin). A banned member cannot remove their own ban this way.
  app.delete('/memberships/:id', async (c) => {
    const { membership, isSelf, mayChangeStatus } = await load(c);
    if (!isSelf && !mayChangeStatus) throw new ApiError('forbidden', "Only a superadmin may remove the owner's membership.");
    if (!mayChangeStatus && membership.status === 'banned') throw new ApiError('forbidden', 'A banned membership can only be removed by an admin.');
    await deps.memberships.remove(membership, c.var.user.id);
    return c.body(null, 204);
  });

  return app;
}
