import { Hono } from 'hono';
import * as v from 'valibot';
import type { ActivityLog } from '../../src/mosques/activity.ts';
import { toFlags, type AdminStore } from '../../src/mosques/admins.ts';
import { MEMBERSHIP_STATUSES, toMembership, type Memberships } from '../../src/mosques/memberships.ts';
import { memberBody } from './memberships.ts';
import type { MosqueOps } from '../../src/mosques/mosque-ops.ts';
import { CALCULATION_METHODS, HIGH_LATITUDE_RULES, streamUrlProblem, toMosque, type MosqueRow, type MosqueStore, type ScheduleFields } from '../../src/mosques/mosques.ts';
import { mayHold, type UserStore } from '../../src/people/users.ts';
import { UNPROVEN_TARGET } from '../../src/mosques/mosque-ops.ts';
import type { AppContext, AppEnv } from '../context.ts';
import { ApiError, errorBody, unwrap } from '../errors.ts';
import { actorOf, holderOnly, mosqueGate, type GateDeps } from '../guards.ts';
import { before, email, httpUrl, id, limit, name, timezone } from '../schemas.ts';
import { readJson, readQuery } from '../validate.ts';

const hhmm = v.pipe(v.string(), v.regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'must be "HH:MM"'));
const minutes = (max: number) => v.pipe(v.number(), v.integer('must be whole minutes'), v.minValue(-max, `must be within ${max} minutes`), v.maxValue(max, `must be within ${max} minutes`));
const perPrayer = <S extends v.GenericSchema>(rule: S) =>
  v.strictObject({ fajr: v.optional(rule), dhuhr: v.optional(rule), asr: v.optional(rule), maghrib: v.optional(rule), isha: v.optional(rule) });
const angle = v.pipe(v.number(), v.minValue(0, 'must be 0..30 degrees'), v.maxValue(30, 'must be 0..30 degrees'));
/** The schedule fields, on create and PATCH (manager; docs/schedule.md, "Setting a mosque's times"). */
export const scheduleEntries = {
  latitude: v.optional(v.nullable(v.pipe(v.number(), v.minValue(-90, 'must be -90..90'), v.maxValue(90, 'must be -90..90')))),
  longitude: v.optional(v.nullable(v.pipe(v.number(), v.minValue(-180, 'must be -180..180'), v.maxValue(180, 'must be -180..180')))),
  prayer_times: v.optional(v.nullable(v.pipe(
    v.strictObject({
      method: v.picklist(CALCULATION_METHODS),
      madhab: v.picklist(['shafi', 'hanafi'] as const),
      high_latitude_rule: v.optional(v.picklist(HIGH_LATITUDE_RULES)),
      fajr_angle: v.optional(angle),
      isha_angle: v.optional(angle),
      adjustments: v.optional(perPrayer(minutes(120))),
    }),
    v.check((p) => p.method !== 'other' || (p.fajr_angle !== undefined && p.isha_angle !== undefined), 'method "other" needs fajr_angle and isha_angle'),
  ))),
  azaan: v.optional(perPrayer(v.union([v.strictObject({ offset_minutes: minutes(180) }), v.strictObject({ fixed: hhmm })]))),
  iqamah: v.optional(perPrayer(v.union([v.strictObject({ after_minutes: v.pipe(minutes(180), v.minValue(0, 'must not be negative')) }), v.strictObject({ fixed: hhmm })]))),
  jumuah: v.optional(v.pipe(v.array(hhmm), v.maxLength(6, 'at most 6 times'))),
  auto_start: v.optional(v.boolean()),
};
const SCHEDULE_KEYS = Object.keys(scheduleEntries) as Array<keyof typeof scheduleEntries>;

/** The schedule fields a body names, or undefined when it names none. */
export function scheduleOf(b: Partial<Record<keyof typeof scheduleEntries, unknown>>): Partial<ScheduleFields> | undefined {
  const named = SCHEDULE_KEYS.filter((k) => b[k] !== undefined);
  return named.length === 0 ? undefined : (Object.fromEntries(named.map((k) => [k, b[k]])) as Partial<ScheduleFields>);
}

