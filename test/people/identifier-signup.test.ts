import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256, startTestService } from '../support/service.ts';
import { API, confirmAddress, createMosque, signInSuperadmin } from '../support/people.ts';
import { AUTH, assertError, assertTokenResponse } from '../support/api.ts';

const PASSWORD = 'correct horse battery staple';

// docs/api.md#identifiers: three emails that read as oa@example.com.

test('a fullwidth ｏａ@example.com is the same account as oa@example.com: signup with its password signs in as that user', async (t) => {
  const ts = await startTestService(t);
  const first = await ts.http.post(`${AUTH}/signup`, { email: 'oa@example.com', password_hash: sha256(PASSWORD) });
  const original = assertTokenResponse(first, 201, { email: 'oa@example.com', role: 'member' });
  const fullwidth = await ts.http.post(`${AUTH}/signup`, { email: 'ｏａ@example.com', password_hash: sha256(PASSWORD) });
  assertTokenResponse(fullwidth, 200, { email: 'oa@example.com', role: 'member', id: original.user.id });
  // A wrong password is answered as for a new address (docs/api.md, "Signup"): a new account claiming the same address.
  const wrong = await ts.http.post(`${AUTH}/signup`, { email: 'ｏａ@ｅｘａｍｐｌｅ．ｃｏｍ', password_hash: sha256('another password') });
  assertTokenResponse(wrong, 201, { email: 'oa@example.com', role: 'member' });
  assert.notEqual(wrong.body.user.id, original.user.id);
});

test('oa@ with a Cyrillic о, or with a zero-width space, is refused with 400 and creates no account', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  for (const [email, reason] of [['оa@example.com', /mix Latin, Greek, Cyrillic/], ['oa\u200b@example.com', /zero-width/]] as const) {
    const res = await ts.http.post(`${AUTH}/signup`, { email, password_hash: sha256(PASSWORD) });
    const body = assertError(res, 400, 'validation_failed');
    assert.equal(body.error.details[0].path, 'email');
    assert.match(body.error.details[0].message, reason);
  }
  const users = await ts.http.get(`${API}/users`, root.token);
  assert.deepEqual(users.body.map((u: { email: string }) => u.email), ['root@example.com']);
});

test('an all-Cyrillic оа@example.com is accepted, as another account than oa@example.com', async (t) => {
  const ts = await startTestService(t);
  const latin = await ts.http.post(`${AUTH}/signup`, { email: 'oa@example.com', password_hash: sha256(PASSWORD) });
  const cyrillic = await ts.http.post(`${AUTH}/signup`, { email: 'оа@example.com', password_hash: sha256(PASSWORD) });
  assertTokenResponse(cyrillic, 201, { email: 'оа@example.com', role: 'member' });
  assert.notEqual(cyrillic.body.user.id, latin.body.user.id);
});

test('+44 (0)20 7946 0123 and +442079460123 are one account, signed in by the hash of +442079460123', async (t) => {
  const ts = await startTestService(t);
  const first = await ts.http.post(`${AUTH}/signup`, { phone: '+44 (0)20 7946 0123', password_hash: sha256(PASSWORD) });
  assert.equal(first.status, 201);
  const again = await ts.http.post(`${AUTH}/signup`, { phone: '+442079460123', password_hash: sha256(PASSWORD) });
  assert.equal(again.status, 200);
  assert.equal(again.body.user.id, first.body.user.id);
  const login = await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('+442079460123'), password_hash: sha256(PASSWORD) });
  assert.equal(login.status, 200);
  assert.equal(login.body.user.id, first.body.user.id);
  const me = await ts.http.get(`${API}/me`, login.body.access_token);
  assert.equal(me.body.user.phone, '+442079460123');
});

test('a phone without its country code, or with letters, is refused with 400', async (t) => {
  const ts = await startTestService(t);
  for (const phone of ['020 7946 0123', '+44 20 7946 0123 ext. 5', '+44 12']) {
    const body = assertError(await ts.http.post(`${AUTH}/signup`, { phone }), 400, 'validation_failed');
    assert.equal(body.error.details[0].path, 'phone', phone);
  }
});

test('invites and user administration go through the same normalisers', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const byPhone = await ts.http.post(`${AUTH}/signup`, { phone: '+442079460123', password_hash: sha256(PASSWORD) });
  await confirmAddress(ts, byPhone.body.access_token, 'sms', '+442079460123');
  const mosque = await createMosque(ts, root.token, null);
  // An invite by WhatsApp to another spelling of the number reaches the same person.
  const invite = await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, whatsapp: '+44 (0)20 7946 0123' }, root.token);
  assert.equal(invite.status, 201, JSON.stringify(invite.body));
  assert.equal(invite.body.membership.user_id, byPhone.body.user.id);
  assert.equal(invite.body.invite.contact, '+442079460123');

  const created = await ts.http.post(`${API}/users`, { email: 'ＡＭＩＮＡ@example.com' }, root.token);
  assert.equal(created.status, 201);
  assert.equal(created.body.email, 'amina@example.com');
  assertError(await ts.http.post(`${API}/users`, { email: 'amina@example.com' }, root.token), 409, 'conflict');
  assertError(await ts.http.post(`${API}/users`, { email: 'ami\u00adna@example.com' }, root.token), 400, 'validation_failed');
  assertError(await ts.http.patch(`${API}/users/${created.body.id}`, { email: 'аmina@example.com' }, root.token), 400, 'validation_failed');
  const patched = await ts.http.patch(`${API}/users/${created.body.id}`, { phone: '+47 987 65 432' }, root.token);
  assert.equal(patched.status, 200);
  assert.equal(patched.body.phone, '+4798765432');
});
