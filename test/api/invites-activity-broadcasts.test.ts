import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { copiedWorld, sha256, startTestService, type TestService } from '../support/service.ts';
import {
  API,
  createMosque,
  joinMosque,
  makeAdmin,
  member,
  mosqueActivity,
  mosqueMemberships,
  ownMembership,
  setStatus,
  signInSuperadmin,
} from '../support/people.ts';
import { assertError, emailId } from '../support/api.ts';
import { waitFor, settle } from '../support/devices.ts';
import { browserKeys, decryptPush, deliveringTo, startPushService } from '../support/push-service.ts';
import { TEST_PUSHES_PER_MINUTE } from '../../api/people/me.ts';

/** POST /invites, the activity feed, and broadcast records with their delivery report. */

async function build(ts: TestService, extra: Record<string, unknown>) {
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, extra);
  return { root, owner, mosque };
}

// Made once for each kind of mosque and copied for every test (copiedWorld): each test still has it to itself,
// and its messages start empty (the world's sign-ins sent no invite and no login code).
const worlds = { manual: copiedWorld((ts) => build(ts, {})), auto: copiedWorld((ts) => build(ts, { auto_approve_members: true })) };

function world(t: TestContext, extra: { auto_approve_members?: true } = {}) {
  return (extra.auto_approve_members ? worlds.auto : worlds.manual)(t);
}

async function invites(ts: TestService) {
  await ts.service.notifier.idle();
  return ts.messages.filter((m) => m.purpose === 'invite');
}

async function userCount(ts: TestService, rootToken: string) {
  const res = await ts.http.get(`${API}/users?limit=200`, rootToken);
  assert.equal(res.status, 200);
  return (res.body as unknown[]).length;
}

// ---- invites ----

test('an invite to an address nobody has proven creates the account, and the membership waits until the address is proven', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const users = await userCount(ts, root.token);
  const res = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: ' Dana@Example.com ' }, owner.token);
  assert.equal(res.status, 201);
  assert.deepEqual(Object.keys(res.body).sort(), ['invite', 'membership']);
  assert.equal(res.body.membership, null);
  assert.equal(res.body.invite.mosque_id, mosque.id);
  assert.equal(res.body.invite.user_id, null);
  assert.equal(res.body.invite.waiting_for_proof, true);
  assert.equal(await userCount(ts, root.token), users + 1);
  assert.deepEqual((await mosqueMemberships(ts, owner.token, mosque.id)).map((m) => m.user_email), ['owner@example.com']);

  const sent = await invites(ts);
  assert.equal(sent.length, 1);
  assert.equal(sent[0]!.channel, 'email');
  assert.equal(sent[0]!.to, 'dana@example.com');
  assert.ok(sent[0]!.text.length > 0);

  // The invited person signs in with a code sent to the address, which proves it: the membership is theirs now.
  assert.equal((await ts.http.post(`${API}/auth/login-code`, { identifier_hash: emailId('dana@example.com') })).status, 202);
  await ts.service.notifier.idle();
  const code = ts.messages.filter((m) => m.purpose === 'login_code').at(-1)!.code!;
  const login = await ts.http.post(`${API}/auth/login-code/verify`, { identifier_hash: emailId('dana@example.com'), code });
  assert.equal(login.status, 200);
  const mine = await ts.http.get(`${API}/me/memberships`, login.body.access_token);
  assert.deepEqual(mine.body.map((m: { mosque_id: string; status: string }) => [m.mosque_id, m.status]), [[mosque.id, 'pending']]);
  const me = await ts.http.get(`${API}/me`, login.body.access_token);
  assert.equal(me.body.user.email_proven, true);
});

test('an invite by whatsapp creates a phone account and sends the invite on the whatsapp channel', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const res = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, whatsapp: '+47 123 45 678' }, owner.token);
  assert.equal(res.status, 201);
  assert.equal(res.body.membership, null);
  const listed = await ts.http.get(`${API}/users?limit=200`, root.token);
  const user = listed.body.find((u: { phone: string | null }) => u.phone === '+4712345678');
  assert.equal(user.email, `phone-${sha256('+4712345678').slice(0, 16)}@phone.invalid`);
  assert.equal(user.phone_proven, false);
  const sent = await invites(ts);
  assert.deepEqual(sent.map((m) => [m.channel, m.to]), [['whatsapp', '+4712345678']]);
});

