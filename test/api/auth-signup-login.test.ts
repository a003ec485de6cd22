import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeJwt, decodeProtectedHeader } from 'jose';
import { createManualClock, sha256, startTestService, signupMember } from '../support/service.ts';
import { createSuperadmin } from '../support/superadmin.ts';
import { AUTH, assertError, assertTokenResponse, emailId, forgeToken, SEVEN_DAYS_SECONDS } from '../support/api.ts';

const PASSWORD = 'correct horse battery staple';

// ---- signup ----

test('signup by email alone answers 201 with the exact token response', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/signup`, { email: 'amina@example.com' });
  assertTokenResponse(res, 201, { email: 'amina@example.com', role: 'member' });
});

test('signup trims and lower-cases the email before keeping it', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/signup`, { email: '  Amina.Khan@Example.COM ', password_hash: sha256(PASSWORD) });
  const body = assertTokenResponse(res, 201, { email: 'amina.khan@example.com', role: 'member' });
  const login = await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('amina.khan@example.com'), password_hash: sha256(PASSWORD) });
  assertTokenResponse(login, 200, { email: 'amina.khan@example.com', role: 'member', id: body.user.id });
});

test('signup by phone alone gets the internal email phone-<16 hex of the phone hash>@phone.invalid', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/signup`, { phone: '+47 123 45 678' });
  const expected = `phone-${sha256('+4712345678').slice(0, 16)}@phone.invalid`;
  const body = assertTokenResponse(res, 201, { email: expected, role: 'member' });
  const me = await ts.http.get('/api/v1/me', body.access_token);
  assert.equal(me.status, 200);
  assert.equal(me.body.user.phone, '+4712345678');
  assert.equal(me.body.user.email, expected);
});

test('signup of an existing account with the right password_hash answers 200 with a token for that account', async (t) => {
  const ts = await startTestService(t);
  const first = await signupMember(ts.http, 'bilal@example.com', PASSWORD);
  const again = await ts.http.post(`${AUTH}/signup`, { email: 'BILAL@example.com', password_hash: sha256(PASSWORD) });
  assertTokenResponse(again, 200, { email: 'bilal@example.com', role: 'member', id: first.user.id });
});

test('signup of an existing account with a wrong or missing password_hash answers 201 like a new address, with a new account', async (t) => {
  const ts = await startTestService(t);
  const first = await signupMember(ts.http, 'bilal@example.com', PASSWORD);
  const wrong = await ts.http.post(`${AUTH}/signup`, { email: 'bilal@example.com', password_hash: sha256('not the password') });
  const missing = await ts.http.post(`${AUTH}/signup`, { email: 'bilal@example.com' });
  const fresh = await ts.http.post(`${AUTH}/signup`, { email: 'nobody@example.com', password_hash: sha256('not the password') });
  for (const res of [wrong, missing]) assertTokenResponse(res, 201, { email: 'bilal@example.com', role: 'member' });
  assertTokenResponse(fresh, 201, { email: 'nobody@example.com', role: 'member' });
  assert.deepEqual(Object.keys(wrong.body).sort(), Object.keys(fresh.body).sort());
  assert.equal(wrong.body.user.email, 'bilal@example.com');
  assert.notEqual(wrong.body.user.id, first.user.id);
  assert.notEqual(missing.body.user.id, first.user.id);
  // The new account holds a claim only: the first account is untouched and still signs in.
  const me = await ts.http.get('/api/v1/me', wrong.body.access_token);
  assert.equal(me.body.user.email_proven, false);
  assertTokenResponse(await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('bilal@example.com'), password_hash: sha256(PASSWORD) }), 200, { id: first.user.id, email: 'bilal@example.com', role: 'member' });
});

test('the address of an existing account is told of a signup attempt at most once a day', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock });
  await signupMember(ts.http, 'bilal@example.com', PASSWORD);
  const notices = async () => {
    await ts.service.notifier.idle();
    return ts.messages.filter((m) => m.purpose === 'signup_attempt');
  };
  await ts.http.post(`${AUTH}/signup`, { email: 'bilal@example.com', password_hash: sha256('guess 1') });
  await ts.http.post(`${AUTH}/signup`, { email: 'bilal@example.com', password_hash: sha256('guess 2') });
  await ts.http.post(`${AUTH}/signup`, { email: 'new@example.com', password_hash: sha256('guess 3') });
  assert.deepEqual((await notices()).map((m) => [m.channel, m.to]), [['email', 'bilal@example.com']]);
  assert.equal((await notices())[0]!.code, undefined);
  clock.advance(24 * 3600 * 1000 + 1000);
  await ts.http.post(`${AUTH}/signup`, { email: 'bilal@example.com', password_hash: sha256('guess 4') });
  assert.equal((await notices()).length, 2);
});

test('signup of an existing passwordless account never hands out a token for it', async (t) => {
  const ts = await startTestService(t);
  const first = await ts.http.post(`${AUTH}/signup`, { email: 'codeonly@example.com' });
  assert.equal(first.status, 201);
  const again = await ts.http.post(`${AUTH}/signup`, { email: 'codeonly@example.com' });
  const withPassword = await ts.http.post(`${AUTH}/signup`, { email: 'codeonly@example.com', password_hash: sha256(PASSWORD) });
  for (const res of [again, withPassword]) {
    assertTokenResponse(res, 201, { email: 'codeonly@example.com', role: 'member' });
    assert.notEqual(res.body.user.id, first.body.user.id);
  }
});

test('signup of an existing phone account without its password makes another account; with it, signs in (200)', async (t) => {
  const ts = await startTestService(t);
  const first = await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678', password_hash: sha256(PASSWORD) });
  assert.equal(first.status, 201);
  const other = await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678' });
  assert.equal(other.status, 201);
  assert.notEqual(other.body.user.id, first.body.user.id);
  const right = await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678', password_hash: sha256(PASSWORD) });
  assert.equal(right.status, 200);
  assert.equal(right.body.user.id, first.body.user.id);
});

test('signup with neither email nor phone answers 400 validation_failed', async (t) => {
  const ts = await startTestService(t);
  for (const body of [{}, { password_hash: sha256(PASSWORD) }, { email: null, phone: null }]) {
    const res = await ts.http.post(`${AUTH}/signup`, body);
    assertError(res, 400, 'validation_failed');
    assert.ok(Array.isArray(res.body.error.details) && res.body.error.details.length > 0);
  }
});

test('signup with an email that is not an address answers 400 validation_failed naming the email', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/signup`, { email: 'not-an-address' });
  assertError(res, 400, 'validation_failed');
  assert.ok(res.body.error.details.some((d: { path: string }) => d.path === 'email'));
});

