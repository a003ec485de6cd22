import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { storeOf } from '../support/database.ts';
import { API, member, signInSuperadmin } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { ensureBuilt, ROOT, tempDir } from '../support/process.ts';
import { registerPlayer } from '../support/devices.ts';
import { createMosque, joinMosque, setStatus } from '../support/people.ts';
import { FIRMWARE_DOWNLOAD_REFUSALS_PER_ADDRESS } from '../../api/firmware/images.ts';

/** docs/api.md, "Firmware updates": images signed offline with `minaret firmware`, checked and stored by the service. */

const run = promisify(execFile);
const cli = async (args: string[]) => {
  ensureBuilt(); // bin/minaret.mjs runs the compiled CLI, as an operator's install does
  return run(process.execPath, [path.join(ROOT, 'bin/minaret.mjs'), 'firmware', ...args], { cwd: ROOT, env: { PATH: process.env.PATH ?? '' } });
};

/** A key pair made by `minaret firmware keygen`, and a signer by `minaret firmware sign`. */
async function operatorKey(t: TestContext) {
  const dir = tempDir(t, 'minaret-fw-key-');
  const made = await cli(['keygen', '--out', path.join(dir, 'keys')]);
  const publicKey = /^FIRMWARE_PUBLIC_KEY=(\S+)$/m.exec(made.stdout)?.[1];
  assert.ok(publicKey, made.stdout);
  const keyFile = path.join(dir, 'keys', 'firmware-signing.key');
  return {
    dir, publicKey, keyFile,
    async sign(image: Buffer): Promise<string> {
      const file = path.join(dir, `image-${crypto.randomUUID()}.bin`);
      fs.writeFileSync(file, image);
      return (await cli(['sign', '--key', keyFile, file])).stdout.trim();
    },
  };
}

const upload = (ts: TestService, token: string, image: Uint8Array, signature: string, at = 'stream_player/B2/1.5.0', headers: Record<string, string> = {}) =>
  ts.http.request('PUT', `${API}/firmware/images/${at}`, { token, raw: image, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signature, ...headers } });

async function imageRows(ts: TestService) {
  const { store, close } = await storeOf(ts);
  try {
    return await store.selectFrom('firmware_images').select(['id', 'version', 'sha256', 'size']).execute();
  } finally {
    await close();
  }
}

test('keygen makes a 0600 private key and will not overwrite it; sign prints a signature the service checks', async (t) => {
  const key = await operatorKey(t);
  assert.equal(fs.statSync(key.keyFile).mode & 0o777, 0o600);
  await assert.rejects(cli(['keygen', '--out', path.join(key.dir, 'keys')]), /exists already/);
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: key.publicKey }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const image = crypto.randomBytes(200_000);
  const signature = await key.sign(image);
  const made = await upload(ts, root.token, image, signature, 'stream_player/B2/1.5.0', { 'x-firmware-notes': encodeURIComponent('Fixes the volume — and more') });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.deepEqual({ ...made.body, id: undefined, created_at: undefined }, {
    id: undefined, created_at: undefined, kind: 'stream_player', hw_rev: 'B2', version: '1.5.0', size: 200_000,
    sha256: crypto.createHash('sha256').update(image).digest('hex'), signature, notes: 'Fixes the volume — and more',
  });
  // The same bytes again: the image as stored; other bytes under the same version: refused, an image never changes.
  const again = await upload(ts, root.token, image, signature);
  assert.deepEqual([again.status, again.body.id], [200, made.body.id]);
  const other = crypto.randomBytes(1000);
  const changed = await upload(ts, root.token, other, await key.sign(other));
  assert.equal(changed.status, 409, JSON.stringify(changed.body));
  const list = await ts.http.get(`${API}/firmware/images`, root.token);
  assert.deepEqual(list.body.map((i: { id: string }) => i.id), [made.body.id]);
  assert.equal(list.body[0].data, undefined, 'never the bytes in a list');
  assert.equal((await imageRows(ts)).length, 1);
});

test('refused and nothing stored: a bad signature, a signature of other bytes, another key, a body over FIRMWARE_MAX_BYTES, a bad version, not a superadmin', async (t) => {
  const key = await operatorKey(t);
  const stranger = await operatorKey(t);
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: key.publicKey, FIRMWARE_MAX_BYTES: '64K' }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const image = crypto.randomBytes(10_000);
  const expectSignatureRefused = async (signature: string, why: string) => {
    const res = await upload(ts, root.token, image, signature);
    assert.equal(res.status, 400, `${why}: ${JSON.stringify(res.body)}`);
    assert.equal(res.body.error.code, 'validation_failed');
    assert.equal(res.body.error.details[0].path, 'signature', why);
  };
  await expectSignatureRefused('not base64 at all!', 'garbage');
  await expectSignatureRefused(Buffer.alloc(64, 1).toString('base64'), 'sixty-four wrong bytes');
  await expectSignatureRefused(await key.sign(crypto.randomBytes(10_000)), "the key's signature of other bytes");
  await expectSignatureRefused(await stranger.sign(image), "another key's signature of these bytes");
  const signature = await key.sign(image);
  const noHeader = await ts.http.request('PUT', `${API}/firmware/images/stream_player/B2/1.5.0`, { token: root.token, raw: image, headers: { 'content-type': 'application/octet-stream' } });
  assert.equal(noHeader.status, 400);
  const big = crypto.randomBytes(65 * 1024);
  assert.equal((await upload(ts, root.token, big, await key.sign(big))).status, 413);
  assert.equal((await upload(ts, root.token, image, signature, 'stream_player/B2/1.5')).status, 400, 'not semver');
  assert.equal((await upload(ts, root.token, image, signature, 'stream_player/B%202/1.5.0')).status, 400, 'a revision with a space');
  assert.equal((await upload(ts, root.token, image, signature, 'toaster/B2/1.5.0')).status, 404);
  assert.equal((await ts.http.request('PUT', `${API}/firmware/images/stream_player/B2/1.5.0`, { token: root.token, raw: image, headers: { 'content-type': 'application/json', 'x-firmware-signature': signature } })).status, 415);
  const owner = await member(ts, 'owner@example.com');
  assert.equal((await upload(ts, owner.token, image, signature)).status, 403, 'a member');
  assert.equal((await ts.http.get(`${API}/firmware/images`, owner.token)).status, 403);
  assert.equal((await ts.http.request('PUT', `${API}/firmware/images/stream_player/B2/1.5.0`, { raw: image, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signature } })).status, 401);
  assert.deepEqual(await imageRows(ts), [], 'nothing stored');
  assert.equal((await upload(ts, root.token, image, signature)).status, 201, 'the right signature still goes in');
});