test('an invite with auto_approve to a proven address makes an approved membership at once', async (t) => {
  const { ts, owner, mosque } = await world(t);
  const dana = await member(ts, 'dana@example.com');
  const res = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'dana@example.com', auto_approve: true }, owner.token);
  assert.equal(res.status, 201);
  assert.equal(res.body.membership.status, 'approved');
  assert.equal(res.body.membership.user_id, dana.id);
  assert.equal(res.body.invite.waiting_for_proof, false);
  // The owner is a member of their own mosque (docs/decisions.md, "Owners and admins are members"); the list holds both, in no set order within a second.
  assert.deepEqual(
    (await mosqueMemberships(ts, owner.token, mosque.id)).map((m) => [m.user_email, m.status]).sort(),
    [['dana@example.com', 'approved'], ['owner@example.com', 'approved']],
  );
});

test('inviting an existing user reuses the account and gives them the membership', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  const users = await userCount(ts, root.token);
  const res = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'AMINA@example.com' }, owner.token);
  assert.equal(res.status, 201);
  assert.equal(res.body.membership.user_id, amina.id);
  assert.equal(await userCount(ts, root.token), users);
  assert.equal((await ownMembership(ts, amina, mosque.id))?.status, 'pending');
});

test('an invite never lowers a membership: an approved member invited without auto_approve stays approved', async (t) => {
  const { ts, owner, mosque } = await world(t, { auto_approve_members: true });
  const amina = await member(ts, 'amina@example.com');
  const joined = await joinMosque(ts, amina, mosque.id);
  assert.equal(joined.status, 'approved');
  const res = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'amina@example.com' }, owner.token);
  assert.equal(res.status, 201);
  assert.equal(res.body.membership.id, joined.id);
  assert.equal(res.body.membership.status, 'approved');
  assert.equal((await ownMembership(ts, amina, mosque.id))?.status, 'approved');
});

test('an invite with auto_approve raises a pending membership to approved, and one without brings a rejected one back to pending', async (t) => {
  const { ts, owner, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  const bilal = await member(ts, 'bilal@example.com');
  await joinMosque(ts, amina, mosque.id);
  const b = await joinMosque(ts, bilal, mosque.id);
  await setStatus(ts, owner.token, b.id, 'rejected');
  const raised = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'amina@example.com', auto_approve: true }, owner.token);
  assert.equal(raised.body.membership.status, 'approved');
  const back = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'bilal@example.com' }, owner.token);
  assert.equal(back.body.membership.status, 'pending');
  assert.equal((await ownMembership(ts, amina, mosque.id))?.status, 'approved');
  assert.equal((await ownMembership(ts, bilal, mosque.id))?.status, 'pending');
});

test('inviting a banned member answers 409 membership_banned, sends nothing, and the ban stays', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  const joined = await joinMosque(ts, amina, mosque.id);
  await setStatus(ts, owner.token, joined.id, 'banned');
  const feedBefore = await mosqueActivity(ts, root.token, mosque.id);
  for (const auto_approve of [false, true]) {
    assertError(await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'amina@example.com', auto_approve }, owner.token), 409, 'membership_banned');
  }
  assert.equal((await ownMembership(ts, amina, mosque.id))?.status, 'banned');
  assert.deepEqual(await invites(ts), []);
  assert.deepEqual(await mosqueActivity(ts, root.token, mosque.id), feedBefore, 'no invite recorded');
});

test('an invite needs exactly one of email or whatsapp: 400, no user created, nothing sent', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const users = await userCount(ts, root.token);
  const bad = [
    { mosque_id: mosque.id },
    { mosque_id: mosque.id, email: 'dana@example.com', whatsapp: '+4712345678' },
    { mosque_id: mosque.id, email: 'not-an-email' },
    { mosque_id: mosque.id, whatsapp: '12345' },
    { email: 'dana@example.com' },
    { mosque_id: mosque.id, email: 'dana@example.com', auto_approve: 'yes' },
  ];
  for (const body of bad) {
    assertError(await ts.http.post(`${API}/invites`, body, owner.token), 400, 'validation_failed');
  }
  assert.equal(await userCount(ts, root.token), users);
  assert.deepEqual(await invites(ts), []);
  // Only the owner's own membership (owners are members); no invite made one.
  assert.deepEqual((await mosqueMemberships(ts, owner.token, mosque.id)).map((m) => [m.user_id, m.status]), [[owner.id, 'approved']]);
});

