import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { copiedWorld, startTestService, type TestService } from '../support/service.ts';
import { API, createMosque, joinMosque, makeAdmin, member, mosqueActivity, mosqueAdmins, ownMembership, setStatus, signInSuperadmin } from '../support/people.ts';
import { connectDevice, nextMessage, registerPlayer } from '../support/devices.ts';
import { assertError } from '../support/api.ts';

/** Mosques and their admins, with the owner rules of docs/decisions.md ("Ownership"). */

// The schedule fields of docs/schedule.md, "Setting a mosque's times".
const MOSQUE_KEYS = ['auto_approve_members', 'auto_start', 'azaan', 'created_at', 'id', 'iqamah', 'join_code', 'jumuah', 'latitude', 'longitude', 'name', 'prayer_times', 'stream_url', 'timezone'];
const JOIN_CODE = /^[ABCDEFGHJKMNPQRSTUVWXYZ23456789]{8}$/;

async function world(t: TestContext, extra: Record<string, unknown> = {}) {
  return withService(t, {}, extra);
}

async function build(ts: TestService, extra: Record<string, unknown>) {
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, extra);
  return { root, owner, mosque };
}

type World = Awaited<ReturnType<typeof build>> & { ts: TestService };
const worlds = new Map<string, (t: TestContext) => Promise<World>>();

/**
 * The same world on a service started with these settings: made once for each set of settings and mosque
 * fields, and copied for every test (copiedWorld), so each test still has it to itself.
 */
async function withService(t: TestContext, env: Record<string, string>, extra: Record<string, unknown> = {}): Promise<World> {
  const key = JSON.stringify([env, extra]);
  let made = worlds.get(key);
  if (!made) worlds.set(key, (made = copiedWorld((ts) => build(ts, extra), { env })));
  return made(t);
}

/** The mosque as the superadmin reads it. */
async function readMosque(ts: TestService, rootToken: string, id: string) {
  const res = await ts.http.get(`${API}/mosques/${id}`, rootToken);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

/** One admin row of the mosque as the superadmin reads it; undefined when there is none. */
async function adminRow(ts: TestService, rootToken: string, mosqueId: string, userId: string) {
  return (await mosqueAdmins(ts, rootToken, mosqueId)).find((a) => a.user_id === userId);
}

// ---- creating ----

test('the superadmin creates a mosque (201) with the contract\'s fields and defaults', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const res = await ts.http.post(`${API}/mosques`, { name: '  Masjid Al-Noor  ' }, root.token);
  assert.equal(res.status, 201);
  assert.deepEqual(Object.keys(res.body).sort(), MOSQUE_KEYS);
  assert.equal(res.body.name, 'Masjid Al-Noor');
  assert.equal(res.body.timezone, 'UTC');
  assert.equal(res.body.auto_approve_members, false);
  assert.equal(res.body.stream_url, null);
  assert.match(res.body.join_code, JOIN_CODE);
  assert.deepEqual(await readMosque(ts, root.token, res.body.id), res.body);
  assert.deepEqual(await mosqueAdmins(ts, root.token, res.body.id), []);
});

test('the owner named at creation gets an admin row with all three flags, shown in the admins list and in GET /me', async (t) => {
  const { ts, root, owner, mosque } = await world(t, { timezone: 'Europe/Oslo', stream_url: 'https://radio.example.org/live', auto_approve_members: true });
  assert.equal(mosque.auto_approve_members, true);
  const read = await readMosque(ts, root.token, mosque.id);
  assert.equal(read.timezone, 'Europe/Oslo');
  assert.equal(read.stream_url, 'https://radio.example.org/live');
  assert.deepEqual(await mosqueAdmins(ts, root.token, mosque.id), [
    { user_id: owner.id, email: 'owner@example.com', email_proven: true, phone_proven: false, is_owner: true, can_trigger: true, can_manage: true },
  ]);
  const me = await ts.http.get(`${API}/me`, owner.token);
  assert.deepEqual(me.body.admin_of, [{ mosque_id: mosque.id, is_owner: true, can_trigger: true, can_manage: true }]);
});