test('signup with an email in the reserved phone.invalid domain is refused, so no one can take a phone number', async (t) => {
  const ts = await startTestService(t);
  const reserved = `phone-${sha256('+4712345678').slice(0, 16)}@phone.invalid`;
  const res = await ts.http.post(`${AUTH}/signup`, { email: reserved, password_hash: sha256(PASSWORD) });
  assertError(res, 400, 'validation_failed');
  assert.ok(res.body.error.details.some((d: { path: string }) => d.path === 'email'));
  // The phone's owner can still sign up, and gets exactly that internal email.
  assertTokenResponse(await ts.http.post(`${AUTH}/signup`, { phone: '+4712345678' }), 201, { email: reserved, role: 'member' });
});

test("signup for a superadmin's email never returns a token for the superadmin", async (t) => {
  const ts = await startTestService(t);
  const root = await createSuperadmin(ts, 'root@example.com', PASSWORD);
  const attempts = [
    { email: 'root@example.com', password_hash: sha256(PASSWORD) },
    { email: ' ROOT@example.com', password_hash: sha256(PASSWORD) },
    { email: 'root@example.com', password_hash: sha256('guess') },
    { email: 'root@example.com' },
  ];
  // The second attempt repeats the first's password: it reaches the account the first made (docs/api.md,
  // "Signup": whichever claimant's password matches), as it would on an address nobody held.
  const statuses = [201, 200, 201, 201];
  for (const [i, body] of attempts.entries()) {
    const res = await ts.http.post(`${AUTH}/signup`, body);
    assertTokenResponse(res, statuses[i]!, { email: 'root@example.com', role: 'member' });
    assert.notEqual(res.body.user.id, root.id);
    // A claim on an address the superadmin holds proven can never be proven.
    assert.equal((await ts.http.get('/api/v1/me', res.body.access_token)).body.user.email_proven, false);
  }
});

// ---- login ----

test('login by the identifier_hash of the email answers 200 with the token response', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'chadia@example.com', PASSWORD);
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('chadia@example.com'), password_hash: sha256(PASSWORD) });
  assertTokenResponse(res, 200, { email: 'chadia@example.com', role: 'member', id: signed.user.id });
});

test('login by the identifier_hash of the phone answers 200 with the token response', async (t) => {
  const ts = await startTestService(t);
  const signed = await ts.http.post(`${AUTH}/signup`, { phone: '+15551234567', password_hash: sha256(PASSWORD) });
  assert.equal(signed.status, 201);
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: sha256('+15551234567'), password_hash: sha256(PASSWORD) });
  assertTokenResponse(res, 200, { email: signed.body.user.email, role: 'member', id: signed.body.user.id });
});

