import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { migrate, openDatabase, readMigrations } from '../../src/platform/db.ts';

function tempDbPath(t: { after(fn: () => void): void }) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-db-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'nested', 'minaret.db');
}

test('a new database file is created with WAL, NORMAL sync, foreign keys and a busy timeout', (t) => {
  const db = openDatabase(tempDbPath(t));
  t.after(() => db.close());
  assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
  assert.equal(db.pragma('synchronous', { simple: true }), 1);
  assert.equal(db.pragma('foreign_keys', { simple: true }), 1);
  assert.equal(db.pragma('busy_timeout', { simple: true }), 5000);
});

test('migrations run in order up to the newest and a second run changes nothing', (t) => {
  const file = tempDbPath(t);
  const db = openDatabase(file);
  t.after(() => db.close());
  const newest = readMigrations().at(-1)!.version;
  assert.equal(migrate(db), newest);
  assert.equal(db.pragma('user_version', { simple: true }), newest);
  db.prepare("INSERT INTO users (id, email, email_hash, role, created_at, updated_at) VALUES ('u', 'a@b.cd', 'h', 'member', 0, 0)").run();
  assert.equal(migrate(db), newest);
  assert.equal((db.prepare('SELECT count(*) AS n FROM users').get() as { n: number }).n, 1);
});

test('a failing migration leaves the version and the schema where they were', (t) => {
  const db = openDatabase(tempDbPath(t));
  t.after(() => db.close());
  const good = readMigrations();
  const version = migrate(db, good);
  const broken = [...good, { version: version + 1, name: 'broken.sql', sql: 'CREATE TABLE half (x INTEGER); SELECT nonsense FROM nowhere;' }];
  assert.throws(() => migrate(db, broken));
  assert.equal(db.pragma('user_version', { simple: true }), version);
  assert.equal((db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'half'").get() as { n: number }).n, 0);
});

test('the user table refuses a role that does not exist', (t) => {
  const db = openDatabase(tempDbPath(t));
  t.after(() => db.close());
  migrate(db);
  assert.throws(() => db.prepare("INSERT INTO users (id, email, email_hash, role, created_at, updated_at) VALUES ('u', 'a@b.cd', 'h', 'owner', 0, 0)").run(), /CHECK/);
});

test('migration 006 carries removals already in the activity feed into membership_removals, except re-joined and deleted users', (t) => {
  const db = openDatabase(tempDbPath(t));
  t.after(() => db.close());
  migrate(db, readMigrations().filter((m) => m.version < 6));
  const user = db.prepare("INSERT INTO users (id, email, email_hash, role, created_at, updated_at) VALUES (?, ?, ?, 'member', 0, 0)");
  for (const id of ['removed', 'rejoined']) user.run(id, `${id}@example.com`, id);
  db.prepare("INSERT INTO mosques (id, name, join_code, created_at, updated_at) VALUES ('m', 'M', 'CODE2345', 0, 0)").run();
  db.prepare("INSERT INTO memberships (id, mosque_id, user_id, status, created_at, updated_at) VALUES ('ms', 'm', 'rejoined', 'pending', 9, 9)").run();
  const removal = db.prepare("INSERT INTO activity (mosque_id, at, kind, subject_id, data) VALUES ('m', ?, 'membership.removed', 'x', ?)");
  removal.run(5, JSON.stringify({ user_id: 'removed' }));
  removal.run(7, JSON.stringify({ user_id: 'removed' }));
  removal.run(6, JSON.stringify({ user_id: 'rejoined' }));
  removal.run(6, JSON.stringify({ user_id: 'deleted-user', reason: 'user_deleted' }));
  migrate(db);
  assert.deepEqual(db.prepare('SELECT mosque_id, user_id, removed_at FROM membership_removals').all(), [{ mosque_id: 'm', user_id: 'removed', removed_at: 7 }]);
});
