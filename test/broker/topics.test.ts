import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createForwardCheck, mayReceive, maySubscribe, parseBroadcastTopic, parseDeviceTopic, publishChannel, type DeviceIdentity } from '../../broker/topics.ts';
import { filterMatches, fixedPrefix } from '../../broker/delivery/retained-index.ts';

// The topic rules of docs/firmware.md#topics, as pure functions (broker/topics.ts).

const tx: DeviceIdentity = { id: 'dtx', kind: 'transmitter', mosqueId: 'm1' };
const player: DeviceIdentity = { id: 'dpl', kind: 'stream_player', mosqueId: 'm1' };
const loosePlayer: DeviceIdentity = { id: 'dfree', kind: 'stream_player', mosqueId: null };

const always = () => true;
const never = () => false;

describe('parseDeviceTopic', () => {
  const rows: Array<[string, { deviceId: string; channel: string } | null]> = [
    ['devices/dtx/status', { deviceId: 'dtx', channel: 'status' }],
    ['devices/dtx/config', { deviceId: 'dtx', channel: 'config' }],
    ['devices/dtx/anything', { deviceId: 'dtx', channel: 'anything' }],
    ['devices/+/status', { deviceId: '+', channel: 'status' }], // parsing only; wildcards are refused by the rules
    ['devices/dtx/status/extra', null],
    ['devices/dtx', null],
    ['devices', null],
    ['devices//status', null],
    ['devices/dtx/', null],
    ['/devices/dtx/status', null],
    ['Devices/dtx/status', null],
    ['device/dtx/status', null],
    ['mosques/m1/broadcast', null],
    ['', null],
  ];
  for (const [topic, expected] of rows) {
    test(JSON.stringify(topic), () => assert.deepEqual(parseDeviceTopic(topic), expected));
  }
});

describe('parseBroadcastTopic', () => {
  const rows: Array<[string, string | null]> = [
    ['mosques/m1/broadcast', 'm1'],
    ['mosques/m1/broadcast/x', null],
    ['mosques//broadcast', null],
    ['mosques/m1/broadcasts', null],
    ['mosques/m1', null],
    ['/mosques/m1/broadcast', null],
    ['devices/m1/broadcast', null],
    ['', null],
  ];
  for (const [topic, expected] of rows) {
    test(JSON.stringify(topic), () => assert.equal(parseBroadcastTopic(topic), expected));
  }
});

describe('publishChannel', () => {
  const rows: Array<[string, DeviceIdentity, string, string | null]> = [
    ['own status', tx, 'devices/dtx/status', 'status'],
    ['own heartbeat', tx, 'devices/dtx/heartbeat', 'heartbeat'],
    ['own log', tx, 'devices/dtx/log', 'log'],
    ['own ack', player, 'devices/dpl/ack', 'ack'],
    ['own config (backend -> device only)', tx, 'devices/dtx/config', null],
    ['own cmd (backend -> device only)', player, 'devices/dpl/cmd', null],
    ['own unknown channel', tx, 'devices/dtx/telemetry', null],
    ['another device\'s status', tx, 'devices/dpl/status', null],
    ['another device\'s heartbeat', player, 'devices/dtx/heartbeat', null],
    ['extra level', tx, 'devices/dtx/status/x', null],
    ['trailing slash', tx, 'devices/dtx/status/', null],
    ['leading slash', tx, '/devices/dtx/status', null],
    ['empty id', tx, 'devices//status', null],
    ['$SYS', tx, '$SYS/broker/clients', null],
    ['$ prefix on an own topic', tx, '$devices/dtx/status', null],
    ['unrelated', tx, 'hello', null],
    ['empty', tx, '', null],
    ['prefix of the own id', tx, 'devices/dt/status', null],
    ['own id as prefix', tx, 'devices/dtxx/status', null],
    // The channel is matched by length and ending: tails that share one or the other are refused.
    ['a channel ending a longer tail', tx, 'devices/dtx/x/status', null],
    ['a channel ending a longer word', tx, 'devices/dtx/catalog', null],
    ['a tail as long as a channel', tx, 'devices/dtx/statux', null],
    ['a channel name in another case', tx, 'devices/dtx/Log', null],
    ['two channels in a row', tx, 'devices/dtx/acklog', null],
    // docs/decisions.md, "A transmitter may publish on its own mosque's broadcast topic": a transmitter announces its own mosque's broadcast; nobody else may publish there.
    ['transmitter: own mosque broadcast', tx, 'mosques/m1/broadcast', 'broadcast'],
    ['transmitter: another mosque broadcast', tx, 'mosques/m2/broadcast', null],
    ['player: its mosque broadcast', player, 'mosques/m1/broadcast', null],
    ['unbound player: a broadcast', loosePlayer, 'mosques/m1/broadcast', null],
  ];
  for (const [name, device, topic, expected] of rows) {
    test(`${device.kind} ${name}: ${JSON.stringify(topic)} -> ${expected}`, () => assert.equal(publishChannel(device, topic), expected));
  }
});

