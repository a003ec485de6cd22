import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { Aedes } from 'aedes';
import { nodeArgsFor, startProcess, tempDir, type Run } from '../support/process.ts';
import { ffmpegPath } from '../audio/audio-files.ts';
import { audioToolsMissing } from '../audio/icecast-plain.ts';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { deviceLine } from './support.ts';
import { SimDevice } from '../../simulator/device.ts';

// Firmware updates on the device (docs/firmware.md, "4.4 Firmware updates"; docs/devices/raspberry-pi.md): a real
// `minaret-device run` against a plain aedes broker (the rollout that sends the command is the service's side, built
// elsewhere) and a small HTTP server standing in for the image download (docs/api.md, "Firmware updates"): HTTP
// Basic by the device's own credentials, ETag = the SHA-256, Range + If-Range. Images are signed as `minaret
// firmware sign` signs them (src/platform/keys/signatures.ts).

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;
const PASSWORD = 'device-password-0123456789abcdef';
const MOSQUE = 'mosque-update-1';
const TARGET = '2.0.0';
const nowS = (): number => Math.floor(Date.now() / 1000);
const keys = newKeyPair();

interface Image {
  body: Buffer;
  sha256: string;
  signature: string;
}

function signedImage(bytes = 240_000, privatePem = keys.privatePem): Image {
  const body = crypto.randomBytes(bytes);
  const digest = digestOf(body);
  return { body, sha256: digest.hex, signature: signDigest(privatePem, digest.raw) };
}

interface Served {
  url: string;
  requests: Array<{ range: string | undefined; ifRange: string | undefined; status: number }>;
}

/**
 * The image download: 401 without the device's own Basic credentials, 206 for a Range whose If-Range names the
 * ETag; the body paced (10 KB every 50 ms) so progress shows; `dropAfter` cuts the first answer's connection there.
 */
async function imageServer(t: TestContext, id: string, image: Buffer, etag: string, o: { dropAfter?: number; host?: string } = {}): Promise<Served> {
  const requests: Served['requests'] = [];
  let dropped = false;
  const server = http.createServer((req, res) => {
    const auth = `Basic ${Buffer.from(`${id}:${PASSWORD}`).toString('base64')}`;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const resume = range !== null && req.headers['if-range'] === `"${etag}"`;
    const from = resume ? Number(range[1]) : 0;
    const status = req.headers.authorization !== auth ? 401 : resume ? 206 : 200;
    requests.push({ range: req.headers.range, ifRange: req.headers['if-range'] as string | undefined, status });
    if (status === 401) return void res.writeHead(401, { 'www-authenticate': 'Basic realm="firmware"' }).end();
    res.writeHead(status, {
      'content-type': 'application/octet-stream', 'content-length': image.length - from, etag: `"${etag}"`, 'accept-ranges': 'bytes',
      ...(status === 206 && { 'content-range': `bytes ${from}-${image.length - 1}/${image.length}` }),
    });
    let at = from;
    const tick = setInterval(() => {
      if (o.dropAfter !== undefined && !dropped && at >= o.dropAfter) {
        dropped = true;
        clearInterval(tick);
        return void res.socket?.destroy();
      }
      if (at >= image.length) return void res.end(clearInterval(tick));
      res.write(image.subarray(at, (at += 10_000)));
    }, 50);
    res.on('close', () => clearInterval(tick));
  });
  const host = o.host ?? '127.0.0.1';
  await new Promise<void>((r) => server.listen(0, host, r));
  t.after(() => new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  }));
  return { url: `http://${host}:${(server.address() as net.AddressInfo).port}/api/v1/firmware/images/img-1/download`, requests };
}

