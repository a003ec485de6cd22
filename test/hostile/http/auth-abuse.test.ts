import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { createManualClock, durableFiles, sha256, signupMember, startTestService, type HttpResult, type TestService } from '../../support/service.ts';
import { createSuperadmin } from '../../support/superadmin.ts';
import { AUTH, assertError, assertTokenResponse, digest, emailId, lastSent, nowSeconds } from '../../support/api.ts';
import { createPasswordHasher } from '../../../src/people/passwords.ts';

/** Guessing short secrets and flooding the password hasher (SECURITY.md, "Guessing"). */

const EMAIL = 'amina@example.com';
const PASSWORD = 'a long member password';
const ROOT = 'root@example.com';
const ROOT_PASSWORD = 'the superadmin password';

async function requestCode(ts: TestService, email = EMAIL): Promise<string> {
  assert.equal((await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId(email) })).status, 202);
  return (await lastSent(ts, 'login_code')).code!;
}

const verifyCode = (ts: TestService, code: string, email = EMAIL) =>
  ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: emailId(email), code });

const passwordLogin = (ts: TestService) =>
  ts.http.post(`${AUTH}/login`, { identifier_hash: emailId(EMAIL), password_hash: sha256(PASSWORD) });

function assertLocked(res: HttpResult, atMostSeconds = 3600): number {
  assertError(res, 429, 'rate_limited');
  const retryAfter = Number(res.headers.get('retry-after'));
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= atMostSeconds, `Retry-After ${res.headers.get('retry-after')}`);
  return retryAfter;
}

/** `count` wrong guesses at the current code; returns the statuses. */
async function guessWrong(ts: TestService, code: string, count: number, email = EMAIL): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 1; i <= count; i++) statuses.push((await verifyCode(ts, String((Number(code) + i) % 1_000_000).padStart(6, '0'), email)).status);
  return statuses;
}

test('30 wrong guesses over 6 fresh codes: the 21st is refused, the 7th code\'s right guess gets 429, password login still works', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, EMAIL, PASSWORD);
  const statuses: number[] = [];
  for (let round = 0; round < 6; round++) statuses.push(...(await guessWrong(ts, await requestCode(ts), 5)));
  assert.deepEqual(statuses, [...Array(20).fill(401), ...Array(10).fill(429)]);

  const seventh = await requestCode(ts);
  assertLocked(await verifyCode(ts, seventh));
  assertTokenResponse(await passwordLogin(ts), 200, { email: EMAIL, role: 'member' });
});

test('the wrong-guess count survives a restart of the service on the same database file', async (t) => {
  const env = { ...durableFiles(t, 'guess').env, AUTH_MAX_WRONG_GUESSES_PER_HOUR: '6' };
  const first = await startTestService(t, { env });
  await signupMember(first.http, EMAIL, PASSWORD);
  assert.deepEqual([...(await guessWrong(first, await requestCode(first), 5)), ...(await guessWrong(first, await requestCode(first), 1))], [401, 401, 401, 401, 401, 401]);
  await first.service.close();

  const second = await startTestService(t, { env });
  assertLocked(await verifyCode(second, await requestCode(second)));
  assertTokenResponse(await passwordLogin(second), 200, { email: EMAIL, role: 'member' });
});

test('moving the clock past the hour restores the account\'s code sign-in, and Retry-After counts down to it', async (t) => {
  const clock = createManualClock(Date.now());
  const ts = await startTestService(t, { clock });
  await signupMember(ts.http, EMAIL, PASSWORD);
  for (let round = 0; round < 4; round++) await guessWrong(ts, await requestCode(ts), 5);
  const code = await requestCode(ts);
  assert.ok(assertLocked(await verifyCode(ts, code)) > 3500);

  clock.advance(1800 * 1000);
  const later = assertLocked(await verifyCode(ts, await requestCode(ts)));
  assert.ok(later <= 1800 && later > 1700, `Retry-After ${later} after half an hour`);

  clock.advance(1801 * 1000);
  assertTokenResponse(await verifyCode(ts, await requestCode(ts)), 200, { email: EMAIL, role: 'member' });
});

