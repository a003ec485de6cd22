import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { checkpointInBackground, migrate, openDatabase, readMigrations } from '../../src/platform/db.ts';
import { createLocalChangeFeed, decodeChanges, encodeChanges, type Change } from '../../src/platform/changes.ts';
import { systemClock } from '../../src/platform/clock.ts';
import { createUserStore } from '../../src/people/users.ts';
import { sqliteStore } from '../../src/platform/store/store.ts';
import { createDeviceStore } from '../../src/devices/devices.ts';

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

test('migration 013 rebuilds the user table without losing a row that references it, and counts old addresses as proven', (t) => {
  const db = openDatabase(tempDbPath(t));
  t.after(() => db.close());
  migrate(db, readMigrations().filter((m) => m.version < 13));
  db.prepare("INSERT INTO users (id, email, email_hash, phone, phone_hash, role, created_at, updated_at) VALUES ('u', 'a@example.com', 'ha', '+4712345678', 'hp', 'member', 1, 2)").run();
  db.prepare("INSERT INTO users (id, email, email_hash, role, created_at, updated_at) VALUES ('p', 'phone-0123456789abcdef@phone.invalid', 'hx', 'member', 1, 3)").run();
  db.prepare("INSERT INTO mosques (id, name, join_code, created_at, updated_at) VALUES ('m', 'M', 'CODE2345', 0, 0)").run();
  db.prepare("INSERT INTO memberships (id, mosque_id, user_id, status, created_at, updated_at) VALUES ('ms', 'm', 'u', 'approved', 0, 0)").run();
  db.prepare("INSERT INTO invites (id, mosque_id, user_id, channel, contact, auto_approve, created_at) VALUES ('i', 'm', 'u', 'email', 'a@example.com', 0, 0)").run();
  migrate(db);
  assert.equal(db.pragma('foreign_keys', { simple: true }), 1);
  assert.deepEqual(db.pragma('foreign_key_check'), []);
  assert.deepEqual(db.prepare('SELECT id, email_proven_at, phone_proven_at, used_unproven FROM users ORDER BY id').all(), [
    { id: 'p', email_proven_at: null, phone_proven_at: null, used_unproven: 0 },
    { id: 'u', email_proven_at: 2, phone_proven_at: 2, used_unproven: 0 },
  ]);
  assert.deepEqual(db.prepare('SELECT id, user_id FROM memberships').all(), [{ id: 'ms', user_id: 'u' }]);
  // The references still cascade: deleting the user takes its rows with it.
  db.prepare("DELETE FROM users WHERE id = 'u'").run();
  assert.deepEqual([db.prepare('SELECT count(*) AS n FROM memberships').get(), db.prepare('SELECT count(*) AS n FROM invites').get()], [{ n: 0 }, { n: 0 }]);
  // Two unproven claims of one address are allowed; two proven ones are not.
  const insert = db.prepare("INSERT INTO users (id, email, email_hash, email_proven_at, role, created_at, updated_at) VALUES (?, 'b@example.com', 'hb', ?, 'member', 0, 0)");
  insert.run('c1', null);
  insert.run('c2', null);
  insert.run('c3', 5);
  assert.throws(() => insert.run('c4', 6), /UNIQUE/);
});

