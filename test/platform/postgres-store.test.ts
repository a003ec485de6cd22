import { after, before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { migrate, openDatabase, readMigrations, type Db } from '../../src/platform/db.ts';
import { postgresStore } from '../../src/platform/store/postgres.ts';
import { sqliteStore, type Store } from '../../src/platform/store/store.ts';
import { createActivityLog } from '../../src/mosques/activity.ts';
import { createMosqueStore } from '../../src/mosques/mosques.ts';
import { createBroadcasts } from '../../src/broadcasts/broadcasts.ts';
import { createScheduleStore } from '../../src/schedule/schedule-store.ts';
import { forPostgres, migratePostgres, readPostgresMigrations } from '../../src/platform/store/postgres-migrations.ts';
import { createRevokedTokens } from '../../src/people/revoked-tokens.ts';
import { createTimeline } from '../../src/devices/timeline.ts';
import { pino } from 'pino';
import { createDeviceStore } from '../../src/devices/devices.ts';
import { createGroupCommit } from '../../src/devices/group-commit.ts';
import { createTelemetry } from '../../src/devices/telemetry/telemetry.ts';
import type { Faults } from '../../src/platform/faults.ts';
import { postgresInstalled, startPostgres, type PostgresCluster } from './postgres.ts';

const skip = postgresInstalled() ? false : 'PostgreSQL 15 or newer is not installed (.ci/run installs it)';
let cluster: PostgresCluster;
before(async () => {
  if (!skip) cluster = await startPostgres();
});
after(() => cluster?.stop());

const open = async () => postgresStore(await cluster.database(), { poolSize: 4, statementTimeoutMs: 5000 });

/** Each table's columns as `name type null|not null`, types reduced to what both engines mean by them. */
const SQLITE_TO_PG: Record<string, string> = { INTEGER: 'bigint', TEXT: 'text', REAL: 'double precision', BLOB: 'bytea' };

test('the numbered migrations build the same tables, columns and nullability on PostgreSQL as on SQLite', { skip }, async () => {
  const db = openDatabase(':memory:');
  const version = migrate(db);
  const lite = new Map<string, string[]>();
  for (const { name } of db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as Array<{ name: string }>) {
    const cols = db.prepare('SELECT name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY name').all(name) as Array<{ name: string; type: string; notnull: number; pk: number }>;
    lite.set(name, cols.map((c) => `${c.name} ${SQLITE_TO_PG[c.type.toUpperCase()] ?? c.type} ${c.notnull || c.pk ? 'not null' : 'null'}`));
  }
  db.close();
  const store = await open();
  try {
    assert.equal(await migratePostgres(store), version);
    const rows = (await sql<{ table_name: string; column_name: string; data_type: string; is_nullable: string }>`
      SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns
      WHERE table_schema = 'public' AND table_name <> 'minaret_schema' ORDER BY table_name, column_name`.execute(store)).rows;
    const pgTables = new Map<string, string[]>();
    for (const r of rows) pgTables.set(r.table_name, [...(pgTables.get(r.table_name) ?? []), `${r.column_name} ${r.data_type} ${r.is_nullable === 'YES' ? 'null' : 'not null'}`]);
    assert.deepEqual([...pgTables.keys()].sort(), [...lite.keys()].sort());
    for (const [table, cols] of lite) assert.deepEqual(pgTables.get(table), cols, table);
  } finally {
    await store.destroy();
  }
});

test('a second run, and two nodes migrating at once, apply each migration once', { skip }, async () => {
  const url = await cluster.database();
  const a = postgresStore(url, { poolSize: 2, statementTimeoutMs: 5000 });
  const b = postgresStore(url, { poolSize: 2, statementTimeoutMs: 5000 });
  try {
    const last = readMigrations().at(-1)!.version;
    assert.deepEqual(await Promise.all([migratePostgres(a), migratePostgres(b)]), [last, last]);
    assert.equal(await migratePostgres(a), last);
    const { rows } = await sql<{ n: number }>`SELECT count(*) AS n FROM minaret_schema`.execute(a);
    assert.equal(rows[0]!.n, 1);
  } finally {
    await a.destroy();
    await b.destroy();
  }
});

test('a migration that fails leaves nothing of itself and the version where it was', { skip }, async () => {
  const store = await open();
  try {
    const first = readPostgresMigrations().slice(0, 2);
    assert.equal(await migratePostgres(store, first), 2);
    const broken = [...first, { version: 3, name: '003_broken.sql', sql: 'CREATE TABLE half_made (id TEXT);\nSELECT no_such_function();' }];
    await assert.rejects(migratePostgres(store, broken), /migration 003_broken\.sql on PostgreSQL/);
    const { rows } = await sql<{ v: number }>`SELECT max(version) AS v FROM minaret_schema`.execute(store);
    assert.equal(rows[0]!.v, 2);
    const made = await sql`SELECT 1 FROM information_schema.tables WHERE table_name = 'half_made'`.execute(store);
    assert.equal(made.rows.length, 0);
  } finally {
    await store.destroy();
  }
});

test('forPostgres spells SQLite\'s types as PostgreSQL holds the same values', () => {
  assert.equal(
    forPostgres('CREATE TABLE t (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n  at INTEGER NOT NULL,\n  x REAL,\n  b BLOB\n) WITHOUT ROWID;'),
    'CREATE TABLE t (\n  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n  at BIGINT NOT NULL,\n  x DOUBLE PRECISION,\n  b BYTEA\n);',
  );
});

test('one set of queries: a repository on the store answers the same on PostgreSQL, with numbers for BIGINT', { skip }, async () => {
  const store = await open();
  try {
    await migratePostgres(store);
    const now = 1_900_000_000_000; // past 2038 in seconds once divided: a 32-bit INTEGER would not hold it
    await sql`INSERT INTO users (id, email, email_hash, role, created_at, updated_at) VALUES ('u1', 'a@example.com', 'h', 'member', 1, 1)`.execute(store);
    const revoked = await createRevokedTokens(store, () => now);
    const exp = now / 1000 + 3600;
    assert.equal(await revoked.revoke('u1', 'tok-1', exp), 'revoked');
    assert.equal(await revoked.revoke('u1', 'tok-1', exp), 'revoked', 'a repeat is ignored (ON CONFLICT DO NOTHING), not an error');
    const again = await createRevokedTokens(store, () => now);
    assert.equal(again.isRevoked('tok-1'), true);
    assert.equal(again.isRevoked('tok-2'), false);
    const row = await store.selectFrom('revoked_tokens').select('expires_at').executeTakeFirstOrThrow();
    assert.equal(row.expires_at, exp);
    assert.equal(typeof row.expires_at, 'number');
  } finally {
    await store.destroy();
  }
});

test('accounts are numbered in the order they were created (claim_seq), as SQLite numbers them', { skip }, async () => {
  const store = await open();
  try {
    await migratePostgres(store);
    const ids = ['u-c', 'u-a', 'u-b']; // inserted in this order, not the ids' order
    for (const id of ids) {
      await store.insertInto('users').values({ id, email: `${id}@example.com`, email_hash: 'same', role: 'member', created_at: 1, updated_at: 1 }).execute();
    }
    const rows = await store.selectFrom('users').select(['id', 'claim_seq']).where('email_hash', '=', 'same').orderBy('created_at').orderBy('claim_seq').execute();
    assert.deepEqual(rows.map((r) => r.id), ids);
    assert.ok(rows.every((r) => typeof r.claim_seq === 'number' && r.claim_seq > 0));
  } finally {
    await store.destroy();
  }
});

/**
 * The repositories' `...Sync` facets (kept for the device plane) prepare their statements on a better-sqlite3
 * connection when built; the writes below never use them, so on PostgreSQL they get an empty SQLite database.
 */
function sqliteFacet(): { db: Db; done: () => void } {
  const db = openDatabase(':memory:');
  migrate(db);
  return { db, done: () => db.close() };
}

/** SQLite's store and a fresh PostgreSQL one, both migrated, each with the connection its sync facets take. */
async function bothEngines(t: TestContext): Promise<Array<{ engine: string; store: Store; db: Db }>> {
  const lite = sqliteFacet();
  const liteStore = sqliteStore(lite.db);
  const facet = sqliteFacet();
  const pgStore = await open();
  await migratePostgres(pgStore);
  t.after(async () => {
    await liteStore.destroy();
    await pgStore.destroy();
    lite.done();
    facet.done();
  });
  return [{ engine: 'sqlite', store: liteStore, db: lite.db }, { engine: 'postgres', store: pgStore, db: facet.db }];
}

const CLOCK = () => 1_900_000_000_000;

async function addMosque(store: Store, id: string): Promise<void> {
  await store.insertInto('mosques').values({ id, name: 'Noor', join_code: `CODE${id}`, created_at: 1, updated_at: 1 }).execute();
}

test('a broadcast\'s start and stop, each with its activity entry, answer the same on PostgreSQL as on SQLite', { skip }, async (t) => {
  const answers = [];
  for (const { store, db } of await bothEngines(t)) {
    await addMosque(store, 'm1');
    const activity = createActivityLog(store, CLOCK);
    const broadcasts = createBroadcasts({ store, clock: CLOCK, activity });
    const heard: string[] = [];
    broadcasts.listen({ started: (b) => void heard.push(`started ${b.kind} ${b.status}`), stopped: (b) => void heard.push(`stopped ${b.kind} ${b.status}`) });
    const started = await broadcasts.start('m1', { kind: 'azaan', prayer: 'fajr', title: null }, null);
    assert.ok(started.ok);
    const second = await broadcasts.start('m1', { kind: 'waaz', prayer: null, title: 'Talk' }, null);
    const stopped = await broadcasts.stop(started.value, null);
    // The caller's copy still says live: the stop changes nothing more and tells no one.
    const again = await broadcasts.stop(started.value, null);
    const entries = await activity.list('m1', 10, null);
    const { id, ...row } = stopped;
    answers.push({
      row, sameId: id === started.value.id && again.id === id, againStatus: again.status, second: second.ok ? 'started' : second.failure, heard,
      entries: entries.map((e) => ({ kind: e.kind, subject: e.subject_id === id, data: e.data })),
      live: await broadcasts.findLive('m1'),
    });
  }
  const [lite, pg] = answers;
  assert.deepEqual(pg, lite);
  assert.equal(pg!.second, 'conflict');
  assert.deepEqual(pg!.heard, ['started azaan live', 'stopped azaan stopped']);
  assert.deepEqual(pg!.entries.map((e) => e.kind), ['broadcast.stopped', 'broadcast.started']);
  assert.deepEqual(pg!.entries[1]!.data, { kind: 'azaan', prayer: 'fajr' });
  assert.equal(pg!.row.stopped_at, CLOCK() / 1000);
  assert.equal(pg!.live, null);
});

test('two starts at once on PostgreSQL: one broadcast starts, the other answers conflict', { skip }, async (t) => {
  const { store, db } = (await bothEngines(t))[1]!;
  await addMosque(store, 'm1');
  const broadcasts = createBroadcasts({ store, clock: CLOCK, activity: createActivityLog(store, CLOCK) });
  const results = await Promise.all([0, 1, 2].map(() => broadcasts.start('m1', { kind: 'announcement', prayer: null, title: null }, null)));
  assert.deepEqual(results.map((r) => (r.ok ? 'started' : r.failure)).sort(), ['conflict', 'conflict', 'started']);
  const { rows } = await sql<{ n: number }>`SELECT count(*) AS n FROM activity WHERE kind = 'broadcast.started'`.execute(store);
  assert.equal(Number(rows[0]!.n), 1);
});

test('a timetable month\'s replace and delete, with the mosque\'s schedule_since, answer the same on PostgreSQL as on SQLite', { skip }, async (t) => {
  const answers = [];
  const day = (d: number) => ({ day: d, fajr: '05:0' + (d % 10), shuruk: null, dhuhr: '12:30', asr: '15:45', maghrib: '18:20', isha: '19:50' });
  for (const { store, db } of await bothEngines(t)) {
    await addMosque(store, 'm1');
    const mosques = createMosqueStore(store, CLOCK);
    const schedule = await createScheduleStore(store, mosques);
    await schedule.replaceMonth('m1', 3, [day(1), day(2), day(3)], 1_000_000);
    await schedule.replaceMonth('m1', 3, [day(1), day(2)], 2_000_000);
    await schedule.replaceMonth('m1', 4, [day(1)], 2_500_000);
    const afterReplace = { since: (await mosques.findById('m1'))!.schedule_since, day2: schedule.timetableDay('m1', 3, 2), day3: schedule.timetableDay('m1', 3, 3) };
    const removed = [await schedule.deleteMonth('m1', 4, 3_000_000), await schedule.deleteMonth('m1', 4, 4_000_000)];
    const stored = await store.selectFrom('schedule_timetables').selectAll().orderBy('month').orderBy('day').execute();
    // A store built again reads what was committed.
    const reread = await createScheduleStore(store, mosques);
    answers.push({
      afterReplace, removed, since: (await mosques.findById('m1'))!.schedule_since, stored,
      reread: { day1: reread.timetableDay('m1', 3, 1), april: reread.timetableDay('m1', 4, 1), mosques: reread.timetableMosques() },
    });
  }
  const [lite, pg] = answers;
  assert.deepEqual(pg, lite);
  assert.deepEqual(pg!.afterReplace, { since: 2_500, day2: { fajr: '05:02', dhuhr: '12:30', asr: '15:45', maghrib: '18:20', isha: '19:50' }, day3: null });
  assert.deepEqual(pg!.removed, [true, false]);
  assert.equal(pg!.since, 3_000, 'a delete that removed nothing leaves schedule_since');
  assert.deepEqual(pg!.stored.map((r) => `${r.month}/${r.day}`), ['3/1', '3/2']);
  assert.deepEqual(pg!.reread.mosques, ['m1']);
  assert.equal(pg!.reread.april, null);
});

test("the device timeline's chain walks run on PostgreSQL: pages, the per-device cap, retention and a deleted device's rows", { skip }, async () => {
  const store = await open();
  try {
    await migratePostgres(store);
    const day = 86_400;
    let now = 1_900_000_000;
    for (const id of ['d1', 'd2']) {
      await sql`INSERT INTO devices (id, kind, secret_hash, created_at, updated_at) VALUES (${id}, 'transmitter', 'h', 1, 1)`.execute(store);
    }
    const timeline = createTimeline(store, () => now * 1000);
    const append = (device: string, reason: string) => timeline.note({ deviceId: device, mosqueId: null, kind: 'status', reason });
    for (let i = 0; i < 6; i++) {
      await append('d1', `a${i}`);
      if (i % 2 === 0) await append('d2', `b${i}`);
      now += day;
    }
    const reasons = (page: Array<{ reason: string | null }>) => page.map((e) => e.reason);
    const first = await timeline.list('d1', 4, null);
    assert.deepEqual(reasons(first), ['a5', 'a4', 'a3', 'a2']);
    assert.deepEqual(reasons(await timeline.list('d1', 4, Number(first.at(-1)!.id))), ['a1', 'a0']);
    const bRow = Number((await timeline.list('d2', 1, null))[0]!.id);
    assert.deepEqual(reasons(await timeline.list('d1', 2, bRow)), ['a4', 'a3'], "another device's row as the cursor: found along the chain");
    // Retention of 4 days takes days 0 and 1 (a0, b0, a1); a cap of 2 then takes a2 and a3.
    assert.equal(await timeline.prune(4, 2), 5);
    assert.deepEqual(reasons(await timeline.list('d1', 10, null)), ['a5', 'a4']);
    assert.deepEqual(reasons(await timeline.list('d2', 10, null)), ['b4', 'b2']);
    // A deleted device's rows go in the next pass (the trigger of migration 012 notes its head).
    await sql`DELETE FROM devices WHERE id = 'd2'`.execute(store);
    assert.equal(await timeline.prune(100, 10), 2);
    const left = await sql<{ n: number }>`SELECT (SELECT count(*) FROM mosque_device_events WHERE device_id = 'd2') + (SELECT count(*) FROM device_timeline_orphans) AS n`.execute(store);
    assert.equal(left.rows[0]!.n, 0);
  } finally {
    await store.destroy();
  }
});

test("the devices registry's writes, the group commit's status write and the heartbeat flush answer the same on PostgreSQL", { skip }, async () => {
  const store = await open();
  try {
    await migratePostgres(store);
    let now = 1_900_000_000_000;
    const clock = () => now;
    await sql`INSERT INTO users (id, email, email_hash, role, created_at, updated_at) VALUES ('u1', 'a@example.com', 'h', 'member', 1, 1)`.execute(store);
    const devices = await createDeviceStore(store, clock);
    const { row, password } = await devices.create(store, { kind: 'transmitter', name: 'tx', mosqueId: null, ownerUserId: null });
    assert.equal(devices.verifySecret(row.id, password), true);
    assert.equal(row.created_at, now / 1000);
    const renamed = await devices.update(store, row.id, { name: 'minbar' });
    assert.equal(renamed.name, 'minbar');
    assert.equal(renamed.config_version, row.config_version, 'a name alone keeps the version');
    const set = await devices.update(store, row.id, { settings: { heartbeat_secs: 60 } });
    assert.equal(set.config_version, row.config_version + 1);
    assert.equal((await devices.bumpConfigVersion(store, row.id)).config_version, row.config_version + 2);
    const second = await devices.rotateSecret(store, row.id);
    assert.equal(devices.verifySecret(row.id, password), false);
    assert.equal(devices.verifySecret(row.id, second), true);
    await devices.setLogLevel(store, row.id, 'debug', 123);
    assert.equal(devices.info(row.id)?.logUntil, 123);
    await devices.claimConnection(store, row.id, 'b1');
    assert.equal(await devices.connectionOwner(row.id), 'b1');
    await devices.releaseConnection(store, row.id, 'b2');
    assert.equal(await devices.connectionOwner(row.id), 'b1', 'only the process\'s own claim');
    await devices.releaseConnection(store, row.id, 'b1');
    assert.equal(await devices.connectionOwner(row.id), null);
    await devices.create(store, { kind: 'stream_player', name: 'p', mosqueId: null, ownerUserId: 'u1' });
    assert.equal(await devices.countPlayersOf(store, 'u1'), 1);
    assert.equal((await createDeviceStore(store, clock)).info(row.id)?.id, row.id, 'a new registry loads it');

    // A status through the group commit: its row and its timeline entry in one transaction, settled after COMMIT.
    const faults = { report: (what: string, err: unknown) => assert.fail(`${what}: ${String(err)}`) } as unknown as Faults;
    const commits = createGroupCommit(store, (err) => assert.fail(String(err)));
    const timeline = createTimeline(store, clock, commits.flush);
    const telemetry = await createTelemetry({ store, clock, devices, timeline, logger: pino({ level: 'silent' }), faults, commits });
    const settled = await new Promise<unknown>((resolve) => telemetry.status(row.id, { v: '1.0', status: 'ONLINE', rssi: -60, fw: '1.2.3', ts: 1 }, resolve));
    assert.equal(settled, null);
    const written = (await devices.findById(row.id))!;
    assert.deepEqual([written.status, written.rssi, written.fw, written.last_seen_at], ['ONLINE', -60, '1.2.3', now / 1000]);
    assert.deepEqual((await timeline.list(row.id, 1, null)).map((e) => [e.kind, e.from, e.to]), [['status', 'UNKNOWN', 'ONLINE']]);

    // The heartbeat flush: one UPDATE ... FROM (VALUES ...) per chunk; a field not sent keeps the row's value.
    now += 5000;
    telemetry.heartbeat(row.id, { v: '1.0', status: 'ONLINE', uptime_s: 99, free_heap: 1234, ts: 2 });
    assert.equal(await telemetry.flush(), true);
    const beat = (await devices.findById(row.id))!;
    assert.deepEqual([beat.uptime_s, beat.free_heap, beat.rssi, beat.last_seen_at], [99, 1234, -60, now / 1000]);

    await devices.delete(store, row.id);
    assert.equal(await devices.findById(row.id), null);
    assert.equal(devices.info(row.id), null);
  } finally {
    await store.destroy();
  }
});