test('an unknown identifier gets the same 401s and then the same 429 as an existing account', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_MAX_WRONG_GUESSES_PER_HOUR: '3' } });
  await signupMember(ts.http, EMAIL, PASSWORD);
  const known = await guessWrong(ts, await requestCode(ts), 4);
  const unknown = await guessWrong(ts, '123456', 4, 'nobody@example.com');
  assert.deepEqual(known, [401, 401, 401, 429]);
  assert.deepEqual(unknown, known);
  const a = await verifyCode(ts, '000000');
  const b = await verifyCode(ts, '000000', 'nobody@example.com');
  assert.deepEqual([a.status, a.body], [b.status, b.body]);
  assert.equal(Math.abs(Number(a.headers.get('retry-after')) - Number(b.headers.get('retry-after'))) <= 2, true);
  // Another account's budget is its own.
  await signupMember(ts.http, 'other@example.com', PASSWORD);
  assertTokenResponse(await verifyCode(ts, await requestCode(ts, 'other@example.com'), 'other@example.com'), 200, { email: 'other@example.com', role: 'member' });
});

// ---- superadmin OTP digests ----

async function forgotSession(ts: TestService, email: string): Promise<string> {
  const res = await ts.http.post(`${AUTH}/superadmin-forgot`, { identifier_hash: emailId(email) });
  assert.equal(res.status, 200);
  return res.body.session_token;
}

const verifyReset = (ts: TestService, session: string, otp: string) =>
  ts.http.post(`${AUTH}/superadmin-forgot/verify`, { session_token: session, timestamp: nowSeconds(ts), hmac: digest(session, otp, nowSeconds(ts)) });

/** `sessions` reset sessions with 5 wrong digests each; returns the statuses. */
async function guessResetDigests(ts: TestService, email: string, sessions: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let s = 0; s < sessions; s++) {
    const session = await forgotSession(ts, email);
    // A real superadmin's OTP is known here, so the guesses certainly miss it; a decoy has none.
    const otp = email === ROOT ? (await lastSent(ts, 'superadmin_reset')).code! : '000000';
    for (let i = 1; i <= 5; i++) statuses.push((await verifyReset(ts, session, String((Number(otp) + i) % 1_000_000).padStart(6, '0'))).status);
  }
  return statuses;
}

test('wrong superadmin reset digests are capped per account: a fresh session\'s right digest gets 429, and sign-in is unaffected', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_MAX_WRONG_GUESSES_PER_HOUR: '10' } });
  await createSuperadmin(ts, ROOT, ROOT_PASSWORD);
  assert.deepEqual(await guessResetDigests(ts, ROOT, 3), [...Array(10).fill(401), ...Array(5).fill(429)]);

  const session = await forgotSession(ts, ROOT);
  const otp = (await lastSent(ts, 'superadmin_reset')).code!;
  assertLocked(await verifyReset(ts, session, otp));

  // The two-step sign-in has its own budget: anyone may start a reset, only the password holder a sign-in.
  const step1 = await ts.http.post(`${AUTH}/superadmin-2fa`, { identifier_hash: emailId(ROOT), password_hash: sha256(ROOT_PASSWORD) });
  const loginOtp = (await lastSent(ts, 'superadmin_otp')).code!;
  const at = nowSeconds(ts);
  const signedIn = await ts.http.post(`${AUTH}/superadmin-2fa/verify`, { session_token: step1.body.session_token, timestamp: at, hmac: digest(step1.body.session_token, loginOtp, at) });
  assertTokenResponse(signedIn, 200, { email: ROOT, role: 'superadmin' });
});

test('decoy reset sessions of a non-superadmin answer guesses exactly like a real superadmin\'s', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_MAX_WRONG_GUESSES_PER_HOUR: '7' } });
  await createSuperadmin(ts, ROOT, ROOT_PASSWORD);
  const real = await guessResetDigests(ts, ROOT, 2);
  const decoy = await guessResetDigests(ts, 'nobody@example.com', 2);
  assert.deepEqual(real, [401, 401, 401, 401, 401, 401, 401, 429, 429, 429]);
  assert.deepEqual(decoy, real);
  // A superseded session is gone for both: no row, so plain invalid_otp whatever the budget.
  const oldReal = await forgotSession(ts, ROOT);
  await forgotSession(ts, ROOT);
  const oldDecoy = await forgotSession(ts, 'nobody@example.com');
  await forgotSession(ts, 'nobody@example.com');
  assertError(await verifyReset(ts, oldReal, '123456'), 401, 'invalid_otp');
  assertError(await verifyReset(ts, oldDecoy, '123456'), 401, 'invalid_otp');
});

