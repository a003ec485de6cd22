import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256, startTestService, type TestService } from '../support/service.ts';
import { API, confirmAddress, createMosque, joinMosque, makeAdmin, member, mosqueAdmins, mosqueMemberships, signInSuperadmin, type Person } from '../support/people.ts';

/**
 * docs/api.md, "Memberships": what admins read of a member or an admin says whether each address is proven or
 * only claimed (docs/api.md, "Addresses: claims and proof"), so nobody approves a claim as if it were the person.
 */

const PASSWORD = 'correct horse battery staple';

async function withPhone(ts: TestService, email: string, phone: string): Promise<Person> {
  const res = await ts.http.post(`${API}/auth/signup`, { email, phone, password_hash: sha256(PASSWORD) });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return { token: res.body.access_token, id: res.body.user.id, email };
}

const proof = (body: Record<string, unknown> | undefined) => body && [body.email_proven, body.phone_proven];

test('member lists, the member page and the admins list say whether each address is proven, and follow a proof', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  // Claims both addresses; proves the email (an account that proved nothing holds nothing, so cannot join), then the phone.
  const amina = await withPhone(ts, 'amina@example.com', '+442079460123');
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, amina.token)).status, 403, 'nothing proven: no join');
  await confirmAddress(ts, amina.token, 'email', 'amina@example.com');
  const joined = await joinMosque(ts, amina, mosque.id);
  const helper = await withPhone(ts, 'helper@example.com', '+442079460124');
  await confirmAddress(ts, helper.token, 'sms', '+442079460124');
  await joinMosque(ts, helper, mosque.id);
  await makeAdmin(ts, root.token, mosque.id, helper);

  const listed = async (userId: string) => proof((await mosqueMemberships(ts, owner.token, mosque.id)).find((m) => m.user_id === userId));
  const page = async () => proof((await ts.http.get(`${API}/memberships/${joined.id}`, owner.token)).body);
  const admin = async (userId: string) => proof((await mosqueAdmins(ts, root.token, mosque.id)).find((a) => a.user_id === userId) as unknown as Record<string, unknown>);

  assert.deepEqual(await listed(amina.id), [true, false]);
  assert.deepEqual(await page(), [true, false]);
  assert.deepEqual(await listed(owner.id), [true, false]);
  assert.deepEqual(await admin(helper.id), [false, true]);
  assert.deepEqual(await admin(owner.id), [true, false]);

  await confirmAddress(ts, amina.token, 'sms', '+442079460123');
  assert.deepEqual(await listed(amina.id), [true, true]);
  assert.deepEqual(await page(), [true, true]);

  // The admin row an add or a change answers carries them too.
  const made = await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: amina.id }, owner.token);
  assert.equal(made.status, 201);
  assert.deepEqual(proof(made.body), [true, true]);
  const changed = await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${helper.id}`, { can_trigger: true }, owner.token);
  assert.deepEqual(proof(changed.body), [false, true]);
});