const until = async (what: string, check: () => boolean, ms = 10_000) => {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

test('WAL checkpoints run in a worker thread once the WAL grows: the writer stops checkpointing, yet the rows reach the main file', async (t) => {
  const file = tempDbPath(t);
  const db = openDatabase(file);
  const errors: Error[] = [];
  const checkpointer = checkpointInBackground(db, { onError: (e) => errors.push(e), intervalMs: 50, pollMs: 50, startWalBytes: 64 * 1024 });
  t.after(async () => { await checkpointer.close(); db.close(); });
  db.exec('CREATE TABLE t (v TEXT)');
  const mainFileBefore = fs.statSync(file).size;
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  for (let i = 0; i < 200; i++) insert.run('x'.repeat(500));
  await until('the worker to start', () => checkpointer.running());
  assert.equal(db.pragma('wal_autocheckpoint', { simple: true }), 0, 'the event loop\'s connection does not checkpoint');
  for (let i = 0; i < 1800; i++) insert.run('x'.repeat(500));
  // Only a checkpoint copies pages from the WAL into the main file; this connection was told not to.
  await until('the worker to checkpoint the WAL into the main file', () => fs.statSync(file).size > mainFileBefore + 500_000);
  assert.deepEqual(errors, []);
});

test('no checkpoint worker runs until the WAL grows past its threshold; meanwhile the writer checkpoints inline', async (t) => {
  const file = tempDbPath(t);
  const db = openDatabase(file);
  const checkpointer = checkpointInBackground(db, { onError: () => {}, pollMs: 20, startWalBytes: 1024 * 1024 });
  t.after(async () => { await checkpointer.close(); db.close(); });
  db.exec('CREATE TABLE t (v TEXT); INSERT INTO t VALUES (1)');
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(checkpointer.running(), false, 'a WAL of a few pages starts no thread');
  assert.equal(db.pragma('wal_autocheckpoint', { simple: true }), 1000, 'SQLite\'s own inline checkpoint');
});

test('the checkpoint worker ends after an idle spell with the WAL truncated, starts again when it grows, and the WAL is folded away on stop', async (t) => {
  const file = tempDbPath(t);
  const db = openDatabase(file);
  const errors: Error[] = [];
  const checkpointer = checkpointInBackground(db, { onError: (e) => errors.push(e), intervalMs: 20, pollMs: 20, idleMs: 300, startWalBytes: 64 * 1024 });
  let closed = false;
  t.after(async () => { if (!closed) { await checkpointer.close(); db.close(); } });
  db.exec('CREATE TABLE t (v TEXT)');
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  const write = (n: number) => { for (let i = 0; i < n; i++) insert.run('w'.repeat(1000)); };
  write(200);
  await until('the worker to start', () => checkpointer.running());
  await until('the worker to end after the idle spell', () => !checkpointer.running());
  assert.equal(db.pragma('wal_autocheckpoint', { simple: true }), 1000, 'the writer checkpoints inline again');
  assert.equal(fs.statSync(`${file}-wal`).size, 0, 'the WAL was truncated before the worker ended');
  write(200);
  await until('the worker to start again once the WAL grows', () => checkpointer.running());
  await until('the worker to end again', () => !checkpointer.running());
  insert.run('after the worker ended');
  assert.ok(fs.statSync(`${file}-wal`).size > 0, 'that write is in the WAL');
  await checkpointer.close();
  db.close();
  closed = true;
  assert.equal(fs.existsSync(`${file}-wal`), false, 'the last close folded the WAL into the file and removed it');
  const check = openDatabase(file);
  t.after(() => check.close());
  assert.equal((check.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, 401);
  assert.deepEqual(errors, []);
});

test('a WAL the worker cannot keep under its limit makes the writer checkpoint inline until it is back under', async (t) => {
  const file = tempDbPath(t);
  const db = openDatabase(file);
  const checkpointer = checkpointInBackground(db, { onError: () => {}, intervalMs: 20, pollMs: 20, startWalBytes: 16 * 1024, walLimitBytes: 64 * 1024 });
  t.after(async () => { await checkpointer.close(); db.close(); });
  db.exec('CREATE TABLE t (v TEXT)');
  // A read transaction held open pins the WAL: no checkpoint can catch up, so the WAL only grows.
  const reader = openDatabase(file);
  reader.exec('BEGIN');
  reader.prepare('SELECT count(*) FROM t').get();
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  for (let i = 0; i < 400; i++) insert.run('y'.repeat(1000));
  await until('inline checkpoints to be switched back on', () => db.pragma('wal_autocheckpoint', { simple: true }) === 1000);
  reader.exec('COMMIT');
  reader.close();
  for (let i = 0; i < 50; i++) insert.run('z');
  await until('the worker to take checkpoints back once the WAL is short again', () => {
    insert.run('z');
    return db.pragma('wal_autocheckpoint', { simple: true }) === 0;
  });
});

test('closing the checkpointer lets the last close remove the WAL', async (t) => {
  const file = tempDbPath(t);
  const db = openDatabase(file);
  const checkpointer = checkpointInBackground(db, { onError: () => {} });
  db.exec('CREATE TABLE t (v TEXT); INSERT INTO t VALUES (1)');
  assert.equal(fs.existsSync(`${file}-wal`), true);
  await checkpointer.close();
  db.close();
  assert.equal(fs.existsSync(`${file}-wal`), false);
});

// ---- the change feed that follows the commits (src/platform/changes.ts; docs/decisions.md, "Several processes") ----

test('the in-process change feed tells every listener at once, as local, and a listener that throws is reported without stopping the rest', () => {
  const reported: unknown[] = [];
  const feed = createLocalChangeFeed((err) => reported.push(err));
  const seen: string[] = [];
  feed.subscribe({ changed: () => { throw new Error('broken listener'); }, resync: () => undefined });
  feed.subscribe({ changed: (c, origin) => seen.push(`${c.kind}:${c.id}:${origin}`), resync: () => seen.push('resync') });
  feed.publish({ kind: 'device', id: 'd1' });
  assert.deepEqual(seen, ['device:d1:local'], 'delivered before publish returned');
  feed.resync();
  assert.deepEqual(seen, ['device:d1:local', 'resync']);
  assert.equal(reported.length, 1);
  assert.equal(feed.state(), 'ok');
});

test('a change message from the channel is read only when well formed, and keeps only known kinds with sane ids', () => {
  const text = encodeChanges({ v: 1, from: 'p1', changes: [{ kind: 'user', id: 'u1' }] });
  assert.deepEqual(decodeChanges(text), { v: 1, from: 'p1', changes: [{ kind: 'user', id: 'u1' }] });
  assert.equal(decodeChanges('not json'), null);
  assert.equal(decodeChanges('null'), null);
  assert.equal(decodeChanges(JSON.stringify({ v: 2, from: 'p1', changes: [] })), null, 'a newer version is not guessed at');
  assert.equal(decodeChanges(JSON.stringify({ v: 1, changes: [] })), null, 'no sender');
  const mixed = decodeChanges(JSON.stringify({ v: 1, from: 'p1', resync: true, changes: [{ kind: 'secret', id: 'x' }, { kind: 'device', id: '' }, { kind: 'device', id: 'x'.repeat(201) }, { kind: 'device', id: 7 }, null, { kind: 'standing', id: 'u2' }] }));
  assert.deepEqual(mixed, { v: 1, from: 'p1', resync: true, changes: [{ kind: 'standing', id: 'u2' }] });
});

test('the stores announce each committed write that a cache mirrors, and reads announce nothing', async (t) => {
  const db = openDatabase(tempDbPath(t));
  t.after(() => db.close());
  migrate(db);
  const heard: string[] = [];
  const changes = { publish: (c: Change) => void heard.push(`${c.kind}:${c.id}`) };
  const users = await createUserStore(sqliteStore(db), systemClock, changes);
  const devices = await createDeviceStore(sqliteStore(db), systemClock, changes);
  const user = await users.create({ email: 'a@example.com', emailHash: 'h1', phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' });
  await users.revokeTokens(user.id);
  await users.setPassword(user.id, 'bcrypt');
  await users.update(user.id, { role: 'superadmin' });
  const kysely = sqliteStore(db);
  const { row } = await devices.create(kysely, { kind: 'transmitter', name: null, mosqueId: null, ownerUserId: user.id });
  await devices.rotateSecret(kysely, row.id);
  await devices.update(kysely, row.id, { name: 'minbar' });
  await devices.delete(kysely, row.id);
  await users.delete(user.id);
  assert.deepEqual(heard, [
    ...Array(4).fill(`user:${user.id}`),
    ...Array(4).fill(`device:${row.id}`),
    `user:${user.id}`,
  ]);
  heard.length = 0;
  await users.findById(user.id);
  users.tokenVersion(user.id);
  devices.verifySecret(row.id, 'x');
  await devices.load(row.id);
  assert.deepEqual(heard, []);
});

test('a token version changed through another connection is picked up by reloadVersion, which announces nothing', async (t) => {
  const file = tempDbPath(t);
  const db = openDatabase(file);
  t.after(() => db.close());
  migrate(db);
  const heard: Change[] = [];
  const here = await createUserStore(sqliteStore(db), systemClock, { publish: (c) => void heard.push(c) });
  const user = await here.create({ email: 'b@example.com', emailHash: 'h2', phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' });
  const other = openDatabase(file);
  t.after(() => other.close());
  await (await createUserStore(sqliteStore(other), systemClock)).revokeTokens(user.id);
  assert.equal(here.tokenVersion(user.id), 0, 'memory still has the old version');
  heard.length = 0;
  await here.reloadVersion(user.id);
  assert.equal(here.tokenVersion(user.id), 1);
  assert.deepEqual(heard, []);
});

test('the database, its -wal and its -shm are created 0600 in a 0700 folder, whatever the umask', (t) => {
  const file = tempDbPath(t);
  const before = process.umask(0o022);
  t.after(() => process.umask(before));
  const db = openDatabase(file);
  t.after(() => db.close());
  migrate(db);
  db.prepare('CREATE TABLE probe (x)').run();
  db.prepare('INSERT INTO probe VALUES (1)').run();
  const mode = (f: string) => (fs.statSync(f).mode & 0o777).toString(8);
  assert.ok(fs.existsSync(`${file}-wal`) && fs.existsSync(`${file}-shm`), 'SQLite made its WAL and shared-memory files');
  assert.deepEqual([mode(file), mode(`${file}-wal`), mode(`${file}-shm`), mode(path.dirname(file))], ['600', '600', '600', '700']);
});

test('a database a former version left 0644 is narrowed to 0600 when opened', (t) => {
  const file = tempDbPath(t);
  openDatabase(file).close();
  fs.chmodSync(file, 0o644);
  const db = openDatabase(file);
  t.after(() => db.close());
  db.prepare('CREATE TABLE probe (x)').run();
  assert.equal((fs.statSync(file).mode & 0o777).toString(8), '600');
  assert.equal((fs.statSync(`${file}-wal`).mode & 0o777).toString(8), '600');
});
