import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CONFIRMATIONS_PER_ADDRESS_PER_MINUTE } from '../../../api/people/me.ts';
import { createAfterAnswer } from '../../../src/platform/flow/after-answer.ts';
import { silentLogger } from '../../../src/platform/log.ts';
import { AUTH, assertError, emailId, sent } from '../../support/api.ts';
import { API, createMosque, member, mosqueActivity, mosqueAdmins, signInSuperadmin } from '../../support/people.ts';
import { signupMember, startTestService, type HttpResult } from '../../support/service.ts';

// docs/api.md "Signing in" and "Addresses: claims and proof": whether an address has an account must not show in
// an answer (membership of a mosque service says something about a person's religion), nor may claims of one
// address by several accounts multiply the messages sent to it.

test('work after the answer starts only once the current turn is over, and a failure is logged, never thrown', async () => {
  const errors: object[] = [];
  const after = createAfterAnswer({ ...silentLogger, error: (obj) => void errors.push(obj) });
  const order: string[] = [];
  after.defer('first', async () => void order.push('work'));
  after.defer('broken', async () => {
    throw new Error('the store went away');
  });
  // What a route does after deferring (its answer) is promise continuations of the same turn.
  for (let i = 0; i < 10; i++) await Promise.resolve();
  order.push('answer');
  assert.equal(after.isBusy(), true);
  await after.idle();
  assert.deepEqual(order, ['answer', 'work']);
  assert.deepEqual(errors, [{ what: 'broken', err: 'the store went away' }]);
  assert.equal(after.isBusy(), false);
});

/** The parts of an answer a caller can see, but the headers every answer differs in. */
const visible = (res: HttpResult) => ({
  status: res.status,
  body: res.body,
  headers: [...res.headers.keys()].filter((h) => h !== 'date' && h !== 'x-request-id').sort(),
});

for (const [route, purpose] of [['login-code', 'login_code'], ['forgot-password', 'password_reset']] as const) {
  test(`${route}: a held address and a free one get the same answer; only the held one is sent a message, after it`, async (t) => {
    const ts = await startTestService(t);
    await signupMember(ts.http, 'held@privacy.test');
    const held = await ts.http.post(`${AUTH}/${route}`, { identifier_hash: emailId('held@privacy.test') });
    const free = await ts.http.post(`${AUTH}/${route}`, { identifier_hash: emailId('free@privacy.test') });
    assert.deepEqual(visible(held), visible(free));
    assert.deepEqual(held.body, { status: 'accepted' });
    const messages = await sent(ts, purpose);
    assert.deepEqual(messages.map((m) => m.to), ['held@privacy.test']);
  });
}

test('an admin named by email: the same 202 and body for a proven holder, a mere claim and a free address; the grant follows', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@privacy.test');
  const mosque = await createMosque(ts, root.token, owner);
  const holder = await member(ts, 'holder@privacy.test');
  await member(ts, 'claimed@privacy.test', { unproven: true });
  const add = (email: string) => ts.http.post(`${API}/mosques/${mosque.id}/admins`, { email, can_trigger: true }, owner.token);

  const answers = [await add('holder@privacy.test'), await add('claimed@privacy.test'), await add('free@privacy.test')];
  for (const [i, email] of ['holder@privacy.test', 'claimed@privacy.test', 'free@privacy.test'].entries()) {
    assert.deepEqual(visible(answers[i]!), { ...visible(answers[0]!), body: { status: 'accepted', email, can_trigger: true, can_manage: false } });
  }

  await ts.service.notifier.idle(); // the work after the answers
  const admins = await mosqueAdmins(ts, root.token, mosque.id);
  assert.deepEqual(admins.map((a) => [a.email, a.can_trigger]).sort(), [['holder@privacy.test', true], ['owner@privacy.test', true]]);
  assert.equal(admins.find((a) => a.email === 'holder@privacy.test')?.user_id, holder.id);
  const waiting = (await mosqueActivity(ts, root.token, mosque.id)).filter((e) => e.kind === 'grant.waiting');
  assert.equal(waiting.length, 2, 'the claimed and the free address each wait for a proof');

  // Naming an admin again changes nothing and answers the same.
  const again = await add('holder@privacy.test');
  assert.deepEqual(visible(again), visible(answers[0]!));
  await ts.service.notifier.idle();
  assert.equal((await mosqueAdmins(ts, root.token, mosque.id)).length, 2);
});

test('confirmation codes are limited per address too: three accounts claiming one address cannot send it more than 3 a minute', async (t) => {
  const ts = await startTestService(t);
  const claimants: Array<{ id: string; token: string }> = [];
  for (let i = 0; i < 3; i++) {
    // A different password each time: the address's first account does not sign in, a new one claims it (docs/api.md, "Signup").
    const res = await signupMember(ts.http, 'target@privacy.test', `password number ${i}`);
    claimants.push({ id: res.user.id, token: res.access_token });
  }
  assert.equal(new Set(claimants.map((c) => c.id)).size, 3, 'three accounts, one address');
  const confirm = (token: string) => ts.http.post(`${API}/me/addresses/confirm`, { channel: 'email' }, token);

  const statuses: number[] = [];
  for (let round = 0; round < 2; round++) for (const c of claimants) statuses.push((await confirm(c.token)).status);
  // Each account asked twice (under its own limit of 3), the address was asked six times.
  assert.deepEqual(statuses, [202, 202, 202, 429, 429, 429]);
  const refused = await confirm(claimants[0]!.token);
  assertError(refused, 429, 'rate_limited');
  const wait = Number(refused.headers.get('retry-after'));
  assert.ok(wait >= 1 && wait <= 60, `Retry-After ${wait}`);
  const codes = (await sent(ts, 'confirm_address')).filter((m) => m.to === 'target@privacy.test');
  assert.equal(codes.length, CONFIRMATIONS_PER_ADDRESS_PER_MINUTE);

  // Another address is not held back by this one's limit.
  const other = await member(ts, 'other@privacy.test', { unproven: true });
  assert.equal((await confirm(other.token)).status, 202);
});