export const MosqueCreate = v.object({
  name,
  timezone: v.optional(timezone),
  auto_approve_members: v.optional(v.boolean()),
  stream_url: v.optional(v.nullable(httpUrl)),
  owner_user_id: v.optional(v.nullable(id)),
  owner_email: v.optional(v.nullable(email)),
  ...scheduleEntries,
});
export const MosqueUpdate = v.object({
  name: v.optional(name),
  timezone: v.optional(timezone),
  auto_approve_members: v.optional(v.boolean()),
  stream_url: v.optional(v.nullable(httpUrl)),
  ...scheduleEntries,
});
export const AdminCreate = v.pipe(
  v.object({ user_id: v.optional(id), email: v.optional(email), can_trigger: v.optional(v.boolean()), can_manage: v.optional(v.boolean()) }),
  v.check((b) => (b.user_id === undefined) !== (b.email === undefined), 'exactly one of user_id or email is required'),
);
export const AdminUpdate = v.object({ can_trigger: v.optional(v.boolean()), can_manage: v.optional(v.boolean()), is_owner: v.optional(v.boolean()) });
export const Enrol = v.object({ user_id: id });
export const MembershipQuery = v.object({ status: v.optional(v.picklist(MEMBERSHIP_STATUSES)) });
export const ActivityQuery = v.object({
  limit: limit(50, 200),
  before: before('an activity id'),
});

interface Deps extends GateDeps {
  /** STREAM_HTTP_HOSTS */
  streamHttpHosts: readonly string[];
  mosques: MosqueStore;
  admins: AdminStore;
  users: UserStore;
  memberships: Memberships;
  mosqueOps: MosqueOps;
  activity: ActivityLog;
}

