import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createManualClock } from '../../src/platform/clock.ts';
import { migrate, openDatabase, readMigrations, type Db } from '../../src/platform/db.ts';
import { createDeviceStore } from '../../src/devices/devices.ts';
import { sqliteStore, type Store } from '../../src/platform/store/store.ts';
import { createTimeline } from '../../src/devices/timeline.ts';
import { sql } from 'kysely';
import { sqliteOnly, testStore } from '../support/database.ts';

// Migration 012: each timeline row points to its device's previous one and the device row to its newest, so
// a row is an append (no per-device index); pages, caps and deleted devices follow the chains. On a real store
// (the SQLite file, or PostgreSQL with MINARET_TEST_STORE); the migration's own tests are SQLite's.

function file(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-chain-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'minaret.db');
}

async function world(t: TestContext, devices: number) {
  const { store: kysely, db } = await testStore(t);
  const clock = createManualClock(Date.UTC(2026, 0, 1));
  const store = await createDeviceStore(kysely, clock);
  const ids: string[] = [];
  for (let i = 0; i < devices; i++) ids.push((await store.create(kysely, { kind: 'transmitter', name: `tx ${i}`, mosqueId: null, ownerUserId: null })).row.id);
  return { db, kysely, clock, store, ids, timeline: createTimeline(kysely, clock) };
}

/** The indexes on a table, by the dialect's own catalogue. */
async function indexesOf(w: { db: Db | null; kysely: Store }, table: string): Promise<string[]> {
  if (w.db) return w.db.prepare<[string], string>('SELECT name FROM pragma_index_list(?)').pluck().all(table);
  return (await sql<{ indexname: string }>`SELECT indexname FROM pg_indexes WHERE tablename = ${table} AND indexname NOT LIKE '%_pkey'`.execute(w.kysely)).rows.map((r) => r.indexname);
}

const count = async (q: Promise<{ n: string | number | bigint }>) => Number((await q).n);

const reasons = (entries: Array<{ reason: string | null }>) => entries.map((e) => e.reason);

test('the timeline has no per-device index: a row is an append that moves its device head', async (t) => {
  const w = await world(t, 2);
  assert.deepEqual(await indexesOf(w, 'mosque_device_events'), []);
  const [a, b] = w.ids as [string, string];
  await w.timeline.note({ deviceId: a, mosqueId: null, kind: 'status', reason: 'a0' });
  await w.timeline.note({ deviceId: b, mosqueId: null, kind: 'status', reason: 'b0' });
  await w.timeline.note({ deviceId: a, mosqueId: null, kind: 'status', reason: 'a1' });
  const rows = await w.kysely.selectFrom('mosque_device_events').select(['id', 'device_id', 'prev_id']).orderBy('id').execute();
  assert.deepEqual(rows.map((r) => r.prev_id), [null, null, rows[0]!.id]);
  const head = async (id: string) => (await w.kysely.selectFrom('devices').select('timeline_head').where('id', '=', id).executeTakeFirstOrThrow()).timeline_head;
  assert.equal(await head(a), rows[2]!.id);
  assert.equal(await head(b), rows[1]!.id);
});

test('pages walk one device back through rows interleaved with others, from any cursor', async (t) => {
  const w = await world(t, 3);
  const [a, b, c] = w.ids as [string, string, string];
  for (let i = 0; i < 12; i++) {
    await w.timeline.note({ deviceId: a, mosqueId: null, kind: 'status', reason: `a${i}` });
    if (i % 3 === 0) await w.timeline.note({ deviceId: b, mosqueId: null, kind: 'status', reason: `b${i}` });
  }
  const first = await w.timeline.list(a, 5, null);
  assert.deepEqual(reasons(first), ['a11', 'a10', 'a9', 'a8', 'a7']);
  const second = await w.timeline.list(a, 5, Number(first.at(-1)!.id));
  assert.deepEqual(reasons(second), ['a6', 'a5', 'a4', 'a3', 'a2']);
  assert.deepEqual(reasons((await w.timeline.list(a, 5, Number(second.at(-1)!.id)))), ['a1', 'a0']);
  assert.deepEqual(reasons((await w.timeline.list(b, 10, null))), ['b9', 'b6', 'b3', 'b0']);
  // A cursor that is another device's row (b9, written just after a9): this device's rows older than it.
  const bRow = Number((await w.timeline.list(b, 1, null))[0]!.id);
  assert.deepEqual(reasons((await w.timeline.list(a, 3, bRow))), ['a9', 'a8', 'a7']);
  // No rows, or a limit of nothing.
  assert.deepEqual((await w.timeline.list(c, 10, null)), []);
  assert.deepEqual((await w.timeline.list(a, 0, null)), []);
});

