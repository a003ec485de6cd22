import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256, startTestService, type TestService } from '../support/service.ts';
import { API, createMosque, joinMosque, makeAdmin, member, mosqueAdmins, mosqueMemberships, signInSuperadmin } from '../support/people.ts';
import { assertError, emailId } from '../support/api.ts';

/** User administration by the superadmin, gated for the whole route. */

const USER_KEYS = ['created_at', 'email', 'email_is_placeholder', 'email_proven', 'has_password', 'id', 'phone', 'phone_proven', 'role'];

async function world(t: Parameters<typeof startTestService>[0]) {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  return { ts, root };
}

async function listUsers(ts: TestService, rootToken: string, query = '') {
  const res = await ts.http.get(`${API}/users${query}`, rootToken);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body as Array<{ id: string; email: string; role: string }>;
}

test('every /users route refuses a member with 403 and changes nothing', async (t) => {
  const { ts, root } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  const before = await listUsers(ts, root.token);
  assertError(await ts.http.get(`${API}/users`, amina.token), 403, 'forbidden');
  assertError(await ts.http.post(`${API}/users`, { email: 'new@example.com' }, amina.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/users/${amina.id}`, amina.token), 403, 'forbidden');
  assertError(await ts.http.patch(`${API}/users/${amina.id}`, { role: 'superadmin' }, amina.token), 403, 'forbidden');
  assertError(await ts.http.delete(`${API}/users/${root.id}`, amina.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/users/no-such-user`, amina.token), 403, 'forbidden');
  assert.deepEqual(await listUsers(ts, root.token), before);
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).body.user.role, 'member');
});

test('the user list is a bare array, paged by limit and offset without overlap', async (t) => {
  const { ts, root } = await world(t);
  for (const name of ['a', 'b', 'c', 'd', 'e']) await member(ts, `${name}@example.com`);
  const all = await listUsers(ts, root.token);
  assert.ok(Array.isArray(all));
  assert.equal(all.length, 6);
  for (const u of all) assert.deepEqual(Object.keys(u).sort(), USER_KEYS);
  assert.ok(all.some((u) => u.id === root.id && u.role === 'superadmin'));

  const pages = [];
  for (let offset = 0; offset < 8; offset += 2) pages.push(await listUsers(ts, root.token, `?limit=2&offset=${offset}`));
  assert.deepEqual(pages.map((p) => p.length), [2, 2, 2, 0]);
  const ids = pages.flat().map((u) => u.id);
  assert.equal(new Set(ids).size, 6, 'no user on two pages');
  assert.deepEqual(ids, all.map((u) => u.id), 'pages follow the order of the full list');
  assert.equal((await listUsers(ts, root.token, '?limit=1')).length, 1);
});

test('a bad limit or offset answers 400 validation_failed', async (t) => {
  const { ts, root } = await world(t);
  for (const q of ['?limit=0', '?limit=201', '?limit=x', '?limit=-1', '?offset=-1', '?offset=two']) {
    assertError(await ts.http.get(`${API}/users${q}`, root.token), 400, 'validation_failed');
  }
});

test('the superadmin creates a user (201) who can then sign in with the password', async (t) => {
  const { ts, root } = await world(t);
  const res = await ts.http.post(`${API}/users`, { email: ' New.Person@Example.com ', password_hash: sha256('a long password') }, root.token);
  assert.equal(res.status, 201);
  assert.deepEqual(Object.keys(res.body).sort(), USER_KEYS);
  assert.equal(res.body.email, 'new.person@example.com');
  assert.equal(res.body.role, 'member');
  assert.equal(res.body.has_password, true);
  assert.equal(res.body.email_is_placeholder, false);
  const read = await ts.http.get(`${API}/users/${res.body.id}`, root.token);
  assert.deepEqual(read.body, res.body);
  const login = await ts.http.post(`${API}/auth/login`, { identifier_hash: emailId('new.person@example.com'), password_hash: sha256('a long password') });
  assert.equal(login.status, 200);
  assert.equal(login.body.user.id, res.body.id);
});