test('only an admin of the mosque invites: a member gets 403, a stranger and an unknown mosque 404; nothing happens', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  const stranger = await member(ts, 'stranger@example.com');
  const otherOwner = await member(ts, 'other-owner@example.com');
  await createMosque(ts, root.token, otherOwner, { name: 'Masjid Other' });
  const users = await userCount(ts, root.token);
  const body = { mosque_id: mosque.id, email: 'dana@example.com', auto_approve: true };
  assertError(await ts.http.post(`${API}/invites`, body, amina.token), 403, 'forbidden');
  assertError(await ts.http.post(`${API}/invites`, body, stranger.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/invites`, body, otherOwner.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/invites`, { ...body, mosque_id: 'no-such-mosque' }, owner.token), 404, 'not_found');
  assert.equal(await userCount(ts, root.token), users);
  assert.deepEqual(await invites(ts), []);
  // The owner's own membership and amina's; nobody else.
  assert.deepEqual((await mosqueMemberships(ts, owner.token, mosque.id)).map((m) => m.user_id).sort(), [owner.id, amina.id].sort());
});

test('the superadmin and an admin without flags may invite', async (t) => {
  const { ts, root, mosque } = await world(t);
  const plain = await member(ts, 'plain@example.com');
  await makeAdmin(ts, root.token, mosque.id, plain);
  assert.equal((await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'dana@example.com' }, plain.token)).status, 201);
  assert.equal((await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'eli@example.com' }, root.token)).status, 201);
  assert.deepEqual((await invites(ts)).map((m) => m.to).sort(), ['dana@example.com', 'eli@example.com']);
});

// ---- activity ----

