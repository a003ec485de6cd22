import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose';
import { createManualClock, toUnixSeconds } from '../../src/platform/clock.ts';
import { createDeviceStore } from '../../src/devices/devices.ts';
import { createEntitlement, decide, type Decision } from '../../src/devices/entitlement.ts';
import { createLeaseSigner, loadOrCreateLeaseKey } from '../../src/devices/leases.ts';
import type { MembershipStatus } from '../../src/mosques/memberships.ts';
import { createMosqueStore } from '../../src/mosques/mosques.ts';
import { testStore } from '../support/database.ts';

// docs/api.md, "Devices, from the app's side" (entitlement): bound to a mosque, owner's membership there approved, device enabled.

const M = 'mosque-1';
type Facts = { enabled: number; mosque_id: string | null };

const table: Array<[name: string, device: Facts, membership: MembershipStatus | null, expected: Decision]> = [
  ['enabled, bound, approved', { enabled: 1, mosque_id: M }, 'approved', { entitled: true, mosqueId: M }],
  ['enabled, bound, pending', { enabled: 1, mosque_id: M }, 'pending', { entitled: false, reason: 'awaiting_approval', decidingField: 'membership.status' }],
  ['enabled, bound, no membership', { enabled: 1, mosque_id: M }, null, { entitled: false, reason: 'awaiting_approval', decidingField: 'membership.status' }],
  ['enabled, bound, rejected', { enabled: 1, mosque_id: M }, 'rejected', { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' }],
  ['enabled, bound, banned', { enabled: 1, mosque_id: M }, 'banned', { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' }],
  ['enabled, unbound (approved elsewhere is irrelevant)', { enabled: 1, mosque_id: null }, 'approved', { entitled: false, reason: 'no_mosque', decidingField: 'device.mosque_id' }],
  ['enabled, unbound, no membership', { enabled: 1, mosque_id: null }, null, { entitled: false, reason: 'no_mosque', decidingField: 'device.mosque_id' }],
  // A disabled device decides first, whatever else holds.
  ['disabled, bound, approved', { enabled: 0, mosque_id: M }, 'approved', { entitled: false, reason: 'membership_lapsed', decidingField: 'device.enabled' }],
  ['disabled, unbound', { enabled: 0, mosque_id: null }, null, { entitled: false, reason: 'membership_lapsed', decidingField: 'device.enabled' }],
  ['disabled, bound, banned', { enabled: 0, mosque_id: M }, 'banned', { entitled: false, reason: 'membership_lapsed', decidingField: 'device.enabled' }],
];

for (const [name, device, membership, expected] of table) {
  test(`decide: ${name}`, () => {
    assert.deepEqual(decide(device, membership), expected);
  });
}

// ---- leases: Ed25519 JWTs that firmware verifies offline against the JWKS ----

function tempDir(t: TestContext) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-lease-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const verifyWith = (jwks: { keys: Array<Record<string, unknown>> }, token: string, now: number) =>
  jwtVerify(token, createLocalJWKSet(jwks as Parameters<typeof createLocalJWKSet>[0]), { algorithms: ['EdDSA'], currentDate: new Date(now * 1000) });

test('a lease verifies against the signer\'s JWKS with EdDSA and carries sub, mosque_id, iat, exp and its own jti', async (t) => {
  const signer = createLeaseSigner(loadOrCreateLeaseKey(tempDir(t)));
  const iat = 1_767_225_600;
  const token = signer.issue('dplayer', M, iat + 3600, iat);
  const header = decodeProtectedHeader(token);
  assert.equal(header.alg, 'EdDSA');
  assert.equal(header.kid, signer.kid);
  const { payload } = await verifyWith(signer.jwks(), token, iat + 10);
  const { jti, ...claims } = payload;
  assert.deepEqual(claims, { sub: 'dplayer', mosque_id: M, iat, exp: iat + 3600 });
  assert.match(String(jti), /^[\w-]{22}$/, '128 random bits');
  // Ed25519 signs deterministically: the same claims issued twice in one second are still two leases.
  assert.notEqual(signer.issue('dplayer', M, iat + 3600, iat), token);
  const [key] = signer.jwks().keys;
  assert.equal(key!.kty, 'OKP');
  assert.equal(key!.crv, 'Ed25519');
  assert.equal(key!.alg, 'EdDSA');
  assert.equal(key!.d, undefined, 'the JWKS must not carry the private part');
});

test('a lease signed with another key fails; so does a tampered one', async (t) => {
  const signer = createLeaseSigner(loadOrCreateLeaseKey(tempDir(t)));
  const other = createLeaseSigner(crypto.generateKeyPairSync('ed25519').privateKey);
  const iat = 1_767_225_600;
  const foreign = other.issue('dplayer', M, iat + 3600, iat);
  await assert.rejects(verifyWith(signer.jwks(), foreign, iat + 10));
  // The other signer's own kid is unknown to this JWKS; with the kid swapped the signature still fails.
  const [, body, sig] = foreign.split('.');
  const relabelled = `${signer.issue('x', M, iat + 1, iat).split('.')[0]}.${body}.${sig}`;
  await assert.rejects(verifyWith(signer.jwks(), relabelled, iat + 10), { code: 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED' });
  // A lease for one mosque re-labelled for another does not verify either.
  const good = signer.issue('dplayer', M, iat + 3600, iat).split('.');
  const forged = Buffer.from(JSON.stringify({ sub: 'dplayer', mosque_id: 'mosque-2', iat, exp: iat + 3600 })).toString('base64url');
  await assert.rejects(verifyWith(signer.jwks(), `${good[0]}.${forged}.${good[2]}`, iat + 10), { code: 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED' });
});

test('an expired lease fails verification', async (t) => {
  const signer = createLeaseSigner(loadOrCreateLeaseKey(tempDir(t)));
  const iat = 1_767_225_600;
  const token = signer.issue('dplayer', M, iat + 3600, iat);
  await verifyWith(signer.jwks(), token, iat + 3599);
  await assert.rejects(verifyWith(signer.jwks(), token, iat + 3600), { code: 'ERR_JWT_EXPIRED' });
  await assert.rejects(verifyWith(signer.jwks(), token, iat + 86_400), { code: 'ERR_JWT_EXPIRED' });
});

test('the lease key is kept in the data folder: a second load signs with the same key and kid', async (t) => {
  const dir = tempDir(t);
  const first = createLeaseSigner(loadOrCreateLeaseKey(dir));
  const second = createLeaseSigner(loadOrCreateLeaseKey(dir));
  assert.equal(first.kid, second.kid);
  assert.deepEqual(first.jwks(), second.jwks());
  assert.equal(fs.statSync(path.join(dir, 'lease-key.pem')).mode & 0o777, 0o600);
  assert.notEqual(createLeaseSigner(loadOrCreateLeaseKey(tempDir(t))).kid, first.kid);
});

// ---- the in-memory leases the broker asks on every SUBSCRIBE and delivery ----

async function setup(t: TestContext, ttlHours = 1) {
  const dir = tempDir(t);
  const { store } = await testStore(t);
  const clock = createManualClock();
  const devices = await createDeviceStore(store, clock);
  const mosques = createMosqueStore(store, clock);
  const memberships = new Map<string, MembershipStatus>();
  const signer = createLeaseSigner(loadOrCreateLeaseKey(dir));
  await store.insertInto('users').values({ id: 'u1', email: 'a@example.com', email_hash: 'h1', role: 'member', created_at: 0, updated_at: 0 }).execute();
  const m1 = await mosques.create(undefined, { name: 'One', timezone: 'UTC', autoApproveMembers: false, streamUrl: 'https://radio.example/one' });
  const m2 = await mosques.create(undefined, { name: 'Two', timezone: 'UTC', autoApproveMembers: false, streamUrl: 'https://radio.example/two' });
  const make = () => createEntitlement({ store, clock, devices, mosques, membershipStatus: (m, u) => memberships.get(`${m}/${u}`) ?? null, membershipRemoved: () => false, signer, ttlHours });
  const { row: player } = await devices.create(store, { kind: 'stream_player', name: 'p', mosqueId: m1.id, ownerUserId: 'u1' });
  return { store, clock, devices, memberships, signer, m1, m2, player, make, entitlement: await make() };
}

test('binding: an entitled player gets the stream and a lease; the broker then lets it hear only its mosque', async (t) => {
  const s = await setup(t);
  const now = toUnixSeconds(s.clock());
  assert.deepEqual(await s.entitlement.binding(s.store, s.player), { mosque_id: s.m1.id, stream_url: null, lease: null, unbound_reason: 'awaiting_approval' });
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m1.id), false);

  s.memberships.set(`${s.m1.id}/u1`, 'approved');
  assert.equal((await s.entitlement.isStale(s.player)), true, 'entitled without a lease: the config must change');
  const b = await s.entitlement.binding(s.store, s.player);
  assert.equal(b.stream_url, 'https://radio.example/one');
  assert.equal(b.unbound_reason, null);
  assert.equal(b.lease!.expires_at, now + 3600);
  const { payload } = await verifyWith(s.signer.jwks(), b.lease!.token, now);
  assert.deepEqual({ ...payload, jti: undefined }, { sub: s.player.id, mosque_id: s.m1.id, iat: now, exp: now + 3600, jti: undefined });
  assert.equal((await s.entitlement.isStale(s.player)), false);
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m1.id), true);
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m2.id), false, 'a lease is for one mosque');
  assert.equal(s.entitlement.holdsLease('dother', s.m1.id), false);
});

test('binding: losing entitlement drops the lease at once (ban, rebinding, removal)', async (t) => {
  const s = await setup(t);
  s.memberships.set(`${s.m1.id}/u1`, 'approved');
  await s.entitlement.binding(s.store, s.player);

  s.memberships.set(`${s.m1.id}/u1`, 'banned');
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m1.id), true, 'until the config is rebuilt');
  assert.equal((await s.entitlement.isStale(s.player)), true);
  assert.deepEqual(await s.entitlement.binding(s.store, s.player), { mosque_id: s.m1.id, stream_url: null, lease: null, unbound_reason: 'membership_lapsed' });
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m1.id), false);
  assert.equal(s.entitlement.lease(s.player.id), null);
  assert.equal((await s.entitlement.isStale(s.player)), false);

  s.memberships.set(`${s.m1.id}/u1`, 'approved');
  await s.entitlement.binding(s.store, s.player);
  const moved = await s.devices.update(s.store, s.player.id, { mosqueId: s.m2.id });
  assert.equal((await s.entitlement.isStale(moved)), true, 'a lease for the old mosque is stale after rebinding');
  assert.equal((await s.entitlement.binding(s.store, moved)).unbound_reason, 'awaiting_approval');
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m1.id), false);

  s.memberships.set(`${s.m2.id}/u1`, 'approved');
  assert.equal((await s.entitlement.binding(s.store, moved)).lease !== null, true);
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m2.id), true);
  await s.entitlement.forget(s.store, s.player.id);
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m2.id), false);
});

