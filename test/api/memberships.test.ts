import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { copiedWorld, type TestService } from '../support/service.ts';
import {
  API,
  createMosque,
  joinMosque,
  makeAdmin,
  member,
  mosqueMemberships,
  ownMembership,
  setStatus,
  signInSuperadmin,
  type Person,
} from '../support/people.ts';
import { assertError } from '../support/api.ts';

/** docs/api.md, "Memberships", and docs/walkthrough.md, "3. The mosque and its members": joining, enrolling, status changes and toggles. */

const TOGGLES = ['notify_azaan', 'notify_jummah', 'notify_waaz', 'notify_announcement'] as const;
const MEMBERSHIP_KEYS = ['created_at', 'id', 'mosque_id', 'notify_announcement', 'notify_azaan', 'notify_jummah', 'notify_waaz', 'status', 'updated_at', 'user_id'];

/** A service with a superadmin, a mosque owned by `owner`, and one prospective member. */
async function build(ts: TestService, extra: Record<string, unknown>) {
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, extra);
  const amina = await member(ts, 'amina@example.com');
  return { root, owner, mosque, amina };
}

// Made once for each kind of mosque and copied for every test (copiedWorld): each test still has it to itself.
const worlds = { manual: copiedWorld((ts) => build(ts, {})), auto: copiedWorld((ts) => build(ts, { auto_approve_members: true })) };

function world(t: TestContext, extra: { auto_approve_members?: true } = {}) {
  return (extra.auto_approve_members ? worlds.auto : worlds.manual)(t);
}

/** The member's own membership of the mosque, read back; fails when there is none. */
async function readBack(ts: TestService, person: Person, mosqueId: string) {
  const m = await ownMembership(ts, person, mosqueId);
  assert.ok(m, `expected ${person.email} to have a membership`);
  return m;
}

/**
 * A mosque's memberships as sorted [user_id, status] pairs. The owner and admins are members of their mosque
 * (docs/decisions.md, "Owners and admins are members"), so these lists hold the owner's own approved membership beside everyone else's.
 */
async function memberPairs(ts: TestService, token: string, mosqueId: string) {
  return (await mosqueMemberships(ts, token, mosqueId)).map((m) => [m.user_id, m.status]).sort();
}

function assertMembership(body: Record<string, unknown>, want: { mosque_id: string; user_id: string; status: string }) {
  assert.deepEqual(Object.keys(body).sort(), MEMBERSHIP_KEYS);
  assert.equal(body.mosque_id, want.mosque_id);
  assert.equal(body.user_id, want.user_id);
  assert.equal(body.status, want.status);
  assert.equal(typeof body.id, 'string');
  for (const k of ['created_at', 'updated_at']) assert.match(String(body[k]), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
}

// ---- joining ----

test('a self-service join of a mosque without auto-approve makes a pending membership (201)', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token);
  assert.equal(res.status, 201);
  assertMembership(res.body, { mosque_id: mosque.id, user_id: amina.id, status: 'pending' });
  assert.deepEqual(await readBack(ts, amina, mosque.id), res.body);
});

test('a self-service join of an auto-approving mosque is approved at once (201)', async (t) => {
  const { ts, mosque, amina } = await world(t, { auto_approve_members: true });
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token);
  assert.equal(res.status, 201);
  assertMembership(res.body, { mosque_id: mosque.id, user_id: amina.id, status: 'approved' });
  assert.equal((await readBack(ts, amina, mosque.id)).status, 'approved');
});

test('every notify toggle of a new membership is true', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  for (const k of TOGGLES) assert.equal(joined[k], true, k);
});

test('joining again with a pending membership answers 200 with it as it is, even after the mosque turns auto-approve on', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const first = await joinMosque(ts, amina, mosque.id);
  const patched = await ts.http.patch(`${API}/mosques/${mosque.id}`, { auto_approve_members: true }, owner.token);
  assert.equal(patched.status, 200);
  const again = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token);
  assert.equal(again.status, 200);
  assert.equal(again.body.id, first.id);
  assert.equal(again.body.status, 'pending');
  // Amina's one pending membership beside the owner's own; the second join made no new row.
  assert.deepEqual(await memberPairs(ts, owner.token, mosque.id), [[owner.id, 'approved'], [amina.id, 'pending']].sort());
});

