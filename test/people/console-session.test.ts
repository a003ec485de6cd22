import { test } from 'node:test';
import assert from 'node:assert/strict';
import { storeOf } from '../support/database.ts';
import { AUTH, assertError, emailId, lastSent } from '../support/api.ts';
import { confirmAddress, signInSuperadmin } from '../support/people.ts';
import { createManualClock, sha256, startTestService, type HttpResult, type TestService } from '../support/service.ts';

// docs/api.md "Console sessions": a fresh sign-in token traded for an HttpOnly cookie, short-lived tokens minted
// from it, a CSRF rule on every request that carries it, and every way of ending tokens ending it too.

const PASSWORD = 'correct horse battery staple';
const COOKIE = 'minaret_console';

interface Session {
  /** `minaret_console=<value>`, as a browser would send it back. */
  cookie: string;
  value: string;
  setCookie: string;
  token: string;
  res: HttpResult;
}

const originOf = (ts: TestService) => new URL(ts.url).origin;
const consoleHeaders = (ts: TestService, extra: Record<string, string> = {}) => ({ origin: originOf(ts), 'x-minaret-console': '1', ...extra });

async function signup(ts: TestService, email: string): Promise<{ token: string; id: string }> {
  const res = await ts.http.post(`${AUTH}/signup`, { email, password_hash: sha256(PASSWORD) });
  assert.equal(res.status, 201);
  return { token: res.body.access_token, id: res.body.user.id };
}

async function login(ts: TestService, email: string, password = PASSWORD): Promise<string> {
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId(email), password_hash: sha256(password) });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.access_token;
}

const setCookieOf = (res: HttpResult) => res.headers.getSetCookie().find((c) => c.startsWith(`${COOKIE}=`)) ?? null;

async function openSession(ts: TestService, token: string, headers: Record<string, string> = consoleHeaders(ts)): Promise<Session> {
  const res = await ts.http.request('POST', `${AUTH}/session`, { token, headers });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const setCookie = setCookieOf(res);
  assert.ok(setCookie, 'the answer sets the session cookie');
  const value = setCookie.split(';')[0]!.slice(COOKIE.length + 1);
  return { cookie: `${COOKIE}=${value}`, value, setCookie, token: res.body.access_token, res };
}

const mint = (ts: TestService, cookie: string | null, headers: Record<string, string> = consoleHeaders(ts)) =>
  ts.http.request('POST', `${AUTH}/session/token`, { headers: { ...headers, ...(cookie && { cookie }) } });
const me = (ts: TestService, token: string) => ts.http.get('/api/v1/me', token);

/** The service's console_sessions rows, through a second connection to its store (SQLite or PostgreSQL). */
async function sessionRows(ts: TestService): Promise<Array<Record<string, string | number>>> {
  const { store, close } = await storeOf(ts);
  try {
    return await store.selectFrom('console_sessions').selectAll().orderBy('created_at').orderBy('id').execute();
  } finally {
    await close();
  }
}

/** The session is over: the cookie gets 401, and the answer makes the browser forget it. */
async function assertEnded(ts: TestService, s: Session, why: string) {
  const res = await mint(ts, s.cookie);
  assertError(res, 401, 'unauthorized');
  assert.match(setCookieOf(res) ?? '', new RegExp(`^${COOKIE}=; .*Max-Age=0`), `${why}: the cookie is cleared`);
  assertError(await me(ts, s.token), 401, 'unauthorized');
}