test('creating a mosque for an unknown owner answers 404 and creates nothing', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  assertError(await ts.http.post(`${API}/mosques`, { name: 'Ghost', owner_user_id: 'no-such-user' }, root.token), 404, 'not_found');
  assert.deepEqual((await ts.http.get(`${API}/mosques`, root.token)).body, []);
});

test('a member cannot create a mosque: 403, and none is created', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const amina = await member(ts, 'amina@example.com');
  assertError(await ts.http.post(`${API}/mosques`, { name: 'Mine', owner_user_id: amina.id }, amina.token), 403, 'forbidden');
  assert.deepEqual((await ts.http.get(`${API}/mosques`, root.token)).body, []);
});

test('creating a mosque with a bad name, time zone or stream_url answers 400 and creates nothing', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const bad = [
    {},
    { name: '' },
    { name: '   ' },
    { name: 42 },
    { name: 'X', timezone: 'Mars/Olympus' },
    { name: 'X', stream_url: 'ftp://radio.example.org/live' },
    { name: 'X', stream_url: 'not a url' },
    { name: 'X', auto_approve_members: 'yes' },
  ];
  for (const body of bad) {
    assertError(await ts.http.post(`${API}/mosques`, body, root.token), 400, 'validation_failed');
  }
  assert.deepEqual((await ts.http.get(`${API}/mosques`, root.token)).body, []);
});

// ---- listing and reading ----

test('GET /mosques lists all for the superadmin, only their own for others, none for a stranger', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const other = await createMosque(ts, root.token, null, { name: 'Masjid Other' });
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, other.id);
  const stranger = await member(ts, 'stranger@example.com');

  const all = await ts.http.get(`${API}/mosques`, root.token);
  assert.equal(all.status, 200);
  assert.deepEqual(all.body.map((m: { id: string }) => m.id).sort(), [mosque.id, other.id].sort());
  for (const m of all.body) assert.match(m.join_code, JOIN_CODE);

  const ownerList = await ts.http.get(`${API}/mosques`, owner.token);
  assert.deepEqual(ownerList.body.map((m: { id: string }) => m.id), [mosque.id]);
  assert.equal(ownerList.body[0].join_code, mosque.join_code, 'an admin sees the join code');

  const memberList = await ts.http.get(`${API}/mosques`, amina.token);
  assert.deepEqual(memberList.body.map((m: { id: string }) => m.id), [other.id]);
  assert.equal(memberList.body[0].join_code, null, 'a member sees join_code null');
  assert.deepEqual(Object.keys(memberList.body[0]).sort(), MOSQUE_KEYS);

  const strangerList = await ts.http.get(`${API}/mosques`, stranger.token);
  assert.equal(strangerList.status, 200);
  assert.deepEqual(strangerList.body, []);
});

test('GET /mosques/{id}: an admin reads it with its join code; a member gets 403; a stranger and an unknown id get 404', async (t) => {
  const { ts, owner, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  const stranger = await member(ts, 'stranger@example.com');
  const res = await ts.http.get(`${API}/mosques/${mosque.id}`, owner.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.join_code, mosque.join_code);
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}`, amina.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}`, stranger.token), 404, 'not_found');
  assertError(await ts.http.get(`${API}/mosques/no-such-mosque`, owner.token), 404, 'not_found');
});

// ---- updating ----

test('a manager updates the name, time zone, auto-approve and stream_url, and a read shows them', async (t) => {
  const { ts, root, mosque } = await withService(t, { STREAM_HTTP_HOSTS: 'icecast.example.org' });
  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  const res = await ts.http.patch(
    `${API}/mosques/${mosque.id}`,
    { name: 'Masjid An-Nur', timezone: 'Asia/Karachi', auto_approve_members: true, stream_url: 'http://icecast.example.org:8000/nur' },
    manager.token,
  );
  assert.equal(res.status, 200);
  const read = await readMosque(ts, root.token, mosque.id);
  assert.deepEqual(read, res.body);
  assert.equal(read.name, 'Masjid An-Nur');
  assert.equal(read.timezone, 'Asia/Karachi');
  assert.equal(read.auto_approve_members, true);
  assert.equal(read.stream_url, 'http://icecast.example.org:8000/nur');
  assert.equal(read.join_code, mosque.join_code);
  const cleared = await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: null }, manager.token);
  assert.equal(cleared.status, 200);
  assert.equal((await readMosque(ts, root.token, mosque.id)).stream_url, null);
});