test('a chain cut by retention ends there; the cap keeps the newest per device', async (t) => {
  const w = await world(t, 2);
  const [a, b] = w.ids as [string, string];
  for (let day = 0; day < 5; day++) {
    await w.timeline.note({ deviceId: a, mosqueId: null, kind: 'status', reason: `a${day}` });
    await w.timeline.note({ deviceId: b, mosqueId: null, kind: 'status', reason: `b${day}` });
    w.clock.advance(86_400_000);
  }
  assert.equal(await w.timeline.prune(3, 1000), 4); // days 0 and 1 of both
  assert.deepEqual(reasons((await w.timeline.list(a, 10, null))), ['a4', 'a3', 'a2']);
  for (let i = 0; i < 6; i++) await w.timeline.note({ deviceId: b, mosqueId: null, kind: 'status', reason: `b+${i}` });
  assert.equal(await w.timeline.prune(3, 4), 5); // b had 9: 4 kept; a (3) untouched
  assert.deepEqual(reasons((await w.timeline.list(b, 10, null))), ['b+5', 'b+4', 'b+3', 'b+2']);
  assert.deepEqual(reasons((await w.timeline.list(a, 10, null))), ['a4', 'a3', 'a2']);
});

test('the cap walks a chain only when its counts say it may be over, and learns what retention took', async (t) => {
  const w = await world(t, 1);
  const [a] = w.ids as [string];
  const counts = { get: (id: string) => w.kysely.selectFrom('devices').select(['timeline_seq as seq', 'timeline_floor as floor']).where('id', '=', id).executeTakeFirstOrThrow() };
  const add = async (n: number) => {
    for (let i = 0; i < n; i++) {
      await w.timeline.note({ deviceId: a, mosqueId: null, kind: 'status' });
      w.clock.advance(86_400_000);
    }
  };
  await add(15);
  assert.equal(await w.timeline.prune(100, 10), 5);
  assert.deepEqual(await counts.get(a), { seq: 15, floor: 6 });
  await add(1);
  assert.equal(await w.timeline.prune(100, 10), 1);
  assert.deepEqual(await counts.get(a), { seq: 16, floor: 7 });
  // Retention keeps the last 3 days' rows (3 of 10); the counts still say 10, so the chain is not walked.
  assert.equal(await w.timeline.prune(3, 10), 7);
  assert.deepEqual(await counts.get(a), { seq: 16, floor: 7 });
  // One more row: the counts say 11, the walk finds 4 and records that.
  await add(1);
  assert.equal(await w.timeline.prune(100, 10), 0);
  assert.deepEqual(await counts.get(a), { seq: 17, floor: 14 });
  await add(5);
  assert.equal(await w.timeline.prune(100, 10), 0);
  assert.deepEqual(await counts.get(a), { seq: 22, floor: 14 }, '9 rows: not walked');
  assert.equal((await w.timeline.list(a, 100, null)).length, 9);
});

test("a deleted device's rows go in the next upkeep pass, also when its owner's deletion took it, and no one else's", async (t) => {
  const w = await world(t, 2);
  const [a, b] = w.ids as [string, string];
  await w.kysely.insertInto('users').values({ id: 'u1', email: 'u1@example.org', email_hash: 'h1', role: 'member', created_at: 0, updated_at: 0 }).execute();
  const owned = (await w.store.create(w.kysely, { kind: 'stream_player', name: 'p', mosqueId: null, ownerUserId: 'u1' })).row.id;
  // Long enough that one device's rows take several chunks of the pass.
  await w.kysely.transaction().execute(async (trx) => {
    for (let i = 0; i < 1200; i++) for (const id of [a, b, owned]) await w.timeline.record(trx, { deviceId: id, mosqueId: null, kind: 'status', reason: `${i}` });
  });
  await w.store.delete(w.kysely, a);
  await w.kysely.deleteFrom('users').where('id', '=', 'u1').execute(); // ON DELETE CASCADE removes the player's row
  assert.equal(await count(w.kysely.selectFrom('devices').select((eb) => eb.fn.countAll().as('n')).where('id', '=', owned).executeTakeFirstOrThrow()), 0);
  const rowsOf = (id: string) => count(w.kysely.selectFrom('mosque_device_events').select((eb) => eb.fn.countAll().as('n')).where('device_id', '=', id).executeTakeFirstOrThrow());
  assert.equal(await rowsOf(a), 1200, 'kept until the pass');
  assert.equal(await w.timeline.prune(30, 100_000, { sliceMs: 0 }), 2400);
  assert.equal(await rowsOf(a), 0);
  assert.equal(await rowsOf(owned), 0);
  assert.equal(await rowsOf(b), 1200);
  assert.equal(await count(w.kysely.selectFrom('device_timeline_orphans').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()), 0);
  assert.equal((await w.timeline.list(b, 1, null))[0]?.reason, '1199');
});