test('opening a session: the cookie is HttpOnly, SameSite=Strict, on the session path only; the store keeps a hash of its secret', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { token, id } = await signup(ts, 'amina@session.test');
  const s = await openSession(ts, token);

  const attributes = s.setCookie.split('; ').slice(1);
  assert.deepEqual(attributes.sort(), ['HttpOnly', `Max-Age=${30 * 86_400}`, 'Path=/api/v1/auth/session', 'SameSite=Strict'].sort(),
    'plain http on 127.0.0.1 (loopback): no Secure, which the browser would drop there');
  assert.match(s.value, /^[\w-]{22}\.[\w-]{43}$/, '128 bits of id, 256 bits of secret');
  assert.equal(s.res.body.expires_in, 15 * 60, 'the page gets a short-lived token, not a week-long one');
  assert.equal(s.res.body.user.id, id);
  assert.equal((await me(ts, s.token)).status, 200);
  assertError(await me(ts, token), 401, 'unauthorized'); // the traded sign-in token died in the trade

  const rows = await sessionRows(ts);
  assert.equal(rows.length, 1);
  const [sid, secret] = s.value.split('.') as [string, string];
  assert.equal(rows[0]!.id, sid);
  assert.equal(rows[0]!.secret_hash, sha256(secret), 'SHA-256 of the secret');
  assert.equal(JSON.stringify(rows).includes(secret), false, 'never the secret itself');
  assert.equal(rows[0]!.user_id, id);
  assert.equal(rows[0]!.expires_at, (rows[0]!.created_at as number) + 30 * 86_400);

  const minted = await mint(ts, s.cookie);
  assert.equal(minted.status, 200, JSON.stringify(minted.body));
  assert.deepEqual(Object.keys(minted.body).sort(), ['access_token', 'expires_in', 'token_type', 'user']);
  assert.equal(minted.body.expires_in, 15 * 60);
  assert.equal(minted.body.user.email, 'amina@session.test');
  assert.match(minted.headers.get('cache-control') ?? '', /no-store/);
  assert.equal((await me(ts, minted.body.access_token)).status, 200);
  assert.equal(setCookieOf(minted), null, 'minting leaves the cookie as it is');
});

test('Secure is set unless the page is plain http on a loopback host; plain http elsewhere opens no session and keeps the token', async (t) => {
  const tls = await startTestService(t, { logLevel: 'warn', env: { PUBLIC_URL: 'https://minaret.example.org' } });
  const a = await signup(tls, 'bilal@session.test');
  const s = await openSession(tls, a.token, { origin: 'https://minaret.example.org', 'x-minaret-console': '1' });
  assert.ok(s.setCookie.split('; ').includes('Secure'), 'https: Secure');
  assert.equal((await mint(tls, s.cookie, { origin: 'https://minaret.example.org', 'x-minaret-console': '1' })).status, 200);
  assertError(await mint(tls, s.cookie), 403, 'forbidden'); // with PUBLIC_URL, the request's own host is not the origin

  const proxied = await startTestService(t, { logLevel: 'warn' });
  const b = await signup(proxied, 'yusuf@session.test');
  const httpsOrigin = originOf(proxied).replace('http:', 'https:');
  const viaProxy = await openSession(proxied, b.token, { origin: httpsOrigin, 'x-minaret-console': '1', 'x-forwarded-proto': 'https' });
  assert.ok(viaProxy.setCookie.split('; ').includes('Secure'), 'https ended by a proxy in front of a loopback port: Secure');

  const lan = await startTestService(t, { logLevel: 'warn', env: { PUBLIC_URL: 'http://minaret.lan:8080' } });
  const c = await signup(lan, 'hafsa@session.test');
  const refused = await lan.http.request('POST', `${AUTH}/session`, { token: c.token, headers: { origin: 'http://minaret.lan:8080', 'x-minaret-console': '1' } });
  assertError(refused, 403, 'forbidden');
  assert.equal(setCookieOf(refused), null);
  assert.equal((await me(lan, c.token)).status, 200, 'the token was not traded away');
  assert.deepEqual(await sessionRows(lan), []);
});