test('an admin without can_manage changes no setting of the mosque: name, stream, auto-approve and schedule are all 403', async (t) => {
  const { ts, root, mosque } = await world(t, { stream_url: 'https://radio.example.org/live' });
  const plain = await member(ts, 'plain@example.com');
  await makeAdmin(ts, root.token, mosque.id, plain, { can_trigger: true });
  const before = await readMosque(ts, root.token, mosque.id);
  for (const body of [{ stream_url: 'https://elsewhere.example/x.mp3' }, { auto_approve_members: true }, { name: 'Taken' }, { latitude: 10, longitude: 10 }]) {
    assertError(await ts.http.patch(`${API}/mosques/${mosque.id}`, body, plain.token), 403, 'forbidden');
  }
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, plain.token), 403, 'forbidden');
  assert.deepEqual(await readMosque(ts, root.token, mosque.id), before);
});

test('a stream address must be https, or http only to a host in STREAM_HTTP_HOSTS', async (t) => {
  const { ts, root, owner, mosque } = await withService(t, { STREAM_HTTP_HOSTS: 'icecast.lan' });
  for (const url of ['http://elsewhere.example/x.mp3', 'ftp://icecast.lan/m', 'https://user:pw@radio.example.org/live']) {
    const res = await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: url }, owner.token);
    assertError(res, 400, 'validation_failed');
    assert.ok(res.body.error.details.some((d: { path: string }) => d.path === 'stream_url'), url);
  }
  assertError(await ts.http.post(`${API}/mosques`, { name: 'Plain', stream_url: 'http://elsewhere.example/x' }, root.token), 400, 'validation_failed');
  for (const url of ['https://radio.example.org/live', 'http://icecast.lan:8000/m', 'http://ICECAST.lan/m']) {
    assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: url }, owner.token)).status, 200, url);
  }
});

test('a PATCH with an unknown time zone or a non-http stream_url answers 400 and changes nothing', async (t) => {
  const { ts, root, owner, mosque } = await world(t, { stream_url: 'https://radio.example.org/live' });
  const before = await readMosque(ts, root.token, mosque.id);
  const bad = [
    { timezone: 'Mars/Olympus' },
    { timezone: '' },
    { stream_url: 'ftp://radio.example.org/live' },
    { stream_url: 'javascript:alert(1)' },
    { stream_url: 'radio.example.org/live' },
    { name: '' },
    { auto_approve_members: 1 },
    { name: 'Fine', timezone: 'Mars/Olympus' },
  ];
  for (const body of bad) {
    const res = assertError(await ts.http.patch(`${API}/mosques/${mosque.id}`, body, owner.token), 400, 'validation_failed');
    assert.ok(res.error.details.length > 0);
  }
  assert.deepEqual(await readMosque(ts, root.token, mosque.id), before);
});

test('a member who is not an admin cannot update the mosque: 403, nothing changed', async (t) => {
  const { ts, root, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  const before = await readMosque(ts, root.token, mosque.id);
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}`, { name: 'Hijacked', auto_approve_members: true }, amina.token), 403, 'forbidden');
  assert.deepEqual(await readMosque(ts, root.token, mosque.id), before);
});

// ---- deleting ----

test('the owner deletes the mosque (204): it is gone, with its admins and memberships', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}`, owner.token)).status, 204);
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}`, root.token), 404, 'not_found');
  assert.deepEqual((await ts.http.get(`${API}/mosques`, root.token)).body, []);
  assert.deepEqual((await ts.http.get(`${API}/me/memberships`, amina.token)).body, []);
  assert.deepEqual((await ts.http.get(`${API}/me`, owner.token)).body.admin_of, []);
});

// A member is refused (403), and a stranger is not told the mosque exists (404): docs/walkthrough.md, "3. The mosque and its members".
test('a member cannot delete the mosque (403) and a stranger cannot see it (404); it stays', async (t) => {
  const { ts, root, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}`, amina.token), 403, 'forbidden');
  const stranger = await member(ts, 'stranger@example.com');
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}`, stranger.token), 404, 'not_found');
  assert.equal((await readMosque(ts, root.token, mosque.id)).id, mosque.id);
  assert.equal((await mosqueAdmins(ts, root.token, mosque.id)).length, 1);
});

test('only the owner or a superadmin deletes a mosque: an admin, even a manager, gets 403 and the mosque stays', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true, can_trigger: true });
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}`, manager.token), 403, 'forbidden');
  assert.equal((await readMosque(ts, root.token, mosque.id)).id, mosque.id);
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}`, owner.token)).status, 204);
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}`, root.token), 404, 'not_found');
});