/** A plain aedes broker with what the device published on its status and ack topics. */
async function broker(t: TestContext, id: string) {
  const statuses: Array<Record<string, any>> = [];
  const acks: Array<Record<string, any>> = [];
  const aedes = await Aedes.createBroker();
  aedes.on('publish', (packet, client) => {
    if (!client) return;
    if (packet.topic === `devices/${id}/status`) statuses.push(JSON.parse(packet.payload.toString()));
    if (packet.topic === `devices/${id}/ack`) acks.push(JSON.parse(packet.payload.toString()));
  });
  const server = net.createServer((s) => aedes.handle(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(async () => {
    const closed = new Promise<void>((r) => server.close(() => r()));
    await new Promise<void>((r) => aedes.close(() => r()));
    await closed;
  });
  const publish = (topic: string, body: unknown, retain = false): Promise<void> =>
    new Promise((r, j) => aedes.publish({ cmd: 'publish', topic, payload: Buffer.from(JSON.stringify(body)), qos: 1, retain, dup: false }, (e) => (e ? j(e) : r())));
  return { port: (server.address() as net.AddressInfo).port, statuses, acks, publish };
}

type Broker = Awaited<ReturnType<typeof broker>>;

function device(t: TestContext, id: string, kind: 'transmitter' | 'stream_player', port: number, args: string[], dir = tempDir(t, 'minaret-update-'), server = 'http://127.0.0.1:9'): { run: Run; dir: string } {
  const file = path.join(dir, 'device.json');
  if (!fs.existsSync(file)) {
    const credentials = { client_id: id, username: id, password: PASSWORD, mqtt_url: `mqtt://127.0.0.1:${port}`, mqtts_url: null };
    fs.writeFileSync(file, JSON.stringify({ server, device: { id, kind }, credentials }), { mode: 0o600 });
  }
  const env = { PATH: process.env.PATH ?? '', HOME: dir, MINARET_DEVICE_RECONNECT_MAX_MS: '1000' };
  const run = startProcess(t, env, process.execPath, [...nodeArgsFor('device/index.ts'), 'run', '--state', dir, '--output', path.join(dir, 'out.wav'), ...args]);
  return { run, dir };
}

async function until<T>(what: string, find: () => T | undefined, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const found = find();
    if (found !== undefined) return found;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Sends `update` for `image` as served at `url`; resolves with its ack. */
async function sendUpdate(mq: Broker, id: string, url: string, image: Pick<Image, 'sha256' | 'signature'> & { size: number }, target = TARGET): Promise<Record<string, any>> {
  const cmdId = crypto.randomUUID();
  const args = { url, size: image.size, sha256: image.sha256, signature: image.signature, target_fw: target };
  await mq.publish(`devices/${id}/cmd`, { v: '1.0', id: cmdId, name: 'update', args, ts: nowS(), expires_at: nowS() + 60 });
  return until(`the ack of ${cmdId}`, () => mq.acks.find((a) => a.id === cmdId));
}

const firmwareFolder = (dir: string): string[] => (fs.existsSync(path.join(dir, 'firmware')) ? fs.readdirSync(path.join(dir, 'firmware')).sort() : []);

async function stopped(run: Run): Promise<void> {
  run.child.kill('SIGTERM');
  assert.equal((await run.exited).code, 0, run.stderr());
}

test('a signed image is downloaded with the device\'s credentials, reported as UPDATING progress, installed by the install command, and the device comes back through CONNECTING on target_fw', { skip, timeout: 90_000 }, async (t) => {
  const id = 'update-tx-ok';
  const image = signedImage();
  const served = await imageServer(t, id, image.body, image.sha256);
  const mq = await broker(t, id);
  const installed = tempDir(t, 'minaret-installed-');
  const { run, dir } = device(t, id, 'transmitter', mq.port, ['--firmware-key', keys.publicRaw, '--install-command', `cp -t ${installed}`]);
  const online = await until('ONLINE', () => mq.statuses.find((s) => s.status === 'ONLINE'));
  const oldFw = online.fw as string;
  assert.notEqual(oldFw, TARGET);
  // Plain semver, the package's version: a rollout without fw_range offers an image to devices older than it.
  const pkg = JSON.parse(fs.readFileSync(path.resolve('package.json'), 'utf8')) as { version: string };
  assert.equal(oldFw, pkg.version);

  const ack = await sendUpdate(mq, id, served.url, { ...image, size: image.body.length });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  assert.deepEqual(ack.result, { accepted: true, target_fw: TARGET });
  const back = await until('ONLINE on the new fw', () => mq.statuses.find((s) => s.status === 'ONLINE' && s.fw === TARGET));
  assert.equal(back.prev, 'CONNECTING');
  assert.equal(back.reason, 'connected');

  const updating = mq.statuses.filter((s) => s.status === 'UPDATING');
  assert.ok(updating.length >= 2, `progress reported: ${JSON.stringify(updating.map((s) => s.detail))}`);
  for (const s of updating) assert.equal(s.reason, 'ota');
  assert.deepEqual(updating[0]!.detail, { progress_pct: 0, target_fw: TARGET });
  assert.deepEqual(updating.at(-1)!.detail, { progress_pct: 100, target_fw: TARGET });
  const reboot = mq.statuses.find((s) => s.status === 'OFFLINE');
  assert.equal(reboot?.reason, 'reboot', 'a clean goodbye before the reboot, not the will');
  assert.equal(reboot?.fw, oldFw);
  assert.ok(mq.statuses.indexOf(reboot!) < mq.statuses.indexOf(back));
  assert.ok(served.requests.some((r) => r.status === 401) === false, 'every request carried the device\'s credentials');

  assert.deepEqual(fs.readFileSync(path.join(dir, 'firmware', TARGET)), image.body, 'the verified image is kept in DIR/firmware/<version>');
  assert.equal(fs.statSync(path.join(dir, 'firmware', TARGET)).mode & 0o777, 0o600);
  assert.deepEqual(fs.readFileSync(path.join(installed, TARGET)), image.body, 'the install command was given the image path');
  assert.equal(JSON.parse(fs.readFileSync(path.join(dir, 'firmware', 'installed.json'), 'utf8')).fw, TARGET);

  // A restart of the process (systemd's) keeps reporting the installed version, and the key stays pinned.
  await stopped(run);
  const again = device(t, id, 'transmitter', mq.port, [], dir);
  await deviceLine(again.run, new RegExp(`minaret-device ${TARGET.replace(/\./g, '\\.')}: transmitter`), 15_000);
  await until('connected again', () => mq.statuses.filter((s) => s.prev === 'CONNECTING' && s.fw === TARGET).length >= 2 || undefined);
  const resent = await sendUpdate(mq, id, served.url, { ...image, size: image.body.length });
  assert.equal(resent.error, 'already_installed');
  await stopped(again.run);
  assert.doesNotMatch(run.stdout() + again.run.stdout(), new RegExp(PASSWORD), 'the password is never printed');
});

test('a device running 2.0.0+build.5 answers an update to 2.0.0 already_installed, and not one to 2.0.0-rc.1', { timeout: 30_000 }, async (t) => {
  const id = 'sim-update-build';
  const mq = await broker(t, id);
  const dev = new SimDevice({ kind: 'transmitter', id, password: PASSWORD, mqttUrl: `mqtt://127.0.0.1:${mq.port}`, fw: '2.0.0+build.5', firmwareKey: keys.publicRaw });
  t.after(() => dev.stop({ graceful: true }));
  await dev.start();
  await until('ONLINE', () => mq.statuses.find((s) => s.status === 'ONLINE'));
  const image = signedImage(1000);
  // Another server's URL: an update that passes the version check is refused there, before any download.
  const elsewhere = 'http://127.0.0.3:9/api/v1/firmware/images/img-1/download';
  for (const target of ['2.0.0', 'v2.0.0+build.6']) {
    const ack = await sendUpdate(mq, id, elsewhere, { ...image, size: 1000 }, target);
    assert.deepEqual([ack.ok, ack.error], [false, 'already_installed'], target);
  }
  const rc = await sendUpdate(mq, id, elsewhere, { ...image, size: 1000 }, '2.0.0-rc.1');
  assert.deepEqual([rc.ok, rc.error], [false, 'untrusted_url'], 'a pre-release is another version');
});

test('an update naming another server than the device\'s own is acked untrusted_url and nothing is fetched; one from its paired server installs', { skip, timeout: 90_000 }, async (t) => {
  const id = 'update-tx-foreign';
  const image = signedImage(60_000);
  // The device's server (its device.json base) on 127.0.0.2, its broker on 127.0.0.1, someone else on 127.0.0.3.
  const own = await imageServer(t, id, image.body, image.sha256, { host: '127.0.0.2' });
  const foreign = await imageServer(t, id, image.body, image.sha256, { host: '127.0.0.3' });
  const mq = await broker(t, id);
  const { run } = device(t, id, 'transmitter', mq.port, ['--firmware-key', keys.publicRaw], tempDir(t, 'minaret-update-'), new URL(own.url).origin);
  const online = await until('ONLINE', () => mq.statuses.find((s) => s.status === 'ONLINE'));

  const stolen = await sendUpdate(mq, id, foreign.url, { ...image, size: image.body.length });
  assert.deepEqual([stolen.ok, stolen.error], [false, 'untrusted_url']);
  const otherPort = await sendUpdate(mq, id, own.url.replace(/:\d+\//, ':9/'), { ...image, size: image.body.length });
  assert.deepEqual([otherPort.ok, otherPort.error], [false, 'untrusted_url'], 'the server\'s host, another origin');
  assert.deepEqual(foreign.requests, [], 'the password never reached the other server');
  assert.equal(mq.statuses.some((s) => s.status === 'UPDATING'), false);

  const ack = await sendUpdate(mq, id, own.url, { ...image, size: image.body.length });
  assert.equal(ack.ok, true, JSON.stringify(ack));
  await until('ONLINE on the new fw', () => mq.statuses.find((s) => s.status === 'ONLINE' && s.fw === TARGET));
  assert.ok(own.requests.length > 0 && own.requests.every((r) => r.status !== 401));
  assert.notEqual(online.fw, TARGET);
  await stopped(run);
});

test('an image whose signature is not the pinned key\'s, or whose bytes are not the announced SHA-256, is refused and nothing is installed', { skip, timeout: 90_000 }, async (t) => {
  const id = 'update-tx-bad';
  const mq = await broker(t, id);
  const { run, dir } = device(t, id, 'transmitter', mq.port, ['--firmware-key', keys.publicRaw]);
  const online = await until('ONLINE', () => mq.statuses.find((s) => s.status === 'ONLINE'));

  // Signed by another key (an attacker who can serve an image and send a command, but does not hold the signing key).
  const forged = signedImage(120_000, newKeyPair().privatePem);
  const served1 = await imageServer(t, id, forged.body, forged.sha256);
  const ack1 = await sendUpdate(mq, id, served1.url, { ...forged, size: forged.body.length });
  assert.equal(ack1.ok, true);
  const bad = await until('update_failed', () => mq.statuses.find((s) => s.reason === 'update_failed'));
  assert.equal(bad.status, 'ONLINE');
  assert.equal(bad.fw, online.fw);
  assert.deepEqual(bad.detail, { error: 'bad_signature', target_fw: TARGET });

  // A genuine signature over the announced digest, but the server hands out other bytes of the same length.
  const genuine = signedImage(120_000);
  const served2 = await imageServer(t, id, crypto.randomBytes(120_000), genuine.sha256);
  const ack2 = await sendUpdate(mq, id, served2.url, { ...genuine, size: genuine.body.length });
  assert.equal(ack2.ok, true);
  const mismatch = await until('hash_mismatch', () => mq.statuses.find((s) => s.detail?.error === 'hash_mismatch'));
  assert.equal(mismatch.reason, 'update_failed');
  assert.equal(mismatch.fw, online.fw);

  assert.equal(mq.statuses.some((s) => s.status === 'OFFLINE'), false, 'no reboot');
  assert.deepEqual(firmwareFolder(dir), ['public.key'], 'nothing installed, no partial image left');
  await stopped(run);
});

test('a download whose connection drops mid-file is continued by a Range request with If-Range, and the update completes', { skip, timeout: 90_000 }, async (t) => {
  const id = 'update-tx-resume';
  const image = signedImage();
  const served = await imageServer(t, id, image.body, image.sha256, { dropAfter: 100_000 });
  const mq = await broker(t, id);
  const { run } = device(t, id, 'transmitter', mq.port, ['--firmware-key', keys.publicRaw]);
  await until('ONLINE', () => mq.statuses.find((s) => s.status === 'ONLINE'));
  const ack = await sendUpdate(mq, id, served.url, { ...image, size: image.body.length });
  assert.equal(ack.ok, true);
  await until('ONLINE on the new fw', () => mq.statuses.find((s) => s.status === 'ONLINE' && s.fw === TARGET));
  assert.equal(served.requests.length, 2, JSON.stringify(served.requests));
  assert.deepEqual(served.requests[0], { range: undefined, ifRange: undefined, status: 200 });
  const second = served.requests[1]!;
  assert.equal(second.status, 206);
  assert.equal(second.ifRange, `"${image.sha256}"`);
  const from = Number(/^bytes=(\d+)-$/.exec(second.range ?? '')?.[1]);
  assert.ok(from >= 100_000 && from < image.body.length, `continued from the bytes kept: ${second.range}`);
  await stopped(run);
});

test('an update while PLAYING is answered busy, and one without a pinned key no_firmware_key', { skip, timeout: 90_000 }, async (t) => {
  const id = 'update-sp-busy';
  const tone = path.join(tempDir(t, 'minaret-update-audio-'), 'tone.mp3');
  execFileSync(ffmpegPath(), ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'sine=frequency=440:duration=20', '-c:a', 'libmp3lame', '-b:a', '64k', tone]);
  const live = fs.readFileSync(tone);
  const stream = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'audio/mpeg' });
    let at = 0;
    const tick = setInterval(() => (at >= live.length ? res.end(clearInterval(tick)) : res.write(live.subarray(at, (at += 2000)))), 250);
    res.on('close', () => clearInterval(tick));
  });
  await new Promise<void>((r) => stream.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => (stream.close(() => r()), stream.closeAllConnections())));
  const streamUrl = `http://127.0.0.1:${(stream.address() as net.AddressInfo).port}/m/${MOSQUE}`;
  const mq = await broker(t, id);
  const config = { v: '1.0', config_version: 1, volume: 100, mosque_id: MOSQUE, stream_url: streamUrl, lease: { token: 'made-up-lease-0123456789abcdef', expires_at: nowS() + 3600 } };
  await mq.publish(`devices/${id}/config`, config, true);
  const image = signedImage(50_000);
  const served = await imageServer(t, id, image.body, image.sha256);
  const { run, dir } = device(t, id, 'stream_player', mq.port, ['--firmware-key', keys.publicRaw]);
  await until('ONLINE', () => mq.statuses.find((s) => s.status === 'ONLINE'));
  await mq.publish(`mosques/${MOSQUE}/broadcast`, { v: '1.0', broadcast_id: 'b-1', kind: 'azaan', action: 'start', ts: nowS() });
  await until('PLAYING', () => mq.statuses.find((s) => s.status === 'PLAYING'));
  const busy = await sendUpdate(mq, id, served.url, { ...image, size: image.body.length });
  assert.deepEqual([busy.ok, busy.error], [false, 'busy']);
  assert.equal(served.requests.length, 0, 'nothing downloaded while playing');
  assert.equal(mq.statuses.some((s) => s.status === 'UPDATING'), false);
  await stopped(run);
  assert.deepEqual(firmwareFolder(dir), ['public.key']);

  // The same board without a key pinned: refused whatever the image (a key never comes over the network).
  fs.rmSync(path.join(dir, 'firmware'), { recursive: true });
  const bare = device(t, id, 'stream_player', mq.port, [], dir);
  await deviceLine(bare.run, /no firmware key pinned/, 15_000);
  await until('connected again', () => mq.statuses.filter((s) => s.prev === 'CONNECTING').length >= 2 || undefined);
  const refused = await sendUpdate(mq, id, served.url, { ...image, size: image.body.length });
  assert.deepEqual([refused.ok, refused.error], [false, 'no_firmware_key']);
  await stopped(bare.run);
});

