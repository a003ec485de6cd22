import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256, signupMember, startTestService, type TestService } from '../../support/service.ts';
import { API, confirmAddress, createMosque, joinMosque, member, mosqueActivity, mosqueMemberships, setStatus, signInSuperadmin, type Person } from '../../support/people.ts';
import { closed, connectDevice, registerPlayer } from '../../support/devices.ts';
import { assertError } from '../../support/api.ts';

/**
 * docs/api.md, "Addresses: claims and proof": an email or phone counts only once its owner proved it. What is
 * addressed to it waits until then, and the first proof takes back what unproven holders gained under it.
 */

const AUTH = `${API}/auth`;
const PASSWORD = 'correct horse battery staple';

async function stranger(ts: TestService, email: string): Promise<Person> {
  const res = await signupMember(ts.http, email, 'stranger password');
  return { token: res.access_token, id: res.user.id, email: res.user.email };
}

/** The last message of a purpose that went to `to`, once the notifier has sent everything. */
async function lastMessage(ts: TestService, purpose: string, to: string) {
  await ts.service.notifier.idle();
  const message = ts.messages.filter((m) => m.purpose === purpose && m.to === to).at(-1);
  assert.ok(message, `no ${purpose} message went to ${to}`);
  return message;
}

/** Resets the password through the link sent to the address: the owner of the address proves it. */
async function resetThroughAddress(ts: TestService, email: string, password: string) {
  assert.equal((await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: sha256(email) })).status, 202);
  const { token } = await lastMessage(ts, 'password_reset', email);
  assert.equal((await ts.http.post(`${AUTH}/reset-password`, { token, password_hash: sha256(password) })).status, 200);
  const login = await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256(email), password_hash: sha256(password) });
  assert.equal(login.status, 200, JSON.stringify(login.body));
  return login.body as { access_token: string; user: { id: string } };
}

test('a pre-claimed email gains nothing: invitation and ownership wait, and the owner proving it takes the account afresh', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true });

  // The stranger signs up first as the imam: an account that has proven nothing holds nothing.
  const squatter = await stranger(ts, 'imam@masjid.example');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, squatter.token), 403, 'address_unproven');
  assertError(await ts.http.post(`${API}/devices`, { kind: 'stream_player', name: 'Kitchen', mosque_id: mosque.id }, squatter.token), 403, 'address_unproven');

  // The admin invites the imam's address with auto_approve: nothing lands on the stranger's account.
  const invite = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'imam@masjid.example', auto_approve: true }, owner.token);
  assert.equal(invite.status, 201);
  assert.equal(invite.body.membership, null);
  assert.equal(invite.body.invite.waiting_for_proof, true);
  // A superadmin names the imam owner of a new mosque by email: it waits too, so the stranger owns nothing.
  const second = await ts.http.post(`${API}/mosques`, { name: 'Masjid Al-Huda', owner_email: 'imam@masjid.example' }, root.token);
  assert.equal(second.status, 201);
  assert.deepEqual((await ts.http.get(`${API}/mosques/${second.body.id}/admins`, root.token)).body, []);
  assertError(await ts.http.get(`${API}/mosques/${second.body.id}`, squatter.token), 404, 'not_found');

  // The real imam resets the password through the address, which proves it: the account is handed over afresh.
  const imam = await resetThroughAddress(ts, 'imam@masjid.example', PASSWORD);
  assertError(await ts.http.get(`${API}/me`, squatter.token), 401, 'unauthorized');
  // The stranger's password went with the takeover: only the owner's works.
  assertError(await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('imam@masjid.example'), password_hash: sha256('stranger password') }), 401, 'invalid_credentials');

  // The invited membership is the imam's, and so is the second mosque.
  const me = await ts.http.get(`${API}/me`, imam.access_token);
  assert.equal(me.body.user.email_proven, true);
  assert.deepEqual(me.body.memberships.map((m: { mosque_id: string; status: string }) => [m.mosque_id, m.status]).sort(),
    [[mosque.id, 'approved'], [second.body.id, 'approved']].sort());
  assert.deepEqual(me.body.admin_of, [{ mosque_id: second.body.id, is_owner: true, can_trigger: true, can_manage: true }]);
});

