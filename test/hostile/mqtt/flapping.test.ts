import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createManualClock, startTestService } from '../../support/service.ts';
import { connectDevice, connectOnce, deviceEvents, getDevice, mosqueWithOwner, registerTransmitter } from '../../support/devices.ts';

// SECURITY.md, "Connection limits": more than MQTT_FLAP_MAX_CONNECTS CONNECTs of one device within MQTT_FLAP_WINDOW_S are
// refused for MQTT_FLAP_BAN_S with CONNACK 3, noted in the timeline once (EMQX's flapping detection).

test('a device reconnecting more than the limit within the window is refused with CONNACK 3 for the ban, noted once, and let in after it', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock, logLevel: 'warn', env: { MQTT_FLAP_MAX_CONNECTS: '3', MQTT_FLAP_WINDOW_S: '60', MQTT_FLAP_BAN_S: '60' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const bystander = await registerTransmitter(ts, owner.token, mosque.id, 'bystander');
  const id = tx.device.id;
  const creds = { clientId: id, username: id, password: tx.credentials.password };
  const url = ts.service.mqttUrl;

  for (let i = 1; i <= 3; i++) {
    assert.equal(await connectOnce(url, creds), 'connected', `connect ${i}`);
    clock.advance(5_000);
  }
  assert.equal(await connectOnce(url, creds), 3, 'the 4th within a minute');
  clock.advance(30_000);
  assert.equal(await connectOnce(url, creds), 3, 'still banned 30 s later');
  // A wrong password is still a wrong password, banned or not.
  assert.equal(await connectOnce(url, { ...creds, password: 'x'.repeat(43) }), 4);
  // Another device is not affected.
  assert.equal(await connectOnce(url, { clientId: bystander.device.id, username: bystander.device.id, password: bystander.credentials.password }), 'connected');

  const bans = (await deviceEvents(ts, owner.token, id, '?limit=100')).filter((e) => e.kind === 'flapping');
  assert.equal(bans.length, 1, 'noted once');
  assert.equal(bans[0]!.reason, 'flapping');
  assert.deepEqual([bans[0]!.detail.connects, bans[0]!.detail.window_s, bans[0]!.detail.ban_s], [4, 60, 60]);
  const device = await getDevice(ts, owner.token, id);
  assert.equal(device.counters.connects, 3);
  assert.equal(device.counters.connects_refused, 2);

  clock.advance(30_000);
  const back = await connectDevice(t, tx.credentials);
  assert.equal(back.connected, true, 'let in once the ban is over');
});

test('connects spread wider than the window are never refused', async (t) => {
  const clock = createManualClock(Date.UTC(2026, 0, 1, 12));
  const ts = await startTestService(t, { clock, logLevel: 'warn', env: { MQTT_FLAP_MAX_CONNECTS: '3', MQTT_FLAP_WINDOW_S: '60' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const creds = { clientId: tx.device.id, username: tx.device.id, password: tx.credentials.password };
  for (let i = 1; i <= 8; i++) {
    assert.equal(await connectOnce(ts.service.mqttUrl, creds), 'connected', `connect ${i}`);
    clock.advance(21_000); // at most 3 within any 60 s
  }
  assert.equal((await deviceEvents(ts, owner.token, tx.device.id, '?limit=100')).filter((e) => e.kind === 'flapping').length, 0);
});
