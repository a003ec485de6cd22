import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeJwt } from 'jose';
import { FRESH_SIGN_IN_SECONDS } from '../../src/people/sessions.ts';
import { AUTH, assertError } from '../support/api.ts';
import { createManualClock, sha256, startTestService, type TestService } from '../support/service.ts';

// docs/api.md "Console sessions" and "Changing the password": a token minted from a console session carries the
// time of the sign-in that opened the session (`auth_time`, OpenID Connect Core 1.0 §2), and every "sign-in in the
// last 10 minutes" rule reads that time, not the minted token's own `iat`.

const COOKIE = 'minaret_console';
const MINUTE = 60_000;

const consoleHeaders = (ts: TestService) => ({ origin: new URL(ts.url).origin, 'x-minaret-console': '1' });

/** An account without a password (it signs in with codes): the one that may set a first password without a current one. */
async function signupWithoutPassword(ts: TestService, email: string): Promise<string> {
  const res = await ts.http.post(`${AUTH}/signup`, { email });
  assert.equal(res.status, 201);
  return res.body.access_token;
}

const openSession = (ts: TestService, token: string) => ts.http.request('POST', `${AUTH}/session`, { token, headers: consoleHeaders(ts) });

/** The cookie a browser sends back after an answer that set it. */
function cookieOf(res: { headers: Headers }): string {
  const set = res.headers.getSetCookie().find((c) => c.startsWith(`${COOKIE}=`));
  assert.ok(set, 'the answer sets the session cookie');
  return set.split(';')[0]!;
}

async function mint(ts: TestService, cookie: string): Promise<string> {
  const res = await ts.http.request('POST', `${AUTH}/session/token`, { headers: { ...consoleHeaders(ts), cookie } });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.access_token;
}

const setFirstPassword = (ts: TestService, token: string) => ts.http.post('/api/v1/me/password', { new_password_hash: sha256('a first password') }, token);

test('a token minted 11 minutes after the sign-in that opened its session can neither set a first password nor open a session', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const signIn = await signupWithoutPassword(ts, 'yusuf@fresh.test');
  const signedInAt = decodeJwt(signIn).iat!;
  const opened = await openSession(ts, signIn);
  assert.equal(opened.status, 201);
  const cookie = cookieOf(opened);

  clock.advance(11 * MINUTE);
  const minted = await mint(ts, cookie);
  const claims = decodeJwt(minted);
  assert.equal(claims.auth_time, signedInAt, 'the minted token carries the sign-in time');
  assert.ok(claims.iat! - signedInAt >= 11 * 60, 'while its own iat is new');

  assertError(await setFirstPassword(ts, minted), 403, 'forbidden');
  assertError(await openSession(ts, minted), 403, 'forbidden');
  assert.equal((await ts.http.get('/api/v1/me', minted)).body.user.has_password, false);
  assert.equal((await ts.http.get('/api/v1/me', minted)).status, 200, 'a refused trade leaves the token working');
});

test(`a token minted within ${FRESH_SIGN_IN_SECONDS / 60} minutes of the sign-in can open a session and set a first password`, async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const opened = await openSession(ts, await signupWithoutPassword(ts, 'maryam@fresh.test'));
  const first = cookieOf(opened);

  clock.advance(9 * MINUTE);
  const again = await openSession(ts, await mint(ts, first));
  assert.equal(again.status, 201, JSON.stringify(again.body));
  const second = cookieOf(again);
  const refused = await ts.http.request('POST', `${AUTH}/session/token`, { headers: { ...consoleHeaders(ts), cookie: first } });
  assertError(refused, 401, 'unauthorized'); // the trade ended the session the token came from

  clock.advance(30_000);
  const res = await setFirstPassword(ts, await mint(ts, second));
  assert.equal(res.status, 200, JSON.stringify(res.body));
});

test('the attacker: a chain of sessions, each opened from the last one\'s token, still counts from the first sign-in', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  let cookie = cookieOf(await openSession(ts, await signupWithoutPassword(ts, 'idris@fresh.test')));
  // Every 4 minutes a new session from the newest minted token: only the first two trades are within 10 minutes.
  const statuses: number[] = [];
  for (let i = 0; i < 3; i++) {
    clock.advance(4 * MINUTE);
    const res = await openSession(ts, await mint(ts, cookie));
    statuses.push(res.status);
    if (res.status === 201) cookie = cookieOf(res);
  }
  assert.deepEqual(statuses, [201, 201, 403]);
  assertError(await setFirstPassword(ts, await mint(ts, cookie)), 403, 'forbidden');
});

test('a first password set from a fresh sign-in gives a token that keeps that sign-in time, so it cannot stretch the window', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const signIn = await signupWithoutPassword(ts, 'zaid@fresh.test');
  clock.advance(9 * MINUTE);
  const res = await setFirstPassword(ts, signIn);
  assert.equal(res.status, 200);
  assert.equal(decodeJwt(res.body.access_token).auth_time, decodeJwt(signIn).iat);
  clock.advance(2 * MINUTE);
  assertError(await openSession(ts, res.body.access_token), 403, 'forbidden');
});
