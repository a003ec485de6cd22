import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeJwt } from 'jose';
import { createManualClock, hmacHex, sha256, signupMember, startTestService, type TestService } from '../support/service.ts';
import { createSuperadmin, databaseBytes, readRows } from '../support/superadmin.ts';
import { AUTH, assertError, assertTokenResponse, digest, emailId, lastSent, nowSeconds, otherCode, sent } from '../support/api.ts';

const ROOT = 'root@example.com';
const PASSWORD = 'the superadmin password';
const NEW_PASSWORD = 'a brand new superadmin password';

const step1 = (ts: TestService, email: string, password: string) =>
  ts.http.post(`${AUTH}/superadmin-2fa`, { identifier_hash: emailId(email), password_hash: sha256(password) });

/** Superadmin step 1; returns the session token and the OTP that went out with it. */
async function startLogin(ts: TestService, email = ROOT, password = PASSWORD): Promise<{ session: string; otp: string }> {
  const res = await step1(ts, email, password);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return { session: res.body.session_token, otp: (await lastSent(ts, 'superadmin_otp')).code! };
}

const verifyLogin = (ts: TestService, session: string, otp: string, timestamp = nowSeconds(ts)) =>
  ts.http.post(`${AUTH}/superadmin-2fa/verify`, { session_token: session, timestamp, hmac: digest(session, otp, timestamp) });

/** Superadmin reset step 1 for a real superadmin; returns the session token and the OTP. */
async function startReset(ts: TestService, email = ROOT): Promise<{ session: string; otp: string }> {
  const res = await ts.http.post(`${AUTH}/superadmin-forgot`, { identifier_hash: emailId(email) });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return { session: res.body.session_token, otp: (await lastSent(ts, 'superadmin_reset')).code! };
}

const verifyReset = (ts: TestService, session: string, otp: string, timestamp = nowSeconds(ts)) =>
  ts.http.post(`${AUTH}/superadmin-forgot/verify`, { session_token: session, timestamp, hmac: digest(session, otp, timestamp) });

/** The whole reset up to the reset token. */
async function resetToken(ts: TestService): Promise<string> {
  const { session, otp } = await startReset(ts);
  const res = await verifyReset(ts, session, otp);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.reset_token;
}

const resetPassword = (ts: TestService, token: string, password: string) =>
  ts.http.post(`${AUTH}/superadmin-reset-password`, { reset_token: token, password_hash: sha256(password) });

/** A full superadmin sign-in; returns the access token. */
async function signIn(ts: TestService): Promise<string> {
  const { session, otp } = await startLogin(ts);
  const res = await verifyLogin(ts, session, otp);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.access_token;
}

// ---- step 1 ----

test('superadmin step 1 with the right password hash answers 200 with a session token and sends an OTP', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const res = await step1(ts, ROOT, PASSWORD);
  assert.equal(res.status, 200);
  assert.deepEqual(Object.keys(res.body).sort(), ['expires_in', 'session_token']);
  assert.equal(res.body.expires_in, 600);
  assert.equal(typeof res.body.session_token, 'string');
  assert.ok(res.body.session_token.length >= 32);
  const otp = await lastSent(ts, 'superadmin_otp');
  assert.equal(otp.to, ROOT);
  assert.equal(otp.channel, 'email');
  assert.match(otp.code!, /^\d{6}$/);
  assert.ok(otp.text.includes(otp.code!));
});

test('superadmin step 1 answers one identical 401 invalid_credentials for a wrong password, a member and an unknown account', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  await signupMember(ts.http, 'member@example.com', PASSWORD);
  const wrong = await step1(ts, ROOT, 'not the password');
  const member = await step1(ts, 'member@example.com', PASSWORD);
  const unknown = await step1(ts, 'nobody@example.com', PASSWORD);
  const body = assertError(wrong, 401, 'invalid_credentials');
  for (const res of [member, unknown]) {
    assert.equal(res.status, 401);
    assert.deepEqual(res.body, body);
  }
  assert.deepEqual(await sent(ts, 'superadmin_otp'), [], 'no OTP goes out on a failed step 1');
});

