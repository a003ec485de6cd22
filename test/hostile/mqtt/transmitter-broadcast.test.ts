import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type mqtt from 'mqtt';
import { API, createMosque, joinMosque, member, setStatus } from '../../support/people.ts';
import { startTestService, type TestService } from '../../support/service.ts';
import {
  connectDevice, deviceEvents, getDevice, mosqueWithOwner, nextMessage, nowTs, publish, registerPlayer, registerTransmitter, settle, subscribeCode,
  waitFor,
} from '../../support/devices.ts';

// docs/decisions.md, "A transmitter may publish on its own mosque's broadcast topic": a transmitter's event on its mosque's broadcast topic is never retained and carries the
// mosque's own stream_url or none: leased players never follow a stream the mosque did not set.

const OWN_STREAM = 'https://icecast.example.org/noor';
const FOREIGN_STREAM = 'https://evil.example.net/other-audio';

/** An approved member's player, bound to the mosque, connected, leased and subscribed to the broadcast topic. */
async function leasedPlayer(t: TestContext, ts: TestService, ownerToken: string, mosqueId: string, email: string): Promise<mqtt.MqttClient> {
  const person = await member(ts, email);
  const membership = await joinMosque(ts, person, mosqueId);
  if (membership.status !== 'approved') await setStatus(ts, ownerToken, membership.id, 'approved');
  const player = await registerPlayer(ts, person, mosqueId);
  const client = await connectDevice(t, player.credentials);
  const configTopic = `devices/${player.device.id}/config`;
  const config = nextMessage(client, configTopic, 2000, (c) => Boolean(c?.lease));
  assert.equal(await subscribeCode(client, configTopic), 1);
  await config;
  assert.equal(await subscribeCode(client, `mosques/${mosqueId}/broadcast`), 1, 'a leased player may subscribe');
  return client;
}

const event = (extra: Record<string, unknown>) => JSON.stringify({ v: '1.0', broadcast_id: 'b-tx-1', kind: 'azaan', action: 'start', ts: nowTs(), ...extra });

test('a transmitter\'s retained broadcast event with a foreign stream_url reaches leased players unretained, with the mosque\'s own stream_url', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { stream_url: OWN_STREAM });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const transmitter = await connectDevice(t, tx.credentials);
  const player = await leasedPlayer(t, ts, owner.token, mosque.id, 'listener@example.com');
  const topic = `mosques/${mosque.id}/broadcast`;

  const heard = nextMessage(player, topic);
  await publish(transmitter, topic, event({ stream_url: FOREIGN_STREAM, extra: 'dropped' }), { retain: true });
  const { body, retain } = await heard;
  assert.equal(retain, false);
  assert.equal(body.stream_url, OWN_STREAM, 'the mosque\'s own stream, not the foreign one');
  assert.equal('extra' in body, false, 'only the contract\'s fields');
  assert.deepEqual([body.broadcast_id, body.kind, body.action], ['b-tx-1', 'azaan', 'start']);

  // Nothing was retained: a player that subscribes afterwards hears nothing.
  const late = await leasedPlayer(t, ts, owner.token, mosque.id, 'late@example.com');
  const lateHeard: unknown[] = [];
  late.on('message', (tp, payload) => tp === topic && lateHeard.push(payload.toString()));
  await settle(300);
  assert.deepEqual(lateHeard, []);

  // The transmitter is not cut off; the foreign stream is counted and noted.
  assert.equal(transmitter.connected, true);
  const device = await getDevice(ts, owner.token, tx.device.id);
  assert.equal(device.counters.payloads_rejected, 1);
  const notes = (await deviceEvents(ts, owner.token, tx.device.id)).filter((e) => e.kind === 'payload_rejected');
  assert.equal(notes[0]?.reason, 'foreign_stream_url');

  // The mosque's own stream_url, or none at all, passes as it is.
  for (const extra of [{ stream_url: OWN_STREAM }, {}]) {
    const next = nextMessage(player, topic);
    await publish(transmitter, topic, event({ ...extra, action: 'stop' }), { retain: false });
    const got = (await next).body;
    assert.equal(got.stream_url, (extra as { stream_url?: string }).stream_url, JSON.stringify(got));
  }
});

test('a mosque without a stream_url: a transmitter\'s event loses the foreign stream_url altogether', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const transmitter = await connectDevice(t, tx.credentials);
  const player = await leasedPlayer(t, ts, owner.token, mosque.id, 'listener@example.com');
  const topic = `mosques/${mosque.id}/broadcast`;

  const heard = nextMessage(player, topic);
  await publish(transmitter, topic, event({ stream_url: FOREIGN_STREAM }), { retain: true });
  const { body, retain } = await heard;
  assert.equal(retain, false);
  assert.equal('stream_url' in body, false, JSON.stringify(body));
});

test('a transmitter of another mosque cannot publish on this mosque\'s broadcast topic at all', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { stream_url: OWN_STREAM });
  const elsewhere = await createMosque(ts, root.token, owner, { name: 'Masjid Al-Huda' });
  const tx = await registerTransmitter(ts, owner.token, elsewhere.id);
  const transmitter = await connectDevice(t, tx.credentials);
  const player = await leasedPlayer(t, ts, owner.token, mosque.id, 'listener@example.com');
  const topic = `mosques/${mosque.id}/broadcast`;
  const lateHeard: unknown[] = [];
  player.on('message', (tp) => tp === topic && lateHeard.push(tp));
  transmitter.publish(topic, event({ stream_url: FOREIGN_STREAM }), { qos: 0, retain: true });
  await waitFor('the foreign transmitter cut off', () => !transmitter.connected);
  await settle(200);
  assert.deepEqual(lateHeard, []);
  assert.equal((await ts.http.get(`${API}/devices/${tx.device.id}`, owner.token)).body.counters.publishes_refused, 1);
});
