import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { storedLease, storeOf } from '../support/database.ts';
import { createManualClock, type Clock } from '../../src/platform/clock.ts';
import { joinMosque, member, setStatus } from '../support/people.ts';
import { restartableService, startTestService, type TestService } from '../support/service.ts';
import {
  closed, configsOnConnect, connectDevice, deviceEvents, mosqueWithOwner, publish, registerPlayer, registerTransmitter, settle, statusPayload, subscribeCode, waitFor,
  type Registered,
} from '../support/devices.ts';

// docs/decisions.md, "Device configs are rebuilt at start, not on connect": without REDIS_URL every device's retained config is rebuilt once at start, before the
// broker listens (any lease that must be signed anew is signed there), so a CONNECT in the reconnect storm a
// restart causes answers from memory. The lease rules stay those of docs/firmware.md section 5.

const STREAM = 'https://radio.example/noor/live';
const nowS = (clock: Clock) => Math.floor(clock() / 1000);

const retainedLine = (ts: TestService) => ts.logs.map((l) => JSON.parse(l) as Record<string, any>).find((l) => l.msg === 'device configs retained');

async function approvedPlayer(ts: TestService) {
  const { owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM });
  const person = await member(ts, 'imran@example.com');
  const membership = await joinMosque(ts, person, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  return { owner, mosque, membership, person, player: await registerPlayer(ts, person, mosque.id) };
}

test('after a restart every device\'s config is retained before any device connects, and connecting rebuilds none', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'configs', { clock, env: { LEASE_TTL_HOURS: '1' }, logLevel: 'info' });
  const { owner, mosque, player } = await approvedPlayer(svc.current());
  const tx = await registerTransmitter(svc.current(), owner.token, mosque.id);
  const before = await storedLease(svc.current(), player.device.id);
  await svc.stop();
  clock.advance(5 * 60_000);
  const ts = await svc.start();
  assert.deepEqual(retainedLine(ts)?.devices, 2, 'both configs were retained at start');
  assert.equal(retainedLine(ts)?.leases_renewed, 0);

  const [playerConfig, ...more] = await configsOnConnect(t, ts, player);
  assert.equal(more.length, 0, 'one retained config, no fresher one built at connect');
  assert.equal(playerConfig!.stream_url, STREAM);
  assert.deepEqual(playerConfig!.lease, { token: before.lease_token, expires_at: before.lease_expires_at });
  assert.equal(playerConfig!.config_version, before.config_version);
  const [txConfig] = await configsOnConnect(t, ts, tx);
  assert.equal(txConfig!.stream_url, STREAM);
  assert.equal(txConfig!.lease, undefined);
  for (const id of [player.device.id, tx.device.id]) {
    const changes = (await deviceEvents(ts, owner.token, id)).filter((e) => e.kind === 'config_changed');
    assert.deepEqual(changes, [], `no config change for ${id}`);
  }
});

test('a lease past half its life when the service starts is signed anew at start, before the player connects', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'configs', { clock, env: { LEASE_TTL_HOURS: '1' }, logLevel: 'info' });
  const { owner, player } = await approvedPlayer(svc.current());
  const before = await storedLease(svc.current(), player.device.id);
  assert.ok(before.lease_token);
  await svc.stop();
  clock.advance(31 * 60_000); // of a one-hour lease
  const ts = await svc.start();

  // Nothing has connected yet: the new lease is already signed and written.
  const atStart = await storedLease(svc.current(), player.device.id);
  assert.notEqual(atStart.lease_token, before.lease_token);
  assert.equal(atStart.lease_expires_at, nowS(clock) + 3600);
  assert.equal(atStart.config_version, before.config_version + 1);
  assert.equal(retainedLine(ts)?.leases_renewed, 1);
  const noted = (await deviceEvents(ts, owner.token, player.device.id)).filter((e) => e.kind === 'config_changed');
  assert.deepEqual(noted.map((e) => e.reason), ['service_start']);

  const configs = await configsOnConnect(t, ts, player);
  assert.equal(configs.length, 1, JSON.stringify(configs));
  assert.deepEqual(configs[0]!.lease, { token: atStart.lease_token, expires_at: atStart.lease_expires_at });
  assert.equal(configs[0]!.config_version, atStart.config_version);
  assert.equal((await deviceEvents(ts, owner.token, player.device.id)).filter((e) => e.kind === 'config_changed').length, 1, 'none more at connect');
});