test('every membership, admin, invite and broadcast change appears in the activity feed, newest first, with actor, kind and subject', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  const bilal = await member(ts, 'bilal@example.com');
  const chen = await member(ts, 'chen@example.com');
  await member(ts, 'dana@example.com');
  const start = (await mosqueActivity(ts, root.token, mosque.id)).length;

  const a = await joinMosque(ts, amina, mosque.id);
  await setStatus(ts, owner.token, a.id, 'approved');
  assert.equal((await ts.http.patch(`${API}/memberships/${a.id}`, { notify_waaz: false }, amina.token)).status, 200);
  const b = (await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: bilal.id }, owner.token)).body;
  await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: chen.id }, owner.token);
  await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${chen.id}`, { can_trigger: true }, owner.token);
  await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${chen.id}`, owner.token);
  const invite = (await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'dana@example.com' }, owner.token)).body;
  const cast = (await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'jummah' }, owner.token)).body;
  await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${cast.id}/stop`, {}, owner.token);
  assert.equal((await ts.http.delete(`${API}/memberships/${b.id}`, owner.token)).status, 204);
  assert.equal((await ts.http.delete(`${API}/memberships/${a.id}`, amina.token)).status, 204);

  // Adding chen as an admin admitted them as a member; removing the admin row kept that membership.
  const chenMembership = await ownMembership(ts, chen, mosque.id);
  assert.equal(chenMembership?.status, 'approved');
  const feed = await ts.http.get(`${API}/mosques/${mosque.id}/activity`, owner.token);
  assert.equal(feed.status, 200);
  assert.ok(Array.isArray(feed.body));
  const fresh = feed.body.slice(0, feed.body.length - start);
  const expected = [
    [amina.id, 'membership.removed', a.id],
    [owner.id, 'membership.removed', b.id],
    [owner.id, 'broadcast.stopped', cast.id],
    [owner.id, 'broadcast.started', cast.id],
    [owner.id, 'invite.sent', invite.invite.id],
    [owner.id, 'membership.invited', invite.membership.id],
    [owner.id, 'admin.removed', chen.id],
    [owner.id, 'admin.updated', chen.id],
    [owner.id, 'membership.admin_admitted', chenMembership!.id],
    [owner.id, 'admin.added', chen.id],
    [owner.id, 'membership.enrolled', b.id],
    [amina.id, 'membership.notifications_changed', a.id],
    [owner.id, 'membership.status_changed', a.id],
    [amina.id, 'membership.joined', a.id],
  ];
  assert.deepEqual(fresh.map((e: { actor_user_id: string; kind: string; subject_id: string }) => [e.actor_user_id, e.kind, e.subject_id]), expected);
  for (const e of feed.body) {
    assert.deepEqual(Object.keys(e).sort(), ['actor_user_id', 'at', 'data', 'id', 'kind', 'subject_id']);
    assert.equal(typeof e.id, 'string');
    assert.match(e.at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    assert.equal(typeof e.data, 'object');
  }
  const ids = feed.body.map((e: { id: string }) => Number(e.id));
  assert.deepEqual(ids, [...ids].sort((x, y) => y - x), 'newest first');
  assert.equal(new Set(ids).size, ids.length);
  // The status change says what it was.
  const statusChange = fresh.find((e: { kind: string }) => e.kind === 'membership.status_changed');
  assert.equal(statusChange.data.from, 'pending');
  assert.equal(statusChange.data.to, 'approved');
  const admitted = fresh.find((e: { kind: string }) => e.kind === 'membership.admin_admitted');
  assert.deepEqual(admitted.data, { user_id: chen.id, from: null, to: 'approved' });
});

test('every device change of a mosque appears in its activity feed: registered, updated, credentials rotated, moved away and deleted', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const other = await createMosque(ts, root.token, null, { name: 'Masjid Other' });
  const amina = await member(ts, 'amina@example.com');
  // Binding a player to a mosque takes a place there (docs/api.md, "Devices"): a pending membership will do.
  await joinMosque(ts, amina, mosque.id);
  await joinMosque(ts, amina, other.id);
  const start = (await mosqueActivity(ts, root.token, mosque.id)).length;
  const otherStart = (await mosqueActivity(ts, root.token, other.id)).length;

  const tx = (await ts.http.post(`${API}/mosques/${mosque.id}/devices`, { kind: 'transmitter', name: 'Minbar' }, owner.token)).body.device;
  assert.equal((await ts.http.patch(`${API}/devices/${tx.id}`, { name: 'Roof', config: { volume: 70 } }, owner.token)).status, 200);
  assert.equal((await ts.http.post(`${API}/devices/${tx.id}/credentials`, {}, owner.token)).status, 200);
  const player = (await ts.http.post(`${API}/devices`, { kind: 'stream_player', name: 'Kitchen', mosque_id: mosque.id }, amina.token)).body.device;
  const loose = await ts.http.post(`${API}/devices`, { kind: 'stream_player', name: 'Unbound' }, amina.token);
  assert.equal(loose.status, 201);
  assert.equal((await ts.http.patch(`${API}/devices/${player.id}`, { mosque_id: other.id }, amina.token)).status, 200);
  assert.equal((await ts.http.delete(`${API}/devices/${tx.id}`, owner.token)).status, 204);

  const feed = await mosqueActivity(ts, owner.token, mosque.id);
  const fresh = feed.slice(0, feed.length - start);
  assert.deepEqual(fresh.map((e) => [e.actor_user_id, e.kind, e.subject_id]), [
    [owner.id, 'device.deleted', tx.id],
    [amina.id, 'device.updated', player.id],
    [amina.id, 'device.registered', player.id],
    [owner.id, 'device.credentials_rotated', tx.id],
    [owner.id, 'device.updated', tx.id],
    [owner.id, 'device.registered', tx.id],
  ], 'a player bound to no mosque is in no feed');
  assert.deepEqual(fresh.at(-1)!.data, { kind: 'transmitter', name: 'Minbar' });
  assert.deepEqual(fresh.at(-2)!.data, { fields: ['name', 'config'], mosque_id: mosque.id });
  assert.deepEqual(fresh[0]!.data, { kind: 'transmitter', name: 'Roof' });
  // The mosque the player moved to hears of it too.
  const otherFeed = (await mosqueActivity(ts, root.token, other.id)).slice(0, -otherStart || undefined);
  assert.deepEqual(otherFeed.map((e) => [e.actor_user_id, e.kind, e.subject_id, e.data]), [[amina.id, 'device.updated', player.id, { fields: ['mosque_id'], mosque_id: other.id }]]);
});

test('the activity feed pages with limit and before (the id of the last entry) without overlap', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  for (const name of ['a', 'b', 'c', 'd', 'e', 'f', 'g']) await joinMosque(ts, await member(ts, `${name}@example.com`), mosque.id);
  const all = await mosqueActivity(ts, root.token, mosque.id);
  assert.ok(all.length >= 9, `expected at least 9 entries, got ${all.length}`);

  const pages = [];
  let query = '?limit=4';
  for (;;) {
    const page = await ts.http.get(`${API}/mosques/${mosque.id}/activity${query}`, owner.token);
    assert.equal(page.status, 200);
    assert.ok(page.body.length <= 4);
    if (page.body.length === 0) break;
    pages.push(page.body);
    query = `?limit=4&before=${page.body.at(-1).id}`;
    assert.ok(pages.length < 10, 'paging must end');
  }
  assert.deepEqual(pages.flat(), all, 'the pages, one after the other, are the whole feed');
  assert.ok(pages.length >= 3);
  assert.deepEqual(pages.slice(0, -1).map((p) => p.length), pages.slice(0, -1).map(() => 4));
});

test('a bad limit or before answers 400; the feed is for admins (member 403, stranger 404)', async (t) => {
  const { ts, owner, mosque } = await world(t);
  for (const q of ['?limit=0', '?limit=201', '?limit=x', '?before=abc', '?before=-1']) {
    assertError(await ts.http.get(`${API}/mosques/${mosque.id}/activity${q}`, owner.token), 400, 'validation_failed');
  }
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  const stranger = await member(ts, 'stranger@example.com');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/activity`, amina.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/activity`, stranger.token), 404, 'not_found');
});

// ---- broadcasts ----

const ZERO_REPORT = { playing: 0, unbound: 0, muted: 0, offline: 0, stream_error: 0, other: 0, covered_locally: 0, push: { queued: 0, sent: 0, failed: 0 } };

test('a trigger admin starts a broadcast (201, live) whose report is pending; GET then gives the same record with zero counts', async (t) => {
  const { ts, root, mosque } = await world(t);
  const muezzin = await member(ts, 'muezzin@example.com');
  await makeAdmin(ts, root.token, mosque.id, muezzin, { can_trigger: true });
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'maghrib', title: 'Maghrib' }, muezzin.token);
  assert.equal(res.status, 201);
  assert.equal(typeof res.body.id, 'string');
  assert.equal(res.body.mosque_id, mosque.id);
  assert.equal(res.body.kind, 'azaan');
  assert.equal(res.body.prayer, 'maghrib');
  assert.equal(res.body.title, 'Maghrib');
  assert.equal(res.body.status, 'live');
  assert.equal(res.body.started_by, muezzin.id);
  assert.match(res.body.started_at, /^\d{4}-\d\d-\d\dT/);
  assert.equal(res.body.stopped_at, null);
  // The 201 does not wait for the report (docs/decisions.md, "The start's `201` carries a pending report").
  assert.deepEqual(res.body.report, { ...ZERO_REPORT, pending: true });
  const read = await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${res.body.id}`, muezzin.token);
  assert.equal(read.status, 200);
  assert.deepEqual(read.body, { ...res.body, report: ZERO_REPORT });
});