test('two unproven claims of one address: the first to prove wins, the other loses the claim and its tokens', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const first = await stranger(ts, 'dana@example.com');
  // The second signup with a wrong password is a second account claiming the same address (201, same shape).
  const second = await ts.http.post(`${AUTH}/signup`, { email: 'dana@example.com', password_hash: sha256(PASSWORD) });
  assert.equal(second.status, 201);
  assert.notEqual(second.body.user.id, first.id);

  // The second proves it while signed in; the first loses the address.
  const proven = await confirmAddress(ts, second.body.access_token, 'email', 'dana@example.com');
  assert.equal(proven.email_proven, true);
  assertError(await ts.http.get(`${API}/me`, first.token), 401, 'unauthorized');
  const lost = await ts.http.get(`${API}/users/${first.id}`, root.token);
  assert.match(lost.body.email, /@claim\.invalid$/);
  // The address now reaches the winner.
  const login = await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('dana@example.com'), password_hash: sha256(PASSWORD) });
  assert.equal(login.body.user.id, second.body.user.id);
});

test('a claim on an address another account proved can never be proven: the right code answers 409 and nothing moves', async (t) => {
  const ts = await startTestService(t);
  const holder = await member(ts, 'holder@example.com');
  const claim = await ts.http.post(`${AUTH}/signup`, { email: 'holder@example.com', password_hash: sha256('someone else') });
  assert.equal(claim.status, 201);
  assert.equal((await ts.http.post(`${API}/me/addresses/confirm`, { channel: 'email' }, claim.body.access_token)).status, 202);
  const { code } = await lastMessage(ts, 'confirm_address', 'holder@example.com');
  assertError(await ts.http.post(`${API}/me/addresses/verify`, { code }, claim.body.access_token), 409, 'conflict');
  assert.equal((await ts.http.get(`${API}/me`, holder.token)).body.user.email_proven, true);
});

test('an unproven account is told to confirm first; confirming while signed in lets it join; a wrong code proves nothing', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true });
  const amina = await member(ts, 'amina@example.com', { unproven: true });
  const refused = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token);
  assertError(refused, 403, 'address_unproven');
  assert.match(refused.body.error.message, /confirm/i);
  assert.equal((await ts.http.post(`${API}/me/addresses/confirm`, { channel: 'email' }, amina.token)).status, 202);
  const { code } = await lastMessage(ts, 'confirm_address', 'amina@example.com');
  const wrong = code === '000000' ? '111111' : '000000';
  assertError(await ts.http.post(`${API}/me/addresses/verify`, { code: wrong }, amina.token), 401, 'invalid_code');
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).body.user.email_proven, false);
  const verified = await ts.http.post(`${API}/me/addresses/verify`, { code }, amina.token);
  assert.equal(verified.status, 200);
  assert.equal(verified.body.email_proven, true);
  assert.equal((await joinMosque(ts, amina, mosque.id)).status, 'approved');
  const player = await registerPlayer(ts, amina, mosque.id);
  assert.equal((await ts.http.get(`${API}/devices/${player.device.id}`, amina.token)).status, 200);
});

test('an admin named by an address nobody has proven waits (202), and becomes an admin when the address is proven', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  const waiting = await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { email: 'Bilal@Example.com', can_trigger: true }, owner.token);
  assert.equal(waiting.status, 202);
  assert.deepEqual(waiting.body, { status: 'accepted', email: 'bilal@example.com', can_trigger: true, can_manage: false });
  await ts.service.notifier.idle(); // the grant is written after the answer
  assert.deepEqual((await ts.http.get(`${API}/mosques/${mosque.id}/admins`, owner.token)).body.map((a: { email: string }) => a.email), ['owner@example.com']);
  const bilal = await member(ts, 'bilal@example.com');
  const admins = (await ts.http.get(`${API}/mosques/${mosque.id}/admins`, owner.token)).body;
  assert.deepEqual(admins.find((a: { user_id: string }) => a.user_id === bilal.id), { user_id: bilal.id, email: 'bilal@example.com', email_proven: true, phone_proven: false, is_owner: false, can_trigger: true, can_manage: false });
  // A proven address gets the row just after the same answer.
  const chen = await member(ts, 'chen@example.com');
  const direct = await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { email: 'chen@example.com' }, owner.token);
  assert.equal(direct.status, 202);
  await ts.service.notifier.idle();
  assert.ok((await ts.http.get(`${API}/mosques/${mosque.id}/admins`, owner.token)).body.some((a: { user_id: string }) => a.user_id === chen.id));
});

