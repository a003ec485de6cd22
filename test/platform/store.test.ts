import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { pino } from 'pino';
import { migrate, openDatabase } from '../../src/platform/db.ts';
import { sqliteStore } from '../../src/platform/store/store.ts';
import { TABLES_FILE, generatedTables } from '../../scripts/tables.ts';

test('generated/tables.ts is what npm run docs generates from the migrated schema', () => {
  assert.equal(fs.readFileSync(TABLES_FILE, 'utf8'), generatedTables(), 'run npm run docs');
});

test('generated/tables.ts types a column as the migrations declare it', () => {
  const text = generatedTables();
  // NOT NULL text, nullable text, a default, the INTEGER PRIMARY KEY the engine numbers.
  assert.match(text, /export interface UsersTable \{[^}]*\n {2}email: string;/);
  assert.match(text, /export interface UsersTable \{[^}]*\n {2}phone: string \| null;/);
  assert.match(text, /export interface UsersTable \{[^}]*\n {2}token_version: Generated<number>;/);
  assert.match(text, /export interface ActivityTable \{[^}]*\n {2}id: Generated<number>;/);
});

function fileStore() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-store-'));
  const db = openDatabase(path.join(dir, 'minaret.db'));
  migrate(db);
  return { db, store: sqliteStore(db), done: () => { db.close(); fs.rmSync(dir, { recursive: true, force: true }); } };
}

test('the store reads and writes through the connection db.ts opened, and closing it leaves that open', async () => {
  const { db, store, done } = fileStore();
  try {
    await store.insertInto('data_steps').values({ name: 'probe', applied_at: 42 }).execute();
    assert.deepEqual(db.prepare('SELECT name, applied_at FROM data_steps WHERE name = ?').get('probe'), { name: 'probe', applied_at: 42 });
    const row = await store.selectFrom('data_steps').select(['name', 'applied_at']).where('name', '=', 'probe').executeTakeFirst();
    assert.deepEqual(row, { name: 'probe', applied_at: 42 });
    const { numDeletedRows } = await store.deleteFrom('data_steps').where('name', '=', 'probe').executeTakeFirstOrThrow();
    assert.equal(numDeletedRows, 1n);
    await store.destroy();
    assert.equal(db.open, true);
  } finally {
    done();
  }
});

test('a transaction that throws leaves nothing behind; one that returns commits', async () => {
  const { db, store, done } = fileStore();
  try {
    await assert.rejects(store.transaction().execute(async (trx) => {
      await trx.insertInto('data_steps').values({ name: 'half', applied_at: 1 }).execute();
      throw new Error('second write failed');
    }), /second write failed/);
    assert.equal(db.prepare("SELECT COUNT(*) AS n FROM data_steps WHERE name = 'half'").pluck().get(), 0);
    await store.transaction().execute(async (trx) => {
      await trx.insertInto('data_steps').values({ name: 'whole', applied_at: 2 }).execute();
    });
    assert.equal(db.prepare("SELECT COUNT(*) AS n FROM data_steps WHERE name = 'whole'").pluck().get(), 1);
  } finally {
    done();
  }
});

test('a transaction takes the write lock at BEGIN: a second connection cannot write until it commits', async () => {
  const { db, store, done } = fileStore();
  const other = openDatabase(db.name);
  other.pragma('busy_timeout = 0');
  try {
    await store.transaction().execute(async (trx) => {
      await trx.selectFrom('data_steps').selectAll().execute(); // a read only: a deferred BEGIN would take no lock yet
      assert.throws(() => other.prepare("INSERT INTO data_steps (name, applied_at) VALUES ('other', 3)").run(), /SQLITE_BUSY|locked/);
    });
    other.prepare("INSERT INTO data_steps (name, applied_at) VALUES ('other', 3)").run();
  } finally {
    other.close();
    done();
  }
});

test('a row lock (FOR UPDATE) is left out of SQLite\'s SQL, where the transaction holds the write lock already, and kept for PostgreSQL', async () => {
  const { store, done } = fileStore();
  try {
    const query = store.selectFrom('users').select('id').where('id', '=', 'u1').forUpdate();
    assert.equal(query.compile().sql, 'select "id" from "users" where "id" = ?');
    assert.deepEqual(await store.transaction().execute((trx) => trx.selectFrom('users').select('id').forUpdate().execute()), []);
    // Another modifier in the same place stays.
    assert.match(store.selectFrom('users').select('id').distinct().forUpdate().compile().sql, /^select distinct "id"/);
  } finally {
    done();
  }
  const { postgresStore } = await import('../../src/platform/store/postgres.ts');
  const pg = postgresStore('postgres://nobody@127.0.0.1:9/none', { poolSize: 1, statementTimeoutMs: 1000 });
  assert.equal(pg.selectFrom('users').select('id').where('id', '=', 'u1').forUpdate().compile().sql, 'select "id" from "users" where "id" = $1 for update');
  await pg.destroy();
});

test('a bad query is a rejected promise with SQLite\'s error, and the store goes on answering', async () => {
  const { store, done } = fileStore();
  try {
    await assert.rejects(sql`SELECT * FROM no_such_table`.execute(store), /no such table/);
    await store.insertInto('data_steps').values({ name: 'twice', applied_at: 1 }).execute();
    await assert.rejects(store.insertInto('data_steps').values({ name: 'twice', applied_at: 1 }).execute(), /UNIQUE|PRIMARY KEY/);
    assert.equal((await store.selectFrom('data_steps').select('name').execute()).length, 1);
  } finally {
    done();
  }
});