test('joining again with an approved membership answers 200 and keeps its toggles', async (t) => {
  const { ts, mosque, amina } = await world(t, { auto_approve_members: true });
  const first = await joinMosque(ts, amina, mosque.id);
  assert.equal((await ts.http.patch(`${API}/memberships/${first.id}`, { notify_waaz: false }, amina.token)).status, 200);
  const again = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token);
  assert.equal(again.status, 200);
  assert.equal(again.body.id, first.id);
  assert.equal(again.body.status, 'approved');
  assert.equal(again.body.notify_waaz, false);
});

test('a rejected member who joins again goes back to pending', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  await setStatus(ts, owner.token, joined.id, 'rejected');
  const again = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token);
  assert.ok(again.status === 200 || again.status === 201, `status ${again.status}`);
  assert.equal(again.body.id, joined.id);
  assert.equal(again.body.status, 'pending');
  assert.equal((await readBack(ts, amina, mosque.id)).status, 'pending');
});

test('a rejected member who joins an auto-approving mosque again is approved', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  await setStatus(ts, owner.token, joined.id, 'rejected');
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}`, { auto_approve_members: true }, owner.token)).status, 200);
  const again = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token);
  assert.equal(again.body.status, 'approved');
  assert.equal((await readBack(ts, amina, mosque.id)).status, 'approved');
});

test('a banned member who joins again gets 403 membership_banned and stays banned, by id and by code', async (t) => {
  const { ts, owner, mosque, amina } = await world(t, { auto_approve_members: true });
  const joined = await joinMosque(ts, amina, mosque.id);
  await setStatus(ts, owner.token, joined.id, 'banned');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token), 403, 'membership_banned');
  assertError(await ts.http.post(`${API}/join`, { code: mosque.join_code }, amina.token), 403, 'membership_banned');
  const after = await readBack(ts, amina, mosque.id);
  assert.equal(after.status, 'banned');
  assert.equal(after.id, joined.id);
});

test('joining a mosque that does not exist answers 404 and makes no membership', async (t) => {
  const { ts, amina } = await world(t);
  assertError(await ts.http.post(`${API}/mosques/no-such-mosque/join`, {}, amina.token), 404, 'not_found');
  assert.deepEqual((await ts.http.get(`${API}/me/memberships`, amina.token)).body, []);
});

// ---- joining by code ----

test('POST /join with the join code joins that mosque (201 pending)', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const res = await ts.http.post(`${API}/join`, { code: mosque.join_code }, amina.token);
  assert.equal(res.status, 201);
  assertMembership(res.body, { mosque_id: mosque.id, user_id: amina.id, status: 'pending' });
});

test('a join code is accepted in lower case, with dashes and with spaces', async (t) => {
  const { ts, root, owner, mosque, amina } = await world(t);
  const code = mosque.join_code;
  assert.match(code, /^[A-HJKMNP-Z2-9]{8}$/);
  const lower = await ts.http.post(`${API}/join`, { code: code.toLowerCase() }, amina.token);
  assert.equal(lower.status, 201);
  assert.equal(lower.body.mosque_id, mosque.id);
  const bilal = await member(ts, 'bilal@example.com');
  const dashed = await ts.http.post(`${API}/join`, { code: `${code.slice(0, 4)}-${code.slice(4).toLowerCase()}` }, bilal.token);
  assert.equal(dashed.status, 201);
  assert.equal(dashed.body.mosque_id, mosque.id);
  const chen = await member(ts, 'chen@example.com');
  const spaced = await ts.http.post(`${API}/join`, { code: ` ${code.slice(0, 4)} ${code.slice(4)} ` }, chen.token);
  assert.equal(spaced.status, 201);
  // Three joins beside the owner's own membership.
  assert.deepEqual(
    await memberPairs(ts, root.token, mosque.id),
    [[owner.id, 'approved'], [amina.id, 'pending'], [bilal.id, 'pending'], [chen.id, 'pending']].sort(),
  );
});

test('an unknown join code answers 404 and makes no membership', async (t) => {
  const { ts, root, owner, mosque, amina } = await world(t);
  const unknown = mosque.join_code === 'ZZZZZZZZ' ? 'YYYYYYYY' : 'ZZZZZZZZ';
  assertError(await ts.http.post(`${API}/join`, { code: unknown }, amina.token), 404, 'not_found');
  // Only the owner's own membership.
  assert.deepEqual(await memberPairs(ts, root.token, mosque.id), [[owner.id, 'approved']]);
  assert.deepEqual((await ts.http.get(`${API}/me/memberships`, amina.token)).body, []);
});

test('an empty or non-string join code answers 400 validation_failed', async (t) => {
  const { ts, root, owner, mosque, amina } = await world(t);
  for (const body of [{}, { code: '' }, { code: 12345678 }]) {
    assertError(await ts.http.post(`${API}/join`, body, amina.token), 400, 'validation_failed');
  }
  // Only the owner's own membership.
  assert.deepEqual(await memberPairs(ts, root.token, mosque.id), [[owner.id, 'approved']]);
});

test('after the join code is rotated the old code stops working at once and the new one works', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const rotated = await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, owner.token);
  assert.equal(rotated.status, 200);
  assert.notEqual(rotated.body.join_code, mosque.join_code);
  assertError(await ts.http.post(`${API}/join`, { code: mosque.join_code }, amina.token), 404, 'not_found');
  assert.equal(await ownMembership(ts, amina, mosque.id), undefined);
  const res = await ts.http.post(`${API}/join`, { code: rotated.body.join_code }, amina.token);
  assert.equal(res.status, 201);
  assert.equal(res.body.mosque_id, mosque.id);
});

// ---- enrolment by an admin ----

test('an admin enrolling a user makes an approved membership (201), and enrolling again answers 200 with the same one', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const first = await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: amina.id }, owner.token);
  assert.equal(first.status, 201);
  assertMembership(first.body, { mosque_id: mosque.id, user_id: amina.id, status: 'approved' });
  const again = await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: amina.id }, owner.token);
  assert.equal(again.status, 200);
  assert.equal(again.body.id, first.body.id);
  assert.equal(again.body.status, 'approved');
});

test('an admin enrolling a user who is pending makes them approved (200)', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: amina.id }, owner.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.id, joined.id);
  assert.equal((await readBack(ts, amina, mosque.id)).status, 'approved');
});

test('the superadmin enrols without an admin row, and the membership is approved', async (t) => {
  const { ts, root, mosque, amina } = await world(t);
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: amina.id }, root.token);
  assert.equal(res.status, 201);
  assert.equal(res.body.status, 'approved');
});

test('enrolling an unknown user answers 404 and makes no membership', async (t) => {
  const { ts, owner, mosque } = await world(t);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: 'no-such-user' }, owner.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, {}, owner.token), 400, 'validation_failed');
  // Only the owner's own membership.
  assert.deepEqual(await memberPairs(ts, owner.token, mosque.id), [[owner.id, 'approved']]);
});

test('a member who is not an admin cannot enrol anyone: 403, and nobody is enrolled', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await joinMosque(ts, amina, mosque.id);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: bilal.id }, amina.token), 403, 'forbidden');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: amina.id }, amina.token), 403, 'forbidden');
  // Amina still pending, bilal not enrolled; the owner's own membership is the only other row.
  assert.deepEqual(await memberPairs(ts, owner.token, mosque.id), [[owner.id, 'approved'], [amina.id, 'pending']].sort());
});

// ---- status changes ----

test('an admin approves a pending membership', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  const res = await ts.http.patch(`${API}/memberships/${joined.id}`, { status: 'approved' }, owner.token);
  assert.equal(res.status, 200);
  assertMembership(res.body, { mosque_id: mosque.id, user_id: amina.id, status: 'approved' });
  assert.equal((await readBack(ts, amina, mosque.id)).status, 'approved');
});

test('an admin with neither can_trigger nor can_manage may still change a status, and the superadmin may without a row', async (t) => {
  const { ts, root, mosque, amina } = await world(t);
  const plain = await member(ts, 'plain-admin@example.com');
  await makeAdmin(ts, root.token, mosque.id, plain);
  const joined = await joinMosque(ts, amina, mosque.id);
  assert.equal((await setStatus(ts, plain.token, joined.id, 'approved')).status, 'approved');
  assert.equal((await setStatus(ts, root.token, joined.id, 'rejected')).status, 'rejected');
  assert.equal((await readBack(ts, amina, mosque.id)).status, 'rejected');
});

test('the memberships list shows each entry with user_email and filters by ?status=', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  const a = await joinMosque(ts, amina, mosque.id);
  await joinMosque(ts, bilal, mosque.id);
  await setStatus(ts, owner.token, a.id, 'approved');
  const all = await mosqueMemberships(ts, owner.token, mosque.id);
  assert.ok(Array.isArray(all));
  // The owner's own membership is listed too.
  assert.deepEqual(all.map((m) => m.user_email).sort(), ['amina@example.com', 'bilal@example.com', 'owner@example.com']);
  for (const m of all) assert.deepEqual(Object.keys(m).sort(), [...MEMBERSHIP_KEYS, 'user_email', 'user_email_is_placeholder', 'user_phone', 'email_proven', 'phone_proven'].sort());
  const pending = await ts.http.get(`${API}/mosques/${mosque.id}/memberships?status=pending`, owner.token);
  assert.equal(pending.status, 200);
  assert.deepEqual(pending.body.map((m: { user_email: string }) => m.user_email), ['bilal@example.com']);
  const approved = await ts.http.get(`${API}/mosques/${mosque.id}/memberships?status=approved`, owner.token);
  assert.equal(approved.status, 200);
  assert.deepEqual(approved.body.map((m: { user_email: string }) => m.user_email).sort(), ['amina@example.com', 'owner@example.com']);
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/memberships?status=vip`, owner.token), 400, 'validation_failed');
});