test('the superadmin deletes a mosque without a row (204)', async (t) => {
  const { ts, root, mosque } = await world(t);
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}`, root.token)).status, 204);
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}`, root.token), 404, 'not_found');
});

// ---- join code ----

test('a manager rotates the join code: a fresh 8-character code from the unambiguous alphabet', async (t) => {
  const { ts, root, mosque } = await world(t);
  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, manager.token);
  assert.equal(res.status, 200);
  assert.match(res.body.join_code, JOIN_CODE);
  assert.notEqual(res.body.join_code, mosque.join_code);
  assert.equal((await readMosque(ts, root.token, mosque.id)).join_code, res.body.join_code);
});

test('an admin without can_manage cannot rotate the join code: 403, the code stays', async (t) => {
  const { ts, root, mosque } = await world(t);
  const trigger = await member(ts, 'trigger@example.com');
  await makeAdmin(ts, root.token, mosque.id, trigger, { can_trigger: true });
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, trigger.token), 403, 'forbidden');
  assert.equal((await readMosque(ts, root.token, mosque.id)).join_code, mosque.join_code);
});

// ---- admins ----

test('a manager adds an admin (201) with the flags asked, false by default', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  const chen = await member(ts, 'chen@example.com');
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: bilal.id, can_trigger: true }, owner.token);
  assert.equal(res.status, 201);
  assert.deepEqual(res.body, { user_id: bilal.id, email: 'bilal@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: true, can_manage: false });
  const plain = await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: chen.id }, owner.token);
  assert.deepEqual(plain.body, { user_id: chen.id, email: 'chen@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: false, can_manage: false });
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, bilal.id), res.body);
  const me = await ts.http.get(`${API}/me`, bilal.token);
  assert.deepEqual(me.body.admin_of, [{ mosque_id: mosque.id, is_owner: false, can_trigger: true, can_manage: false }]);
});

test('adding an admin twice answers 409 conflict and keeps the first flags', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal, { can_trigger: true });
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: bilal.id, can_manage: true }, owner.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: owner.id }, owner.token), 409, 'conflict');
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, bilal.id), { user_id: bilal.id, email: 'bilal@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: true, can_manage: false });
  assert.equal((await mosqueAdmins(ts, root.token, mosque.id)).length, 2);
});

test('adding an unknown user as admin answers 404; a bad body answers 400; nothing is added', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: 'no-such-user' }, owner.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/admins`, {}, owner.token), 400, 'validation_failed');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: bilal.id, can_trigger: 'yes' }, owner.token), 400, 'validation_failed');
  assert.equal((await mosqueAdmins(ts, root.token, mosque.id)).length, 1);
});

test('an admin without can_manage cannot add, change or remove admins: 403, nothing changed', async (t) => {
  const { ts, root, mosque } = await world(t);
  const trigger = await member(ts, 'trigger@example.com');
  await makeAdmin(ts, root.token, mosque.id, trigger, { can_trigger: true });
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal);
  const chen = await member(ts, 'chen@example.com');
  const before = await mosqueAdmins(ts, root.token, mosque.id);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: chen.id }, trigger.token), 403, 'forbidden');
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { can_manage: true }, trigger.token), 403, 'forbidden');
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${trigger.id}`, { can_manage: true }, trigger.token), 403, 'forbidden');
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, trigger.token), 403, 'forbidden');
  assert.deepEqual(await mosqueAdmins(ts, root.token, mosque.id), before);
});

