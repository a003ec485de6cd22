import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256, signupMember, startTestService, type TestService } from '../../support/service.ts';
import { API, confirmAddress, createMosque, joinMosque, member, signInSuperadmin, type Person } from '../../support/people.ts';
import { closed, connectDevice, registerPlayer } from '../../support/devices.ts';
import { storeOf } from '../../support/database.ts';
import { assertError } from '../../support/api.ts';

/**
 * docs/api.md, "Addresses: claims and proof": an account whose every address is unproven holds nothing, so a
 * proof has nothing to hand over and no one to wipe. Each test is an attacker's (or an honest member's) steps
 * over HTTP and MQTT, from outside, against a running service.
 */

const AUTH = `${API}/auth`;
const PASSWORD = 'correct horse battery staple';
const PUSH_KEYS = { p256dh: 'BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM', auth: 'tBHItJI5svbpez7KI4CCXg' };
const CONSOLE = (ts: TestService) => ({ origin: new URL(ts.url).origin, 'x-minaret-console': '1' });

async function lastMessage(ts: TestService, purpose: string, to: string) {
  await ts.service.notifier.idle();
  const message = ts.messages.filter((m) => m.purpose === purpose && m.to === to).at(-1);
  assert.ok(message, `no ${purpose} message went to ${to}`);
  return message;
}

async function signInWithCode(ts: TestService, address: string) {
  assert.equal((await ts.http.post(`${AUTH}/login-code`, { identifier_hash: sha256(address) })).status, 202);
  const { code } = await lastMessage(ts, 'login_code', address);
  const res = await ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: sha256(address), code });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body as { access_token: string; user: { id: string } };
}

async function pushSubscriptionsOf(ts: TestService, userId: string): Promise<string[]> {
  const { store, close } = await storeOf(ts);
  try {
    return (await store.selectFrom('push_subscriptions').select('endpoint').where('user_id', '=', userId).execute()).map((r) => r.endpoint);
  } finally {
    await close();
  }
}

async function openConsoleSession(ts: TestService, token: string): Promise<string> {
  const res = await ts.http.request('POST', `${AUTH}/session`, { token, headers: CONSOLE(ts) });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.headers.getSetCookie().find((c) => c.startsWith('minaret_console='))!.split(';')[0]!;
}

test('an account emptied by an email change holds nothing, and the victim who proves the address gets none of it', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const imam = await member(ts, 'imam@example.com');
  const mosque = await createMosque(ts, root.token, imam, { auto_approve_members: true });
  // A mosque whose ownership waits on the victim's address.
  const waiting = await ts.http.post(`${API}/mosques`, { name: 'Masjid Al-Huda', owner_email: 'victim@example.com' }, root.token);
  assert.equal(waiting.status, 201);

  // The attacker proves his own address, sets a password (signup did), joins, adds a player and a push subscription.
  const attacker = await member(ts, 'attacker@example.com');
  await joinMosque(ts, attacker, mosque.id);
  const player = await registerPlayer(ts, attacker, mosque.id);
  const device = await connectDevice(t, player.credentials);
  const endpoint = 'https://push.example.test/attacker-browser';
  assert.equal((await ts.http.post(`${API}/me/push-subscriptions`, { endpoint, keys: PUSH_KEYS }, attacker.token)).status, 201);
  const cookie = await openConsoleSession(ts, (await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('attacker@example.com'), password_hash: sha256(PASSWORD) })).body.access_token);

  // He moves his account onto the victim's address: it has no proven address left.
  const moved = await ts.http.patch(`${API}/me`, { email: 'victim@example.com', current_password_hash: sha256(PASSWORD) }, attacker.token);
  assert.equal(moved.status, 200);
  assertError(await ts.http.get(`${API}/me`, attacker.token), 401, 'unauthorized');
  assertError(await ts.http.request('POST', `${AUTH}/session/token`, { headers: { ...CONSOLE(ts), cookie } }), 401, 'unauthorized');
  await closed(device, 2000);
  assert.deepEqual(await pushSubscriptionsOf(ts, attacker.id), []);
  const emptied = (await ts.http.get(`${API}/me`, moved.body.access_token)).body;
  assert.deepEqual([emptied.user.email_proven, emptied.memberships, emptied.admin_of], [false, [], []]);
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, moved.body.access_token), 403, 'address_unproven');
  assertError(await ts.http.post(`${API}/me/push-subscriptions`, { endpoint, keys: PUSH_KEYS }, moved.body.access_token), 403, 'address_unproven');

  // The victim signs in with a code sent to her address, as an invitation tells her to.
  const victim = await signInWithCode(ts, 'victim@example.com');
  assertError(await ts.http.get(`${API}/me`, moved.body.access_token), 401, 'unauthorized');
  assertError(await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('victim@example.com'), password_hash: sha256(PASSWORD) }), 401, 'invalid_credentials');
  const mine = (await ts.http.get(`${API}/me`, victim.access_token)).body;
  assert.deepEqual(mine.admin_of, [{ mosque_id: waiting.body.id, is_owner: true, can_trigger: true, can_manage: true }]);
  assert.deepEqual(mine.memberships.map((m: { mosque_id: string }) => m.mosque_id), [waiting.body.id]);
  assert.deepEqual((await ts.http.get(`${API}/devices`, victim.access_token)).body, []);
  assert.deepEqual(await pushSubscriptionsOf(ts, victim.user.id), []);
  // The mosque's setting is hers alone: the attacker's tokens change nothing.
  assertError(await ts.http.patch(`${API}/mosques/${waiting.body.id}`, { stream_url: 'https://evil.example/stream' }, moved.body.access_token), 401, 'unauthorized');
});