test("/auth/login with the superadmin's credentials answers 401 invalid_credentials", async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId(ROOT), password_hash: sha256(PASSWORD) });
  assertError(res, 401, 'invalid_credentials');
  assert.equal(res.body.access_token, undefined);
  // The same credentials are good for step 1: the refusal is about the route, not the password.
  assert.equal((await step1(ts, ROOT, PASSWORD)).status, 200);
});

// ---- step 2 ----

test('superadmin verify with the right digest answers 200 with a superadmin token response', async (t) => {
  const ts = await startTestService(t);
  const root = await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  const body = assertTokenResponse(await verifyLogin(ts, session, otp), 200, { email: ROOT, role: 'superadmin', id: root.id });
  assert.equal(decodeJwt(body.access_token).role, 'superadmin');
  const me = await ts.http.get('/api/v1/me', body.access_token);
  assert.equal(me.status, 200);
  assert.equal(me.body.user.role, 'superadmin');
});

test('a superadmin session verifies only once', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  assert.equal((await verifyLogin(ts, session, otp)).status, 200);
  const again = await verifyLogin(ts, session, otp);
  assertError(again, 401, 'invalid_otp');
  assert.equal(again.body.access_token, undefined);
});

test('a superadmin session verified twice at once yields one token', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  const results = await Promise.all(Array.from({ length: 6 }, () => verifyLogin(ts, session, otp)));
  assert.deepEqual(results.map((r) => r.status).sort(), [200, 401, 401, 401, 401, 401]);
});

test('a verify timestamp 301 seconds off answers 401 stale_timestamp', async (t) => {
  // A clock that stands still: with the real one a second may pass between writing +301 and the check (300).
  const ts = await startTestService(t, { clock: createManualClock() });
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  assertError(await verifyLogin(ts, session, otp, nowSeconds(ts) - 301), 401, 'stale_timestamp');
  assertError(await verifyLogin(ts, session, otp, nowSeconds(ts) + 301), 401, 'stale_timestamp');
});

test('a verify timestamp 299 seconds behind server time still works', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  assert.equal((await verifyLogin(ts, session, otp, nowSeconds(ts) - 299)).status, 200);
});

test('a verify timestamp 299 seconds ahead of server time still works', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  assert.equal((await verifyLogin(ts, session, otp, nowSeconds(ts) + 299)).status, 200);
});

test('a digest over another timestamp than the one sent is refused with invalid_otp', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  const now = nowSeconds(ts);
  const res = await ts.http.post(`${AUTH}/superadmin-2fa/verify`, { session_token: session, timestamp: now, hmac: digest(session, otp, now - 1) });
  assertError(res, 401, 'invalid_otp');
});

test('a digest keyed with anything but the session token is refused with invalid_otp', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  const now = nowSeconds(ts);
  const hmac = hmacHex(sha256(session), `${otp}|${now}`);
  assertError(await ts.http.post(`${AUTH}/superadmin-2fa/verify`, { session_token: session, timestamp: now, hmac }), 401, 'invalid_otp');
});

test('an unknown session token answers 401 invalid_otp', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  await startLogin(ts);
  assertError(await verifyLogin(ts, 'made-up-session-token-that-was-never-issued', '123456'), 401, 'invalid_otp');
});

test('a new step 1 supersedes the earlier session of that superadmin', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const first = await startLogin(ts);
  const second = await startLogin(ts);
  assert.notEqual(first.session, second.session);
  assertError(await verifyLogin(ts, first.session, first.otp), 401, 'invalid_otp');
  assertTokenResponse(await verifyLogin(ts, second.session, second.otp), 200, { email: ROOT, role: 'superadmin' });
});

test('four wrong digests leave the superadmin session usable', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  for (let i = 0; i < 4; i++) assertError(await verifyLogin(ts, session, otherCode(otp)), 401, 'invalid_otp');
  assert.equal((await verifyLogin(ts, session, otp)).status, 200);
});

