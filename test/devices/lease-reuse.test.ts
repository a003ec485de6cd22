import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { storedLease as storedRow, storeOf } from '../support/database.ts';
import { createManualClock, type Clock } from '../../src/platform/clock.ts';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { restartableService, type TestService } from '../support/service.ts';
import { configsOnConnect, connectDevice, mosqueWithOwner, registerPlayer, subscribeCode, type Registered } from '../support/devices.ts';

// docs/decisions.md, "Leases on reconnect": a player that reconnects while its lease is not yet half spent gets the same signed lease (no
// signature, no lease write per CONNECT), after a restart of the service too; past half its life it gets a
// new one, and a player no longer entitled gets none, whatever lease it held.

const STREAM = 'https://radio.example/noor/live';
const nowS = (clock: Clock) => Math.floor(clock() / 1000);

/** The row's lease alone (its token and expiry), as these tests compare it. */
const storedLease = async (ts: TestService, id: string) => {
  const { lease_token, lease_expires_at } = await storedRow(ts, id);
  return { lease_token, lease_expires_at };
};

/** Connects the player, waits for its retained config and hangs up: the config it was given (the freshest). */
const configOnConnect = async (t: TestContext, ts: TestService, reg: Registered) => (await configsOnConnect(t, ts, reg)).at(-1)!;

async function approvedPlayer(ts: TestService) {
  const { owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM });
  const person = await member(ts, 'imran@example.com');
  const membership = await joinMosque(ts, person, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  return { owner, mosque, membership, player: await registerPlayer(ts, person, mosque.id) };
}

test('a player reconnecting within the first half of its lease, after a restart too, gets the same lease bytes', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'lease', { clock, env: { LEASE_TTL_HOURS: '1' } });
  const { player } = await approvedPlayer(svc.current());
  const first = await configOnConnect(t, svc.current(), player);
  assert.ok(first.lease, JSON.stringify(first));
  assert.deepEqual(await storedLease(svc.current(), player.device.id), { lease_token: first.lease.token, lease_expires_at: first.lease.expires_at });

  clock.advance(10 * 60_000);
  const ts = await svc.restart();
  clock.advance(10 * 60_000); // 20 minutes into a one-hour lease: a fresh signature would carry a later iat
  const again = await configOnConnect(t, svc.current(), player);
  assert.deepEqual(again.lease, first.lease, 'the very token, not a re-signed one');
  assert.equal(again.stream_url, STREAM);
  assert.deepEqual(await storedLease(svc.current(), player.device.id), { lease_token: first.lease.token, lease_expires_at: first.lease.expires_at });
  // It still opens the broadcast topic, and verifies against the published keys.
  const keys = createLocalJWKSet((await ts.http.get(`${API}/devices/lease-keys`)).body);
  const { payload } = await jwtVerify(again.lease.token, keys, { algorithms: ['EdDSA'], currentDate: new Date(clock()) });
  assert.equal(payload.exp, first.lease.expires_at);
});

test('after a restart, a player back past half its lease gets a newly signed one on reconnect', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'lease', { clock, env: { LEASE_TTL_HOURS: '1' } });
  const { player } = await approvedPlayer(svc.current());
  const first = await configOnConnect(t, svc.current(), player);
  await svc.restart();
  clock.advance(31 * 60_000);
  const renewed = await configOnConnect(t, svc.current(), player);
  assert.notEqual(renewed.lease.token, first.lease.token);
  assert.equal(renewed.lease.expires_at, nowS(clock) + 3600);
  assert.ok(renewed.config_version > first.config_version, 'a new config, not the old one again');
  assert.deepEqual(await storedLease(svc.current(), player.device.id), { lease_token: renewed.lease.token, lease_expires_at: renewed.lease.expires_at });
});

test('a player whose membership was banned while it was offline gets no lease on reconnect, though its old one has not run out', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'lease', { clock, env: { LEASE_TTL_HOURS: '1' } });
  const { owner, membership, player } = await approvedPlayer(svc.current());
  const first = await configOnConnect(t, svc.current(), player);
  assert.ok(first.lease);
  await setStatus(svc.current(), owner.token, membership.id, 'banned');
  await svc.restart();
  clock.advance(5 * 60_000);
  const after = await configOnConnect(t, svc.current(), player);
  assert.equal(after.lease, undefined, JSON.stringify(after));
  assert.equal(after.stream_url, undefined);
  assert.equal(after.unbound_reason, 'membership_lapsed');
  assert.deepEqual(await storedLease(svc.current(), player.device.id), { lease_token: null, lease_expires_at: null });
});

test('a membership banned in the database while the service was down: the stored lease is not handed out again', async (t) => {
  const clock = createManualClock(Date.now());
  const svc = await restartableService(t, 'lease', { clock, env: { LEASE_TTL_HOURS: '1' } });
  const { membership, player } = await approvedPlayer(svc.current());
  const first = await configOnConnect(t, svc.current(), player);
  assert.ok(first.lease);
  await svc.current().service.close();
  const { store, close } = await storeOf(svc.current());
  await store.updateTable('memberships').set({ status: 'banned' }).where('id', '=', membership.id).execute();
  await close();
  await svc.restart();
  const after = await configOnConnect(t, svc.current(), player);
  assert.equal(after.lease, undefined, JSON.stringify(after));
  assert.equal(after.unbound_reason, 'membership_lapsed');
  assert.equal(await subscribeCode(await connectDevice(t, player.credentials, { url: svc.current().service.mqttUrl }), `mosques/${first.mosque_id}/broadcast`), 128);
});
