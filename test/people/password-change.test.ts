import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FRESH_SIGN_IN_SECONDS } from '../../src/people/sessions.ts';
import { AUTH, assertError, assertTokenResponse, emailId, lastSent } from '../support/api.ts';
import { createManualClock, sha256, startTestService, type TestService } from '../support/service.ts';

// docs/api.md "Changing the password": POST /me/password.

const PASSWORD = '/api/v1/me/password';
const OLD = 'correct horse battery staple';
const NEW = 'a brand new passphrase';

async function signup(ts: TestService, email: string, password: string | null = OLD) {
  const res = await ts.http.post(`${AUTH}/signup`, { email, ...(password !== null && { password_hash: sha256(password) }) });
  assert.equal(res.status, 201);
  return res.body as { access_token: string; user: { id: string; email: string } };
}

const login = (ts: TestService, email: string, password: string) => ts.http.post(`${AUTH}/login`, { identifier_hash: emailId(email), password_hash: sha256(password) });
const me = (ts: TestService, token: string) => ts.http.get('/api/v1/me', token);

test('the right current password changes it: the answer is a fresh token response, and every older token stops working', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const first = await signup(ts, 'amina@pw.test');
  const second = (await login(ts, 'amina@pw.test', OLD)).body.access_token as string;

  const res = await ts.http.post(PASSWORD, { current_password_hash: sha256(OLD), new_password_hash: sha256(NEW) }, first.access_token);
  const fresh = assertTokenResponse(res, 200, { email: 'amina@pw.test', role: 'member', id: first.user.id });
  assert.match(res.headers.get('cache-control') ?? '', /no-store/, 'an answer carrying a token is never cached');

  assertError(await me(ts, first.access_token), 401, 'unauthorized');
  assertError(await me(ts, second), 401, 'unauthorized');
  assert.equal((await me(ts, fresh.access_token)).status, 200, 'the caller stays signed in');
  assert.equal((await me(ts, fresh.access_token)).body.user.has_password, true);
  assertError(await login(ts, 'amina@pw.test', OLD), 401, 'invalid_credentials');
  assert.equal((await login(ts, 'amina@pw.test', NEW)).status, 200);
});

test('a wrong current password answers 401 invalid_credentials and changes nothing; past the hourly guess budget, 429 even for the right one', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock, env: { AUTH_MAX_WRONG_GUESSES_PER_HOUR: '3' } });
  const { access_token: token } = await signup(ts, 'bilal@pw.test');

  for (let i = 0; i < 3; i++) {
    assertError(await ts.http.post(PASSWORD, { current_password_hash: sha256(`guess ${i}`), new_password_hash: sha256(NEW) }, token), 401, 'invalid_credentials');
  }
  assert.equal((await me(ts, token)).status, 200, 'a refused change leaves the token working');
  assertError(await login(ts, 'bilal@pw.test', NEW), 401, 'invalid_credentials');

  const locked = await ts.http.post(PASSWORD, { current_password_hash: sha256(OLD), new_password_hash: sha256(NEW) }, token);
  assertError(locked, 429, 'rate_limited');
  const wait = Number(locked.headers.get('retry-after'));
  assert.ok(wait > 0 && wait <= 3600, `Retry-After ${wait}`);
  assert.equal((await login(ts, 'bilal@pw.test', OLD)).status, 200, 'the locked try changed nothing');

  clock.advance(3601 * 1000);
  assert.equal((await ts.http.post(PASSWORD, { current_password_hash: sha256(OLD), new_password_hash: sha256(NEW) }, token)).status, 200);
});

test(`an account without a password sets its first one without current_password_hash only within ${FRESH_SIGN_IN_SECONDS / 60} minutes of signing in`, async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const { access_token: stale } = await signup(ts, 'code-only@pw.test', null);
  assert.equal((await me(ts, stale)).body.user.has_password, false);

  clock.advance((FRESH_SIGN_IN_SECONDS + 1) * 1000);
  const refused = assertError(await ts.http.post(PASSWORD, { new_password_hash: sha256(NEW) }, stale), 403, 'forbidden');
  assert.match(refused.error.message, /10 minutes/);
  assertError(await login(ts, 'code-only@pw.test', NEW), 401, 'invalid_credentials');

  // A sign-in code proves the mailbox now: its token is fresh.
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('code-only@pw.test') });
  const { code } = await lastSent(ts, 'login_code');
  const signedIn = await ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: emailId('code-only@pw.test'), code });
  assert.equal(signedIn.status, 200);
  clock.advance((FRESH_SIGN_IN_SECONDS - 1) * 1000);
  const set = await ts.http.post(PASSWORD, { new_password_hash: sha256(NEW) }, signedIn.body.access_token);
  const fresh = assertTokenResponse(set, 200, { email: 'code-only@pw.test', role: 'member' });
  assert.equal((await login(ts, 'code-only@pw.test', NEW)).status, 200);
  assertError(await me(ts, signedIn.body.access_token), 401, 'unauthorized');

  // Now it has a password: leaving the current one out is refused even from a fresh token.
  const omitted = await ts.http.post(PASSWORD, { new_password_hash: sha256('third') }, fresh.access_token);
  assertError(omitted, 401, 'invalid_credentials');
  assert.equal((await login(ts, 'code-only@pw.test', NEW)).status, 200);
});

test('the body is checked at the edge, and the route needs a bearer token', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { access_token: token } = await signup(ts, 'yusuf@pw.test');
  const bad = assertError(await ts.http.post(PASSWORD, { current_password_hash: sha256(OLD), new_password_hash: 'plaintext' }, token), 400, 'validation_failed');
  assert.deepEqual(bad.error.details.map((d: { path: string }) => d.path), ['new_password_hash']);
  assertError(await ts.http.post(PASSWORD, { current_password_hash: sha256(OLD) }, token), 400, 'validation_failed');
  assertError(await ts.http.post(PASSWORD, { current_password_hash: sha256(OLD), new_password_hash: sha256(NEW) }), 401, 'unauthorized');
  assert.equal((await login(ts, 'yusuf@pw.test', OLD)).status, 200, 'nothing changed');
});