test('five wrong digests burn the superadmin session', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  for (let i = 0; i < 5; i++) assertError(await verifyLogin(ts, session, otherCode(otp)), 401, 'invalid_otp');
  assertError(await verifyLogin(ts, session, otp), 401, 'invalid_otp');
});

test('a superadmin session still verifies just before 10 minutes', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  clock.advance(599 * 1000);
  assert.equal((await verifyLogin(ts, session, otp)).status, 200);
});

test('a superadmin session expires after 10 minutes', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startLogin(ts);
  clock.advance(601 * 1000);
  assertError(await verifyLogin(ts, session, otp), 401, 'invalid_otp');
});

test('superadmin verify with a malformed body answers 400 validation_failed', async (t) => {
  const ts = await startTestService(t);
  const now = nowSeconds(ts);
  const good = { session_token: 'abc', timestamp: now, hmac: sha256('x') };
  for (const body of [{ ...good, timestamp: String(now) }, { ...good, timestamp: now + 0.5 }, { ...good, hmac: 'zz' }, { ...good, session_token: '' }, {}]) {
    assertError(await ts.http.post(`${AUTH}/superadmin-2fa/verify`, body), 400, 'validation_failed');
  }
});

// ---- superadmin reset ----

test('superadmin-forgot answers an unknown identifier with the same 200 shape, a decoy session that never verifies', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  await signupMember(ts.http, 'member@example.com');
  const real = await ts.http.post(`${AUTH}/superadmin-forgot`, { identifier_hash: emailId(ROOT) });
  assert.equal(real.status, 200);
  assert.equal((await sent(ts, 'superadmin_reset')).length, 1);

  for (const who of ['nobody@example.com', 'member@example.com']) {
    const decoy = await ts.http.post(`${AUTH}/superadmin-forgot`, { identifier_hash: emailId(who) });
    assert.equal(decoy.status, real.status);
    assert.deepEqual(Object.keys(decoy.body).sort(), Object.keys(real.body).sort());
    assert.equal(decoy.body.expires_in, 600);
    assert.equal(typeof decoy.body.session_token, 'string');
    assert.equal(decoy.body.session_token.length, real.body.session_token.length);
    for (const guess of ['000000', '123456', '999999']) {
      assertError(await verifyReset(ts, decoy.body.session_token, guess), 401, 'invalid_otp');
    }
  }
  assert.equal((await sent(ts, 'superadmin_reset')).length, 1, 'decoys send nothing');
});

test('superadmin reset: OTP, verify, reset token, new password; the old password no longer passes step 1', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startReset(ts);
  const message = await lastSent(ts, 'superadmin_reset');
  assert.equal(message.to, ROOT);
  assert.match(otp, /^\d{6}$/);

  const verified = await verifyReset(ts, session, otp);
  assert.equal(verified.status, 200);
  assert.deepEqual(Object.keys(verified.body).sort(), ['expires_in', 'reset_token']);
  assert.equal(verified.body.expires_in, 900);
  assert.equal(typeof verified.body.reset_token, 'string');

  const res = await resetPassword(ts, verified.body.reset_token, NEW_PASSWORD);
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { status: 'password_reset' });
  assertError(await step1(ts, ROOT, PASSWORD), 401, 'invalid_credentials');
  assert.equal((await step1(ts, ROOT, NEW_PASSWORD)).status, 200);
});

test('the new superadmin password takes effect only when the reset token is redeemed', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const token = await resetToken(ts);
  assert.equal((await step1(ts, ROOT, PASSWORD)).status, 200, 'the old password still works before the reset');
  assert.equal((await resetPassword(ts, token, NEW_PASSWORD)).status, 200);
  assertError(await step1(ts, ROOT, PASSWORD), 401, 'invalid_credentials');
});

test('a superadmin reset session verifies only once', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startReset(ts);
  assert.equal((await verifyReset(ts, session, otp)).status, 200);
  assertError(await verifyReset(ts, session, otp), 401, 'invalid_otp');
});

