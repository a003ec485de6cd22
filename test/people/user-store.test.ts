import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { Change } from '../../src/platform/changes.ts';
import { systemClock } from '../../src/platform/clock.ts';
import { testStore } from '../support/database.ts';
import { createUserStore } from '../../src/people/users.ts';

/** A migrated store of its own (testStore: SQLite, or PostgreSQL), and a user store over it that records what it announces. */
async function userStore(t: TestContext) {
  const { store: db } = await testStore(t); // `db`: the rows as another connection writes them
  const heard: Change[] = [];
  const users = await createUserStore(db, systemClock, { publish: (c) => void heard.push(c) });
  const user = await users.create({ email: 'a@example.com', emailHash: 'ha', phone: null, phoneHash: null, passwordBcrypt: 'x', role: 'member' });
  heard.length = 0;
  return { db, users, user, heard };
}

test("writes made through the user store's transaction reach the version map and the change feed only once it commits", async (t) => {
  const { users, user, heard } = await userStore(t);
  await users.transaction(async (trx) => {
    await users.resetAfterTakeover(user.id, trx);
    assert.equal((await users.findById(user.id, trx))?.token_version, 1, 'the row is written inside the transaction');
    assert.equal(users.tokenVersion(user.id), 0, 'memory keeps the committed version until the commit');
    assert.deepEqual(heard, [], 'nothing is announced before the commit');
  });
  assert.equal(users.tokenVersion(user.id), 1);
  assert.deepEqual(heard, [{ kind: 'user', id: user.id }]);
});

test("a rolled-back transaction's writes reach neither the version map nor the change feed", async (t) => {
  const { users, user, heard } = await userStore(t);
  await assert.rejects(users.transaction(async (trx) => {
    await users.resetAfterTakeover(user.id, trx);
    await users.create({ email: 'b@example.com', emailHash: 'hb', phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' }, trx);
    throw new Error('rolled back');
  }), /rolled back/);
  assert.equal(users.tokenVersion(user.id), 0);
  assert.equal((await users.findById(user.id))?.password_bcrypt, 'x', 'the row is as it was');
  assert.equal(await users.findByEmail('b@example.com'), null);
  assert.deepEqual(heard, []);
});

test('a full reload of the token versions keeps a version this process wrote while the rows were read', async (t) => {
  const { db, user } = await userStore(t);
  // The reload's rows are read, then held until the write below committed and set its version: a select's
  // execute() resolves only once `hold` does, after the query gave the connection back (a plugin's transformResult
  // would hold it while the connection is still taken, and the write could never run).
  let hold: Promise<void> | null = null;
  let release = () => {};
  const held = <T extends object>(target: T): T => new Proxy(target, {
    get(obj, key) {
      const value = Reflect.get(obj, key) as unknown;
      if (typeof value !== 'function') return value;
      if (key === 'execute') {
        return async (...args: unknown[]) => {
          const rows = await (value as (...a: unknown[]) => Promise<unknown>).apply(obj, args);
          if (hold) await hold;
          return rows;
        };
      }
      return (...args: unknown[]) => {
        const out = (value as (...a: unknown[]) => unknown).apply(obj, args);
        return out !== null && typeof out === 'object' && 'execute' in out ? held(out) : out;
      };
    },
  });
  const base = db;
  const store = new Proxy(base, {
    get(obj, key) {
      const value = Reflect.get(obj, key) as unknown;
      if (typeof value !== 'function') return value;
      return key === 'selectFrom'
        ? (...args: unknown[]) => held((value as (...a: unknown[]) => object).apply(obj, args))
        : (value as (...a: unknown[]) => unknown).bind(obj);
    },
  });
  const users = await createUserStore(store, systemClock);
  hold = new Promise((resolve) => (release = resolve));
  const reload = users.reloadVersions();
  await users.revokeTokens(user.id);
  assert.equal(users.tokenVersion(user.id), 1);
  release();
  await reload;
  assert.equal(users.tokenVersion(user.id), 1, 'the rows read before the write do not undo it');
});

test('a full reload picks up versions another connection wrote, and forgets users deleted there', async (t) => {
  const { db, users, user } = await userStore(t);
  const gone = await users.create({ email: 'c@example.com', emailHash: 'hc', phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' });
  await db.updateTable('users').set({ token_version: 5 }).where('id', '=', user.id).execute();
  await db.deleteFrom('users').where('id', '=', gone.id).execute();
  assert.equal(users.tokenVersion(user.id), 0, 'memory has the old version until a reload');
  await users.reloadVersions();
  assert.equal(users.tokenVersion(user.id), 5);
  assert.equal(await users.tokenVersion(gone.id), undefined, 'a user memory lost is read again (a promise), and is gone');
  assert.equal(users.tokenVersion(gone.id), undefined, 'then memory knows it is gone: no second read');
});

test('an update is one read and one write: two at once keep both changes', async (t) => {
  const { users, user } = await userStore(t);
  await Promise.all([
    users.update(user.id, { role: 'superadmin' }),
    users.update(user.id, { phone: { phone: '+441234567890', phoneHash: 'hp' } }),
  ]);
  const row = await users.findById(user.id);
  assert.equal(row?.role, 'superadmin');
  assert.equal(row?.phone, '+441234567890');
  assert.equal(users.tokenVersion(user.id), row?.token_version);
});

test('two unproven claims of one address made in the same second are listed in the order the claims were made', async (t) => {
  const { users, db } = await userStore(t);
  // Three accounts in one second: the claim order cannot come from created_at, nor from the random ids.
  const created = [];
  for (let i = 0; i < 3; i += 1) {
    created.push(await users.create({ email: `same${i}@example.com`, emailHash: 'same', phone: null, phoneHash: null, passwordBcrypt: 'x', role: 'member' }));
  }
  await db.updateTable('users').set({ created_at: 1000 }).where('email_hash', '=', 'same').execute();
  const listed = await users.listUnprovenClaimants('same');
  assert.deepEqual(listed.map((u) => u.id), created.map((u) => u.id));
  assert.equal((await users.findByIdentifierHash('same'))?.id, created[0]!.id);
  // Against the order of the ids too, whichever way the random ids fell: swapping the first two claims' numbers swaps the answer.
  const order = async (id: string) => (await db.selectFrom('users').select('email_claim_order').where('id', '=', id).executeTakeFirstOrThrow()).email_claim_order;
  const [a, b] = [await order(created[0]!.id), await order(created[1]!.id)];
  assert.ok(a > 0 && b > a, `claim numbers ${a}, ${b} follow the order the claims were made`);
  await db.updateTable('users').set({ email_claim_order: b }).where('id', '=', created[0]!.id).execute();
  await db.updateTable('users').set({ email_claim_order: a }).where('id', '=', created[1]!.id).execute();
  assert.equal((await users.findByIdentifierHash('same'))?.id, created[1]!.id);
});

test('an older account that claims an address today queues behind the claim made yesterday', async (t) => {
  const { users } = await userStore(t);
  const old = await users.create({ email: 'old@example.com', emailHash: 'old', phone: null, phoneHash: null, passwordBcrypt: 'x', role: 'member' });
  const invited = await users.create({ email: 'new@example.com', emailHash: 'new', phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' });
  await users.update(old.id, { email: { email: 'new@example.com', emailHash: 'new' } });
  assert.deepEqual((await users.listUnprovenClaimants('new')).map((u) => u.id), [invited.id, old.id]);
  assert.equal((await users.findByIdentifierHash('new'))?.id, invited.id);
});