test('--fail-update: the image is installed, the device reboots (in the process, or by exiting with --reboot exit) and comes back on its old fw with reason rolled_back', { skip, timeout: 90_000 }, async (t) => {
  const id = 'update-tx-rollback';
  const image = signedImage(60_000);
  const served = await imageServer(t, id, image.body, image.sha256);
  const mq = await broker(t, id);
  const { run, dir } = device(t, id, 'transmitter', mq.port, ['--firmware-key', keys.publicRaw, '--fail-update']);
  const online = await until('ONLINE', () => mq.statuses.find((s) => s.status === 'ONLINE'));
  const ack = await sendUpdate(mq, id, served.url, { ...image, size: image.body.length });
  assert.equal(ack.ok, true);
  const back = await until('rolled_back', () => mq.statuses.find((s) => s.reason === 'rolled_back'));
  assert.equal(back.status, 'ONLINE');
  assert.equal(back.prev, 'CONNECTING');
  assert.equal(back.fw, online.fw, 'the old version runs');
  assert.equal(mq.statuses.find((s) => s.status === 'OFFLINE')?.reason, 'reboot');
  assert.deepEqual(firmwareFolder(dir), ['public.key'], 'the rolled-back image is not recorded as installed');
  await stopped(run);

  // --reboot exit: the process ends after the graceful OFFLINE (systemd's Restart=always starts it again), and the
  // process that follows says rolled_back in its first status.
  const exiting = device(t, id, 'transmitter', mq.port, ['--fail-update', '--reboot', 'exit'], dir);
  await until('connected again', () => mq.statuses.filter((s) => s.prev === 'CONNECTING').length >= 3 || undefined);
  const seen = mq.statuses.length;
  assert.equal((await sendUpdate(mq, id, served.url, { ...image, size: image.body.length }, '3.0.0')).ok, true);
  assert.equal((await exiting.run.exited).code, 0, exiting.run.stderr());
  assert.equal(mq.statuses.slice(seen).find((s) => s.status === 'OFFLINE')?.reason, 'reboot');
  const restarted = device(t, id, 'transmitter', mq.port, [], dir);
  const first = await until('the first status after the restart', () => mq.statuses.slice(seen).find((s) => s.prev === 'CONNECTING'));
  assert.deepEqual([first.status, first.reason, first.fw], ['ONLINE', 'rolled_back', online.fw]);
  await stopped(restarted.run);
});

