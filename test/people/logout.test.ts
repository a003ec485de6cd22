import { test } from 'node:test';
import assert from 'node:assert/strict';
import { storeOf } from '../support/database.ts';
import { MAX_REVOKED_PER_USER } from '../../src/people/revoked-tokens.ts';
import { AUTH, assertError, digest, emailId, lastSent, nowSeconds } from '../support/api.ts';
import { signInSuperadmin } from '../support/people.ts';
import { createManualClock, restartableService, sha256, startTestService, type TestService } from '../support/service.ts';

// docs/api.md "Signing out": POST /auth/logout ends the token it is sent with; POST /auth/logout-all every
// token of the account and its pending superadmin sign-ins and resets.

const PASSWORD = 'correct horse battery staple';

async function signup(ts: TestService, email: string) {
  const res = await ts.http.post(`${AUTH}/signup`, { email, password_hash: sha256(PASSWORD) });
  assert.equal(res.status, 201);
  return res.body.access_token as string;
}

async function login(ts: TestService, email: string): Promise<string> {
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId(email), password_hash: sha256(PASSWORD) });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.access_token;
}

const me = (ts: TestService, token: string) => ts.http.get('/api/v1/me', token);

/** The service's revoked_tokens rows, through a second connection to its store (SQLite or PostgreSQL). */
async function revokedRows(ts: TestService): Promise<Array<{ token_id_hash: string; user_id: string; expires_at: number }>> {
  const { store, close } = await storeOf(ts);
  try {
    return await store.selectFrom('revoked_tokens').select(['token_id_hash', 'user_id', 'expires_at']).orderBy('expires_at').orderBy('token_id_hash').execute();
  } finally {
    await close();
  }
}

test('logout ends the token it is sent with at once, and no other token of the account', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const phone = await signup(ts, 'amina@logout.test');
  const laptop = await login(ts, 'amina@logout.test');
  assert.equal((await me(ts, phone)).status, 200, 'the token works before (and is in the verify cache)');

  const res = await ts.http.post(`${AUTH}/logout`, undefined, phone);
  assert.equal(res.status, 204);
  assert.equal(res.body, null);
  assert.match(res.headers.get('cache-control') ?? '', /no-store/, 'the auth routes\' security headers');

  assertError(await me(ts, phone), 401, 'unauthorized');
  assert.equal((await me(ts, laptop)).status, 200, 'the other sign-in goes on');
  assertError(await ts.http.post(`${AUTH}/logout`, undefined, phone), 401, 'unauthorized');
  const rows = await revokedRows(ts);
  assert.equal(rows.length, 1);
  assert.match(rows[0]!.token_id_hash, /^[0-9a-f]{64}$/, 'a hash, never the token or its id');
  assert.equal(JSON.stringify(rows).includes(phone.split('.')[1]!), false);
});

test('logout and logout-all need a bearer token although they live under /auth', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const token = await signup(ts, 'bilal@logout.test');
  for (const path of ['logout', 'logout-all']) {
    assertError(await ts.http.post(`${AUTH}/${path}`), 401, 'unauthorized');
    assertError(await ts.http.request('POST', `${AUTH}/${path}`, { headers: { authorization: `Bearer ${token}x` } }), 401, 'unauthorized');
  }
  assert.equal((await me(ts, token)).status, 200, 'nothing was ended');
  assert.deepEqual(await revokedRows(ts), []);
});

test('a signed-out token stays refused after a restart; its row is pruned once the token has expired', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const svc = await restartableService(t, 'logout', { clock });
  let ts = svc.current();
  const gone = await signup(ts, 'yusuf@logout.test');
  const kept = await login(ts, 'yusuf@logout.test');
  assert.equal((await ts.http.post(`${AUTH}/logout`, undefined, gone)).status, 204);

  ts = await svc.restart();
  assertError(await me(ts, gone), 401, 'unauthorized');
  assert.equal((await me(ts, kept)).status, 200);
  assert.equal((await revokedRows(ts)).length, 1);

  clock.advance((7 * 86_400 + 120) * 1000); // past the token's exp (ACCESS_TOKEN_EXPIRE_DAYS, 7)
  const later = await login(ts, 'yusuf@logout.test');
  assert.equal((await ts.http.post(`${AUTH}/logout`, undefined, later)).status, 204);
  const rows = await revokedRows(ts);
  assert.equal(rows.length, 1, 'the expired row went, the new one stays');
  assert.ok(rows[0]!.expires_at > nowSeconds(ts));
});

test('logout-all ends every token of the account and its pending superadmin sign-in and reset', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts, 'root@logout.test', 'root password 123');

  // A sign-in and a reset left pending (say, by someone who has the password) when the owner ends everything.
  const pending = await ts.http.post(`${AUTH}/superadmin-2fa`, { identifier_hash: emailId('root@logout.test'), password_hash: sha256('root password 123') });
  assert.equal(pending.status, 200);
  const otp = (await lastSent(ts, 'superadmin_otp')).code!;
  const reset = await ts.http.post(`${AUTH}/superadmin-forgot`, { identifier_hash: emailId('root@logout.test') });
  const resetOtp = (await lastSent(ts, 'superadmin_reset')).code!;
  const won = await ts.http.post(`${AUTH}/superadmin-forgot/verify`, { session_token: reset.body.session_token, timestamp: nowSeconds(ts), hmac: digest(reset.body.session_token, resetOtp, nowSeconds(ts)) });
  assert.equal(won.status, 200, 'a reset token was won before the sign-out');

  assert.equal((await ts.http.post(`${AUTH}/logout-all`, undefined, root.token)).status, 204);
  assertError(await me(ts, root.token), 401, 'unauthorized');
  const verify = await ts.http.post(`${AUTH}/superadmin-2fa/verify`, { session_token: pending.body.session_token, timestamp: nowSeconds(ts), hmac: digest(pending.body.session_token, otp, nowSeconds(ts)) });
  assertError(verify, 401, 'invalid_otp');
  assertError(await ts.http.post(`${AUTH}/superadmin-reset-password`, { reset_token: won.body.reset_token, password_hash: sha256('taken over') }), 400, 'invalid_token');
});

test('logout-all ends every token of a member, and a sign-in afterwards works', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const tokens = [await signup(ts, 'hafsa@logout.test'), await login(ts, 'hafsa@logout.test'), await login(ts, 'hafsa@logout.test')];
  assert.equal((await ts.http.post(`${AUTH}/logout-all`, undefined, tokens[1])).status, 204);
  for (const token of tokens) assertError(await me(ts, token), 401, 'unauthorized');
  assert.equal((await me(ts, await login(ts, 'hafsa@logout.test'))).status, 200);
});

test(`past ${MAX_REVOKED_PER_USER} signed-out tokens at once, the next logout ends every token of the account and empties its rows`, async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const kept = await signup(ts, 'script@logout.test');
  for (let i = 0; i < MAX_REVOKED_PER_USER; i++) {
    assert.equal((await ts.http.post(`${AUTH}/logout`, undefined, await login(ts, 'script@logout.test'))).status, 204);
  }
  assert.equal((await revokedRows(ts)).length, MAX_REVOKED_PER_USER);
  assert.equal((await me(ts, kept)).status, 200, 'up to the cap, only the signed-out tokens end');

  const last = await login(ts, 'script@logout.test');
  assert.equal((await ts.http.post(`${AUTH}/logout`, undefined, last)).status, 204);
  assertError(await me(ts, last), 401, 'unauthorized');
  assertError(await me(ts, kept), 401, 'unauthorized');
  assert.deepEqual(await revokedRows(ts), []);
});
