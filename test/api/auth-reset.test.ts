import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createManualClock, sha256, signupMember, startTestService, type TestService } from '../support/service.ts';
import { AUTH, assertError, assertTokenResponse, emailId, lastSent, sent } from '../support/api.ts';

const OLD = 'old password, long enough';
const NEW = 'new password, longer still';

/** Asks for a password reset and returns the token that went out. */
async function requestReset(ts: TestService, identifierHash: string): Promise<string> {
  const before = (await sent(ts, 'password_reset')).length;
  const res = await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: identifierHash });
  assert.equal(res.status, 202);
  const after = await sent(ts, 'password_reset');
  assert.equal(after.length, before + 1, 'expected one new reset message');
  return after.at(-1)!.token!;
}

const reset = (ts: TestService, token: string, password: string) =>
  ts.http.post(`${AUTH}/reset-password`, { token, password_hash: sha256(password) });

const login = (ts: TestService, email: string, password: string) =>
  ts.http.post(`${AUTH}/login`, { identifier_hash: emailId(email), password_hash: sha256(password) });

test('forgot-password answers 202 accepted whether or not the account exists', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'amina@example.com', OLD);
  const known = await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('amina@example.com') });
  const unknown = await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('nobody@example.com') });
  assert.equal(known.status, 202);
  assert.deepEqual(known.body, { status: 'accepted' });
  assert.equal(unknown.status, 202);
  assert.deepEqual(unknown.body, known.body);
});

test('a reset token is delivered only when the account exists', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'amina@example.com', OLD);
  await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('nobody@example.com') });
  assert.deepEqual(await sent(ts, 'password_reset'), []);
  await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('amina@example.com') });
  const message = await lastSent(ts, 'password_reset');
  assert.equal(message.channel, 'email');
  assert.equal(message.to, 'amina@example.com');
  assert.equal(typeof message.token, 'string');
  assert.ok(message.token!.length >= 32, 'a reset token carries enough randomness');
  assert.ok(message.text.includes(message.token!));
  assert.equal((await sent(ts, 'password_reset')).length, 1);
});

test('a phone-only account gets its reset token by sms', async (t) => {
  const ts = await startTestService(t);
  assert.equal((await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678' })).status, 201);
  await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: sha256('+4712345678') });
  const message = await lastSent(ts, 'password_reset');
  assert.equal(message.channel, 'sms');
  assert.equal(message.to, '+4712345678');
});

test('reset-password answers 200 password_reset; the new password works and the old one does not', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'bilal@example.com', OLD);
  const token = await requestReset(ts, emailId('bilal@example.com'));
  const res = await reset(ts, token, NEW);
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { status: 'password_reset' });
  assertTokenResponse(await login(ts, 'bilal@example.com', NEW), 200, { email: 'bilal@example.com', role: 'member', id: signed.user.id });
  assertError(await login(ts, 'bilal@example.com', OLD), 401, 'invalid_credentials');
});

test('reset-password gives a passwordless account its first password', async (t) => {
  const ts = await startTestService(t);
  assert.equal((await ts.http.post(`${AUTH}/signup`, { email: 'codeonly@example.com' })).status, 201);
  assertError(await login(ts, 'codeonly@example.com', NEW), 401, 'invalid_credentials');
  const token = await requestReset(ts, emailId('codeonly@example.com'));
  assert.equal((await reset(ts, token, NEW)).status, 200);
  assert.equal((await login(ts, 'codeonly@example.com', NEW)).status, 200);
});

test('a reset token works only once', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'chadia@example.com', OLD);
  const token = await requestReset(ts, emailId('chadia@example.com'));
  assert.equal((await reset(ts, token, NEW)).status, 200);
  assertError(await reset(ts, token, 'a third password entirely'), 400, 'invalid_token');
  // The second attempt changed nothing.
  assert.equal((await login(ts, 'chadia@example.com', NEW)).status, 200);
});

test('a reset token redeemed twice at once sets one password only', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'chadia@example.com', OLD);
  const token = await requestReset(ts, emailId('chadia@example.com'));
  const [a, b] = await Promise.all([reset(ts, token, 'first racer password'), reset(ts, token, 'second racer password')]);
  assert.deepEqual([a.status, b.status].sort(), [200, 400]);
  const winner = a.status === 200 ? 'first racer password' : 'second racer password';
  const loser = a.status === 200 ? 'second racer password' : 'first racer password';
  assert.equal((await login(ts, 'chadia@example.com', winner)).status, 200);
  assertError(await login(ts, 'chadia@example.com', loser), 401, 'invalid_credentials');
});

test('a reset token still works just before PASSWORD_RESET_TTL_HOURS', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock, env: { PASSWORD_RESET_TTL_HOURS: '2' } });
  await signupMember(ts.http, 'dawud@example.com', OLD);
  const token = await requestReset(ts, emailId('dawud@example.com'));
  clock.advance(2 * 3600 * 1000 - 1000);
  assert.equal((await reset(ts, token, NEW)).status, 200);
});

test('a reset token expires after PASSWORD_RESET_TTL_HOURS', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock, env: { PASSWORD_RESET_TTL_HOURS: '2' } });
  await signupMember(ts.http, 'dawud@example.com', OLD);
  const token = await requestReset(ts, emailId('dawud@example.com'));
  clock.advance(2 * 3600 * 1000 + 1000);
  assertError(await reset(ts, token, NEW), 400, 'invalid_token');
  assert.equal((await login(ts, 'dawud@example.com', OLD)).status, 200, 'the password did not change');
});

test('an unknown reset token answers 400 invalid_token', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'eman@example.com', OLD);
  await requestReset(ts, emailId('eman@example.com'));
  const res = await reset(ts, 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', NEW);
  assertError(res, 400, 'invalid_token');
  assert.equal((await login(ts, 'eman@example.com', OLD)).status, 200);
});

test('a password reset revokes older access tokens at once', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'farah@example.com', OLD);
  const viaLogin = (await login(ts, 'farah@example.com', OLD)).body.access_token as string;
  assert.equal((await ts.http.get('/api/v1/me', signed.access_token)).status, 200);
  assert.equal((await ts.http.get('/api/v1/me', viaLogin)).status, 200);

  const token = await requestReset(ts, emailId('farah@example.com'));
  assert.equal((await reset(ts, token, NEW)).status, 200);

  assertError(await ts.http.get('/api/v1/me', signed.access_token), 401, 'unauthorized');
  assertError(await ts.http.get('/api/v1/me', viaLogin), 401, 'unauthorized');
  const fresh = await login(ts, 'farah@example.com', NEW);
  assert.equal(fresh.status, 200);
  assert.equal((await ts.http.get('/api/v1/me', fresh.body.access_token)).status, 200);
});

test('reset-password with a malformed body answers 400 validation_failed', async (t) => {
  const ts = await startTestService(t);
  assertError(await ts.http.post(`${AUTH}/reset-password`, { token: 'x' }), 400, 'validation_failed');
  assertError(await ts.http.post(`${AUTH}/reset-password`, { token: '', password_hash: sha256(NEW) }), 400, 'validation_failed');
  assertError(await ts.http.post(`${AUTH}/reset-password`, { token: 'x', password_hash: 'short' }), 400, 'validation_failed');
});
