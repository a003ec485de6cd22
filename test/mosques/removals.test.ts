import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestService, type TestService } from '../support/service.ts';
import { API, createMosque, joinMosque, member, setStatus, signInSuperadmin, type Person } from '../support/people.ts';

/**
 * docs/api.md, "Memberships": an admin's removal outlives the membership. The removed person's own leaving never
 * erases it; only the mosque approving them again (an admin's approval or enrolment) lifts it.
 */

async function autoApproveMosque(ts: TestService) {
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true });
  return { owner, mosque };
}

async function leave(ts: TestService, person: Person, membershipId: string) {
  assert.equal((await ts.http.delete(`${API}/memberships/${membershipId}`, person.token)).status, 204);
}

test('a member an admin removed cannot undo the removal by leaving their pending rejoin and joining again', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await autoApproveMosque(ts);
  const amina = await member(ts, 'amina@example.com');
  const first = await joinMosque(ts, amina, mosque.id);
  assert.equal(first.status, 'approved');
  assert.equal((await ts.http.delete(`${API}/memberships/${first.id}`, owner.token)).status, 204);

  // The attack: rejoin (pending, as it should), delete that pending membership oneself, join again.
  const rejoined = await joinMosque(ts, amina, mosque.id);
  assert.equal(rejoined.status, 'pending');
  await leave(ts, amina, rejoined.id);
  const again = await joinMosque(ts, amina, mosque.id);
  assert.equal(again.status, 'pending');
  // However often, and by the join code as well as by the mosque's id.
  await leave(ts, amina, again.id);
  await leave(ts, amina, (await joinMosque(ts, amina, mosque.id)).id);
  const byCode = await ts.http.post(`${API}/join`, { code: mosque.join_code }, amina.token);
  assert.equal(byCode.body.status, 'pending');
  // An admin's rejection does not lift it either: reapplying waits again.
  await setStatus(ts, owner.token, byCode.body.id, 'rejected');
  assert.equal((await joinMosque(ts, amina, mosque.id)).status, 'pending');
});

test("an admin approving the removed member's rejoin lifts the removal: a later leave and join is approved as for anyone", async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await autoApproveMosque(ts);
  const amina = await member(ts, 'amina@example.com');
  assert.equal((await ts.http.delete(`${API}/memberships/${(await joinMosque(ts, amina, mosque.id)).id}`, owner.token)).status, 204);
  const rejoined = await joinMosque(ts, amina, mosque.id);
  assert.equal(rejoined.status, 'pending');
  assert.equal((await setStatus(ts, owner.token, rejoined.id, 'approved')).status, 'approved');

  await leave(ts, amina, rejoined.id);
  assert.equal((await joinMosque(ts, amina, mosque.id)).status, 'approved');
});

test('an admin enrolling the removed member lifts the removal; removing them again puts it back', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await autoApproveMosque(ts);
  const bilal = await member(ts, 'bilal@example.com');
  assert.equal((await ts.http.delete(`${API}/memberships/${(await joinMosque(ts, bilal, mosque.id)).id}`, owner.token)).status, 204);
  const enrolled = await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: bilal.id }, owner.token);
  assert.equal(enrolled.status, 201);
  await leave(ts, bilal, enrolled.body.id);
  const back = await joinMosque(ts, bilal, mosque.id);
  assert.equal(back.status, 'approved');

  assert.equal((await ts.http.delete(`${API}/memberships/${back.id}`, owner.token)).status, 204);
  const asked = await joinMosque(ts, bilal, mosque.id);
  assert.equal(asked.status, 'pending');
  await leave(ts, bilal, asked.id);
  assert.equal((await joinMosque(ts, bilal, mosque.id)).status, 'pending');
});