test('CSRF: a missing console header, a foreign Origin or none at all is refused with 403 and changes nothing', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const s = await openSession(ts, (await signup(ts, 'khadija@session.test')).token);
  const before = await sessionRows(ts);
  const refusals: Array<[string, Record<string, string>]> = [
    ['no X-Minaret-Console', { origin: originOf(ts) }],
    ['X-Minaret-Console other than 1', { origin: originOf(ts), 'x-minaret-console': 'yes' }],
    ['a foreign Origin', { origin: 'https://evil.example', 'x-minaret-console': '1' }],
    ['another port of the same host', { origin: 'http://127.0.0.1:1', 'x-minaret-console': '1' }],
    ['Origin: null (a sandboxed frame)', { origin: 'null', 'x-minaret-console': '1' }],
    ['no Origin', { 'x-minaret-console': '1' }],
  ];
  for (const [what, headers] of refusals) {
    const res = await mint(ts, s.cookie, headers);
    assert.equal(res.status, 403, what);
    assert.deepEqual(Object.keys(res.body), ['error'], `${what}: the documented error shape`);
    assert.equal(res.body.error.code, 'forbidden', what);
    assert.equal(setCookieOf(res), null, `${what}: the cookie is left alone`);
  }
  assert.deepEqual(await sessionRows(ts), before, 'no session was used or ended');

  // Opening one takes the same rule: nothing is traded, no row is written.
  const other = await signup(ts, 'umar@session.test');
  for (const [what, headers] of refusals) {
    const res = await ts.http.request('POST', `${AUTH}/session`, { token: other.token, headers });
    assertError(res, 403, 'forbidden');
    assert.equal(setCookieOf(res), null, what);
  }
  assert.equal((await me(ts, other.token)).status, 200);
  assert.deepEqual(await sessionRows(ts), before);
  assert.equal((await mint(ts, s.cookie)).status, 200, 'and the session still works from its own page');
});

test('bearer clients are unaffected: sign-in answers as before, no cookie anywhere, logout as before', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const res = await ts.http.post(`${AUTH}/signup`, { email: 'zaid@session.test', password_hash: sha256(PASSWORD) });
  assert.equal(res.body.expires_in, 7 * 86_400);
  assert.deepEqual(res.headers.getSetCookie(), []);
  const token = await login(ts, 'zaid@session.test');
  const loggedOut = await ts.http.post(`${AUTH}/logout`, undefined, token);
  assert.equal(loggedOut.status, 204);
  assert.deepEqual(loggedOut.headers.getSetCookie(), [], 'a token from a sign-in clears no cookie');
  // No cookie at all: nothing to restore, answered without a failure (a signed-out page asks on every load).
  const none = await mint(ts, null);
  assert.equal(none.status, 204);
  assert.deepEqual(none.headers.getSetCookie(), []);
  assertError(await mint(ts, `${COOKIE}=garbage`), 401, 'unauthorized');
  // A session's own token opens another only within 10 minutes of the sign-in that opened it: test/people/sign-in-time.test.ts.
  assertError(await ts.http.request('POST', `${AUTH}/session`, { headers: consoleHeaders(ts) }), 401, 'unauthorized');
});

test('a wrong secret for a real session id is refused and leaves the session alone', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const s = await openSession(ts, (await signup(ts, 'maryam@session.test')).token);
  const forged = `${COOKIE}=${s.value.split('.')[0]}.${'A'.repeat(43)}`;
  assertError(await mint(ts, forged), 401, 'unauthorized');
  assert.equal((await mint(ts, s.cookie)).status, 200);
});

test('sign out ends the session and clears the cookie; the other sessions of the account go on', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { token } = await signup(ts, 'salman@session.test');
  const laptop = await openSession(ts, token);
  const phone = await openSession(ts, await login(ts, 'salman@session.test'));
  const res = await ts.http.post(`${AUTH}/logout`, undefined, laptop.token);
  assert.equal(res.status, 204);
  assert.match(setCookieOf(res) ?? '', /^minaret_console=; Path=\/api\/v1\/auth\/session; Max-Age=0; HttpOnly; SameSite=Strict$/);
  await assertEnded(ts, laptop, 'logout');
  assert.equal((await mint(ts, phone.cookie)).status, 200);
  assert.equal((await sessionRows(ts)).length, 1);
});