test('superadmin-forgot/verify refuses a timestamp 301 seconds off with stale_timestamp', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startReset(ts);
  assertError(await verifyReset(ts, session, otp, nowSeconds(ts) - 301), 401, 'stale_timestamp');
  assertError(await verifyReset(ts, session, otp, nowSeconds(ts) + 301), 401, 'stale_timestamp');
});

test('five wrong digests burn the superadmin reset session', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const { session, otp } = await startReset(ts);
  for (let i = 0; i < 5; i++) assertError(await verifyReset(ts, session, otherCode(otp)), 401, 'invalid_otp');
  assertError(await verifyReset(ts, session, otp), 401, 'invalid_otp');
});

test('a login session cannot be spent on the reset verify, nor a reset session on the login verify', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const login = await startLogin(ts);
  const reset = await startReset(ts);
  assertError(await verifyReset(ts, login.session, login.otp), 401, 'invalid_otp');
  assertError(await verifyLogin(ts, reset.session, reset.otp), 401, 'invalid_otp');
});

test('the superadmin reset token works only once', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const token = await resetToken(ts);
  assert.equal((await resetPassword(ts, token, NEW_PASSWORD)).status, 200);
  assertError(await resetPassword(ts, token, 'a third password'), 400, 'invalid_token');
  assert.equal((await step1(ts, ROOT, NEW_PASSWORD)).status, 200);
});

test('the superadmin reset token still works just before 15 minutes', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await createSuperadmin(ts, ROOT, PASSWORD);
  const token = await resetToken(ts);
  clock.advance(15 * 60 * 1000 - 1000);
  assert.equal((await resetPassword(ts, token, NEW_PASSWORD)).status, 200);
});

test('the superadmin reset token expires after 15 minutes', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  await createSuperadmin(ts, ROOT, PASSWORD);
  const token = await resetToken(ts);
  clock.advance(15 * 60 * 1000 + 1000);
  assertError(await resetPassword(ts, token, NEW_PASSWORD), 400, 'invalid_token');
  assert.equal((await step1(ts, ROOT, PASSWORD)).status, 200, 'the password did not change');
});

test('old superadmin tokens stop working after the superadmin password reset', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const before = await signIn(ts);
  assert.equal((await ts.http.get('/api/v1/me', before)).status, 200);
  assert.equal((await resetPassword(ts, await resetToken(ts), NEW_PASSWORD)).status, 200);
  assertError(await ts.http.get('/api/v1/me', before), 401, 'unauthorized');
});

test('reset tokens of members and of superadmins are not interchangeable', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  await signupMember(ts.http, 'member@example.com', PASSWORD);
  await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('member@example.com') });
  const memberToken = (await lastSent(ts, 'password_reset')).token!;
  const superadminToken = await resetToken(ts);
  assertError(await resetPassword(ts, memberToken, NEW_PASSWORD), 400, 'invalid_token');
  assertError(await ts.http.post(`${AUTH}/reset-password`, { token: superadminToken, password_hash: sha256(NEW_PASSWORD) }), 400, 'invalid_token');
  assert.equal((await step1(ts, ROOT, PASSWORD)).status, 200, 'the superadmin password did not change');
});

test('the member forgot-password flow sends nothing to a superadmin', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  const res = await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId(ROOT) });
  assert.equal(res.status, 202);
  assert.deepEqual(res.body, { status: 'accepted' });
  assert.deepEqual(await sent(ts, 'password_reset'), []);
});

// ---- what the database keeps ----

/** A superadmin and a member with one of each secret outstanding at once. */
async function oneOfEachSecret(ts: TestService) {
  await createSuperadmin(ts, ROOT, PASSWORD);
  await signupMember(ts.http, 'member@example.com', 'member password');
  const superadminToken = await resetToken(ts);
  const login = await startLogin(ts);
  const reset = await startReset(ts);
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('member@example.com') });
  const loginCode = (await lastSent(ts, 'login_code')).code!;
  await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('member@example.com') });
  const memberToken = (await lastSent(ts, 'password_reset')).token!;
  return { superadminToken, login, reset, loginCode, memberToken };
}