test('password hashing runs off the event loop: /healthz answers while a costly login is still being checked', async (t) => {
  // BCRYPT_COST=13: about a second per check here, far longer than the waits below.
  const ts = await startTestService(t, { env: { BCRYPT_COST: '13' } });
  assert.equal((await ts.http.post(`${AUTH}/signup`, { email: 'slow@example.com', password_hash: sha256(PASSWORD) })).status, 201);
  let loginDone = false;
  const login = ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('slow@example.com'), password_hash: sha256(PASSWORD) }).then((r) => ((loginDone = true), r));
  await new Promise((r) => setTimeout(r, 150)); // the login is with the hasher by now
  for (let i = 0; i < 3; i++) assert.equal((await ts.http.get('/healthz')).status, 200);
  assert.equal(loginDone, false, 'the health checks were answered while the password was still being checked');
  assert.equal((await login).status, 200);
});

test('login accepts an upper-case hex password_hash as the same digest', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'dawud@example.com', PASSWORD);
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('dawud@example.com'), password_hash: sha256(PASSWORD).toUpperCase() });
  assert.equal(res.status, 200);
});

test('login failures answer 401 invalid_credentials with one identical body whatever the cause', async (t) => {
  const ts = await startTestService(t);
  await signupMember(ts.http, 'member@example.com', PASSWORD);
  assert.equal((await ts.http.post(`${AUTH}/signup`, { email: 'nopassword@example.com' })).status, 201);
  await createSuperadmin(ts, 'root@example.com', PASSWORD);

  const unknown = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('nobody@example.com'), password_hash: sha256(PASSWORD) });
  const wrong = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('member@example.com'), password_hash: sha256('wrong') });
  const noPassword = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('nopassword@example.com'), password_hash: sha256(PASSWORD) });
  const superadmin = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('root@example.com'), password_hash: sha256(PASSWORD) });

  const body = assertError(unknown, 401, 'invalid_credentials');
  for (const res of [wrong, noPassword, superadmin]) {
    assert.equal(res.status, 401);
    assert.deepEqual(res.body, body);
  }
});

test('the access token is HS256 and carries id, email, role, ver, iat and exp seven days after iat', async (t) => {
  const ts = await startTestService(t);
  const before = Math.floor(Date.now() / 1000);
  const signed = await signupMember(ts.http, 'eman@example.com', PASSWORD);
  const header = decodeProtectedHeader(signed.access_token);
  const claims = decodeJwt(signed.access_token);
  assert.equal(header.alg, 'HS256');
  assert.equal(claims.id, signed.user.id);
  assert.equal(claims.email, 'eman@example.com');
  assert.equal(claims.role, 'member');
  assert.equal(typeof claims.ver, 'number');
  assert.equal(typeof claims.iat, 'number');
  assert.ok(claims.iat! >= before && claims.iat! <= Math.floor(Date.now() / 1000));
  assert.equal(claims.exp! - claims.iat!, SEVEN_DAYS_SECONDS);
});

test('GET /me accepts the access token and returns the signed-in user', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'farah@example.com', PASSWORD);
  const me = await ts.http.get('/api/v1/me', signed.access_token);
  assert.equal(me.status, 200);
  assert.equal(me.body.user.id, signed.user.id);
  assert.equal(me.body.user.email, 'farah@example.com');
  assert.equal(me.body.user.role, 'member');
  assert.equal(me.body.user.has_password, true);
  assert.deepEqual(me.body.memberships, []);
  assert.deepEqual(me.body.admin_of, []);
});

test('GET /me without a token answers 401 unauthorized', async (t) => {
  const ts = await startTestService(t);
  assertError(await ts.http.get('/api/v1/me'), 401, 'unauthorized');
});

// ---- tokens the server must refuse ----

test('a token forged with the right secret and current claims is accepted (so the refusals below are meaningful)', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'ghada@example.com');
  const token = await forgeToken({ id: signed.user.id, email: signed.user.email, role: 'member', ver: 0 });
  assert.equal((await ts.http.get('/api/v1/me', token)).status, 200);
});

