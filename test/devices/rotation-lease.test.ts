import { test } from 'node:test';
import assert from 'node:assert/strict';
import type mqtt from 'mqtt';
import { API, member } from '../support/people.ts';
import { closed, configsOnConnect, connectDevice, mosqueWithOwner, registerPlayer, settle, subscribeCode, waitFor, type Credentials } from '../support/devices.ts';
import { startTestService } from '../support/service.ts';
import { icecastEnv, listenerAdd } from '../audio/icecast.ts';

/**
 * docs/firmware.md, "5. The lease, and checking it offline": a rotated password drops the lease signed under the
 * old one, and the player's first connection with the new password is handed a config with a fresh lease, retained
 * before its CONNACK, so the config it receives on subscribing already opens the audio gate. The gate's side runs
 * through Icecast's listener_add callback, as test/audio/callbacks.test.ts calls it (no Icecast needed).
 */

/** Every message on the device's config topic from the moment of subscribing, in order, with its retain flag. */
async function subscribeConfig(client: mqtt.MqttClient, deviceId: string): Promise<Array<{ body: any; retain: boolean }>> {
  const topic = `devices/${deviceId}/config`;
  const seen: Array<{ body: any; retain: boolean }> = [];
  client.on('message', (tp, payload, packet) => {
    if (tp === topic) seen.push({ body: payload.length > 0 ? JSON.parse(payload.toString('utf8')) : null, retain: packet.retain });
  });
  assert.equal(await subscribeCode(client, topic), 1);
  return seen;
}

const rotate = async (ts: Awaited<ReturnType<typeof startTestService>>, id: string, token: string): Promise<Credentials> => {
  const res = await ts.http.post(`${API}/devices/${id}/credentials`, {}, token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.credentials as Credentials;
};

test('after a password rotation the player reconnects to a retained config whose fresh lease the listener gate admits', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: icecastEnv(9) });
  const { mosque } = await mosqueWithOwner(ts, { auto_approve_members: true });
  const listener = await member(ts, 'listener@example.com');
  const player = await registerPlayer(ts, listener, mosque.id);
  const before = (await configsOnConnect(t, ts, player)).at(-1)!;
  assert.ok(before.lease?.token, 'the approved player holds a lease before the rotation');
  assert.equal((await listenerAdd(ts, before.stream_url, 1)).admitted, true, 'its stream address opens the gate before the rotation');

  // The player is connected when its owner rotates its password: that connection is closed at once.
  const old = await connectDevice(t, player.credentials, { url: ts.service.mqttUrl });
  const gone = closed(old, 2000);
  const fresh = await rotate(ts, player.device.id, listener.token);
  await gone;
  assert.equal((await listenerAdd(ts, before.stream_url, 2)).reason, 'lease_superseded', 'the lease signed under the old password is refused');

  const again = await connectDevice(t, { ...fresh, mqtt_url: ts.service.mqttUrl });
  const configs = await subscribeConfig(again, player.device.id);
  await waitFor('a config after the reconnect', () => configs.length > 0);
  const [first] = configs;
  assert.equal(first!.retain, true, 'the config is the retained one, there when the player subscribed');
  assert.ok(first!.body?.lease?.token, `the first config carries a lease: ${JSON.stringify(first!.body)}`);
  assert.notEqual(first!.body.lease.token, before.lease.token, 'the lease is a fresh one, not the superseded one');
  assert.ok(first!.body.config_version > before.config_version, 'a new config version');
  const admitted = await listenerAdd(ts, first!.body.stream_url, 3);
  assert.deepEqual(admitted, { status: 200, admitted: true, reason: null }, 'the gate admits the fresh lease');
  // Nothing older follows it: the superseded config is never handed out again.
  await settle(200);
  assert.ok(configs.every((c) => c.body?.lease?.token !== before.lease.token), 'the superseded lease came after the fresh one');
  assert.equal((await listenerAdd(ts, before.stream_url, 4)).reason, 'lease_superseded', 'the old address stays refused');
});

test('a player that reconnects after a rotation of its password while its owner waits for approval gets no lease', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: icecastEnv(9) });
  const { mosque } = await mosqueWithOwner(ts);
  const listener = await member(ts, 'pending@example.com');
  const player = await registerPlayer(ts, listener, mosque.id);
  const before = (await configsOnConnect(t, ts, player)).at(-1)!;
  assert.equal(before.unbound_reason, 'awaiting_approval');
  const fresh = await rotate(ts, player.device.id, listener.token);
  const again = await connectDevice(t, { ...fresh, mqtt_url: ts.service.mqttUrl });
  const configs = await subscribeConfig(again, player.device.id);
  await waitFor('a config after the reconnect', () => configs.length > 0);
  assert.equal(configs[0]!.retain, true);
  assert.equal(configs[0]!.body.lease, undefined, 'a rotation grants no entitlement');
  assert.equal(configs[0]!.body.unbound_reason, 'awaiting_approval');
});
