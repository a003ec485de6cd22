import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createManualClock } from '../../src/platform/clock.ts';
import { createDeviceStore } from '../../src/devices/devices.ts';
import { createTimeline } from '../../src/devices/timeline.ts';
import { sql } from 'kysely';
import { testStore } from '../support/database.ts';

// DEVICE_EVENTS_RETENTION_DAYS and DEVICE_EVENTS_MAX_PER_DEVICE (docs/settings.md), on a real store (the SQLite
// file, or PostgreSQL with MINARET_TEST_STORE).

const DAY_MS = 86_400_000;

async function world(t: TestContext, devices: number) {
  const { store: kysely, db } = await testStore(t);
  const clock = createManualClock(Date.UTC(2026, 0, 1));
  const store = await createDeviceStore(kysely, clock);
  const ids: string[] = [];
  for (let i = 0; i < devices; i++) ids.push((await store.create(kysely, { kind: 'transmitter', name: `tx ${i}`, mosqueId: null, ownerUserId: null })).row.id);
  const timeline = createTimeline(kysely, clock);
  const count = async (id: string) => Number((await kysely.selectFrom('mosque_device_events').select((eb) => eb.fn.countAll().as('n')).where('device_id', '=', id).executeTakeFirstOrThrow()).n);
  const oldestAt = async () => Number((await kysely.selectFrom('mosque_device_events').select((eb) => eb.fn.min('at').as('at')).executeTakeFirstOrThrow()).at);
  return { db, kysely, clock, ids, timeline, count, oldestAt };
}

test('events older than the retention are deleted and newer ones kept, found without an index on at', async (t) => {
  const w = await world(t, 2);
  for (let day = 0; day < 40; day++) {
    for (const id of w.ids) await w.timeline.note({ deviceId: id, mosqueId: null, kind: 'status', from: 'ONLINE', to: 'PLAYING', reason: `day ${day}` });
    w.clock.advance(DAY_MS);
  }
  // Now is day 40: with 30 days kept, days 0-9 go (day 10 is exactly 30 days old and stays).
  const removed = await w.timeline.prune(30, 1000);
  assert.equal(removed, 2 * 10);
  for (const id of w.ids) assert.equal(await w.count(id), 30);
  assert.equal(await w.oldestAt(), Math.floor((Date.UTC(2026, 0, 1) + 10 * DAY_MS) / 1000));
  const indexes = w.db
    ? w.db.prepare<[], string>("SELECT name FROM pragma_index_list('mosque_device_events')").pluck().all()
    : (await sql<{ indexname: string }>`SELECT indexname FROM pg_indexes WHERE tablename = 'mosque_device_events'`.execute(w.kysely)).rows.map((r) => r.indexname);
  assert.ok(!indexes.includes('mosque_device_events_at'), `indexes: ${indexes.join(', ')}`);
  // A second pass finds nothing more to do.
  assert.equal(await w.timeline.prune(30, 1000), 0);
});

test('each device keeps only its newest events past the cap, the others untouched, and a later pass checks only devices written to', async (t) => {
  const w = await world(t, 3);
  const [a, b, c] = w.ids as [string, string, string];
  for (let i = 0; i < 25; i++) await w.timeline.note({ deviceId: a, mosqueId: null, kind: 'status', reason: `a${i}` });
  for (let i = 0; i < 5; i++) await w.timeline.note({ deviceId: b, mosqueId: null, kind: 'status', reason: `b${i}` });
  assert.equal(await w.timeline.prune(30, 10), 15);
  assert.equal(await w.count(a), 10);
  assert.equal(await w.count(b), 5);
  assert.deepEqual((await w.timeline.list(a, 1, null)).map((e) => e.reason), ['a24']);
  assert.deepEqual((await w.timeline.list(a, 100, null)).at(-1)?.reason, 'a15');

  // Rows written by another process sharing the file (another timeline on it) are not seen until that device
  // is written to here: the cap pass after the first looks only at devices written to since.
  const other = createTimeline(w.kysely, w.clock);
  for (let i = 0; i < 20; i++) await other.note({ deviceId: c, mosqueId: null, kind: 'status', reason: `other ${i}` });
  await w.timeline.note({ deviceId: b, mosqueId: null, kind: 'status', reason: 'b5' });
  assert.equal(await w.timeline.prune(100_000, 10), 0, 'device b is within its cap; device c was not written through the timeline');
  await w.timeline.note({ deviceId: c, mosqueId: null, kind: 'status', reason: 'c' });
  assert.equal(await w.timeline.prune(100_000, 10), 11);
  assert.equal(await w.count(c), 10);
});

test('a long pass yields to the event loop between slices and stops when asked', async (t) => {
  const w = await world(t, 200);
  await w.kysely.transaction().execute(async (trx) => {
    for (const id of w.ids) for (let i = 0; i < 30; i++) await w.timeline.record(trx, { deviceId: id, mosqueId: null, kind: 'status' });
  });
  // Another task that runs once per event-loop turn (as each slice does): it gets a turn between the slices.
  let turns = 0;
  let passing = true;
  const tick = () => {
    turns++;
    if (passing) setImmediate(tick);
  };
  setImmediate(tick);
  // Slices of 0 ms do one step each: 200 devices to cap take 200 slices.
  const removed = await w.timeline.prune(30, 20, { sliceMs: 0 });
  passing = false;
  assert.equal(removed, 200 * 10);
  assert.ok(turns >= 150, `the other task ran ${turns} times during the pass`);

  for (const id of w.ids) await w.timeline.note({ deviceId: id, mosqueId: null, kind: 'status' });
  let steps = 0;
  const partial = await w.timeline.prune(30, 20, { sliceMs: 0, stopped: () => ++steps > 50 });
  assert.ok(partial > 0 && partial < 200, `a pass stopped part-way removed ${partial} of 200`);
  // The devices it did not reach are still due: the next pass caps them, with nothing written meanwhile.
  assert.equal(partial + (await w.timeline.prune(30, 20, { sliceMs: 0 })), 200);
});
