import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { sql } from 'kysely';
import { pino } from 'pino';
import { createDeviceStore } from '../../src/devices/devices.ts';
import { createGroupCommit } from '../../src/devices/group-commit.ts';
import { createTelemetry, type StatusReport } from '../../src/devices/telemetry/telemetry.ts';
import { createDeliveryStatuses, createTimeline } from '../../src/devices/timeline.ts';
import type { Faults } from '../../src/platform/faults.ts';
import { testStore } from '../support/database.ts';

// A group-commit batch writes its statuses, transitions and connected notes as sets (a few multi-row statements
// per table; one statement on PostgreSQL). On a real store: the SQLite file, or PostgreSQL with MINARET_TEST_STORE.

const T0 = 1_900_000_000;

async function world(t: TestContext, devicesWanted = 2) {
  const { store } = await testStore(t);
  let now = T0 * 1000;
  const clock = () => now;
  await sql`INSERT INTO mosques (id, name, join_code, created_at, updated_at) VALUES ('m1', 'Masjid', 'J1', 1, 1)`.execute(store);
  const devices = await createDeviceStore(store, clock);
  const ids: string[] = [];
  for (let i = 0; i < devicesWanted; i++) ids.push((await devices.create(store, { kind: 'transmitter', name: `tx ${i}`, mosqueId: 'm1', ownerUserId: null })).row.id);
  const faults: string[] = [];
  const commits = createGroupCommit(store, (err) => assert.fail(String(err)));
  const timeline = createTimeline(store, clock, commits.flush);
  const telemetry = await createTelemetry({
    store, clock, devices, timeline, logger: pino({ level: 'silent' }), commits,
    faults: { report: (what: string) => void faults.push(what) } as unknown as Faults,
  });
  /** Statuses sent in one turn: one batch. Resolves to each one's settle error, in the order sent. */
  const batch = (statuses: Array<[string, Partial<StatusReport> & { status: string }]>) => Promise.all(statuses.map(([id, r]) =>
    new Promise<unknown>((resolve) => telemetry.status(id, { v: '1.0', ts: 1, ...r } as StatusReport, resolve))));
  const setNow = (s: number) => void (now = s * 1000);
  const chainOf = async (id: string) => {
    const rows = await store.selectFrom('mosque_device_events').select(['id', 'prev_id', 'kind', 'from_status', 'to_status', 'reason', 'detail']).where('device_id', '=', id).orderBy('id').execute();
    const row = await store.selectFrom('devices').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    return { rows, row };
  };
  return { store, ids, telemetry, timeline, commits, batch, setNow, chainOf, faults, devices };
}

test('several statuses of one device in one batch chain their timeline rows in order, interleaved with another device', async (t) => {
  const w = await world(t);
  const [a, b] = w.ids as [string, string];
  w.telemetry.connected(a, {});
  const settled = await w.batch([
    [a, { status: 'ONLINE', reason: 'a1', fw: '1.0.0', rssi: -70 }],
    [b, { status: 'ONLINE', reason: 'b1' }],
    [a, { status: 'PLAYING', reason: 'a2', detail: { mount: '/live', "q\"uote": 'é' } }],
    [a, { status: 'PLAYING', reason: 'a2 again', rssi: -50 }],
    [a, { status: 'STREAM_ERROR', reason: 'a3' }],
    [b, { status: 'PLAYING', reason: 'b2' }],
  ]);
  assert.deepEqual(settled, [null, null, null, null, null, null], 'every status settled without an error');

  const { rows, row } = await w.chainOf(a);
  assert.deepEqual(rows.map((r) => [r.kind, r.from_status, r.to_status, r.reason]), [
    ['connected', null, null, null],
    ['status', 'UNKNOWN', 'ONLINE', 'a1'],
    ['status', 'ONLINE', 'PLAYING', 'a2'],
    ['status', 'PLAYING', 'STREAM_ERROR', 'a3'],
  ], 'a status that repeats the one before writes the row, not the timeline');
  assert.deepEqual(rows.map((r) => r.prev_id), [null, rows[0]!.id, rows[1]!.id, rows[2]!.id], 'each row points to the one before it');
  assert.equal(row.timeline_head, rows[3]!.id);
  assert.equal(row.timeline_seq, 4);
  assert.deepEqual([row.status, row.status_reason, row.fw, row.rssi, row.last_seen_at], ['STREAM_ERROR', 'a3', '1.0.0', -50, T0], 'the last status, fields laid over one another');
  assert.deepEqual(JSON.parse(row.status_detail), { prev: 'PLAYING', reason: 'a3', detail: {} });
  assert.deepEqual(JSON.parse(rows[2]!.detail), { source: 'status', detail: { mount: '/live', 'q"uote': 'é' } }, 'the detail as sent, encoded once');

  // The pages walk the same chain, and memory agrees with the row.
  assert.deepEqual((await w.timeline.list(a, 10, null)).map((e) => e.reason), ['a3', 'a2', 'a1', null]);
  assert.deepEqual((await w.timeline.list(b, 10, null)).map((e) => e.to), ['PLAYING', 'ONLINE']);
  assert.equal(w.telemetry.currentStatus(a), 'STREAM_ERROR');

  // The next batch continues each chain from its head.
  await w.batch([[a, { status: 'ONLINE', reason: 'a4' }], [b, { status: 'ONLINE', reason: 'b3' }]]);
  const next = await w.chainOf(a);
  assert.equal(next.rows.at(-1)!.prev_id, rows[3]!.id);
  assert.equal(next.row.timeline_seq, 5);
  assert.deepEqual((await w.timeline.list(b, 10, null)).map((e) => e.reason), ['b3', 'b2', 'b1']);
});