test('a manager updates an admin\'s flags, and the admins list shows them', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal);
  const res = await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { can_trigger: true, can_manage: true }, owner.token);
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { user_id: bilal.id, email: 'bilal@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: true, can_manage: true });
  const partial = await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { can_manage: false }, owner.token);
  assert.deepEqual(partial.body, { user_id: bilal.id, email: 'bilal@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: true, can_manage: false });
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, bilal.id), partial.body);
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { can_trigger: 'no' }, owner.token), 400, 'validation_failed');
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/no-such-user`, { can_trigger: true }, owner.token), 404, 'not_found');
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, bilal.id), partial.body);
});

test('taking can_trigger away applies to the very next request with the same token', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal, { can_trigger: true });
  const started = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, bilal.token);
  assert.equal(started.status, 201);
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${started.body.id}/stop`, {}, bilal.token)).status, 200);
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { can_trigger: false }, owner.token)).status, 200);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, bilal.token), 403, 'forbidden');
  const list = await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, bilal.token);
  assert.equal(list.status, 200, 'still an admin: may read');
  assert.equal(list.body.length, 1);
});

test('granting can_manage applies to the very next request, and removing the admin row ends admin access at once', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, bilal.token), 403, 'forbidden');
  await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { can_manage: true }, owner.token);
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, bilal.token)).status, 200);
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, owner.token)).status, 204);
  // Admins are members (docs/decisions.md, "Owners and admins are members") and stay members when the row goes: a member, no longer an admin, gets 403.
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}`, bilal.token), 403, 'forbidden');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, bilal.token), 403, 'forbidden');
  assert.deepEqual((await ts.http.get(`${API}/me`, bilal.token)).body.admin_of, []);
});

test('a manager removes an admin (204): gone from the list and from their GET /me', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal, { can_manage: true });
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, owner.token)).status, 204);
  assert.equal(await adminRow(ts, root.token, mosque.id, bilal.id), undefined);
  assert.deepEqual((await ts.http.get(`${API}/me`, bilal.token)).body.admin_of, []);
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, owner.token), 404, 'not_found');
});

// ---- the owner ----

test('only the superadmin lowers the owner\'s flags: a manager gets 403 and the owner keeps them', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  for (const body of [{ can_trigger: false }, { can_manage: false }, { can_trigger: false, can_manage: false }]) {
    assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${owner.id}`, body, manager.token), 403, 'forbidden');
  }
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${owner.id}`, { can_trigger: false }, owner.token), 403, 'forbidden');
  const full = { user_id: owner.id, email: 'owner@example.com', email_proven: true, phone_proven: false, is_owner: true, can_trigger: true, can_manage: true };
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, owner.id), full);
  const lowered = await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${owner.id}`, { can_trigger: false }, root.token);
  assert.equal(lowered.status, 200);
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, owner.id), { ...full, can_trigger: false });
});

test('the owner row cannot lose is_owner: 409 conflict for the owner and the superadmin, and it keeps it', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${owner.id}`, { is_owner: false }, root.token), 409, 'conflict');
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${owner.id}`, { is_owner: false }, owner.token), 409, 'conflict');
  assert.equal((await adminRow(ts, root.token, mosque.id, owner.id))?.is_owner, true);
});

test('the owner row cannot be deleted: 409 for the superadmin, 403 for a manager, and the owner stays', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${owner.id}`, root.token), 409, 'conflict');
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${owner.id}`, manager.token), 403, 'forbidden');
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${owner.id}`, owner.token), 403, 'forbidden');
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, owner.id), { user_id: owner.id, email: 'owner@example.com', email_proven: true, phone_proven: false, is_owner: true, can_trigger: true, can_manage: true });
});

test('the owner hands ownership to another admin: the new owner gets all three flags, the old one keeps the others', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal);
  const res = await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { is_owner: true }, owner.token);
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { user_id: bilal.id, email: 'bilal@example.com', email_proven: true, phone_proven: false, is_owner: true, can_trigger: true, can_manage: true });
  const admins = await mosqueAdmins(ts, root.token, mosque.id);
  assert.deepEqual(admins.filter((a) => a.is_owner).map((a) => a.user_id), [bilal.id], 'exactly one owner');
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, owner.id), { user_id: owner.id, email: 'owner@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: true, can_manage: true });
  // The owner's rights moved with the flag.
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}`, bilal.token)).status, 204);
});

