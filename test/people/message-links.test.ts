import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256, startTestService, type TestService } from '../support/service.ts';
import { API, createMosque, member, signInSuperadmin } from '../support/people.ts';
import { assertError, AUTH } from '../support/api.ts';
import { JOIN_LOOKUP_WRONG_PER_ADDRESS } from '../../api/mosques/memberships.ts';

/** Every message Minaret sends leads to a console page (docs/settings.md, PUBLIC_URL; docs/api.md "Join links"). */

const PUBLIC = 'https://minaret.example.org';

async function allSent(ts: TestService) {
  await ts.service.notifier.idle();
  return ts.messages;
}

test('every message carries a link under PUBLIC_URL to the page its reader needs, and its text names that link', async (t) => {
  const ts = await startTestService(t, { env: { PUBLIC_URL: PUBLIC }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts); // superadmin_otp
  const owner = await member(ts, 'owner@links.test'); // confirm_address
  const mosque = await createMosque(ts, root.token, owner);
  assert.equal((await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'new@links.test' }, owner.token)).status, 201);
  assert.equal((await ts.http.post(`${AUTH}/login-code`, { identifier_hash: sha256('owner@links.test'), channel: 'email' })).status, 202);
  assert.equal((await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: sha256('owner@links.test'), channel: 'email' })).status, 202);
  await ts.http.post(`${AUTH}/signup`, { email: 'owner@links.test', password_hash: sha256('another password 1') }); // signup_attempt
  const moved = await ts.http.request('PATCH', `${API}/me`, { token: owner.token, body: { email: 'moved@links.test', current_password_hash: sha256('correct horse battery staple') } });
  assert.equal(moved.status, 200, JSON.stringify(moved.body)); // address_changed to the old address

  const expected: Record<string, string> = {
    superadmin_otp: '/superadmin', confirm_address: '/account', invite: '/', login_code: '/signin', password_reset: '/signin',
    signup_attempt: '/signin', address_changed: '/account',
  };
  const messages = await allSent(ts);
  assert.deepEqual([...new Set(messages.map((m) => m.purpose))].sort(), Object.keys(expected).sort(), 'each kind of message was sent');
  for (const m of messages) {
    assert.equal(m.link, `${PUBLIC}${expected[m.purpose]}`, `${m.purpose} leads to its page`);
    assert.ok(m.text.includes(m.link), `${m.purpose}'s text names ${m.link}: ${m.text}`);
  }
});

test("without PUBLIC_URL a message links to the service's own address", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await member(ts, 'amina@links.test');
  const [confirm] = await allSent(ts);
  assert.equal(confirm!.link, `${ts.url}/account`);
  assert.match(confirm!.text, new RegExp(`${ts.url.replace(/[.:/]/g, '\\$&')}/account`));
});

test('a join code tells anyone holding it the name of its mosque, and nothing else', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null, { name: 'Masjid An-Nur', stream_url: 'https://radio.example.org/live' });
  const res = await ts.http.get(`${API}/join/${mosque.join_code.toLowerCase()}`); // no token; codes are read case-blind
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { mosque_name: 'Masjid An-Nur' });
  assert.equal(res.headers.get('cache-control'), 'no-store');
  assertError(await ts.http.get(`${API}/join/NOPE2345`), 404, 'not_found');
  // A rotated code stops naming the mosque at once.
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, undefined, root.token)).status, 200);
  assertError(await ts.http.get(`${API}/join/${mosque.join_code}`), 404, 'not_found');
});

test('guessing join codes through the lookup is cut off after a few wrong ones, even for a right one', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  for (let i = 0; i < JOIN_LOOKUP_WRONG_PER_ADDRESS; i++) assertError(await ts.http.get(`${API}/join/GUESS${String(i).padStart(3, '0')}`), 404, 'not_found');
  const refused = await ts.http.get(`${API}/join/${mosque.join_code}`);
  assertError(refused, 429, 'rate_limited');
  assert.ok(Number(refused.headers.get('retry-after')) > 0);
});