test('a code sign-in to an unproven account starts it afresh: the password goes and earlier tokens end', async (t) => {
  const ts = await startTestService(t);
  const squatter = await stranger(ts, 'imam@masjid.example');
  assert.equal((await ts.http.post(`${AUTH}/login-code`, { identifier_hash: sha256('imam@masjid.example') })).status, 202);
  const { code } = await lastMessage(ts, 'login_code', 'imam@masjid.example');
  const login = await ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: sha256('imam@masjid.example'), code });
  assert.equal(login.status, 200);
  const me = (await ts.http.get(`${API}/me`, login.body.access_token)).body;
  assert.deepEqual([me.user.email_proven, me.user.has_password, me.memberships.length], [true, false, 0]);
  assertError(await ts.http.get(`${API}/me`, squatter.token), 401, 'unauthorized');
  assertError(await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('imam@masjid.example'), password_hash: sha256('stranger password') }), 401, 'invalid_credentials');
});

test('binding a player to a mosque takes a place there: a stranger gets 404, a pending member may, a banned one gets 403', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  const outsider = await member(ts, 'outsider@example.com');
  const body = { kind: 'stream_player', name: 'OFFICIAL: call +47 12345678', mosque_id: mosque.id };
  assertError(await ts.http.post(`${API}/devices`, body, outsider.token), 404, 'not_found');
  const loose = await ts.http.post(`${API}/devices`, { kind: 'stream_player', name: 'Kitchen' }, outsider.token);
  assert.equal(loose.status, 201);
  assertError(await ts.http.patch(`${API}/devices/${loose.body.device.id}`, { mosque_id: mosque.id }, outsider.token), 404, 'not_found');
  assert.deepEqual((await ts.http.get(`${API}/devices?mosque_id=${mosque.id}`, owner.token)).body, []);
  assert.ok(!(await mosqueActivity(ts, owner.token, mosque.id)).some((e: { kind: string }) => e.kind.startsWith('device.')));

  const pending = await joinMosque(ts, outsider, mosque.id);
  assert.equal(pending.status, 'pending');
  assert.equal((await ts.http.post(`${API}/devices`, body, outsider.token)).status, 201);
  await setStatus(ts, owner.token, pending.id, 'banned');
  assertError(await ts.http.patch(`${API}/devices/${loose.body.device.id}`, { mosque_id: mosque.id }, outsider.token), 403, 'forbidden');
});

test('a member an admin removed rejoins as pending even where auto_approve_members is set; a ban stays a ban', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true });
  const amina = await member(ts, 'amina@example.com');
  const first = await joinMosque(ts, amina, mosque.id);
  assert.equal(first.status, 'approved');
  assert.equal((await ts.http.delete(`${API}/memberships/${first.id}`, owner.token)).status, 204);
  assert.equal((await joinMosque(ts, amina, mosque.id)).status, 'pending');
  const rotated = await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, owner.token);
  assert.equal((await ts.http.post(`${API}/join`, { code: rotated.body.join_code }, amina.token)).body.status, 'pending');
  // Someone who left by themselves is not "removed": they come back as the mosque says.
  const bilal = await member(ts, 'bilal@example.com');
  const joined = await joinMosque(ts, bilal, mosque.id);
  assert.equal((await ts.http.delete(`${API}/memberships/${joined.id}`, bilal.token)).status, 204);
  assert.equal((await joinMosque(ts, bilal, mosque.id)).status, 'approved');
  await setStatus(ts, owner.token, (await joinMosque(ts, bilal, mosque.id)).id, 'banned');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, bilal.token), 403, 'membership_banned');
});

test('PATCH /me: a new email is a claim, every older token stops, the answer carries a working one', async (t) => {
  const ts = await startTestService(t);
  const amina = await member(ts, 'amina@example.com');
  const res = await ts.http.patch(`${API}/me`, { email: 'Amina.New@Example.com', current_password_hash: sha256(PASSWORD) }, amina.token);
  assert.equal(res.status, 200);
  assert.equal(res.body.user.email, 'amina.new@example.com');
  assertError(await ts.http.get(`${API}/me`, amina.token), 401, 'unauthorized');
  const me = await ts.http.get(`${API}/me`, res.body.access_token);
  assert.deepEqual([me.body.user.email, me.body.user.email_proven], ['amina.new@example.com', false]);
  // The same answer whether or not another account holds the new address (an unproven account needs no password).
  await member(ts, 'taken@example.com');
  const taken = await ts.http.patch(`${API}/me`, { email: 'taken@example.com' }, res.body.access_token);
  assert.equal(taken.status, 200);
  assert.deepEqual(Object.keys(taken.body).sort(), Object.keys(res.body).sort());
});
