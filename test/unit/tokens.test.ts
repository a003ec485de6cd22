import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT, decodeJwt, decodeProtectedHeader } from 'jose';
import { createManualClock } from '../../src/platform/clock.ts';
import { createAccessTokens } from '../../src/people/tokens.ts';
import { sha256Hex } from '../../src/platform/identifiers.ts';

const SECRET = 'unit-test-secret-0123456789-abcdefghijklmnop';
const user = { id: 'u1', email: 'a@example.com', role: 'member' as const, token_version: 3 };

function setup(versions = new Map([['u1', 3]])) {
  const clock = createManualClock();
  const tokens = createAccessTokens({ secret: SECRET, expireDays: 7, clock, currentVersion: (id) => versions.get(id), cacheSize: 2 });
  return { clock, tokens, versions };
}

test('an issued token is HS256 with id, email, role, ver, iat and exp seven days apart', async () => {
  const { tokens } = setup();
  const res = await tokens.issue(user);
  assert.equal(res.token_type, 'Bearer');
  assert.equal(res.expires_in, 604800);
  assert.deepEqual(res.user, { id: 'u1', email: 'a@example.com', role: 'member' });
  assert.equal(decodeProtectedHeader(res.access_token).alg, 'HS256');
  const claims = decodeJwt(res.access_token);
  assert.equal(claims.exp! - claims.iat!, 604800);
  assert.deepEqual([claims.id, claims.email, claims.role, claims.ver], ['u1', 'a@example.com', 'member', 3]);
  assert.equal((await tokens.verify(res.access_token))?.id, 'u1');
});

test('a token stops working the moment it expires, cached or not', async () => {
  const { tokens, clock } = setup();
  const { access_token } = await tokens.issue(user);
  assert.ok(await tokens.verify(access_token));
  clock.advance(7 * 86_400_000 - 1000);
  assert.ok(await tokens.verify(access_token));
  clock.advance(1000);
  assert.equal(await tokens.verify(access_token), null);
});

test('raising the token version revokes a token that is already in the cache', async () => {
  const { tokens, versions } = setup();
  const { access_token } = await tokens.issue(user);
  assert.ok(await tokens.verify(access_token));
  versions.set('u1', 4);
  assert.equal(await tokens.verify(access_token), null);
});

test('a deleted user\'s token is refused', async () => {
  const { tokens, versions } = setup();
  const { access_token } = await tokens.issue(user);
  versions.delete('u1');
  assert.equal(await tokens.verify(access_token), null);
});

const forged: Array<[string, (now: number) => Promise<string>]> = [
  ['alg none', async (now) => `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ id: 'u1', email: 'a@example.com', role: 'superadmin', ver: 3, iat: now, exp: now + 60 })}.`],
  ['HS512 with the right secret', (now) => sign({ alg: 'HS512' }, SECRET, { iat: now, exp: now + 60 })],
  ['HS256 with another secret', (now) => sign({ alg: 'HS256' }, 'another-secret-0123456789-abcdefghijklmnop', { iat: now, exp: now + 60 })],
  ['no exp claim', (now) => sign({ alg: 'HS256' }, SECRET, { iat: now })],
  ['a role that does not exist', (now) => sign({ alg: 'HS256' }, SECRET, { iat: now, exp: now + 60, role: 'owner' })],
  ['a ver that is not a number', (now) => sign({ alg: 'HS256' }, SECRET, { iat: now, exp: now + 60, ver: '3' })],
];
for (const [what, make] of forged) {
  test(`a token with ${what} is refused`, async () => {
    const { tokens, clock } = setup();
    assert.equal(await tokens.verify(await make(Math.floor(clock() / 1000))), null);
  });
}

test('the cache stays within its bound and evicted tokens still verify', async () => {
  const { tokens, clock } = setup();
  const issued = [];
  for (let i = 0; i < 4; i++) {
    clock.advance(1000); // a different iat makes a different token
    issued.push((await tokens.issue(user)).access_token);
  }
  for (const t of issued) assert.ok(await tokens.verify(t));
  for (const t of issued) assert.ok(await tokens.verify(t));
});

function b64(obj: object) {
  return Buffer.from(JSON.stringify(obj)).toString('base64url');
}

function sign(header: { alg: string }, secret: string, claims: Record<string, unknown>) {
  const body = { id: 'u1', email: 'a@example.com', role: 'member', ver: 3, ...claims };
  return new SignJWT(body).setProtectedHeader(header).sign(new TextEncoder().encode(secret));
}

test('each token carries its own random jti; a signed-out one is refused, cached or not, and the others of the user are not', async () => {
  const clock = createManualClock();
  const revoked = new Set<string>();
  const tokens = createAccessTokens({ secret: SECRET, expireDays: 7, clock, currentVersion: () => 3, isRevoked: (h) => revoked.has(h) });
  const [a, b] = [await tokens.issue(user), await tokens.issue(user)];
  const [ja, jb] = [decodeJwt(a.access_token).jti, decodeJwt(b.access_token).jti];
  assert.match(String(ja), /^[A-Za-z0-9_-]{22}$/, '128 random bits');
  assert.notEqual(ja, jb);
  const claims = (await tokens.verify(a.access_token))!;
  assert.equal(claims.tokenIdHash, sha256Hex(String(ja)), 'the denylist key is the hash of the jti, never the jti');
  revoked.add(claims.tokenIdHash);
  assert.equal(await tokens.verify(a.access_token), null, 'refused although its verification was cached');
  assert.ok(await tokens.verify(b.access_token));
});

test('a token issued before tokens carried a jti can still be signed out: its key is the hash of the whole token', async () => {
  const revoked = new Set<string>();
  const clock = createManualClock();
  const tokens = createAccessTokens({ secret: SECRET, expireDays: 7, clock, currentVersion: () => 3, isRevoked: (h) => revoked.has(h) });
  const iat = Math.floor(clock() / 1000);
  const legacy = await new SignJWT({ id: 'u1', email: 'a@example.com', role: 'member', ver: 3 })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setIssuedAt(iat).setExpirationTime(iat + 3600).sign(new TextEncoder().encode(SECRET));
  const claims = (await tokens.verify(legacy))!;
  assert.equal(claims.tokenIdHash, sha256Hex(legacy));
  revoked.add(claims.tokenIdHash);
  assert.equal(await tokens.verify(legacy), null);
});
