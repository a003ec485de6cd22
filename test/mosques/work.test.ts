import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { Change } from '../../src/platform/changes.ts';
import { createManualClock } from '../../src/platform/clock.ts';
import { testStore } from '../support/database.ts';
import { createActivityLog } from '../../src/mosques/activity.ts';
import { createMemberships, type MembershipChange } from '../../src/mosques/memberships.ts';
import { createMosqueStore } from '../../src/mosques/mosques.ts';
import { transact } from '../../src/mosques/work.ts';
import { createUserStore } from '../../src/people/users.ts';

// The mosques' repositories on the store port (docs/architecture.md, "Writing a repository"): a change made inside a
// caller's transaction is announced once that commits, never inside it and never after a rollback; a read that
// decides a write is made in the transaction that writes.

async function setup(t: TestContext) {
  const { store, dialect, db } = await testStore(t);
  const clock = createManualClock();
  const published: Change[] = [];
  const changes = { publish: (c: Change) => void published.push(c) };
  // When told, the change must be committed: on SQLite the one connection has left its transaction; on
  // PostgreSQL a read on another connection of the pool already sees the membership (inside the transaction it
  // would not: READ COMMITTED).
  const told: Array<MembershipChange & { inTransaction: boolean; committed: Promise<boolean> }> = [];
  const users = await createUserStore(store, clock);
  const activity = createActivityLog(store, clock);
  const mosques = createMosqueStore(store, clock);
  const memberships = createMemberships({
    store, clock, activity, users, changes,
  });
  memberships.listen((change) => void told.push({
    ...change,
    inTransaction: db?.inTransaction ?? false,
    committed: dialect === 'postgres'
      ? store.selectFrom('memberships').select('id').where('id', '=', change.membership.id).executeTakeFirst().then((r) => r !== undefined)
      : Promise.resolve(true),
  }));
  const user = await users.create({ email: 'amina@example.com', emailHash: 'hash-amina', phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' });
  const mosque = (name: string) => mosques.create(undefined, { name, timezone: 'UTC', autoApproveMembers: true, streamUrl: null });
  return { store, activity, memberships, user, mosque, published, told };
}

test('a membership made in a caller\'s transaction is announced after its COMMIT, and not at all when it rolls back', async (t) => {
  const s = await setup(t);
  const noor = await s.mosque('Noor');
  await transact(s.store, async (w) => {
    const given = await s.memberships.invite(w, noor.id, s.user.id, true, null);
    assert.ok(given.ok);
    assert.equal(s.told.length, 0, 'told inside the transaction');
    assert.deepEqual(s.published, [], 'published inside the transaction');
  });
  assert.equal(s.told.length, 1);
  assert.equal(s.told[0]!.inTransaction, false);
  assert.equal(await s.told[0]!.committed, true, 'told before its COMMIT');
  assert.equal(s.told[0]!.membership.status, 'approved');
  assert.deepEqual(s.published, [{ kind: 'standing', id: s.user.id }]);

  const huda = await s.mosque('Huda');
  await assert.rejects(transact(s.store, async (w) => {
    await s.memberships.invite(w, huda.id, s.user.id, true, null);
    throw new Error('the rest of the change failed');
  }), /the rest of the change failed/);
  assert.equal(s.told.length, 1, 'a rolled-back membership was announced');
  assert.equal(s.published.length, 1);
  assert.equal(await s.memberships.findFor(huda.id, s.user.id), null);
  assert.deepEqual(await s.activity.list(huda.id, 10, null), []);
});

test('two joins of one person at once make one membership and one feed entry', async (t) => {
  const s = await setup(t);
  const noor = await s.mosque('Noor');
  const [a, b] = await Promise.all([s.memberships.join(noor, s.user.id), s.memberships.join(noor, s.user.id)]);
  assert.ok(a.ok && b.ok);
  assert.deepEqual([a.value.created, b.value.created].sort(), [false, true]);
  assert.equal(a.value.membership.id, b.value.membership.id);
  const joined = (await s.activity.list(noor.id, 10, null)).filter((e) => e.kind === 'membership.joined');
  assert.equal(joined.length, 1);
  assert.equal(s.told.length, 1);
});