test('leases: held until expiry, due for renewal past half life, and reloaded after a restart', async (t) => {
  const s = await setup(t, 1);
  s.memberships.set(`${s.m1.id}/u1`, 'approved');
  await s.entitlement.binding(s.store, s.player);
  assert.deepEqual(s.entitlement.dueForRenewal(), []);
  s.clock.advance(29 * 60_000);
  assert.deepEqual(s.entitlement.dueForRenewal(), []);
  s.clock.advance(60_000);
  assert.deepEqual(s.entitlement.dueForRenewal(), [s.player.id], 'half of a one-hour lease is spent');

  // A restart keeps a lease that is still valid for an entitled player.
  const restarted = (await s.make());
  assert.equal(restarted.holdsLease(s.player.id, s.m1.id), true);
  assert.equal(restarted.lease(s.player.id)?.expiresAt, s.entitlement.lease(s.player.id)?.expiresAt);

  s.clock.advance(30 * 60_000);
  assert.equal(s.entitlement.holdsLease(s.player.id, s.m1.id), false, 'expired at exp');
  // ...but not an expired one, nor one whose owner lost the membership meanwhile.
  assert.equal((await s.make()).lease(s.player.id), null);
  s.clock.advance(-31 * 60_000);
  s.memberships.set(`${s.m1.id}/u1`, 'rejected');
  assert.equal((await s.make()).lease(s.player.id), null);
});

