import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createManualClock, sha256, signupMember, startTestService, type TestService } from '../support/service.ts';
import { createSuperadmin } from '../support/superadmin.ts';
import { AUTH, assertError, assertTokenResponse, emailId, lastSent, otherCode, sent } from '../support/api.ts';

/** Asks for a login code and returns the code that went out. */
async function requestCode(ts: TestService, identifierHash: string, channel?: 'email' | 'sms'): Promise<string> {
  const before = (await sent(ts, 'login_code')).length;
  const res = await ts.http.post(`${AUTH}/login-code`, channel ? { identifier_hash: identifierHash, channel } : { identifier_hash: identifierHash });
  assert.equal(res.status, 202);
  const after = await sent(ts, 'login_code');
  assert.equal(after.length, before + 1, 'expected one new login code message');
  return after.at(-1)!.code!;
}

const verify = (ts: TestService, identifierHash: string, code: string) =>
  ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: identifierHash, code });

test('login-code answers 202 accepted for an existing and an unknown account alike', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'amina@example.com');
  const known = await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('amina@example.com') });
  const unknown = await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('nobody@example.com') });
  assert.equal(known.status, 202);
  assert.deepEqual(known.body, { status: 'accepted' });
  assert.equal(unknown.status, known.status);
  assert.deepEqual(unknown.body, known.body);
  const codes = await sent(ts, 'login_code');
  assert.equal(codes.length, 1, 'only the existing account gets a code');
  assert.equal(codes[0]!.to, 'amina@example.com');
});

test('a login code goes out by email as 6 digits to an email account', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'amina@example.com');
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('amina@example.com') });
  const message = await lastSent(ts, 'login_code');
  assert.equal(message.channel, 'email');
  assert.equal(message.to, 'amina@example.com');
  assert.match(message.code!, /^\d{6}$/);
  assert.ok(message.text.includes(message.code!), 'the text carries the code');
});

test('a phone-only account gets its login code by sms', async (t) => {
  const ts = await startTestService(t);
  assert.equal((await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678' })).status, 201);
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: sha256('+4712345678') });
  const message = await lastSent(ts, 'login_code');
  assert.equal(message.channel, 'sms');
  assert.equal(message.to, '+4712345678');
  assert.match(message.code!, /^\d{6}$/);
});

test('a phone-only account asking for the email channel still gets the code by sms', async (t) => {
  const ts = await startTestService(t);
  assert.equal((await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678' })).status, 201);
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: sha256('+4712345678'), channel: 'email' });
  const message = await lastSent(ts, 'login_code');
  assert.equal(message.channel, 'sms');
  assert.equal(message.to, '+4712345678');
});

test('channel sms sends the code to the phone of an account that has an email and a phone', async (t) => {
  const ts = await startTestService(t);
  assert.equal((await ts.http.post(`${AUTH}/signup`, { email: 'bilal@example.com', phone: '+4798765432' })).status, 201);
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('bilal@example.com'), channel: 'sms' });
  const bySms = await lastSent(ts, 'login_code');
  assert.equal(bySms.channel, 'sms');
  assert.equal(bySms.to, '+4798765432');
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('bilal@example.com') });
  const byEmail = await lastSent(ts, 'login_code');
  assert.equal(byEmail.channel, 'email');
  assert.equal(byEmail.to, 'bilal@example.com');
});

test('no login code is sent for a superadmin account, though the answer is the same 202', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, 'root@example.com', 'root password');
  const res = await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('root@example.com') });
  assert.equal(res.status, 202);
  assert.deepEqual(res.body, { status: 'accepted' });
  assert.deepEqual(await sent(ts, 'login_code'), []);
});

test('login-code with a malformed body answers 400 validation_failed', async (t) => {
  const ts = await startTestService(t);
  assertError(await ts.http.post(`${AUTH}/login-code`, {}), 400, 'validation_failed');
  assertError(await ts.http.post(`${AUTH}/login-code`, { identifier_hash: 'abc' }), 400, 'validation_failed');
  assertError(await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('a@example.com'), channel: 'pigeon' }), 400, 'validation_failed');
});

test('verifying the right login code answers 200 with a token response that works', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'chadia@example.com');
  const code = await requestCode(ts, emailId('chadia@example.com'));
  const res = await verify(ts, emailId('chadia@example.com'), code);
  const body = assertTokenResponse(res, 200, { email: 'chadia@example.com', role: 'member', id: signed.user.id });
  assert.equal((await ts.http.get('/api/v1/me', body.access_token)).status, 200);
});

test('a passwordless phone account signs in with a code sent by sms', async (t) => {
  const ts = await startTestService(t);
  const signup = await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678' });
  const code = await requestCode(ts, sha256('+4712345678'));
  assertTokenResponse(await verify(ts, sha256('+4712345678'), code), 200, { email: signup.body.user.email, role: 'member', id: signup.body.user.id });
});