test("GET /memberships/{id}: an admin reads the member's addresses, their status history newest first and their players at this mosque only", async (t) => {
  const { ts, root, owner, mosque, amina } = await world(t);
  const elsewhere = await createMosque(ts, root.token, owner, { name: 'Masjid Elsewhere' });
  const joined = await joinMosque(ts, amina, mosque.id);
  await setStatus(ts, owner.token, joined.id, 'approved');
  assert.equal((await ts.http.post(`${API}/devices`, { kind: 'stream_player', name: 'here', mosque_id: mosque.id }, amina.token)).status, 201);
  await setStatus(ts, owner.token, joined.id, 'banned');
  await joinMosque(ts, amina, elsewhere.id);
  assert.equal((await ts.http.post(`${API}/devices`, { kind: 'stream_player', name: 'there', mosque_id: elsewhere.id }, amina.token)).status, 201);

  const res = await ts.http.get(`${API}/memberships/${joined.id}`, owner.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.user_email, 'amina@example.com');
  assert.equal(res.body.user_email_is_placeholder, false);
  assert.equal(res.body.user_phone, null);
  assert.equal(res.body.status, 'banned');
  assert.equal(res.body.admin, null);
  assert.deepEqual(res.body.history.map((a: { kind: string; data: { to?: string } }) => `${a.kind}:${a.data.to}`),
    ['membership.status_changed:banned', 'membership.status_changed:approved', 'membership.joined:pending']);
  assert.deepEqual(res.body.players.map((d: { name: string }) => d.name), ['here']);
  assert.deepEqual(res.body.players[0].entitlement, { entitled: false, reason: 'membership_lapsed', mosque_id: mosque.id, lease_expires_at: null });
  // The owner's own membership says they are the owner.
  const owners = (await mosqueMemberships(ts, owner.token, mosque.id)).find((m) => m.user_id === owner.id)!;
  assert.deepEqual((await ts.http.get(`${API}/memberships/${owners.id}`, root.token)).body.admin, { is_owner: true, can_trigger: true, can_manage: true });
});

