import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import type { PublishPacket } from 'aedes';
import {
  applyPublishRefusal, connackError, forwardedAfter, mqttOutcome, subscriptionAfter,
  type ConnectRefusal, type MqttOutcome, type PublishRefusal,
} from '../../broker/hooks/refusals.ts';
import { projectPath } from '../../src/platform/config.ts';

// The DeviceRefusal -> MQTT table (broker/hooks/refusals.ts) and how it is applied to aedes's answers.
// The broker tests (connect, ingest, wills, hostile/mqtt) hold the same answers end to end over real MQTT.

type Kind = keyof typeof mqttOutcome;
const KINDS = Object.keys(mqttOutcome) as Kind[];

const packet = (over: Partial<PublishPacket> = {}): PublishPacket =>
  ({ cmd: 'publish', topic: 'devices/d1/status', payload: Buffer.from('{"v":1}'), qos: 1, retain: true, dup: false, ...over }) as PublishPacket;

describe('the table', () => {
  const rows: Array<[Kind, MqttOutcome]> = [
    ['credentials_missing', { connack: 4, message: 'username and password required' }],
    ['bad_credentials', { connack: 4, message: 'bad username or password' }],
    ['client_id_mismatch', { connack: 5, message: 'clientId must equal username' }],
    ['will_denied', { connack: 5, message: 'a will may only target the own status topic' }],
    ['banned', { connack: 3, message: 'banned for reconnecting or publishing too often; try again later' }],
    ['flapping', { connack: 3, message: 'reconnecting too often; try again later' }],
    ['server_busy', { connack: 3, message: 'server unavailable' }],
    ['unknown_device', { publish: 'disconnect', message: 'unknown device' }],
    ['topic_denied', { publish: 'disconnect', message: 'publish not authorized' }],
    ['flooding', { publish: 'disconnect', message: 'publish flood' }],
    ['superseded', { publish: 'dropped' }],
    ['over_budget', { publish: 'dropped' }],
    ['payload_too_large', { publish: 'dropped' }],
    ['payload_invalid', { publish: 'dropped' }],
    ['log_throttled', { publish: 'dropped' }],
    ['will_ignored', { publish: 'dropped' }],
    ['not_written', { publish: 'unacknowledged' }],
    ['filter_denied', { suback: 0x80 }],
    ['subscribe_failed', { suback: 0x80 }],
    ['forward_denied', { forward: 'withheld' }],
  ];
  test('maps every refusal to the answer firmware has always met', () => {
    assert.deepEqual(Object.fromEntries(rows), mqttOutcome);
  });
});

describe('applying it', () => {
  test('a refused CONNECT carries its return code and message to aedes', () => {
    const refusals: ConnectRefusal[] = [{ kind: 'credentials_missing' }, { kind: 'will_denied', topic: 'x' }, { kind: 'flapping' }];
    assert.deepEqual(
      refusals.map((r) => connackError(r)).map((e) => [e.returnCode, e.message]),
      [[4, 'username and password required'], [5, 'a will may only target the own status topic'], [3, 'reconnecting too often; try again later']],
    );
  });

  test('a dropped publish is acknowledged at its QoS but rerouted to $dropped/{id}, empty and not retained', () => {
    const p = packet();
    assert.equal(applyPublishRefusal(p, { kind: 'payload_invalid', deviceId: 'd1', channel: 'status', reason: 'schema' }), null);
    assert.deepEqual([p.topic, p.retain, p.payload.length, p.qos], ['$dropped/d1', false, 0, 1]);
  });

  test('an unwritten publish is dropped and goes down to QoS 0, so aedes sends no PUBACK', () => {
    const p = packet();
    assert.equal(applyPublishRefusal(p, { kind: 'not_written', deviceId: 'd1' }), null);
    assert.deepEqual([p.topic, p.retain, p.payload.length, p.qos], ['$dropped/d1', false, 0, 0]);
  });

  test('a publish that closes the connection leaves the packet as it came and hands aedes an error', () => {
    const refusals: PublishRefusal[] = [
      { kind: 'topic_denied', deviceId: 'd1', topic: 'devices/d2/status' },
      { kind: 'flooding', deviceId: 'd1', channel: 'heartbeat' },
      { kind: 'unknown_device', deviceId: 'd1' },
    ];
    for (const r of refusals) {
      const p = packet();
      const err = applyPublishRefusal(p, r);
      assert.ok(err instanceof Error, r.kind);
      assert.equal(err.message, (mqttOutcome[r.kind] as { message: string }).message);
      assert.deepEqual(p, packet(), r.kind);
    }
  });

  test('a refused filter is a null subscription (SUBACK 0x80); a granted one passes as it is', () => {
    const sub = { topic: 'devices/d2/cmd', qos: 1 as const };
    assert.equal(subscriptionAfter(sub, { kind: 'filter_denied', filter: sub.topic }), null);
    assert.equal(subscriptionAfter(sub, { kind: 'subscribe_failed' }), null);
    assert.equal(subscriptionAfter(sub, null), sub);
  });

  test('a withheld delivery is a null packet; an allowed one passes as it is', () => {
    const p = packet();
    assert.equal(forwardedAfter(p, { kind: 'forward_denied' }), null);
    assert.equal(forwardedAfter(p, null), p);
  });
});

/** docs/firmware.md, "2. What the broker refuses, and why": one row per case, the refusals named in its last column. */
function guideRows(): Array<{ answer: string; kinds: string[] }> {
  const guide = fs.readFileSync(projectPath('docs/firmware.md'), 'utf8');
  const section = guide.slice(guide.indexOf('## 2. What the broker refuses'), guide.indexOf('## 3. Device'));
  return section.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| You do')).map((line) => {
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    return { answer: cells[1]!, kinds: [...cells[3]!.matchAll(/`(\w+)`/g)].map((m) => m[1]!) };
  });
}

/** What the guide's "The broker answers" cell must say for each kind of answer. */
function phraseOf(outcome: MqttOutcome): string {
  if ('connack' in outcome) return `CONNACK **${outcome.connack}**`;
  if ('suback' in outcome) return 'SUBACK **0x80**';
  if ('forward' in outcome) return '**not delivered**';
  return { dropped: '**dropped**', unacknowledged: '**not acknowledged**', disconnect: '**closed**' }[outcome.publish];
}

test('the firmware guide names every refusal, each in a row that gives its answer from the table', () => {
  const rows = guideRows();
  assert.ok(rows.length >= 15, `${rows.length} rows`);
  const named = new Set(rows.flatMap((r) => r.kinds));
  assert.deepEqual([...named].filter((k) => !(k in mqttOutcome)), [], 'the guide names no refusal the table lacks');
  assert.deepEqual(KINDS.filter((k) => !named.has(k)), [], 'every refusal of the table is in the guide');
  for (const row of rows) {
    for (const kind of row.kinds) assert.ok(row.answer.includes(phraseOf(mqttOutcome[kind as Kind])), `${kind}: "${row.answer}" says ${phraseOf(mqttOutcome[kind as Kind])}`);
  }
});