test('sign out everywhere, a password change and a password reset end every session of the account', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { token } = await signup(ts, 'ali@session.test');

  const a = await openSession(ts, token);
  const b = await openSession(ts, await login(ts, 'ali@session.test'));
  const all = await ts.http.post(`${AUTH}/logout-all`, undefined, await login(ts, 'ali@session.test'));
  assert.equal(all.status, 204);
  await assertEnded(ts, a, 'logout-all');
  await assertEnded(ts, b, 'logout-all');
  assert.deepEqual(await sessionRows(ts), []);

  const c = await openSession(ts, await login(ts, 'ali@session.test'));
  const changed = await ts.http.post('/api/v1/me/password', { current_password_hash: sha256(PASSWORD), new_password_hash: sha256('second password') }, c.token);
  assert.equal(changed.status, 200);
  await assertEnded(ts, c, 'password change');

  const d = await openSession(ts, await login(ts, 'ali@session.test', 'second password'));
  assert.equal((await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('ali@session.test') })).status, 202);
  const reset = await ts.http.post(`${AUTH}/reset-password`, { token: (await lastSent(ts, 'password_reset')).token, password_hash: sha256('third password') });
  assert.equal(reset.status, 200);
  await assertEnded(ts, d, 'password reset');
});

test('a role change and the deletion of the account end its sessions', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts, 'root@session.test');
  const person = await signup(ts, 'imran@session.test');
  const s = await openSession(ts, person.token);
  const unrelated = await openSession(ts, (await signup(ts, 'nadia@session.test')).token);

  assert.equal((await ts.http.patch(`/api/v1/users/${person.id}`, { role: 'superadmin' }, root.token)).status, 200);
  await assertEnded(ts, s, 'role change');
  // A superadmin signs in only by the two-step flow: back to member for the next password sign-in.
  assert.equal((await ts.http.patch(`/api/v1/users/${person.id}`, { role: 'member' }, root.token)).status, 200);

  const again = await openSession(ts, await login(ts, 'imran@session.test'));
  assert.equal((await ts.http.delete(`/api/v1/users/${person.id}`, root.token)).status, 204);
  await assertEnded(ts, again, 'deletion');
  assert.deepEqual((await sessionRows(ts)).map((r) => r.id), [unrelated.value.split('.')[0]], 'only the other person\'s session is left');
  assert.equal((await mint(ts, unrelated.cookie)).status, 200);
});

test('idle and absolute expiry end a session; a minted token lives its 15 minutes and never past the session', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock, env: { CONSOLE_SESSION_IDLE_HOURS: '2', CONSOLE_SESSION_MAX_DAYS: '1' } });
  const idle = await openSession(ts, (await signup(ts, 'sara@session.test')).token);
  const busy = await openSession(ts, await login(ts, 'sara@session.test'));
  assert.match(busy.setCookie, /Max-Age=86400/);

  clock.advance((15 * 60 + 1) * 1000);
  assertError(await me(ts, busy.token), 401, 'unauthorized'); // the short token ran out
  const fresh = await mint(ts, busy.cookie);
  assert.equal(fresh.status, 200, 'the session mints the next one');

  clock.advance((2 * 3600 - 15 * 60) * 1000); // idle for 2 h since it was opened; busy was used 15 min in
  assertError(await mint(ts, idle.cookie), 401, 'unauthorized');
  for (let hour = 0; hour < 21; hour++) {
    assert.equal((await mint(ts, busy.cookie)).status, 200, `in use, hour ${hour}`);
    clock.advance(3600 * 1000);
  }
  // 1 day minus 14 minutes in (it is 23 h and a second now): the next token ends with the session, not 15 minutes on.
  clock.advance((46 * 60 - 1) * 1000);
  const last = await mint(ts, busy.cookie);
  assert.equal(last.status, 200);
  assert.ok(last.body.expires_in < 15 * 60 && last.body.expires_in > 0, `expires_in ${last.body.expires_in}`);
  clock.advance(last.body.expires_in * 1000);
  assertError(await mint(ts, busy.cookie), 401, 'unauthorized');
  assert.deepEqual(await sessionRows(ts), []);
});