test('a login code works only once', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'dawud@example.com');
  const code = await requestCode(ts, emailId('dawud@example.com'));
  assert.equal((await verify(ts, emailId('dawud@example.com'), code)).status, 200);
  assertError(await verify(ts, emailId('dawud@example.com'), code), 401, 'invalid_code');
});

test('a login code still works just before 15 minutes', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await signupMember(ts.http, 'eman@example.com');
  const code = await requestCode(ts, emailId('eman@example.com'));
  clock.advance(15 * 60 * 1000 - 1000);
  assert.equal((await verify(ts, emailId('eman@example.com'), code)).status, 200);
});

test('a login code sent twice at once signs in only once', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'dawud@example.com');
  const code = await requestCode(ts, emailId('dawud@example.com'));
  const results = await Promise.all(Array.from({ length: 8 }, () => verify(ts, emailId('dawud@example.com'), code)));
  assert.deepEqual(results.map((r) => r.status).sort(), [200, 401, 401, 401, 401, 401, 401, 401]);
});

test('a login code expires after 15 minutes', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await signupMember(ts.http, 'eman@example.com');
  const code = await requestCode(ts, emailId('eman@example.com'));
  clock.advance(15 * 60 * 1000 + 1000);
  assertError(await verify(ts, emailId('eman@example.com'), code), 401, 'invalid_code');
});

test('a wrong login code answers 401 invalid_code', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'farah@example.com');
  const code = await requestCode(ts, emailId('farah@example.com'));
  const res = await verify(ts, emailId('farah@example.com'), otherCode(code));
  assertError(res, 401, 'invalid_code');
  assert.equal(res.body.access_token, undefined);
});

test('verifying a code for an unknown account answers the same 401 invalid_code', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'farah@example.com');
  const code = await requestCode(ts, emailId('farah@example.com'));
  const wrong = await verify(ts, emailId('farah@example.com'), otherCode(code));
  const unknown = await verify(ts, emailId('nobody@example.com'), code);
  assertError(unknown, 401, 'invalid_code');
  assert.deepEqual(unknown.body, wrong.body);
});

test("one account's login code does not sign in another account", async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'ghada@example.com');
  await signupMember(ts.http, 'hana@example.com');
  const ghadaCode = await requestCode(ts, emailId('ghada@example.com'));
  let hanaCode = await requestCode(ts, emailId('hana@example.com'));
  while (hanaCode === ghadaCode) hanaCode = await requestCode(ts, emailId('hana@example.com'));
  assertError(await verify(ts, emailId('hana@example.com'), ghadaCode), 401, 'invalid_code');
  assert.equal((await verify(ts, emailId('hana@example.com'), hanaCode)).status, 200);
});

test('a superadmin cannot sign in with a login code', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, 'root@example.com', 'root password');
  for (const code of ['000000', '123456', '999999']) {
    assertError(await verify(ts, emailId('root@example.com'), code), 401, 'invalid_code');
  }
});

test('four wrong login codes leave the code usable', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'idris@example.com');
  const code = await requestCode(ts, emailId('idris@example.com'));
  for (let i = 0; i < 4; i++) assertError(await verify(ts, emailId('idris@example.com'), otherCode(code)), 401, 'invalid_code');
  assert.equal((await verify(ts, emailId('idris@example.com'), code)).status, 200);
});

test('a wrong login code five times burns the code', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'idris@example.com');
  const code = await requestCode(ts, emailId('idris@example.com'));
  for (let i = 0; i < 5; i++) assertError(await verify(ts, emailId('idris@example.com'), otherCode(code)), 401, 'invalid_code');
  assertError(await verify(ts, emailId('idris@example.com'), code), 401, 'invalid_code');
});

test('a new login code request replaces the old code', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'jamal@example.com');
  const old = await requestCode(ts, emailId('jamal@example.com'));
  let fresh = await requestCode(ts, emailId('jamal@example.com'));
  // One chance in a million that both are equal; then the test would prove nothing.
  while (fresh === old) fresh = await requestCode(ts, emailId('jamal@example.com'));
  assertError(await verify(ts, emailId('jamal@example.com'), old), 401, 'invalid_code');
  assert.equal((await verify(ts, emailId('jamal@example.com'), fresh)).status, 200);
});

test('a new login code request gives back all five tries', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'jamal@example.com');
  const first = await requestCode(ts, emailId('jamal@example.com'));
  for (let i = 0; i < 4; i++) await verify(ts, emailId('jamal@example.com'), otherCode(first));
  const second = await requestCode(ts, emailId('jamal@example.com'));
  for (let i = 0; i < 4; i++) assertError(await verify(ts, emailId('jamal@example.com'), otherCode(second)), 401, 'invalid_code');
  assert.equal((await verify(ts, emailId('jamal@example.com'), second)).status, 200);
});

test('login-code/verify with a code that is not 6 digits answers 400 validation_failed', async (t) => {
  const ts = await startTestService(t);
  for (const code of ['12345', '1234567', 'abcdef', 123456]) {
    assertError(await ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: emailId('a@example.com'), code }), 400, 'validation_failed');
  }
});