test('a phone-only user is created with the placeholder email', async (t) => {
  const { ts, root } = await world(t);
  const res = await ts.http.post(`${API}/users`, { phone: '+47 123 45 678' }, root.token);
  assert.equal(res.status, 201);
  assert.equal(res.body.phone, '+4712345678');
  assert.equal(res.body.email, `phone-${sha256('+4712345678').slice(0, 16)}@phone.invalid`);
  assert.equal(res.body.email_is_placeholder, true);
  assert.equal(res.body.has_password, false);
});

test('creating a user whose email or phone is taken answers 409 conflict and adds nobody', async (t) => {
  const { ts, root } = await world(t);
  await member(ts, 'amina@example.com');
  const phoned = await ts.http.post(`${API}/users`, { phone: '+4712345678' }, root.token);
  assert.equal(phoned.status, 201);
  const before = await listUsers(ts, root.token);
  assertError(await ts.http.post(`${API}/users`, { email: 'amina@example.com' }, root.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/users`, { email: 'AMINA@example.com ' }, root.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/users`, { email: 'other@example.com', phone: '+4712345678' }, root.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/users`, { email: 'root@example.com' }, root.token), 409, 'conflict');
  assert.deepEqual(await listUsers(ts, root.token), before);
});

test('creating a user with neither email nor phone, or a bad field, answers 400 and adds nobody', async (t) => {
  const { ts, root } = await world(t);
  const before = await listUsers(ts, root.token);
  for (const body of [{}, { role: 'member' }, { email: 'not-an-email' }, { phone: '12345' }, { email: 'x@example.com', role: 'owner' }, { email: 'x@example.com', password_hash: 'short' }]) {
    assertError(await ts.http.post(`${API}/users`, body, root.token), 400, 'validation_failed');
  }
  assert.deepEqual(await listUsers(ts, root.token), before);
});

test('reading, updating or deleting an unknown user id answers 404', async (t) => {
  const { ts, root } = await world(t);
  const before = await listUsers(ts, root.token);
  assertError(await ts.http.get(`${API}/users/no-such-user`, root.token), 404, 'not_found');
  assertError(await ts.http.patch(`${API}/users/no-such-user`, { role: 'superadmin' }, root.token), 404, 'not_found');
  assertError(await ts.http.delete(`${API}/users/no-such-user`, root.token), 404, 'not_found');
  assert.deepEqual(await listUsers(ts, root.token), before);
});

test('the superadmin updates a user\'s email and phone, and a read shows them', async (t) => {
  const { ts, root } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  const res = await ts.http.patch(`${API}/users/${amina.id}`, { email: 'amina.k@example.com', phone: '+4798765432' }, root.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.email, 'amina.k@example.com');
  assert.equal(res.body.phone, '+4798765432');
  assert.deepEqual((await ts.http.get(`${API}/users/${amina.id}`, root.token)).body, res.body);
});

test('updating a user to an email another user holds answers 409 and changes nothing', async (t) => {
  const { ts, root } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  await member(ts, 'bilal@example.com');
  const before = (await ts.http.get(`${API}/users/${amina.id}`, root.token)).body;
  assertError(await ts.http.patch(`${API}/users/${amina.id}`, { email: 'bilal@example.com' }, root.token), 409, 'conflict');
  assertError(await ts.http.patch(`${API}/users/${amina.id}`, { email: 'bilal' }, root.token), 400, 'validation_failed');
  assertError(await ts.http.patch(`${API}/users/${amina.id}`, { role: 'owner' }, root.token), 400, 'validation_failed');
  assert.deepEqual((await ts.http.get(`${API}/users/${amina.id}`, root.token)).body, before);
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).status, 200, 'a refused change revokes nothing');
});

test('a role change to superadmin raises the token version: the user\'s old token answers 401 at once', async (t) => {
  const { ts, root } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).status, 200);
  const res = await ts.http.patch(`${API}/users/${amina.id}`, { role: 'superadmin' }, root.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.role, 'superadmin');
  assertError(await ts.http.get(`${API}/me`, amina.token), 401, 'unauthorized');
  assertError(await ts.http.get(`${API}/users`, amina.token), 401, 'unauthorized');
  assert.equal((await ts.http.get(`${API}/users/${amina.id}`, root.token)).body.role, 'superadmin');
});

test('a change that is not a role, email or password change leaves the user\'s token working', async (t) => {
  const { ts, root } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  assert.equal((await ts.http.patch(`${API}/users/${amina.id}`, { role: 'member', phone: '+4711122233' }, root.token)).status, 200);
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).status, 200);
});

test('a superadmin\'s change of a user\'s email ends that user\'s tokens, and the new email is a claim until proven', async (t) => {
  const { ts, root } = await world(t);
  const amina = await member(ts, 'amina@example.com');
  const res = await ts.http.patch(`${API}/users/${amina.id}`, { email: 'amina.new@example.com' }, root.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.email_proven, false);
  assertError(await ts.http.get(`${API}/me`, amina.token), 401, 'unauthorized');
});

test('deleting a user (204) revokes their tokens at once and removes their memberships and admin rows', async (t) => {
  const { ts, root } = await world(t);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  const amina = await member(ts, 'amina@example.com');
  await joinMosque(ts, amina, mosque.id);
  await makeAdmin(ts, root.token, mosque.id, amina, { can_trigger: true });
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).status, 200);
  // The owner and admins are approved members (docs/decisions.md, "Owners and admins are members"): amina's pending membership was admitted.
  assert.deepEqual(
    (await mosqueMemberships(ts, root.token, mosque.id)).map((m) => [m.user_id, m.status]).sort(),
    [[owner.id, 'approved'], [amina.id, 'approved']].sort(),
  );

  assert.equal((await ts.http.delete(`${API}/users/${amina.id}`, root.token)).status, 204);
  assertError(await ts.http.get(`${API}/me`, amina.token), 401, 'unauthorized');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, amina.token), 401, 'unauthorized');
  assertError(await ts.http.get(`${API}/users/${amina.id}`, root.token), 404, 'not_found');
  // Amina's membership is gone; the owner's own stays.
  assert.deepEqual((await mosqueMemberships(ts, root.token, mosque.id)).map((m) => m.user_id), [owner.id]);
  assert.deepEqual((await mosqueAdmins(ts, root.token, mosque.id)).map((a) => a.user_id), [owner.id]);
  assert.ok(!(await listUsers(ts, root.token)).some((u) => u.id === amina.id));
  assertError(await ts.http.delete(`${API}/users/${amina.id}`, root.token), 404, 'not_found');
  // The address is free again.
  assert.equal((await ts.http.post(`${API}/users`, { email: 'amina@example.com' }, root.token)).status, 201);
});

test('deleting a user who owns a mosque answers 409 conflict and keeps the user, the token and the ownership', async (t) => {
  const { ts, root } = await world(t);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  assertError(await ts.http.delete(`${API}/users/${owner.id}`, root.token), 409, 'conflict');
  assert.equal((await ts.http.get(`${API}/users/${owner.id}`, root.token)).status, 200);
  assert.equal((await ts.http.get(`${API}/me`, owner.token)).status, 200);
  assert.equal((await mosqueAdmins(ts, root.token, mosque.id)).find((a) => a.user_id === owner.id)?.is_owner, true);
  // After handing the mosque over, the delete goes through.
  const bilal = await member(ts, 'bilal@example.com');
  await makeAdmin(ts, root.token, mosque.id, bilal);
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${bilal.id}`, { is_owner: true }, owner.token)).status, 200);
  assert.equal((await ts.http.delete(`${API}/users/${owner.id}`, root.token)).status, 204);
});