test("the broadcast report's status as of a time and played-between walk chains written in batches", async (t) => {
  const w = await world(t, 1);
  const [a] = w.ids as [string];
  const report = createDeliveryStatuses(w.store);
  w.setNow(T0);
  await w.batch([[a, { status: 'ONLINE' }], [a, { status: 'PLAYING' }], [a, { status: 'ONLINE' }]]);
  w.setNow(T0 + 100);
  await w.batch([[a, { status: 'PLAYING' }], [a, { status: 'STREAM_ERROR' }]]);
  w.setNow(T0 + 200);
  await w.batch([[a, { status: 'ONLINE' }]]);

  const asOf = async (until: number, from: number, playedUntil: number) => (await report.asOf({ mosque: 'm1', until, from, played_until: playedUntil }))[0]!;
  assert.deepEqual(await asOf(T0 + 50, T0, T0 + 50), { id: a, kind: 'transmitter', status: 'ONLINE', played: 1 }, 'the first batch: its last status; it played within it');
  assert.deepEqual(await asOf(T0 + 150, T0 + 60, T0 + 90), { id: a, kind: 'transmitter', status: 'STREAM_ERROR', played: 0 }, 'nothing played between the batches');
  assert.deepEqual(await asOf(T0 + 150, T0 + 100, T0 + 150), { id: a, kind: 'transmitter', status: 'STREAM_ERROR', played: 1 });
  assert.deepEqual(await asOf(T0 - 1, T0 - 10, T0 - 1), { id: a, kind: 'transmitter', status: null, played: 0 }, 'before any status');
  assert.deepEqual((await report.now({ mosque: 'm1', from: T0 + 150, played_until: T0 + 250 }))[0], { id: a, kind: 'transmitter', status: 'ONLINE', played: 0 });
});

test('a batch the store refuses keeps none of its rows, settles every status with the error, and the next batch starts from what was written', async (t) => {
  const w = await world(t);
  const [a, b] = w.ids as [string, string];
  await w.batch([[a, { status: 'ONLINE', reason: 'kept' }]]);
  const before = await w.chainOf(a);

  // One status too long for a CHECK the test adds: the batch's statement (or its transaction) fails whole.
  await sql`ALTER TABLE mosque_device_events ADD CONSTRAINT short_reason CHECK (length(reason) < 50)`.execute(w.store).catch(async () => {
    // SQLite cannot add a constraint to a table: a trigger refuses the row instead.
    await sql`CREATE TRIGGER short_reason BEFORE INSERT ON mosque_device_events WHEN length(NEW.reason) >= 50 BEGIN SELECT RAISE(ABORT, 'reason too long'); END`.execute(w.store);
  });
  w.telemetry.connected(b, {});
  const settled = await w.batch([
    [a, { status: 'PLAYING', reason: 'lost 1' }],
    [b, { status: 'ONLINE', reason: 'lost 2', fw: '9.9.9' }],
    [a, { status: 'STREAM_ERROR', reason: 'x'.repeat(60) }],
  ]);
  assert.equal(settled.length, 3);
  assert.ok(settled.every((err) => err instanceof Error), 'every status of the batch settled with the error');

  const after = await w.chainOf(a);
  assert.deepEqual(after.rows, before.rows, 'no timeline row of the batch was kept');
  assert.deepEqual([after.row.status, after.row.status_reason, after.row.timeline_head, after.row.timeline_seq], [before.row.status, before.row.status_reason, before.row.timeline_head, before.row.timeline_seq]);
  const other = await w.chainOf(b);
  assert.deepEqual([other.rows.length, other.row.status, other.row.fw], [0, 'UNKNOWN', null], "the other device's status and connected note went with it");
  assert.equal(w.telemetry.currentStatus(a), 'ONLINE', 'memory believes only what was written');
  assert.equal(w.telemetry.counters(a).writes_failed, 2);
  assert.ok(w.faults.includes('device connected note') && w.faults.includes('device status'), w.faults.join(', '));

  // The next batch transitions from what was written, not from what was lost.
  const ok = await w.batch([[a, { status: 'PLAYING', reason: 'again' }]]);
  assert.deepEqual(ok, [null]);
  const last = await w.chainOf(a);
  assert.deepEqual(last.rows.map((r) => [r.from_status, r.to_status, r.reason]), [['UNKNOWN', 'ONLINE', 'kept'], ['ONLINE', 'PLAYING', 'again']]);
  assert.equal(last.rows[1]!.prev_id, last.rows[0]!.id);
});