// ---- the bcrypt queue ----

test('the password hasher refuses jobs past its queue bound at once, dummy comparisons included', async (t) => {
  const hasher = await createPasswordHasher({ cost: 10, threads: 1, maxQueue: 2 });
  t.after(() => hasher.close());
  const stored = await hasher.hash(sha256('x'));
  assert.ok(stored.ok);
  // One runs, two wait, the rest are refused: known and unknown accounts alike.
  const outcomes = await Promise.all([
    hasher.verify(sha256('x'), stored.value),
    hasher.verify(sha256('y'), null),
    hasher.verify(sha256('x'), stored.value),
    hasher.verify(sha256('z'), null),
    hasher.verify(sha256('x'), stored.value),
  ]);
  assert.deepEqual(outcomes.map((o) => (o.ok ? o.value : o.failure)), [true, false, true, 'service_busy', 'service_busy']);
  for (const o of outcomes.slice(3)) assert.ok(!o.ok && (o.retryAfterSeconds ?? 0) >= 1);
  // Once drained it takes work again.
  const again = await hasher.verify(sha256('x'), stored.value);
  assert.deepEqual(again, { ok: true, value: true });
});

test('a burst of concurrent logins past BCRYPT_MAX_QUEUE gets 503 service_busy with Retry-After, then the service answers normally', async (t) => {
  const ts = await startTestService(t, { env: { BCRYPT_COST: '10', BCRYPT_MAX_QUEUE: '2' } });
  await signupMember(ts.http, EMAIL, PASSWORD);
  const burst = await Promise.all(Array.from({ length: 24 }, () =>
    ts.http.post(`${AUTH}/login`, { identifier_hash: crypto.randomBytes(32).toString('hex'), password_hash: sha256('guess') }),
  ));
  const busy = burst.filter((r) => r.status === 503);
  assert.ok(busy.length > 0, 'some logins were refused as busy');
  assert.ok(burst.every((r) => r.status === 503 || r.status === 401), `statuses ${burst.map((r) => r.status).join(',')}`);
  for (const res of busy) {
    assertError(res, 503, 'service_busy');
    assert.match(res.headers.get('retry-after') ?? '', /^[1-9]\d*$/);
    assert.equal(res.headers.get('cache-control'), 'no-store, no-cache, must-revalidate', 'the auth headers are on a 503 too');
  }
  assertTokenResponse(await passwordLogin(ts), 200, { email: EMAIL, role: 'member' });
});

test('wrong superadmin sign-in digests are capped across sessions: a fresh session\'s right digest gets 429', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_MAX_WRONG_GUESSES_PER_HOUR: '5' } });
  await createSuperadmin(ts, ROOT, ROOT_PASSWORD);
  const step1 = async () => {
    const res = await ts.http.post(`${AUTH}/superadmin-2fa`, { identifier_hash: emailId(ROOT), password_hash: sha256(ROOT_PASSWORD) });
    assert.equal(res.status, 200);
    return { session: res.body.session_token as string, otp: (await lastSent(ts, 'superadmin_otp')).code! };
  };
  const verify = (session: string, otp: string) => {
    const at = nowSeconds(ts);
    return ts.http.post(`${AUTH}/superadmin-2fa/verify`, { session_token: session, timestamp: at, hmac: digest(session, otp, at) });
  };
  const first = await step1();
  for (let i = 1; i <= 5; i++) assertError(await verify(first.session, String((Number(first.otp) + i) % 1_000_000).padStart(6, '0')), 401, 'invalid_otp');
  const second = await step1();
  assertLocked(await verify(second.session, second.otp));
});