test('a manager who is not the owner cannot hand over ownership: 403, the owner stays', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  assertError(await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${manager.id}`, { is_owner: true }, manager.token), 403, 'forbidden');
  const admins = await mosqueAdmins(ts, root.token, mosque.id);
  assert.deepEqual(admins.filter((a) => a.is_owner).map((a) => a.user_id), [owner.id]);
  assert.deepEqual(await adminRow(ts, root.token, mosque.id, manager.id), { user_id: manager.id, email: 'manager@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: false, can_manage: true });
});

test('the superadmin hands over ownership, and a mosque created without an owner gets one', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal);
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { is_owner: true }, root.token)).status, 200);
  const admins = await mosqueAdmins(ts, root.token, mosque.id);
  assert.deepEqual(admins.filter((a) => a.is_owner).map((a) => a.user_id), [bilal.id]);
  assert.equal((await adminRow(ts, root.token, mosque.id, owner.id))?.is_owner, false);

  const orphan = await createMosque(ts, root.token, null, { name: 'Orphan' });
  await makeAdmin(ts, root.token, orphan.id, owner);
  assert.equal((await ts.http.patch(`${API}/mosques/${orphan.id}/admins/${owner.id}`, { is_owner: true }, root.token)).status, 200);
  assert.deepEqual(await mosqueAdmins(ts, root.token, orphan.id), [
    { user_id: owner.id, email: 'owner@example.com', email_proven: true, phone_proven: false, is_owner: true, can_trigger: true, can_manage: true },
  ]);
});

test('the admins list is for admins: a member gets 403, a stranger 404', async (t) => {
  const { ts, mosque } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  const stranger = await member(ts, 'stranger@example.com');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/admins`, amina.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/admins`, stranger.token), 404, 'not_found');
});

// ---- owners and admins are members ----

/** docs/decisions.md, "Owners and admins are members": a mosque's owner and admins are its members, so their own players are entitled like anyone's. */

test('creating a mosque enrols its owner as an approved member', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  const membership = await ownMembership(ts, owner, mosque.id);
  assert.equal(membership?.status, 'approved');
  const kinds = (await mosqueActivity(ts, root.token, mosque.id)).map((e: { kind: string }) => e.kind);
  assert.ok(kinds.includes('membership.admin_admitted'), kinds.join(','));
});

test("the owner's own player is entitled at once: its first config carries the stream and a lease", async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, { stream_url: 'https://radio.example.org/live' });
  const player = await registerPlayer(ts, owner, mosque.id);
  const client = await connectDevice(t, player.credentials);
  const config = nextMessage(client, `devices/${player.device.id}/config`, 3000);
  client.subscribe(`devices/${player.device.id}/config`, { qos: 1 });
  const { body } = await config;
  assert.equal(body.stream_url, 'https://radio.example.org/live');
  assert.equal(typeof body.lease?.token, 'string');
});

test('adding an admin enrols them as approved; a pending membership is approved', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  const pendingOne = await member(ts, 'pending@example.com');
  const joined = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, pendingOne.token);
  assert.equal(joined.body.status, 'pending');
  const fresh = await member(ts, 'fresh@example.com');
  await makeAdmin(ts, root.token, mosque.id, pendingOne);
  await makeAdmin(ts, root.token, mosque.id, fresh);
  assert.equal((await ownMembership(ts, pendingOne, mosque.id))?.status, 'approved');
  assert.equal((await ownMembership(ts, fresh, mosque.id))?.status, 'approved');
});

test('adding a banned user as admin leaves the ban in place: only a status change lifts it', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  const person = await member(ts, 'banned@example.com');
  const joined = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, person.token);
  await setStatus(ts, root.token, joined.body.id, 'banned');
  await makeAdmin(ts, root.token, mosque.id, person);
  assert.equal((await ownMembership(ts, person, mosque.id))?.status, 'banned');
});

test('removing an admin row leaves the membership as it is', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  const person = await member(ts, 'helper@example.com');
  await makeAdmin(ts, root.token, mosque.id, person);
  const removed = await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${person.id}`, root.token);
  assert.equal(removed.status, 204, JSON.stringify(removed.body));
  assert.equal((await ownMembership(ts, person, mosque.id))?.status, 'approved');
});