test('an unknown broadcast kind or a bad field answers 400 and starts nothing', async (t) => {
  const { ts, owner, mosque } = await world(t);
  for (const body of [{ kind: 'concert' }, {}, { kind: 'AZAAN' }, { kind: 'azaan', prayer: 5 }, { kind: 'azaan', title: 'x'.repeat(201) }]) {
    assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, body, owner.token), 400, 'validation_failed');
  }
  assert.deepEqual((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body, []);
  // Nothing is live: a valid start goes through.
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'waaz' }, owner.token)).status, 201);
});

test('a second start while one is live answers 409 conflict, and the first stays the only live one', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const first = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token);
  assert.equal(first.status, 201);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'announcement' }, owner.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, root.token), 409, 'conflict');
  const list = await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token);
  assert.deepEqual(list.body.map((b: { id: string; status: string }) => [b.id, b.status]), [[first.body.id, 'live']]);
});

test('another mosque may be live at the same time', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const other = await createMosque(ts, root.token, null, { name: 'Masjid Other' });
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token)).status, 201);
  assert.equal((await ts.http.post(`${API}/mosques/${other.id}/broadcasts`, { kind: 'azaan' }, root.token)).status, 201);
});

test('stopping a broadcast makes it stopped; stopping it again answers 200 unchanged; then a new one may start', async (t) => {
  const { ts, owner, mosque } = await world(t);
  const started = (await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'jummah' }, owner.token)).body;
  const stopped = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${started.id}/stop`, {}, owner.token);
  assert.equal(stopped.status, 200);
  assert.equal(stopped.body.id, started.id);
  assert.equal(stopped.body.status, 'stopped');
  assert.equal(stopped.body.stopped_by, owner.id);
  assert.match(stopped.body.stopped_at, /^\d{4}-\d\d-\d\dT/);
  assert.deepEqual(stopped.body.report, ZERO_REPORT);
  const again = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${started.id}/stop`, {}, owner.token);
  assert.equal(again.status, 200);
  assert.deepEqual(again.body, stopped.body);
  assert.deepEqual((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${started.id}`, owner.token)).body, stopped.body);
  const next = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token);
  assert.equal(next.status, 201);
  const list = await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token);
  assert.deepEqual(list.body.map((b: { id: string }) => b.id).sort(), [started.id, next.body.id].sort());
  assert.ok(Array.isArray(list.body));
});

test('an admin without can_trigger reads broadcasts but cannot start or stop one: 403, nothing changed', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  const live = (await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token)).body;
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${live.id}/stop`, {}, manager.token), 403, 'forbidden');
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${live.id}/stop`, {}, owner.token)).status, 200);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, manager.token), 403, 'forbidden');
  const list = await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, manager.token);
  assert.equal(list.status, 200);
  assert.deepEqual(list.body.map((b: { id: string; status: string }) => [b.id, b.status]), [[live.id, 'stopped']]);
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${live.id}`, manager.token)).status, 200);
});

