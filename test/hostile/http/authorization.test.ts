import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { API, joinMosque, makeAdmin, member, mosqueMemberships, ownMembership, setStatus, type Person } from '../../support/people.ts';
import { startTestService } from '../../support/service.ts';
import { mosqueWithOwner } from '../../support/devices.ts';

// The enrol path must not lift a ban (docs/decisions.md, "Enrolment never lifts a ban."), and one account must not mint players without bound.

async function world(t: TestContext, env: Record<string, string> = {}) {
  const ts = await startTestService(t, { logLevel: 'warn', env });
  const { root, owner, mosque } = await mosqueWithOwner(ts);
  return { ts, root, owner, mosque };
}
type World = Awaited<ReturnType<typeof world>>;

const enrol = (w: World, userId: string, token: string) => w.ts.http.post(`${API}/mosques/${w.mosque.id}/memberships`, { user_id: userId }, token);
const activityKinds = async (w: World) => ((await w.ts.http.get(`${API}/mosques/${w.mosque.id}/activity?limit=200`, w.owner.token)).body as Array<{ kind: string }>).map((a) => a.kind);

async function bannedMember(w: World, email: string): Promise<Person & { membershipId: string }> {
  const person = await member(w.ts, email);
  const m = await joinMosque(w.ts, person, w.mosque.id);
  await setStatus(w.ts, w.owner.token, m.id, 'approved');
  await setStatus(w.ts, w.owner.token, m.id, 'banned');
  return { ...person, membershipId: m.id };
}

test('an admin banned from the mosque cannot lift the ban by enrolling themselves: 403 forbidden, still banned, nothing in the feed', async (t) => {
  const w = await world(t);
  const mallory = await bannedMember(w, 'mallory@example.com');
  await makeAdmin(w.ts, w.root.token, w.mosque.id, mallory, { can_manage: true, can_trigger: true });
  // Being made an admin admits a member (docs/decisions.md, "Owners and admins are members") but never over a ban: mallory is still banned.
  assert.equal((await ownMembership(w.ts, mallory, w.mosque.id))?.status, 'banned');
  const before = await activityKinds(w);
  const res = await enrol(w, mallory.id, mallory.token);
  assert.equal(res.status, 403);
  assert.equal(res.body.error.code, 'forbidden');
  assert.equal((await ownMembership(w.ts, mallory, w.mosque.id))?.status, 'banned');
  assert.deepEqual(await activityKinds(w), before);
});

test('an admin cannot enrol themselves, with or without a membership (403), and no membership is made or changed', async (t) => {
  const w = await world(t);
  // The owner is an approved member of their mosque from its creation: enrolling themselves is refused all the same.
  const admitted = await ownMembership(w.ts, w.owner, w.mosque.id);
  assert.equal(admitted?.status, 'approved');
  const withMembership = await enrol(w, w.owner.id, w.owner.token);
  assert.equal(withMembership.status, 403);
  assert.equal(withMembership.body.error.code, 'forbidden');
  assert.deepEqual(await ownMembership(w.ts, w.owner, w.mosque.id), admitted);
  // The superadmin removes that membership; the admin row stays, so the owner is an admin without a membership.
  assert.equal((await w.ts.http.delete(`${API}/memberships/${admitted!.id}`, w.root.token)).status, 204);
  assert.equal(await ownMembership(w.ts, w.owner, w.mosque.id), undefined);
  const before = await activityKinds(w);
  const res = await enrol(w, w.owner.id, w.owner.token);
  assert.equal(res.status, 403);
  assert.equal(res.body.error.code, 'forbidden');
  assert.equal(await ownMembership(w.ts, w.owner, w.mosque.id), undefined);
  assert.deepEqual(await activityKinds(w), before);
});

test('enrolling a banned member is 409 membership_banned for an admin and for a superadmin; the superadmin lifts the ban by a status change', async (t) => {
  const w = await world(t);
  const bilal = await bannedMember(w, 'bilal@example.com');
  for (const token of [w.owner.token, w.root.token]) {
    const res = await enrol(w, bilal.id, token);
    assert.equal(res.status, 409);
    assert.equal(res.body.error.code, 'membership_banned');
    assert.equal(typeof res.body.error.message, 'string');
  }
  // Bilal stays banned; the other row is the owner's own membership.
  const rows = await mosqueMemberships(w.ts, w.owner.token, w.mosque.id);
  assert.deepEqual(rows.map((r) => [r.user_id, r.status]).sort(), [[w.owner.id, 'approved'], [bilal.id, 'banned']].sort());
  assert.ok(!(await activityKinds(w)).includes('membership.enrolled'));
  assert.equal((await setStatus(w.ts, w.root.token, bilal.membershipId, 'approved')).status, 'approved');
});

test("a plain admin cannot ban or remove the owner's membership (403, unchanged); a superadmin can", async (t) => {
  const w = await world(t);
  const helper = await member(w.ts, 'helper@example.com');
  await makeAdmin(w.ts, w.root.token, w.mosque.id, helper, { can_manage: true });
  const ownerMembership = (await ownMembership(w.ts, w.owner, w.mosque.id))!;
  assert.equal(ownerMembership.status, 'approved', 'the owner is a member');
  const ban = await w.ts.http.patch(`${API}/memberships/${ownerMembership.id}`, { status: 'banned' }, helper.token);
  assert.equal(ban.status, 403);
  assert.equal(ban.body.error.code, 'forbidden');
  const remove = await w.ts.http.delete(`${API}/memberships/${ownerMembership.id}`, helper.token);
  assert.equal(remove.status, 403);
  assert.equal((await ownMembership(w.ts, w.owner, w.mosque.id))?.status, 'approved', 'nothing changed');
  // The owner may still leave, and a superadmin may change the owner's status.
  assert.equal((await w.ts.http.patch(`${API}/memberships/${ownerMembership.id}`, { status: 'rejected' }, w.root.token)).status, 200);
  assert.equal((await ownMembership(w.ts, w.owner, w.mosque.id))?.status, 'rejected');
});

test('a superadmin may enrol themselves', async (t) => {
  const w = await world(t);
  const res = await enrol(w, w.root.id, w.root.token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  assert.equal(res.body.status, 'approved');
});

test('a user owns at most MAX_PLAYERS_PER_USER stream players, even when asking in parallel; deleting one makes room; a superadmin is not capped', async (t) => {
  const w = await world(t, { MAX_PLAYERS_PER_USER: '3' });
  const amina = await member(w.ts, 'amina@example.com');
  const register = (token: string) => w.ts.http.post(`${API}/devices`, { kind: 'stream_player', name: 'kitchen' }, token);
  const answers = await Promise.all(Array.from({ length: 6 }, () => register(amina.token)));
  assert.deepEqual(answers.map((r) => r.status).sort(), [201, 201, 201, 409, 409, 409]);
  const refused = answers.find((r) => r.status === 409)!;
  assert.equal(refused.body.error.code, 'conflict');
  const own = (await w.ts.http.get(`${API}/devices`, amina.token)).body as Array<{ id: string }>;
  assert.equal(own.length, 3);
  // Another person's count is their own.
  assert.equal((await register((await member(w.ts, 'bilal@example.com')).token)).status, 201);
  assert.equal((await w.ts.http.delete(`${API}/devices/${own[0]!.id}`, amina.token)).status, 204);
  assert.equal((await register(amina.token)).status, 201);
  assert.equal((await register(amina.token)).status, 409);
  for (let i = 0; i < 4; i++) assert.equal((await register(w.root.token)).status, 201, `superadmin player ${i}`);
});