test('the database never holds a session token, an OTP, a login code or a reset token in plain text', async (t) => {
  const ts = await startTestService(t);
  const { superadminToken, login, reset, loginCode, memberToken } = await oneOfEachSecret(ts);
  const secrets = [login.session, login.otp, reset.session, reset.otp, loginCode, memberToken, superadminToken];

  const sessions = await readRows(ts, 'superadmin_sessions');
  const codes = await readRows(ts, 'login_codes');
  const resets = await readRows(ts, 'reset_tokens');
  assert.equal(sessions.length, 2);
  assert.equal(codes.length, 1);
  assert.equal(resets.length, 2);
  // The server keeps SHA-256 of the session token (docs/decisions.md, "How secrets are kept"), nothing more of it.
  assert.deepEqual(sessions.map((r) => r.session_hash).sort(), [sha256(login.session), sha256(reset.session)].sort());

  for (const row of [...sessions, ...codes, ...resets]) {
    for (const [column, value] of Object.entries(row)) {
      for (const secret of secrets) {
        assert.ok(!String(value).includes(secret), `column ${column} holds a secret in plain text`);
      }
    }
  }
  // The long secrets cannot hide anywhere in the file or its write-ahead log either (SQLite: on PostgreSQL the
  // rows above are all the service keeps, and the cluster's files are not its own).
  if (!ts.config.postgres) {
    const bytes = databaseBytes(ts);
    for (const secret of [login.session, reset.session, memberToken, superadminToken]) {
      assert.equal(bytes.includes(Buffer.from(secret)), false, 'a token sits in the database file');
    }
  }

  // Everything kept is still usable: the checks above looked at live secrets.
  assert.equal((await verifyLogin(ts, login.session, login.otp)).status, 200);
  assert.equal((await ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: emailId('member@example.com'), code: loginCode })).status, 200);
});

test('codes, OTPs and reset tokens are kept as keyed hashes: no column holds the plain SHA-256 of one', async (t) => {
  const ts = await startTestService(t);
  const { superadminToken, login, reset, loginCode, memberToken } = await oneOfEachSecret(ts);
  // A 6-digit code's plain SHA-256 falls to a million guesses; a keyed hash needs the server's key too.
  const digests = [login.otp, reset.otp, loginCode, memberToken, superadminToken].map((s) => sha256(s));
  const rows = [...await readRows(ts, 'superadmin_sessions'), ...await readRows(ts, 'login_codes'), ...await readRows(ts, 'reset_tokens')];
  assert.equal(rows.length, 5);
  for (const row of rows) {
    for (const [column, value] of Object.entries(row)) {
      for (const d of digests) assert.ok(!String(value).toLowerCase().includes(d), `column ${column} holds an unkeyed SHA-256`);
    }
  }
});

test('no log line carries a password hash, a code, an OTP, a session token or a reset token', async (t) => {
  const ts = await startTestService(t);
  await createSuperadmin(ts, ROOT, PASSWORD);
  await signupMember(ts.http, 'member@example.com', 'member password');
  const { session, otp } = await startLogin(ts);
  const access = await verifyLogin(ts, session, otp);
  const reset = await startReset(ts);
  const token = (await verifyReset(ts, reset.session, reset.otp)).body.reset_token as string;
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('member@example.com') });
  const code = (await lastSent(ts, 'login_code')).code!;
  await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('member@example.com') });
  const memberToken = (await lastSent(ts, 'password_reset')).token!;
  await ts.service.notifier.idle();

  const secrets = [sha256(PASSWORD), sha256('member password'), session, reset.session, token, memberToken, access.body.access_token];
  // Six digits can turn up inside a timestamp by chance: a code counts only as a number of its own.
  const codes = [otp, reset.otp, code].map((c) => new RegExp(`(?<![0-9])${c}(?![0-9])`));
  assert.ok(ts.logs.length > 10, 'the service logged the requests');
  for (const line of ts.logs) {
    for (const secret of secrets) assert.ok(!line.includes(secret), `a log line carries a secret: ${line}`);
    for (const pattern of codes) assert.doesNotMatch(line, pattern, 'a log line carries a code');
  }
});