test('a status of a device deleted before its batch commits writes nothing for it and still settles', async (t) => {
  const w = await world(t);
  const [a, b] = w.ids as [string, string];
  // The queue held by a lone run, so the batch is written only after the delete.
  let release: () => void = () => assert.fail('the lone run has not begun');
  const held = w.commits.runAlone(() => new Promise<void>((resolve) => (release = resolve)));
  const settled = Promise.all([
    new Promise<unknown>((resolve) => w.telemetry.status(a, { v: '1.0', ts: 1, status: 'ONLINE' } as StatusReport, resolve)),
    new Promise<unknown>((resolve) => w.telemetry.status(b, { v: '1.0', ts: 1, status: 'ONLINE' } as StatusReport, resolve)),
  ]);
  await w.devices.delete(w.store, a);
  release();
  await held;
  assert.deepEqual(await settled, [null, null]);
  assert.equal((await w.store.selectFrom('mosque_device_events').select('id').where('device_id', '=', a).execute()).length, 0);
  assert.equal((await w.chainOf(b)).row.status, 'ONLINE');
});

test('a heartbeat flush of more devices than one chunk writes each its own fields, keeps what was not sent, skips a deleted one', async (t) => {
  // 261 devices: a chunk of 256 and one of 4 and one of 1 on SQLite; one statement on PostgreSQL.
  const w = await world(t, 261);
  w.setNow(T0 + 10);
  await w.batch([[w.ids[0]!, { status: 'ONLINE', rssi: -40, fw: '2.0.0' }]]);
  w.setNow(T0 + 20);
  w.ids.forEach((id, i) => {
    w.telemetry.heartbeat(id, { v: '1.0', status: 'ONLINE', ts: 2, uptime_s: 1000 + i, ...(i % 2 === 0 ? { rssi: -(i + 1) } : {}), ...(i === 7 ? { ip: '10.0.0.7', free_heap: 77, volume: 70, config_version: 3 } : {}) });
  });
  // A second heartbeat of one device before the flush: merged, a field it did not carry kept from the first.
  w.telemetry.heartbeat(w.ids[7]!, { v: '1.0', status: 'ONLINE', ts: 3, uptime_s: 5 });
  const deleted = w.ids[260]!;
  await w.devices.delete(w.store, deleted);
  assert.equal(await w.telemetry.flush(), true);

  const rows = await w.store.selectFrom('devices').select(['id', 'last_seen_at', 'rssi', 'ip', 'uptime_s', 'free_heap', 'volume', 'reported_config_version', 'fw', 'status']).execute();
  const byId = new Map(rows.map((r) => [r.id, r]));
  assert.equal(byId.has(deleted), false);
  w.ids.slice(0, 260).forEach((id, i) => {
    const r = byId.get(id)!;
    assert.equal(r.last_seen_at, T0 + 20, `device ${i}: its last-seen time`);
    assert.equal(r.uptime_s, i === 7 ? 5 : 1000 + i, `device ${i}: its own uptime`);
    assert.equal(r.rssi, i % 2 === 0 ? -(i + 1) : null, `device ${i}: rssi only where sent`);
  });
  const first = byId.get(w.ids[0]!)!;
  assert.deepEqual([first.fw, first.status, first.rssi], ['2.0.0', 'ONLINE', -1], 'the status\'s fields stay; the heartbeat\'s rssi lies over the status\'s');
  const seventh = byId.get(w.ids[7]!)!;
  assert.deepEqual([seventh.ip, seventh.free_heap, seventh.volume, seventh.reported_config_version], ['10.0.0.7', 77, 70, 3], 'the first heartbeat\'s fields, kept under the second');
  assert.deepEqual(w.faults, []);
});