test('a membership approved in the database while the service was down: the player\'s config carries a lease from the start', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'configs', { clock, env: { LEASE_TTL_HOURS: '1' }, logLevel: 'info' });
  const { owner, mosque } = await mosqueWithOwner(svc.current(), { stream_url: STREAM });
  const person = await member(svc.current(), 'imran@example.com');
  const membership = await joinMosque(svc.current(), person, mosque.id);
  const player = await registerPlayer(svc.current(), person, mosque.id);
  assert.equal((await storedLease(svc.current(), player.device.id)).lease_token, null, 'pending: no lease');
  await svc.stop();
  const { store, close } = await storeOf(svc.current());
  await store.updateTable('memberships').set({ status: 'approved' }).where('id', '=', membership.id).execute();
  await close();
  const ts = await svc.start();
  assert.ok((await storedLease(svc.current(), player.device.id)).lease_token, 'signed at start');
  const [config] = await configsOnConnect(t, ts, player);
  assert.equal(config!.stream_url, STREAM);
  assert.equal(config!.lease.expires_at, nowS(clock) + 3600);
  assert.equal(config!.unbound_reason, undefined);
  // And the broker's own check agrees: the broadcast topic opens to it.
  const client = await connectDevice(t, player.credentials, { url: ts.service.mqttUrl });
  assert.equal(await subscribeCode(client, `mosques/${mosque.id}/broadcast`), 1);
  void owner;
});

test('a player banned while offline and a deleted player: after a restart the one has a config without a lease, the other none', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'configs', { clock, env: { LEASE_TTL_HOURS: '1' }, logLevel: 'info' });
  const { owner, mosque, membership, person, player } = await approvedPlayer(svc.current());
  const spare = await registerPlayer(svc.current(), person, mosque.id, 'spare');
  await setStatus(svc.current(), owner.token, membership.id, 'banned');
  assert.equal((await svc.current().http.delete(`/api/v1/devices/${spare.device.id}`, owner.token)).status, 204);
  // The ban's lease revocation is written after its answer. Whether it landed or a stop cut it off, the row is
  // made to hold the lease again, as a cut-off ban leaves it: the start must not serve it, and must clear it.
  await svc.stop();
  const { store, close } = await storeOf(svc.current());
  await store.updateTable('devices').set({ lease_token: 'eyJ.left-by-a-cut-off-ban.sig', lease_expires_at: Math.floor(clock() / 1000) + 3000 })
    .where('id', '=', player.device.id).execute();
  await close();
  const ts = await svc.start();
  assert.equal(retainedLine(ts)?.devices, 1, 'only the devices that exist');
  const [config, ...more] = await configsOnConnect(t, ts, player);
  assert.equal(more.length, 0);
  assert.equal(config!.lease, undefined, JSON.stringify(config));
  assert.equal(config!.stream_url, undefined);
  assert.equal(config!.unbound_reason, 'membership_lapsed');
  assert.equal((await storedLease(svc.current(), player.device.id)).lease_token, null);
});

test('a connected note is listed right after the CONNACK and comes before the status the device sends next', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const client = await connectDevice(t, tx.credentials);
  const listed = await deviceEvents(ts, owner.token, tx.device.id);
  assert.ok(listed.some((e) => e.kind === 'connected'), JSON.stringify(listed));
  await publish(client, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await publish(client, `devices/${tx.device.id}/log`, 'not json'); // a rejected payload: a note written at once
  await settle(100);
  client.end(true);
  await closed(client);
  const kinds = (await deviceEvents(ts, owner.token, tx.device.id)).map((e) => e.kind).reverse();
  const at = (kind: string) => kinds.indexOf(kind);
  assert.ok(at('connected') < at('status') && at('status') < at('disconnected'), kinds.join(','));
  assert.ok(at('connected') < at('payload_rejected'), kinds.join(','));
});