test('removing the only proven phone empties the account: its tokens end and its memberships go', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const imam = await member(ts, 'imam@example.com');
  const mosque = await createMosque(ts, root.token, imam, { auto_approve_members: true });
  const signed = await ts.http.post(`${AUTH}/signup`, { email: 'unconfirmed@example.com', phone: '+442079460123', password_hash: sha256(PASSWORD) });
  const person: Person = { token: signed.body.access_token, id: signed.body.user.id, email: 'unconfirmed@example.com' };
  await confirmAddress(ts, person.token, 'sms', '+442079460123');
  assert.equal((await joinMosque(ts, person, mosque.id)).status, 'approved');
  const removed = await ts.http.patch(`${API}/me`, { phone: null, current_password_hash: sha256(PASSWORD) }, person.token);
  assert.equal(removed.status, 200);
  assertError(await ts.http.get(`${API}/me`, person.token), 401, 'unauthorized');
  const after = (await ts.http.get(`${API}/me`, removed.body.access_token)).body;
  assert.deepEqual([after.user.phone, after.memberships], [null, []]);
  const feed = (await ts.http.get(`${API}/mosques/${mosque.id}/activity`, imam.token)).body;
  assert.ok(feed.some((e: { kind: string; data: { reason?: string } }) => e.kind === 'membership.removed' && e.data.reason === 'address_unproven'));
});

test('claims are ordered by when they were made: an older account claiming an address today queues behind yesterday\'s', async (t) => {
  const ts = await startTestService(t);
  const old = await member(ts, 'old@example.com', { unproven: true });
  const yesterday = await signupMember(ts.http, 'newcomer@example.com', 'newcomer password');
  // The older account claims the address today (it has nothing proven, so it needs no password).
  assert.equal((await ts.http.patch(`${API}/me`, { email: 'newcomer@example.com' }, old.token)).status, 200);
  // The newcomer still signs in with her password, and a code sent to the address reaches her account.
  const login = await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('newcomer@example.com'), password_hash: sha256('newcomer password') });
  assert.equal(login.status, 200);
  assert.equal(login.body.user.id, yesterday.user.id);
  const byCode = await signInWithCode(ts, 'newcomer@example.com');
  assert.equal(byCode.user.id, yesterday.user.id);
});

test('signup then login, and the same signup twice, answer alike for a free and a held address', async (t) => {
  const ts = await startTestService(t);
  await member(ts, 'held@example.com');
  const answers: Record<string, number[]> = {};
  for (const address of ['held@example.com', 'free@example.com']) {
    const password = sha256(`random ${address}`);
    const first = await ts.http.post(`${AUTH}/signup`, { email: address, password_hash: password });
    const login = await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256(address), password_hash: password });
    const again = await ts.http.post(`${AUTH}/signup`, { email: address, password_hash: password });
    assert.equal(login.body.user?.id, first.body.user.id, `${address}: the login reaches the account the signup made`);
    answers[address] = [first.status, login.status, again.status];
  }
  assert.deepEqual(answers['held@example.com'], answers['free@example.com']);
  assert.deepEqual(answers['free@example.com'], [201, 200, 200]);
});