test('a fleet of simulated players updates through the same firmware, and the one made with failUpdate rolls back', { timeout: 60_000 }, async (t) => {
  const ids = ['sim-update-1', 'sim-update-2', 'sim-update-3', 'sim-update-4'];
  const image = signedImage(80_000);
  const mqs = await Promise.all(ids.map((id) => broker(t, id)));
  const devices = await Promise.all(ids.map(async (id, i) => {
    const mq = mqs[i]!;
    const config = { v: '1.0', config_version: 1, mosque_id: MOSQUE, stream_url: `http://127.0.0.1:9/m/${MOSQUE}`, lease: { token: 'made-up-lease-0123456789abcdef', expires_at: nowS() + 3600 } };
    await mq.publish(`devices/${id}/config`, config, true);
    const dev = new SimDevice({ kind: 'stream_player', id, password: PASSWORD, mqttUrl: `mqtt://127.0.0.1:${mq.port}`, firmwareKey: keys.publicRaw, failUpdate: i === 3, progressEveryMs: 0 });
    t.after(() => dev.stop({ graceful: true }));
    await dev.start();
    await until(`${id} ONLINE`, () => mq.statuses.find((s) => s.status === 'ONLINE'));
    return dev;
  }));
  const served = await Promise.all(ids.map((id) => imageServer(t, id, image.body, image.sha256)));
  const acks = await Promise.all(ids.map((id, i) => sendUpdate(mqs[i]!, id, served[i]!.url, { ...image, size: image.body.length })));
  for (const ack of acks) assert.deepEqual(ack.result, { accepted: true, target_fw: TARGET });
  const backs = await Promise.all(mqs.map((mq) => until('back after the reboot', () => {
    const reboot = mq.statuses.findIndex((s) => s.status === 'OFFLINE' && s.reason === 'reboot');
    return reboot < 0 ? undefined : mq.statuses.slice(reboot).find((s) => s.prev === 'CONNECTING');
  })));
  assert.deepEqual(backs.map((s) => [s.status, s.reason, s.fw]), [
    ['ONLINE', 'connected', TARGET], ['ONLINE', 'connected', TARGET], ['ONLINE', 'connected', TARGET], ['ONLINE', 'rolled_back', 'minaret-sp-sim/1.0.0'],
  ]);
  assert.deepEqual(devices.map((d) => d.fw), [TARGET, TARGET, TARGET, 'minaret-sp-sim/1.0.0']);
  for (const mq of mqs) assert.ok(mq.statuses.filter((s) => s.status === 'UPDATING').length >= 3, 'progress reported as the image came');
});