describe('maySubscribe', () => {
  const rows: Array<[string, DeviceIdentity, string, (d: DeviceIdentity, m: string) => boolean, boolean]> = [
    ['own config', tx, 'devices/dtx/config', never, true],
    ['own cmd', tx, 'devices/dtx/cmd', never, true],
    ['player own config', player, 'devices/dpl/config', never, true],
    ['player own cmd', player, 'devices/dpl/cmd', never, true],
    ['own status (device -> backend only)', tx, 'devices/dtx/status', always, false],
    ['own heartbeat', tx, 'devices/dtx/heartbeat', always, false],
    ['own log', tx, 'devices/dtx/log', always, false],
    ['own ack', tx, 'devices/dtx/ack', always, false],
    ['another device\'s config', tx, 'devices/dpl/config', always, false],
    ['another device\'s cmd', player, 'devices/dtx/cmd', always, false],
    ['another device\'s status', player, 'devices/dtx/status', always, false],
    ['#', tx, '#', always, false],
    ['+/x', tx, '+/x', always, false],
    ['+', tx, '+', always, false],
    ['devices/#', tx, 'devices/#', always, false],
    ['own id with #', tx, 'devices/dtx/#', always, false],
    ['own id with +', tx, 'devices/dtx/+', always, false],
    ['any id, own channel', tx, 'devices/+/config', always, false],
    ['$SYS/#', tx, '$SYS/#', always, false],
    ['$SYS exact', tx, '$SYS/broker/uptime', always, false],
    ['$share of own config', tx, '$share/g/devices/dtx/config', always, false],
    ['extra level on own config', tx, 'devices/dtx/config/x', always, false],
    ['empty segment', tx, 'devices//config', always, false],
    ['leading slash', tx, '/devices/dtx/config', always, false],
    ['empty filter', tx, '', always, false],
    ['unrelated', tx, 'news', always, false],
    ['transmitter: own mosque broadcast', tx, 'mosques/m1/broadcast', always, false],
    ['entitled player: own mosque broadcast', player, 'mosques/m1/broadcast', always, true],
    ['unentitled player: own mosque broadcast', player, 'mosques/m1/broadcast', never, false],
    ['entitled player: another mosque broadcast', player, 'mosques/m2/broadcast', always, false],
    ['unbound player: a broadcast', loosePlayer, 'mosques/m1/broadcast', always, false],
    ['entitled player: broadcast wildcard', player, 'mosques/+/broadcast', always, false],
    ['entitled player: broadcast extra level', player, 'mosques/m1/broadcast/x', always, false],
  ];
  // One broker-side check for the whole table, as aedes uses it: its memo of the last topic must never
  // answer for another topic or another device.
  let current: (d: DeviceIdentity, m: string) => boolean = never;
  const forward = createForwardCheck((d, m) => current(d, m));
  for (const [name, device, filter, entitled, expected] of rows) {
    test(`${device.kind} ${name}: ${JSON.stringify(filter)} -> ${expected}`, () => {
      assert.equal(maySubscribe(device, filter, entitled), expected);
      // Delivery is re-checked with the same rule.
      assert.equal(mayReceive(device, filter, entitled), expected);
      current = entitled;
      assert.equal(forward(device, filter), expected);
    });
  }

  test('the forward check answers each subscriber of one topic for itself', () => {
    const forward = createForwardCheck((d) => d.id === 'dpl');
    const other: DeviceIdentity = { ...player, id: 'dpl2' };
    const topic = 'mosques/m1/broadcast';
    assert.deepEqual([player, other, tx, player].map((d) => forward(d, topic)), [true, false, false, true]);
    assert.deepEqual([forward(tx, 'devices/dtx/cmd'), forward(player, 'devices/dtx/cmd'), forward(player, topic)], [true, false, true]);
  });

  test('entitlement is asked about the player and its own mosque only', () => {
    const asked: Array<[string, string]> = [];
    const spy = (d: DeviceIdentity, m: string) => (asked.push([d.id, m]), true);
    maySubscribe(player, 'mosques/m1/broadcast', spy);
    maySubscribe(player, 'mosques/m2/broadcast', spy);
    maySubscribe(tx, 'mosques/m1/broadcast', spy);
    maySubscribe(player, 'devices/dpl/config', spy);
    assert.deepEqual(asked, [['dpl', 'm1']]);
  });

  test('losing entitlement stops delivery at once (mayReceive reads the callback each time)', () => {
    let leased = true;
    const entitled = () => leased;
    assert.equal(mayReceive(player, 'mosques/m1/broadcast', entitled), true);
    leased = false;
    assert.equal(mayReceive(player, 'mosques/m1/broadcast', entitled), false);
    leased = true;
    const forward = createForwardCheck(entitled);
    assert.equal(forward(player, 'mosques/m1/broadcast'), true);
    leased = false;
    assert.equal(forward(player, 'mosques/m1/broadcast'), false);
  });
});

// The retained index's reading of a filter (broker/delivery/retained-index.ts): which range of topics to read, and
// which of them the filter matches [MQTT-4.7.1].
describe('a retained lookup in Redis mode', () => {
  const prefixes: Array<[string, string]> = [
    ['mosques/m1/#', 'mosques/m1'], // `#` also matches the parent level
    ['devices/+/status', 'devices'],
    ['devices/d1/config', 'devices/d1/config'],
    ['#', ''],
    ['+/d1/status', ''],
  ];
  for (const [filter, prefix] of prefixes) {
    test(`reads the topics starting with ${JSON.stringify(prefix)} for ${filter}`, () => assert.equal(fixedPrefix(filter), prefix));
  }
  const matches: Array<[string, string, boolean]> = [
    ['mosques/m1/#', 'mosques/m1', true],
    ['mosques/m1/#', 'mosques/m1/broadcast', true],
    ['mosques/m1/#', 'mosques/m1/a/b', true],
    ['mosques/m1/#', 'mosques/m10/broadcast', false],
    ['devices/+/status', 'devices/d1/status', true],
    ['devices/+/status', 'devices/d1/config', false],
    ['devices/+/status', 'devices/d1/status/x', false],
    ['devices/+/status', 'devices/status', false],
    ['devices/+', 'devices/', true], // an empty level is a level
  ];
  for (const [filter, topic, expected] of matches) {
    test(`${expected ? 'matches' : 'does not match'} ${topic} with ${filter}`, () => assert.equal(filterMatches(filter, topic), expected));
  }
});