test('without FIRMWARE_PUBLIC_KEY updates are off and say so; a key that is not Ed25519 stops the start', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const off = await ts.http.get(`${API}/firmware/images`, root.token);
  assert.equal(off.status, 409);
  assert.match(off.body.error.message, /FIRMWARE_PUBLIC_KEY/);
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'pem', type: 'spki' }).toString();
  await assert.rejects(startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: rsa }, logLevel: 'warn' }), /FIRMWARE_PUBLIC_KEY: an rsa key, not Ed25519/);
  await assert.rejects(startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: 'c2hvcnQ=' }, logLevel: 'warn' }), /FIRMWARE_PUBLIC_KEY/);
});

test('the download needs a device\'s own credentials and an offer of the image: a person, a wrong password or no offer get nothing', async (t) => {
  const key = await operatorKey(t);
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: key.publicKey }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const image = crypto.randomBytes(5000);
  const made = await upload(ts, root.token, image, await key.sign(image));
  assert.equal(made.status, 201);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  const alice = await member(ts, 'alice@example.com');
  await setStatus(ts, owner.token, (await joinMosque(ts, alice, mosque.id)).id, 'approved');
  const player = await registerPlayer(ts, alice, mosque.id);
  const download = (auth?: string) => ts.http.request('GET', `${API}/firmware/images/${made.body.id}/download`, { headers: auth ? { authorization: auth } : {} });
  const basic = (user: string, pass: string) => `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}`;
  const none = await download();
  assert.equal(none.status, 401);
  assert.match(none.headers.get('www-authenticate') ?? '', /^Basic /);
  assert.equal((await download(`Bearer ${alice.token}`)).status, 401, "a person's token is not a device's credential");
  assert.equal((await download(basic(player.device.id, 'wrong-password'))).status, 401);
  assert.equal((await download(basic('no-such-device', 'x'))).status, 401);
  const unoffered = await download(basic(player.credentials.username, player.credentials.password));
  assert.equal(unoffered.status, 404, 'no rollout offers it to this device');
});

test('guessing device passwords at the download is cut off per address after a few refusals; a device elsewhere is unaffected', async (t) => {
  const key = await operatorKey(t);
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: key.publicKey, TRUST_PROXY: '1' }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const image = crypto.randomBytes(5000);
  const made = await upload(ts, root.token, image, await key.sign(image));
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  const alice = await member(ts, 'alice@example.com');
  await setStatus(ts, owner.token, (await joinMosque(ts, alice, mosque.id)).id, 'approved');
  const player = await registerPlayer(ts, alice, mosque.id);
  const basic = (user: string, pass: string) => `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}`;
  const download = (from: string, auth?: string) =>
    ts.http.request('GET', `${API}/firmware/images/${made.body.id}/download`, { headers: { 'x-forwarded-for': from, ...(auth ? { authorization: auth } : {}) } });
  const attacker = '203.0.113.7';
  const good = basic(player.credentials.username, player.credentials.password);

  // The device's own right answers cost nothing, from any address.
  for (let i = 0; i < FIRMWARE_DOWNLOAD_REFUSALS_PER_ADDRESS + 2; i++) assert.equal((await download(attacker, good)).status, 404, 'offered nothing, but let in');
  for (let i = 0; i < FIRMWARE_DOWNLOAD_REFUSALS_PER_ADDRESS; i++) {
    const guess = i % 3 === 0 ? basic(`no-such-device-${i}`, 'x') : i % 3 === 1 ? basic(player.device.id, `wrong-${i}`) : undefined;
    assert.equal((await download(attacker, guess)).status, 401, `refusal ${i + 1}`);
  }
  for (const auth of [basic(player.device.id, 'wrong-again'), basic('another-unknown', 'x'), good]) {
    const limited = await download(attacker, auth);
    assert.deepEqual([limited.status, limited.body.error?.code], [429, 'rate_limited'], 'out of tries, even with the right password');
    assert.ok(Number(limited.headers.get('retry-after')) > 60, `Retry-After ${limited.headers.get('retry-after')}`);
  }
  const elsewhere = await download('198.51.100.20', good);
  assert.equal(elsewhere.status, 404, 'another address keeps its own budget');
  assert.match(elsewhere.body.error.message, /No update of that image is offered/);
  assert.equal((await download('198.51.100.20', basic(player.device.id, 'wrong'))).status, 401);
});