test('a token with alg none is refused with 401 unauthorized', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'ghada@example.com');
  const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const iat = Math.floor(Date.now() / 1000);
  const unsigned = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ id: signed.user.id, email: signed.user.email, role: 'member', ver: 0, iat, exp: iat + 3600 })}`;
  assertError(await ts.http.get('/api/v1/me', `${unsigned}.`), 401, 'unauthorized');
  // Also with something in the signature place, so the token reaches the verifier.
  assertError(await ts.http.get('/api/v1/me', `${unsigned}.c2lnbmF0dXJl`), 401, 'unauthorized');
});

test('a token signed with HS512 and the right secret is refused with 401 unauthorized', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'ghada@example.com');
  const token = await forgeToken({ id: signed.user.id, email: signed.user.email, role: 'member', ver: 0 }, { alg: 'HS512' });
  assertError(await ts.http.get('/api/v1/me', token), 401, 'unauthorized');
});

test('a token signed with a wrong secret is refused with 401 unauthorized', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'ghada@example.com');
  const token = await forgeToken({ id: signed.user.id, email: signed.user.email, role: 'member', ver: 0 }, { secret: 'another-secret-0123456789-abcdefghijklmnop' });
  assertError(await ts.http.get('/api/v1/me', token), 401, 'unauthorized');
});

test('a token claiming superadmin for a member, signed with a wrong secret, is refused', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'ghada@example.com');
  const token = await forgeToken({ id: signed.user.id, email: signed.user.email, role: 'superadmin', ver: 0 }, { secret: 'x'.repeat(40) });
  assertError(await ts.http.get('/api/v1/me', token), 401, 'unauthorized');
});

test('a token for an unknown user id or an old token version is refused', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'ghada@example.com');
  const unknownUser = await forgeToken({ id: 'no-such-user', email: 'ghada@example.com', role: 'member', ver: 0 });
  const otherVersion = await forgeToken({ id: signed.user.id, email: signed.user.email, role: 'member', ver: 1 });
  assertError(await ts.http.get('/api/v1/me', unknownUser), 401, 'unauthorized');
  assertError(await ts.http.get('/api/v1/me', otherVersion), 401, 'unauthorized');
});

test('a token expires seven days after it was issued', async (t) => {
  const clock = createManualClock();
  const ts = await startTestService(t, { clock });
  const signed = await signupMember(ts.http, 'hana@example.com');
  clock.advance((SEVEN_DAYS_SECONDS - 1) * 1000);
  assert.equal((await ts.http.get('/api/v1/me', signed.access_token)).status, 200);
  clock.advance(2000);
  assertError(await ts.http.get('/api/v1/me', signed.access_token), 401, 'unauthorized');
});

test('ACCESS_TOKEN_EXPIRE_DAYS=2 gives tokens of two days: expires_in, exp, and a refusal once they are spent', async (t) => {
  const TWO_DAYS_SECONDS = 2 * 24 * 3600;
  const clock = createManualClock();
  const ts = await startTestService(t, { clock, env: { ACCESS_TOKEN_EXPIRE_DAYS: '2' } });
  const signup = await ts.http.post(`${AUTH}/signup`, { email: 'hana@example.com', password_hash: sha256(PASSWORD) });
  const login = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('hana@example.com'), password_hash: sha256(PASSWORD) });
  for (const res of [signup, login]) {
    assert.equal(res.body.expires_in, TWO_DAYS_SECONDS);
    const claims = decodeJwt(res.body.access_token);
    assert.equal(claims.exp! - claims.iat!, TWO_DAYS_SECONDS);
  }
  clock.advance((TWO_DAYS_SECONDS - 1) * 1000);
  assert.equal((await ts.http.get('/api/v1/me', login.body.access_token)).status, 200);
  clock.advance(2000);
  assertError(await ts.http.get('/api/v1/me', login.body.access_token), 401, 'unauthorized');
});

test('a forged token whose exp has passed is refused even with the right secret', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'hana@example.com');
  const iat = Math.floor(Date.now() / 1000) - SEVEN_DAYS_SECONDS - 60;
  const token = await forgeToken({ id: signed.user.id, email: signed.user.email, role: 'member', ver: 0 }, { iat });
  assertError(await ts.http.get('/api/v1/me', token), 401, 'unauthorized');
});

test('a malformed Authorization header answers 401 unauthorized', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'idris@example.com');
  const headers = [
    signed.access_token, // no scheme
    `Basic ${signed.access_token}`,
    'Bearer',
    'Bearer ',
    'Bearer not-a-jwt',
    'Bearer a.b',
    `Bearer ${signed.access_token}.extra`,
    `Bearer ${signed.access_token.slice(0, -3)}`,
  ];
  for (const authorization of headers) {
    const res = await ts.http.request('GET', '/api/v1/me', { headers: { authorization } });
    assertError(res, 401, 'unauthorized');
  }
  assert.equal((await ts.http.get('/api/v1/me', signed.access_token)).status, 200);
});