test('GET /memberships/{id}: the member themselves gets 403, another member and an admin of another mosque 404', async (t) => {
  const { ts, root, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  const bilal = await member(ts, 'bilal@example.com');
  await joinMosque(ts, bilal, mosque.id);
  const stranger = await member(ts, 'stranger@example.com');
  await createMosque(ts, root.token, stranger, { name: 'Other' });
  assertError(await ts.http.get(`${API}/memberships/${joined.id}`, amina.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/memberships/${joined.id}`, bilal.token), 404, 'not_found');
  assertError(await ts.http.get(`${API}/memberships/${joined.id}`, stranger.token), 404, 'not_found');
  assert.equal((await ts.http.get(`${API}/memberships/${joined.id}`, root.token)).status, 200);
});

test("a manager changing the owner's membership is told only a superadmin may, and nothing changes", async (t) => {
  const { ts, root, owner, mosque, amina } = await world(t);
  await makeAdmin(ts, root.token, mosque.id, amina, { can_manage: true });
  const owners = (await mosqueMemberships(ts, owner.token, mosque.id)).find((m) => m.user_id === owner.id)!;
  const res = await ts.http.patch(`${API}/memberships/${owners.id}`, { status: 'banned' }, amina.token);
  assertError(res, 403, 'forbidden');
  assert.equal(res.body.error.message, "Only a superadmin may change the owner's membership.");
  assert.equal((await ts.http.get(`${API}/memberships/${owners.id}`, owner.token)).body.status, 'approved');
});

test('a member cannot change the status of their own membership: 403 and it stays pending', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  for (const status of ['approved', 'pending', 'rejected', 'banned']) {
    assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { status }, amina.token), 403, 'forbidden');
  }
  const after = await readBack(ts, amina, mosque.id);
  assert.equal(after.status, 'pending');
  assert.equal(after.updated_at, joined.updated_at);
});

test('a banned member who sets their own status back to approved gets 403 and stays banned', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  const banned = await setStatus(ts, owner.token, joined.id, 'banned');
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { status: 'approved' }, amina.token), 403, 'forbidden');
  const after = await readBack(ts, amina, mosque.id);
  assert.equal(after.status, 'banned');
  assert.equal(after.updated_at, banned.updated_at);
});

test('an unknown status value or a wrong type answers 400 validation_failed and changes nothing', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  for (const status of ['vip', 'APPROVED', '', 1, null, true]) {
    const res = assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { status }, owner.token), 400, 'validation_failed');
    assert.ok(res.error.details.some((d: { path: string }) => d.path === 'status'), JSON.stringify(res.error.details));
  }
  for (const value of ['no', 0, 1, null, 'false']) {
    const res = await ts.http.patch(`${API}/memberships/${joined.id}`, { notify_azaan: value }, amina.token);
    assertError(res, 400, 'validation_failed');
  }
  const after = await readBack(ts, amina, mosque.id);
  assert.equal(after.status, 'pending');
  for (const k of TOGGLES) assert.equal(after[k], true, k);
});

test('an empty PATCH body, or one that is not a JSON object, answers 400 validation_failed', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  for (const body of [{}, [], [false], null, 'notify_azaan']) {
    assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, body, amina.token), 400, 'validation_failed');
  }
  assert.deepEqual(await readBack(ts, amina, mosque.id), joined);
});

// ---- toggles ----

test('a member sets each of their own toggles, and the others keep their value', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  const expected: Record<string, boolean> = Object.fromEntries(TOGGLES.map((k) => [k, true]));
  for (const k of TOGGLES) {
    const res = await ts.http.patch(`${API}/memberships/${joined.id}`, { [k]: false }, amina.token);
    assert.equal(res.status, 200);
    expected[k] = false;
    const back = await readBack(ts, amina, mosque.id);
    for (const other of TOGGLES) assert.equal(back[other], expected[other], `${other} after turning off ${k}`);
    assert.equal(back.status, 'pending');
  }
  const on = await ts.http.patch(`${API}/memberships/${joined.id}`, { notify_azaan: true, notify_waaz: true }, amina.token);
  assert.equal(on.status, 200);
  assert.deepEqual(
    TOGGLES.map((k) => on.body[k]),
    [true, false, true, false],
  );
});

test('a member sending any other key, alone or beside a toggle, gets 403 and nothing changes', async (t) => {
  const { ts, root, mosque, amina } = await world(t);
  const other = await createMosque(ts, root.token, null, { name: 'Other' });
  const joined = await joinMosque(ts, amina, mosque.id);
  const forbidden = [
    { status: 'approved' },
    { notify_azaan: false, status: 'approved' },
    { notify_jummah: false, user_id: 'someone-else' },
    { notify_waaz: false, mosque_id: other.id },
    { notify_announcement: false, id: 'another-id' },
    { notify_azaan: false, created_at: '2000-01-01T00:00:00Z' },
    { notify_azaan: false, notify_everything: true },
  ];
  for (const body of forbidden) {
    assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, body, amina.token), 403, 'forbidden');
  }
  assert.deepEqual(await readBack(ts, amina, mosque.id), joined);
  assert.equal(await ownMembership(ts, amina, other.id), undefined);
});

test('an admin who is not the member cannot change the toggles: 403, alone or beside a status, and nothing changes', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { notify_azaan: false }, owner.token), 403, 'forbidden');
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { status: 'approved', notify_jummah: false }, owner.token), 403, 'forbidden');
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { status: 'approved', user_id: owner.id }, owner.token), 403, 'forbidden');
  assert.deepEqual(await readBack(ts, amina, mosque.id), joined);
});

test('the superadmin cannot change a member\'s toggles either: 403, nothing changed', async (t) => {
  const { ts, root, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { notify_waaz: false }, root.token), 403, 'forbidden');
  assert.deepEqual(await readBack(ts, amina, mosque.id), joined);
});

// ---- who may see a membership ----

test('an unknown membership id answers 404', async (t) => {
  const { ts, owner, amina } = await world(t);
  assertError(await ts.http.patch(`${API}/memberships/no-such-membership`, { notify_azaan: false }, amina.token), 404, 'not_found');
  assertError(await ts.http.patch(`${API}/memberships/no-such-membership`, { status: 'approved' }, owner.token), 404, 'not_found');
  assertError(await ts.http.delete(`${API}/memberships/no-such-membership`, owner.token), 404, 'not_found');
});

test('an admin of another mosque PATCHing a membership here gets 404 and nothing changes', async (t) => {
  const { ts, root, mosque, amina } = await world(t);
  const otherOwner = await member(ts, 'other-owner@example.com');
  await createMosque(ts, root.token, otherOwner, { name: 'Masjid Other' });
  const joined = await joinMosque(ts, amina, mosque.id);
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { status: 'approved' }, otherOwner.token), 404, 'not_found');
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { notify_azaan: false }, otherOwner.token), 404, 'not_found');
  assertError(await ts.http.delete(`${API}/memberships/${joined.id}`, otherOwner.token), 404, 'not_found');
  assert.deepEqual(await readBack(ts, amina, mosque.id), joined);
});

test('another member of the same mosque PATCHing someone\'s membership gets 404 and nothing changes', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await joinMosque(ts, bilal, mosque.id);
  const joined = await joinMosque(ts, amina, mosque.id);
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { notify_azaan: false }, bilal.token), 404, 'not_found');
  assertError(await ts.http.patch(`${API}/memberships/${joined.id}`, { status: 'approved' }, bilal.token), 404, 'not_found');
  assert.deepEqual(await readBack(ts, amina, mosque.id), joined);
});

// ---- leaving and removing ----

test('a member may leave a mosque (204), and the membership is gone', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  const res = await ts.http.delete(`${API}/memberships/${joined.id}`, amina.token);
  assert.equal(res.status, 204);
  assert.equal(await ownMembership(ts, amina, mosque.id), undefined);
  // Only the owner's own membership is left.
  assert.deepEqual(await memberPairs(ts, owner.token, mosque.id), [[owner.id, 'approved']]);
});

test('a banned member cannot leave (and so shed the ban): 403, still banned; an admin may remove it', async (t) => {
  const { ts, owner, mosque, amina } = await world(t);
  const joined = await joinMosque(ts, amina, mosque.id);
  await setStatus(ts, owner.token, joined.id, 'banned');
  assertError(await ts.http.delete(`${API}/memberships/${joined.id}`, amina.token), 403, 'forbidden');
  assert.equal((await readBack(ts, amina, mosque.id)).status, 'banned');
  assert.equal((await ts.http.delete(`${API}/memberships/${joined.id}`, owner.token)).status, 204);
  assert.equal(await ownMembership(ts, amina, mosque.id), undefined);
});

// ---- /me ----

test('GET /me shows the user, their memberships and the mosques they administer', async (t) => {
  const { ts, root, owner, mosque, amina } = await world(t);
  const second = await createMosque(ts, root.token, null, { name: 'Masjid Second', auto_approve_members: true });
  await makeAdmin(ts, root.token, second.id, amina, { can_trigger: true });
  // Being made an admin of the second mosque admitted amina as an approved member of it; joining finds it.
  const admitted = await ownMembership(ts, amina, second.id);
  assert.equal(admitted?.status, 'approved');
  const m1 = await joinMosque(ts, amina, mosque.id);
  const m2 = await joinMosque(ts, amina, second.id);
  assert.equal(m2.id, admitted?.id);
  const me = await ts.http.get(`${API}/me`, amina.token);
  assert.equal(me.status, 200);
  assert.deepEqual(Object.keys(me.body).sort(), ['admin_of', 'memberships', 'user']);
  assert.equal(me.body.user.id, amina.id);
  assert.equal(me.body.user.email, 'amina@example.com');
  assert.deepEqual(
    me.body.memberships.map((m: { id: string; status: string }) => [m.id, m.status]).sort(),
    [[m1.id, 'pending'], [m2.id, 'approved']].sort(),
  );
  assert.deepEqual(me.body.admin_of, [{ mosque_id: second.id, is_owner: false, can_trigger: true, can_manage: false }]);
  const ownerMe = await ts.http.get(`${API}/me`, owner.token);
  // The owner is an approved member of their own mosque.
  assert.deepEqual(
    ownerMe.body.memberships.map((m: { mosque_id: string; user_id: string; status: string }) => [m.mosque_id, m.user_id, m.status]),
    [[mosque.id, owner.id, 'approved']],
  );
  assert.deepEqual(ownerMe.body.admin_of, [{ mosque_id: mosque.id, is_owner: true, can_trigger: true, can_manage: true }]);
});

test('GET /me/memberships is a bare array of the caller\'s own memberships only', async (t) => {
  const { ts, mosque, amina } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  const mine = await joinMosque(ts, amina, mosque.id);
  await joinMosque(ts, bilal, mosque.id);
  const res = await ts.http.get(`${API}/me/memberships`, amina.token);
  assert.equal(res.status, 200);
  assert.ok(Array.isArray(res.body));
  assert.deepEqual(res.body, [mine]);
  assertError(await ts.http.get(`${API}/me/memberships`), 401, 'unauthorized');
});