test('broadcasts are hidden from members (403) and strangers (404); an unknown or foreign broadcast id is 404', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const other = await createMosque(ts, root.token, null, { name: 'Masjid Other' });
  const foreign = (await ts.http.post(`${API}/mosques/${other.id}/broadcasts`, { kind: 'azaan' }, root.token)).body;
  const live = (await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token)).body;
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  const stranger = await member(ts, 'stranger@example.com');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, amina.token), 403, 'forbidden');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, amina.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, stranger.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${live.id}/stop`, {}, stranger.token), 404, 'not_found');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/no-such-broadcast`, owner.token), 404, 'not_found');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${foreign.id}`, owner.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${foreign.id}/stop`, {}, owner.token), 404, 'not_found');
  assert.equal((await ts.http.get(`${API}/mosques/${other.id}/broadcasts/${foreign.id}`, root.token)).body.status, 'live');
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${live.id}`, owner.token)).body.status, 'live');
});

// ---- the console's test notification ----

test('a test notification reaches every push subscription of the caller, encrypted for it, and nobody else', async (t) => {
  const push = await startPushService(t);
  const ts = await startTestService(t, { logLevel: 'warn', pushNetwork: deliveringTo(push) });
  const amina = await member(ts, 'amina@example.com');
  const bilal = await member(ts, 'bilal@example.com');
  const phone = browserKeys();
  const laptop = browserKeys();
  for (const [who, path, keys] of [[amina, '/push/amina-phone', phone], [amina, '/push/amina-laptop', laptop], [bilal, '/push/bilal', browserKeys()]] as const) {
    const res = await ts.http.post(`${API}/me/push-subscriptions`, { endpoint: `${push.origin}${path}`, keys: keys.keys }, who.token);
    assert.equal(res.status, 201, JSON.stringify(res.body));
  }

  const res = await ts.http.post(`${API}/me/push-subscriptions/test`, undefined, amina.token);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.deepEqual(res.body, { queued: 2 });
  await waitFor('both of her pushes', () => push.received.length >= 2, 10_000);
  await settle(300);
  assert.deepEqual(push.received.map((r) => r.path).sort(), ['/push/amina-laptop', '/push/amina-phone'], 'Bilal gets nothing');
  for (const [path, keys] of [['/push/amina-phone', phone], ['/push/amina-laptop', laptop]] as const) {
    const payload = decryptPush(push.to(path)[0]!.body, keys) as Record<string, unknown>;
    assert.equal(payload.kind, 'test');
    assert.equal(payload.title, 'Minaret: test notification');
    assert.equal(typeof payload.body, 'string');
  }

  // Someone with no subscription queues nothing (and learns nothing about others').
  const none = await ts.http.post(`${API}/me/push-subscriptions/test`, undefined, (await member(ts, 'nosub@example.com')).token);
  assert.deepEqual([none.status, none.body], [202, { queued: 0 }]);
  assert.equal(push.received.length, 2);
});

test('test notifications are limited to 3 a minute per person, then 429 with Retry-After', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const amina = await member(ts, 'amina@example.com');
  const bilal = await member(ts, 'bilal@example.com');
  for (let i = 0; i < TEST_PUSHES_PER_MINUTE; i++) assert.equal((await ts.http.post(`${API}/me/push-subscriptions/test`, undefined, amina.token)).status, 202);
  const refused = await ts.http.post(`${API}/me/push-subscriptions/test`, undefined, amina.token);
  assertError(refused, 429, 'rate_limited');
  assert.ok(Number(refused.headers.get('retry-after')) >= 1);
  assert.equal((await ts.http.post(`${API}/me/push-subscriptions/test`, undefined, bilal.token)).status, 202, 'the limit is per person');
  assert.equal((await ts.http.post(`${API}/me/push-subscriptions/test`, undefined)).status, 401);
});