/** Mosques, their admins, their memberships, join and the activity feed (docs/api.md, "Flags decide"). */
export function mosqueRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const gate = (g: Parameters<typeof mosqueGate>[1]) => mosqueGate(deps, g);
  const show = (c: AppContext, row: MosqueRow) => toMosque(row, { showJoinCode: c.var.standing?.admin ?? c.var.user.role === 'superadmin' });

  app.post('/', async (c) => {
    if (c.var.user.role !== 'superadmin') throw new ApiError('forbidden');
    const b = await readJson(c, MosqueCreate);
    if (b.owner_user_id && b.owner_email) throw invalid('owner_email', 'give owner_user_id or owner_email, not both');
    checkStreamUrl(b.stream_url, deps.streamHttpHosts);
    const schedule = scheduleOf(b);
    const fields = { name: b.name, timezone: b.timezone ?? 'UTC', autoApproveMembers: b.auto_approve_members ?? false, streamUrl: b.stream_url ?? null, ...(schedule && { schedule }) };
    const owner = b.owner_user_id ? { userId: b.owner_user_id } : b.owner_email ? { email: b.owner_email } : null;
    const mosque = unwrap(await deps.mosqueOps.create(fields, owner, actorOf(c)));
    return c.json(toMosque(mosque, { showJoinCode: true }), 201);
  });

  app.get('/', async (c) => {
    const actor = actorOf(c);
    if (actor.isSuperadmin) return c.json((await deps.mosques.listAll()).map((m) => toMosque(m, { showJoinCode: true })));
    const adminOf = new Set((await deps.admins.listForUser(actor.id)).map((a) => a.mosque_id));
    return c.json((await deps.mosques.listForUser(actor.id)).map((m) => toMosque(m, { showJoinCode: adminOf.has(m.id) })));
  });

  app.get('/:id', gate('admin'), (c) => c.json(show(c, c.var.mosque)));

  // docs/api.md, "Flags decide": every setting of the mosque is the managers' (can_manage); an admin without
  // the flag reads the mosque, its admins, memberships and activity and changes none of it.
  app.patch('/:id', gate('manager'), async (c) => {
    const b = await readJson(c, MosqueUpdate);
    requireSomething(b);
    checkStreamUrl(b.stream_url, deps.streamHttpHosts);
    const schedule = scheduleOf(b);
    const fields = {
      ...(schedule && { schedule }),
      ...(b.name !== undefined && { name: b.name }),
      ...(b.timezone !== undefined && { timezone: b.timezone }),
      ...(b.auto_approve_members !== undefined && { autoApproveMembers: b.auto_approve_members }),
      ...(b.stream_url !== undefined && { streamUrl: b.stream_url }),
    };
    return c.json(show(c, await deps.mosqueOps.update(c.var.mosque, fields, actorOf(c))));
  });

  // docs/api.md, "Flags decide": deleting a mosque takes everything of it with it, so only its owner or a superadmin may.
  app.delete('/:id', gate('owner'), async (c) => {
    await deps.mosqueOps.delete(c.var.mosque);
    return c.body(null, 204);
  });

  app.post('/:id/join-code', gate('manager'), async (c) => c.json(show(c, await deps.mosqueOps.rotateJoinCode(c.var.mosque, actorOf(c)))));

  app.get('/:id/admins', gate('admin'), async (c) =>
    c.json((await deps.admins.listForMosque(c.var.mosque.id)).map((a) => ({ user_id: a.user_id, email: a.email, email_proven: a.email_proven, phone_proven: a.phone_proven, ...toFlags(a) }))),
  );

  app.post('/:id/admins', gate('manager'), async (c) => {
    const b = await readJson(c, AdminCreate);
    const flags = { can_trigger: b.can_trigger ?? false, can_manage: b.can_manage ?? false };
    // docs/api.md, "Addresses: claims and proof": by email, one answer whether or not an account holds the address,
    // given before any of the work that depends on it.
    if (b.user_id === undefined) {
      deps.mosqueOps.addAdminByEmail(c.var.mosque, b.email!, flags, actorOf(c));
      return c.json({ status: 'accepted', email: b.email!, ...flags }, 202);
    }
    const row = unwrap(await deps.mosqueOps.addAdmin(c.var.mosque, { userId: b.user_id }, flags, actorOf(c)));
    if (row === 'waiting') throw new Error('an admin named by user_id never waits on an address');
    return c.json(await adminBody(deps.users, row), 201);
  });

  app.patch('/:id/admins/:user_id', gate('manager'), async (c) => {
    const b = await readJson(c, AdminUpdate);
    requireSomething(b);
    const actor = { ...actorOf(c), isOwner: c.var.standing.owner };
    const row = unwrap(await deps.mosqueOps.updateAdmin(c.var.mosque, c.req.param('user_id'), b, actor));
    return c.json(await adminBody(deps.users, row));
  });

  app.delete('/:id/admins/:user_id', gate('manager'), async (c) => {
    unwrap(await deps.mosqueOps.removeAdmin(c.var.mosque, c.req.param('user_id'), actorOf(c)));
    return c.body(null, 204);
  });

  app.get('/:id/memberships', gate('admin'), async (c) => {
    const q = readQuery(c, MembershipQuery);
    const rows = await deps.memberships.listForMosque(c.var.mosque.id, q.status ?? null);
    return c.json(rows.map(memberBody));
  });

  app.post('/:id/memberships', gate('admin'), async (c) => {
    const b = await readJson(c, Enrol);
    const target = await deps.users.findById(b.user_id);
    if (!target) throw new ApiError('not_found', 'No user has that user_id.');
    // docs/api.md, "Addresses: claims and proof": an account that has proven nothing holds nothing.
    if (!mayHold(target)) throw new ApiError('conflict', UNPROVEN_TARGET);
    const result = await deps.memberships.enrol(c.var.mosque.id, b.user_id, actorOf(c));
    // As for invites (docs/decisions.md, "Enrolment never lifts a ban."): enrolling a banned user conflicts with the ban, 409 rather than the
    // table's 403, which is the banned member's own join.
    if (!result.ok && result.failure === 'membership_banned') return c.json(errorBody('membership_banned', result.message), 409);
    const { membership, created } = unwrap(result);
    return c.json(toMembership(membership), created ? 201 : 200);
  });

  app.post('/:id/join', holderOnly(deps.users), gate('member'), async (c) => {
    const { membership, created } = unwrap(await deps.memberships.join(c.var.mosque, c.var.user.id));
    return c.json(toMembership(membership), created ? 201 : 200);
  });

  app.get('/:id/activity', gate('admin'), async (c) => {
    const q = readQuery(c, ActivityQuery);
    return c.json(await deps.activity.list(c.var.mosque.id, q.limit, q.before ?? null));
  });

  return app;
}

function invalid(path: string, message: string): ApiError {
  return new ApiError('validation_failed', `${path}: ${message}`, { details: [{ path, message }] });
}

function checkStreamUrl(url: string | null | undefined, httpHosts: readonly string[]): void {
  const problem = url ? streamUrlProblem(url, httpHosts) : null;
  if (problem) throw invalid('stream_url', problem);
}

/** A PATCH that names nothing to change is a client mistake, not a no-op worth an activity entry. */
function requireSomething(body: Record<string, unknown>): void {
  if (Object.values(body).some((value) => value !== undefined)) return;
  throw new ApiError('validation_failed', 'Nothing to change.', { details: [{ path: '', message: 'no known field given' }] });
}

async function adminBody(users: UserStore, row: Parameters<typeof toFlags>[0]) {
  const user = await users.findById(row.user_id);
  return {
    user_id: row.user_id, email: user?.email ?? null,
    email_proven: user ? user.email_proven_at !== null : false, phone_proven: user ? user.phone_proven_at !== null : false, ...toFlags(row),
  };
}