test('a person keeps at most CONSOLE_SESSIONS_PER_USER sessions: the one unused longest goes', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock, env: { CONSOLE_SESSIONS_PER_USER: '2' } });
  const first = await openSession(ts, (await signup(ts, 'hamza@session.test')).token);
  clock.advance(1000);
  const second = await openSession(ts, await login(ts, 'hamza@session.test'));
  clock.advance(1000);
  assert.equal((await mint(ts, first.cookie)).status, 200); // now the first is the more recently used
  clock.advance(1000);
  const third = await openSession(ts, await login(ts, 'hamza@session.test'));
  assert.equal((await sessionRows(ts)).length, 2);
  assertError(await mint(ts, second.cookie), 401, 'unauthorized');
  assert.equal((await mint(ts, first.cookie)).status, 200);
  assert.equal((await mint(ts, third.cookie)).status, 200);
});

test('a sign-in older than 10 minutes cannot open a session', async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const { token } = await signup(ts, 'tariq@session.test');
  clock.advance(11 * 60 * 1000);
  assertError(await ts.http.request('POST', `${AUTH}/session`, { token, headers: consoleHeaders(ts) }), 403, 'forbidden');
  assert.equal((await me(ts, token)).status, 200, 'and the token was not traded');
  assert.deepEqual(await sessionRows(ts), []);
});

/** Reads a Server-Sent Events body until `wanted` shows up (true) or the server ends the stream (false). */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, wanted: string): Promise<boolean> {
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return false;
    text += decoder.decode(value, { stream: true });
    if (text.includes(wanted)) return true;
  }
}

test("an admin's event stream opened with a session's token lives with the session, past the token, and ends with it", async (t) => {
  const clock = createManualClock(Date.parse('2026-03-01T10:00:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const root = await signInSuperadmin(ts, 'root@session.test');
  const imam = await signup(ts, 'imam@session.test');
  await confirmAddress(ts, imam.token, 'email', 'imam@session.test');
  const mosque = await ts.http.post('/api/v1/mosques', { name: 'Masjid Al-Noor', owner_user_id: imam.id }, root.token);
  assert.equal(mosque.status, 201);
  const s = await openSession(ts, imam.token);
  const ticket = await ts.http.post(`/api/v1/mosques/${mosque.body.id}/events/ticket`, undefined, s.token);
  assert.equal(ticket.status, 201);
  const stream = await fetch(`${ts.url}/api/v1/mosques/${mosque.body.id}/events/stream?ticket=${ticket.body.ticket}`);
  assert.equal(stream.status, 200);
  const reader = stream.body!.getReader();
  t.after(() => reader.cancel().catch(() => {}));

  clock.advance(20 * 60 * 1000); // the token the stream opened with has expired
  const next = await mint(ts, s.cookie);
  assert.equal(next.status, 200);
  // A change naming the user re-checks the stream at once (api/mosques/events.ts); the session is live, so it stays.
  const moved = await ts.http.patch('/api/v1/me', { phone: '+442079460123', current_password_hash: sha256(PASSWORD) }, next.body.access_token);
  assert.equal(moved.status, 200);
  const started = await ts.http.post(`/api/v1/mosques/${mosque.body.id}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, next.body.access_token);
  assert.equal(started.status, 201);
  assert.equal(await readUntil(reader, 'event: broadcast'), true, 'the stream is still open and delivers');

  assert.equal((await ts.http.post(`${AUTH}/logout-all`, undefined, next.body.access_token)).status, 204);
  assert.equal(await readUntil(reader, 'never sent'), false, 'the session ended, and the stream with it');
});