test('a renewed lease is a new token with a later exp', async (t) => {
  const s = await setup(t, 1);
  s.memberships.set(`${s.m1.id}/u1`, 'approved');
  const first = (await s.entitlement.binding(s.store, s.player)).lease!;
  s.clock.advance(31 * 60_000);
  const second = (await s.entitlement.binding(s.store, s.player)).lease!;
  assert.notEqual(second.token, first.token);
  assert.equal(second.expires_at, first.expires_at + 31 * 60);
  assert.equal(decodeJwt(second.token).exp, second.expires_at);
  assert.deepEqual(s.entitlement.dueForRenewal(), []);
});

test('a transmitter holds no lease and is never entitled through one', async (t) => {
  const s = await setup(t);
  const { row: tx } = await s.devices.create(s.store, { kind: 'transmitter', name: 'tx', mosqueId: s.m1.id, ownerUserId: null });
  assert.deepEqual(await s.entitlement.binding(s.store, tx), { mosque_id: s.m1.id, stream_url: 'https://radio.example/one', lease: null, unbound_reason: null });
  assert.equal(s.entitlement.holdsLease(tx.id, s.m1.id), false);
});

test('a membership an admin removed has lapsed; one that never existed is awaited', () => {
  const device = { mosque_id: 'm1', enabled: 1 };
  assert.deepEqual(decide(device, null, true), { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' });
  assert.deepEqual(decide(device, null, false), { entitled: false, reason: 'awaiting_approval', decidingField: 'membership.status' });
  // A new membership after the removal is judged on its own status.
  assert.deepEqual(decide(device, 'pending', true), { entitled: false, reason: 'awaiting_approval', decidingField: 'membership.status' });
  assert.deepEqual(decide(device, 'approved', true), { entitled: true, mosqueId: 'm1' });
});

test('binding reuses the held lease until half its life is spent, and never one signed with a replaced key', async (t) => {
  const s = await setup(t, 1);
  s.memberships.set(`${s.m1.id}/u1`, 'approved');
  const first = (await s.entitlement.binding(s.store, s.player)).lease!;
  s.clock.advance(29 * 60_000);
  assert.deepEqual((await s.entitlement.binding(s.store, s.player)).lease, first, 'not yet half spent: the same token');
  assert.deepEqual((await (await s.make()).binding(s.store, s.player)).lease, first, 'kept in the row across a restart');

  const otherKey = createLeaseSigner(loadOrCreateLeaseKey(tempDir(t)));
  const rekeyed = await createEntitlement({ store: s.store, clock: s.clock, devices: s.devices, mosques: createMosqueStore(s.store, s.clock), membershipStatus: (m, u) => s.memberships.get(`${m}/${u}`) ?? null, membershipRemoved: () => false, signer: otherKey, ttlHours: 1 });
  const resigned = (await rekeyed.binding(s.store, s.player)).lease!;
  assert.notEqual(resigned.token, first.token);
  assert.equal(otherKey.isOwn(resigned.token), true);
  assert.equal(otherKey.isOwn(first.token), false);
});