/** A database as version 11 left it (a per-device index, no chains), with these devices registered. */
function olderDatabase(t: TestContext, devices: string[]) {
  const db: Db = openDatabase(file(t));
  t.after(() => db.close());
  const all = readMigrations();
  migrate(db, all.filter((m) => m.version < 12));
  const add = db.prepare("INSERT INTO devices (id, kind, name, secret_hash, created_at, updated_at) VALUES (?, 'transmitter', ?, 'x', 0, 0)");
  for (const id of devices) add.run(id, id);
  return { db, all };
}

test('migration 012 links the rows an older database holds and keeps its id sequence', { skip: sqliteOnly('builds a SQLite file at schema version 11 and migrates it') }, async (t) => {
  const { db, all } = olderDatabase(t, ['d1', 'd2']);
  const old = db.prepare("INSERT INTO mosque_device_events (device_id, at, kind, reason, detail) VALUES (?, 0, 'status', ?, '{}')");
  for (const [d, r] of [['d1', 'x0'], ['d2', 'y0'], ['d1', 'x1'], ['d1', 'x2'], ['d2', 'y1'], ['d2', 'gone']] as const) old.run(d, r);
  db.prepare("DELETE FROM mosque_device_events WHERE reason = 'gone'").run(); // the newest id: not to be handed out again
  migrate(db, all);
  const clock = createManualClock(0);
  const timeline = createTimeline(sqliteStore(db), clock);
  assert.deepEqual(reasons((await timeline.list('d1', 10, null))), ['x2', 'x1', 'x0']);
  assert.deepEqual(reasons((await timeline.list('d2', 10, null))), ['y1', 'y0']);
  await timeline.note({ deviceId: 'd2', mosqueId: null, kind: 'status', reason: 'y2' });
  assert.equal((await timeline.list('d2', 1, null))[0]!.id, '7');
  assert.deepEqual(reasons((await timeline.list('d2', 10, null))), ['y2', 'y1', 'y0']);
});

test('migration 012 without room for its copy of the timeline fails and changes nothing', { skip: sqliteOnly('caps the SQLite file (max_page_count) under the migration') }, (t) => {
  const { db, all } = olderDatabase(t, ['d1']);
  const old = db.prepare("INSERT INTO mosque_device_events (device_id, at, kind, detail) VALUES ('d1', 0, 'status', ?)");
  db.transaction(() => {
    for (let i = 0; i < 2000; i++) old.run(JSON.stringify({ pad: 'x'.repeat(200), i }));
  })();
  // As DATABASE_MAX_BYTES does: a cap a few pages above what the file holds now.
  const pages = db.pragma('page_count', { simple: true }) as number;
  db.pragma(`max_page_count = ${pages + 8}`);
  assert.throws(() => migrate(db, all), /full/);
  assert.equal(db.pragma('user_version', { simple: true }), 11);
  assert.equal(db.prepare<[], number>('SELECT count(*) FROM mosque_device_events').pluck().get(), 2000);
  const columns = db.prepare<[], string>("SELECT name FROM pragma_table_info('mosque_device_events')").pluck().all();
  assert.ok(!columns.includes('prev_id'), `columns: ${columns.join(', ')}`);
  // Given room, the same start goes through.
  db.pragma(`max_page_count = ${pages * 4}`);
  assert.equal(migrate(db, all), all.at(-1)!.version);
  assert.equal(db.prepare<[], number>('SELECT count(*) FROM mosque_device_events WHERE prev_id IS NOT NULL').pluck().get(), 1999);
});