test('a bearer token alone cannot move a proven account: the current password or a code to the proven address, and the old address is told', async (t) => {
  const ts = await startTestService(t);
  const amina = await member(ts, 'amina@example.com');
  assertError(await ts.http.patch(`${API}/me`, { email: 'thief@example.com' }, amina.token), 403, 'forbidden');
  assertError(await ts.http.patch(`${API}/me`, { email: 'thief@example.com', current_password_hash: sha256('wrong') }, amina.token), 401, 'invalid_credentials');
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).body.user.email, 'amina@example.com');
  assert.ok(!ts.messages.some((m) => m.purpose === 'address_changed'));
  const moved = await ts.http.patch(`${API}/me`, { email: 'amina2@example.com', current_password_hash: sha256(PASSWORD) }, amina.token);
  assert.equal(moved.status, 200);
  const told = await lastMessage(ts, 'address_changed', 'amina@example.com');
  assert.doesNotMatch(told.text, /amina2/);

  // An account without a password (made by an invitation, signed in with codes) shows a code sent to its proven address.
  const root = await signInSuperadmin(ts);
  const imam = await member(ts, 'imam@example.com');
  const mosque = await createMosque(ts, root.token, imam);
  assert.equal((await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'bilal@example.com' }, imam.token)).status, 201);
  const bilal = await signInWithCode(ts, 'bilal@example.com');
  assertError(await ts.http.patch(`${API}/me`, { email: 'x@example.com' }, bilal.access_token), 403, 'forbidden');
  assert.equal((await ts.http.post(`${API}/me/addresses/confirm`, { channel: 'email' }, bilal.access_token)).status, 202);
  const { code } = await lastMessage(ts, 'confirm_address', 'bilal@example.com');
  const wrong = code === '000000' ? '111111' : '000000';
  assertError(await ts.http.patch(`${API}/me`, { phone: '+442079460123', code: wrong }, bilal.access_token), 401, 'invalid_code');
  const added = await ts.http.patch(`${API}/me`, { phone: '+442079460123', code }, bilal.access_token);
  assert.equal(added.status, 200, JSON.stringify(added.body));
  assert.equal((await ts.http.get(`${API}/me`, added.body.access_token)).body.user.phone, '+442079460123');
});

test('an honest member who signs in with a code after forgetting the password keeps everything', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const imam = await member(ts, 'imam@example.com');
  const mosque = await createMosque(ts, root.token, imam, { auto_approve_members: true });
  const amina = await member(ts, 'amina@example.com'); // signs up with a password and confirms, as the console leads
  await joinMosque(ts, amina, mosque.id);
  const player = await registerPlayer(ts, amina, mosque.id);
  const byCode = await signInWithCode(ts, 'amina@example.com');
  assert.equal(byCode.user.id, amina.id);
  const me = (await ts.http.get(`${API}/me`, byCode.access_token)).body;
  assert.deepEqual([me.user.has_password, me.memberships.length], [true, 1]);
  assert.equal((await ts.http.get(`${API}/devices/${player.device.id}`, byCode.access_token)).status, 200);
  assert.equal((await ts.http.get(`${API}/me`, amina.token)).status, 200, 'her other phone stays signed in');
});

test('an account that has proven nothing cannot be named by id: enrolment, admin and ownership answer 409 and give nothing', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const imam = await member(ts, 'imam@example.com');
  const mosque = await createMosque(ts, root.token, imam);
  const claim = await member(ts, 'claim@example.com', { unproven: true });
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: claim.id }, imam.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: claim.id, can_trigger: true }, imam.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/mosques`, { name: 'Masjid An-Nur', owner_user_id: claim.id }, root.token), 409, 'conflict');
  const me = (await ts.http.get(`${API}/me`, claim.token)).body;
  assert.deepEqual([me.memberships, me.admin_of], [[], []]);
});
