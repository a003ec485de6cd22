import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { systemClock } from '../../src/platform/clock.ts';
import { testStore } from '../support/database.ts';
import { createActivityLog } from '../../src/mosques/activity.ts';
import { createMosqueStore } from '../../src/mosques/mosques.ts';
import { createDeviceStore } from '../../src/devices/devices.ts';
import { createCommands } from '../../src/devices/commands.ts';
import { createTimeline } from '../../src/devices/timeline.ts';
import type { DeviceLink } from '../../src/devices/device-link.ts';
import { createBroadcasts } from '../../src/broadcasts/broadcasts.ts';
import { createFanout } from '../../src/broadcasts/broadcast-fanout.ts';
import { createPushOutbox } from '../../src/broadcasts/push-outbox.ts';
import { createPushSubscriptions } from '../../src/broadcasts/push-subscriptions.ts';

const STREAM = 'https://stream.example.org/noor';

/**
 * Without an audio server a start event names the mosque's own stream_url, which the fan-out reads from the
 * store before it publishes. The fan-out runs here on real stores (SQLite, or PostgreSQL with MINARET_TEST_STORE), with the broker port
 * recording what it is handed, in the order it is handed.
 */
async function fanoutWorld(t: TestContext) {
  const { store } = await testStore(t);
  const clock = systemClock;
  const logger = pino({ level: 'silent' });
  const mosques = createMosqueStore(store, clock);
  const mosque = await mosques.create(undefined, { name: 'Noor', timezone: 'UTC', autoApproveMembers: false, streamUrl: STREAM });
  const devices = await createDeviceStore(store, clock);
  const tx = (await devices.create(store, { kind: 'transmitter', name: null, mosqueId: mosque.id, ownerUserId: null })).row;
  const sent: Array<{ topic: string; payload: Record<string, unknown> }> = [];
  const link: DeviceLink = {
    publish: async (topic, payload) => void sent.push({ topic, payload: payload as Record<string, unknown> }),
    disconnect: () => undefined,
    forgetSession: () => undefined,
    isConnected: () => true,
  };
  const commands = createCommands({ link: () => link, timeline: createTimeline(store, clock), clock, logger, mosqueOf: () => mosque.id });
  const outbox = createPushOutbox({ store, clock, logger, subscriptions: createPushSubscriptions(store, clock, 5), concurrency: 1, sender: { send: async () => ({ ok: true }) } });
  const fanout = createFanout({ store, clock, logger, devices, mosques, memberships: { notifiedMembers: async () => [] }, commands, outbox, link: () => link });
  const broadcasts = createBroadcasts({ store, clock, activity: createActivityLog(store, clock) });
  const events = () => sent.filter((s) => s.topic === `mosques/${mosque.id}/broadcast`).map((s) => s.payload);
  const cmds = () => sent.filter((s) => s.topic === `devices/${tx.id}/cmd`).map((s) => s.payload['name']);
  return { mosque, fanout, broadcasts, events, cmds };
}

/** Until `done` (at most 2 s): the store's reads take a few turns on SQLite, round trips on PostgreSQL. */
const afterWrites = async (done: () => boolean) => {
  for (const end = Date.now() + 2000; !done() && Date.now() < end;) await new Promise((resolve) => setTimeout(resolve, 5));
};

test('a start resolves once its event, naming the mosque\'s stream_url read from the store, is with the broker', async (t) => {
  const w = await fanoutWorld(t);
  w.broadcasts.listen({ started: (b) => w.fanout.publishStart(b), stopped: () => undefined });
  const started = await w.broadcasts.start(w.mosque.id, { kind: 'azaan', prayer: 'isha', title: null }, null);
  assert.ok(started.ok);
  assert.deepEqual(w.events().map((e) => [e['action'], e['stream_url']]), [['start', STREAM]]);
});

test('a stop in the same turn as a start still reading its address is published after it, and cancels its transmitter command', async (t) => {
  const w = await fanoutWorld(t);
  const started = await w.broadcasts.start(w.mosque.id, { kind: 'announcement', prayer: null, title: null }, null);
  assert.ok(started.ok);
  void w.fanout.publishStart(started.value);
  w.fanout.afterStart(started.value);
  w.fanout.onStop(started.value);
  assert.deepEqual(w.events(), [], 'nothing is published before the address is read');
  await afterWrites(() => w.events().length >= 2 && w.cmds().length >= 1);
  assert.deepEqual(w.events().map((e) => e['action']), ['start', 'stop']);
  assert.equal(w.events()[0]!['stream_url'], STREAM);
  assert.equal(w.events()[1]!['stream_url'], undefined);
  assert.deepEqual(w.cmds(), ['broadcast_stop']);
});