test('a prepared query runs again with new values in place of its markers, on its own or in a transaction', async () => {
  const { prepared } = await import('../../src/platform/store/prepared.ts');
  const { db, store, done } = fileStore();
  try {
    const insert = prepared<{ name: string; at: number }>(store, ['name', 'at'], (v) => store.insertInto('data_steps').values({ name: v.name, applied_at: v.at }));
    const later = prepared<{ at: number; name: string }>(store, ['at', 'name'], (v) =>
      store.updateTable('data_steps').set({ applied_at: v.at }).where('name', '=', v.name).where('applied_at', '<', 1000));
    await insert.run(store, { name: 'a', at: 1 });
    await store.transaction().execute(async (trx) => {
      await insert.run(trx, { name: 'b', at: 2 });
      await later.run(trx, { at: 5, name: 'a' });
    });
    assert.deepEqual(db.prepare('SELECT name, applied_at FROM data_steps ORDER BY name').all(), [
      { name: 'a', applied_at: 5 }, { name: 'b', applied_at: 2 },
    ]);
    // The constant 1000 stayed where the builder put it: only the markers are replaced.
    await later.run(store, { at: 2000, name: 'b' });
    await later.run(store, { at: 3000, name: 'b' });
    assert.equal(db.prepare("SELECT applied_at FROM data_steps WHERE name = 'b'").pluck().get(), 2000);
    assert.throws(() => prepared<{ name: string; unused: number }>(store, ['name', 'unused'], (v) => store.deleteFrom('data_steps').where('name', '=', v.name)), /does not use unused/);
  } finally {
    done();
  }
});

test('the write probe of a degraded database waits while a store transaction holds the connection, and leaves its writes whole', async () => {
  const { createFaults, sqliteProbe } = await import('../../src/platform/faults.ts');
  const { db, store, done } = fileStore();
  try {
    let now = 0;
    const faults = createFaults({ probe: sqliteProbe(db), clock: () => now, logger: pino({ level: 'silent' }) });
    faults.report('a write', Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' }));
    await store.transaction().execute(async (trx) => {
      await trx.insertInto('data_steps').values({ name: 'first', applied_at: 1 }).execute();
      now += 5000;
      assert.equal(faults.storageState(), 'full', 'no probe inside the transaction: the last state stands');
      await trx.insertInto('data_steps').values({ name: 'second', applied_at: 2 }).execute();
    });
    assert.deepEqual(db.prepare('SELECT name FROM data_steps ORDER BY name').all(), [{ name: 'first' }, { name: 'second' }]);
    assert.equal(faults.storageState(), 'ok', 'once the connection is free the probe runs and finds the file takes writes');
  } finally {
    done();
  }
});

test('what a transaction queued with afterCommit runs once it committed, where another connection reads the row; never after a rollback', async () => {
  const { db, store, done } = fileStore();
  const { inTransaction, afterCommit } = await import('../../src/platform/store/after-commit.ts');
  const other = openDatabase(db.name);
  try {
    const seen: Array<string | null> = [];
    const read = () => (other.prepare('SELECT name FROM data_steps WHERE name = ?').get('told') as { name: string } | undefined)?.name ?? null;
    await inTransaction(store, async (trx) => {
      await trx.insertInto('data_steps').values({ name: 'told', applied_at: 1 }).execute();
      afterCommit(trx, () => seen.push(read()));
      assert.equal(read(), null, 'not committed yet: another connection does not see it');
      assert.deepEqual(seen, [], 'nothing told before the commit');
    });
    assert.deepEqual(seen, ['told'], 'told once, after the commit, when the row is there for everyone');
    await assert.rejects(inTransaction(store, async (trx) => {
      await trx.insertInto('data_steps').values({ name: 'undone', applied_at: 1 }).execute();
      afterCommit(trx, () => seen.push('undone'));
      throw new Error('rolled back');
    }), /rolled back/);
    assert.deepEqual(seen, ['told'], 'a rolled-back write tells nobody');
    afterCommit(store, () => seen.push('at once'));
    assert.deepEqual(seen, ['told', 'at once'], 'on the store itself (a write already committed) it runs at once');
  } finally {
    other.close();
    done();
  }
});

test('a prepared query answers in the same turn through a SQLite transaction (runNow), and runs nothing outside one', async () => {
  const { store, done } = fileStore();
  const { prepared } = await import('../../src/platform/store/prepared.ts');
  try {
    const insert = prepared<{ name: string }>(store, ['name'], (v) => store.insertInto('data_steps').values({ name: v.name, applied_at: 7 }));
    assert.equal(insert.runNow(store, { name: 'outside' }), undefined, 'the store itself: left to run()');
    const answered = await store.transaction().execute(async (trx) => {
      const now = insert.runNow(trx, { name: 'inside' });
      return now?.numAffectedRows;
    });
    assert.equal(answered, 1n, 'one row, answered without a promise');
    const names = (await store.selectFrom('data_steps').select('name').where('applied_at', '=', 7).execute()).map((r) => r.name);
    assert.deepEqual(names, ['inside'], 'what runNow declined was not written');
  } finally {
    done();
  }
});
