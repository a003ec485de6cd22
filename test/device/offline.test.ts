import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { Aedes } from 'aedes';
import { freePort } from '../support/redis.ts';
import { tempDir, type Run } from '../support/process.ts';
import { audioToolsMissing } from '../audio/icecast-plain.ts';
import { deviceLine, firstLoudMs, loudestHalfSecond, readWav, runDeviceOn, secondsAt, tone, wavStartMs } from './support.ts';

// The azaan without the network (docs/firmware.md, "4.1 Config": offline; docs/devices/raspberry-pi.md): a real
// `minaret-device run` against a plain aedes broker that holds the retained config with `offline`, a small HTTP
// server standing in for the recording download (docs/api.md, "Recorded azaan"), and a real 1 kHz MP3 made by
// ffmpeg. The WAV output is the sound card. The service's side of `offline` is test/devices/offline-azaan.test.ts;
// the whole chain with the real service in a child process is offline-service.test.ts.

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;
const ID = 'offline-player-1';
const MOSQUE = 'mosque-offline-1';
const LEASE = 'made-up-lease-token-0123456789abcdef';
const GRACE = 2;
const nowS = (): number => Math.floor(Date.now() / 1000);

/** The recording download (with its lease check) and, at /m/<mosque>, a live stream of `live` paced at 8 KB/s. */
async function fileServer(t: TestContext, body: Buffer, live?: Buffer): Promise<{ url: string; leases: string[] }> {
  const leases: string[] = [];
  const server = http.createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    leases.push(u.searchParams.get('lease') ?? '');
    if (u.pathname === `/m/${MOSQUE}` && live) {
      res.writeHead(200, { 'content-type': 'audio/mpeg' });
      let at = 0;
      const tick = setInterval(() => {
        if (at >= live.length) return void res.end(clearInterval(tick));
        res.write(live.subarray(at, (at += 2000)));
      }, 250);
      res.on('close', () => clearInterval(tick));
      return;
    }
    if (u.pathname !== `/audio/recordings/${MOSQUE}` || u.searchParams.get('lease') !== LEASE) return void res.writeHead(403).end();
    res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': body.length }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  }));
  server.unref();
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, leases };
}

/** A plain aedes broker on a fixed port that can go down and come back, with the statuses the device published. */
function broker(t: TestContext, port: number) {
  const statuses: Array<Record<string, any>> = [];
  let current: { aedes: Aedes; server: net.Server } | null = null;
  const api = {
    statuses,
    async up(config?: Record<string, unknown>): Promise<Aedes> {
      const aedes = await Aedes.createBroker();
      aedes.on('publish', (packet, client) => {
        if (client && packet.topic === `devices/${ID}/status`) statuses.push(JSON.parse(packet.payload.toString()));
      });
      const server = net.createServer((s) => aedes.handle(s));
      await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
      current = { aedes, server };
      if (config) await new Promise<void>((r, j) => aedes.publish({ cmd: 'publish', topic: `devices/${ID}/config`, payload: Buffer.from(JSON.stringify(config)), qos: 1, retain: true, dup: false }, (e) => (e ? j(e) : r())));
      return aedes;
    },
    async down(): Promise<void> {
      const c = current;
      current = null;
      if (!c) return;
      // Stop listening first: a device reconnecting to a closed aedes would hold the server open for ever.
      const closed = new Promise<void>((r) => c.server.close(() => r()));
      await new Promise<void>((r) => c.aedes.close(() => r()));
      await closed;
    },
    publish(topic: string, body: unknown): void {
      current?.aedes.publish({ cmd: 'publish', topic, payload: Buffer.from(JSON.stringify(body)), qos: 1, retain: false, dup: false }, () => {});
    },
  };
  t.after(() => api.down());
  return api;
}

interface ConfigOptions {
  at: number;
  sha256?: string;
  leaseExpiresAt?: number;
  prayer?: string;
}

function config(files: string, recording: Buffer, o: ConfigOptions): Record<string, unknown> {
  return {
    v: '1.0', config_version: 3, heartbeat_secs: 300, log_enabled: false, volume: 100, mosque_id: MOSQUE,
    stream_url: `${files}/m/${MOSQUE}`, lease: { token: LEASE, expires_at: o.leaseExpiresAt ?? nowS() + 86_400 },
    offline: {
      slots: [{ prayer: o.prayer ?? 'maghrib', at: o.at }],
      recording: { url: `${files}/audio/recordings/${MOSQUE}`, sha256: o.sha256 ?? crypto.createHash('sha256').update(recording).digest('hex'), size: recording.length },
      grace_s: GRACE,
    },
  };
}

/** `minaret-device run` on `dir` (device.json written once), its output into `wav`. */
function device(t: TestContext, dir: string, port: number, wav: string): Run {
  const file = path.join(dir, 'device.json');
  if (!fs.existsSync(file)) {
    const credentials = { client_id: ID, username: ID, password: 'device-password-0123456789abcdef', mqtt_url: `mqtt://127.0.0.1:${port}`, mqtts_url: null };
    fs.writeFileSync(file, JSON.stringify({ server: 'http://127.0.0.1:9', device: { id: ID, kind: 'stream_player' }, credentials }), { mode: 0o600 });
  }
  return runDeviceOn(t, dir, ['--output', wav], { MINARET_DEVICE_RECONNECT_MAX_MS: '1000' });
}

/**
 * What every test here starts from: a `recordingS`-second 1 kHz recording behind the file server (and `live` as the
 * mosque's stream), the broker up with the retained config naming a slot `inS` seconds from now, and the device
 * running on a fresh state folder with its output into out.wav.
 */
async function offlineWorld(t: TestContext, o: { inS: number; recordingS?: number; live?: Buffer; config?: (at: number) => Partial<ConfigOptions> }) {
  const recording = tone(t, 1000, o.recordingS ?? 3);
  const files = await fileServer(t, recording, o.live);
  const port = await freePort();
  const mq = broker(t, port);
  const at = nowS() + o.inS;
  await mq.up(config(files.url, recording, { at, ...o.config?.(at) }));
  const dir = tempDir(t, 'minaret-offline-');
  const wav = path.join(dir, 'out.wav');
  return { recording, files, port, mq, at, dir, wav, run: device(t, dir, port, wav) };
}

const sleepUntil = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms - Date.now())));

async function stopped(run: Run): Promise<void> {
  run.child.kill('SIGTERM');
  assert.equal((await run.exited).code, 0, run.stderr());
}

test('the slot passes with the broker down: the kept 1 kHz recording plays at at + grace_s, and PLAYING source local reaches the broker once it is back', { skip, timeout: 90_000 }, async (t) => {
  const { recording, files, mq, at, dir, wav, run } = await offlineWorld(t, { inS: 9 });
  await deviceLine(run, /offline azaan: recording kept as \S+azaan-[0-9a-f]{64}\.mp3/, 15_000);
  const kept = fs.readdirSync(dir).filter((n) => n.startsWith('azaan-'));
  assert.equal(kept.length, 1);
  assert.equal(fs.statSync(path.join(dir, kept[0]!)).mode & 0o777, 0o600, 'the recording is 0600');
  assert.deepEqual(fs.readFileSync(path.join(dir, kept[0]!)), recording);
  assert.deepEqual(files.leases, [LEASE], 'fetched once, with the lease');

  await mq.down();
  await deviceLine(run, /broker connection lost/, 10_000);
  await deviceLine(run, /-> PLAYING \(offline_fallback\)/, (at + GRACE + 5) * 1000 - Date.now());
  await deviceLine(run, /PLAYING -> ONLINE \(local_done\)/, 10_000);
  const loud = firstLoudMs(run, wav);
  assert.ok(loud !== null, 'the recording played');
  const delay = (loud - (at + GRACE) * 1000) / 1000;
  console.log(`offline azaan: first non-silent sample ${delay.toFixed(3)} s after at + grace_s (goal <= 1 s)`);
  assert.ok(delay > -0.2 && delay < 5, `the recording starts at the slot's at + grace_s: ${delay.toFixed(3)} s`);
  const from = (loud - wavStartMs(run)) / 1000;
  const heard = loudestHalfSecond(readWav(wav), from, from + 3);
  assert.ok(heard.rms > 1000 && Math.abs(heard.hz - 1000) < 30, `the 1 kHz recording: ${heard.hz.toFixed(1)} Hz, rms ${heard.rms.toFixed(0)}`);

  // Back online: the PLAYING made offline goes out with the ts it began at, then the state as it is.
  await mq.up();
  await deviceLine(run, /broker connection restored/, 15_000);
  const playing = await waitForStatus(mq.statuses, (s) => s.status === 'PLAYING');
  assert.deepEqual(playing.detail, { source: 'local', reason: 'offline_fallback', prayer: 'maghrib', slot_at: at });
  assert.equal(playing.reason, 'offline_fallback');
  assert.ok(Math.abs(playing.ts - (at + GRACE)) <= 2, `its ts is when playing began: ${playing.ts} vs ${at + GRACE}`);
  const after = await waitForStatus(mq.statuses, (s) => s.status === 'ONLINE' && mq.statuses.indexOf(s) > mq.statuses.indexOf(playing));
  assert.equal(after.prev, 'PLAYING');
  assert.equal(after.reason, 'local_done');
  assert.equal(mq.statuses.filter((s) => s.status === 'PLAYING').length, 1, 'PLAYING once');
  await stopped(run);
  assert.doesNotMatch(run.stdout() + run.stderr(), new RegExp(LEASE), 'the lease is never printed');
});

async function waitForStatus(statuses: Array<Record<string, any>>, match: (s: Record<string, any>) => boolean): Promise<Record<string, any>> {
  const until = Date.now() + 10_000;
  while (Date.now() < until) {
    const found = statuses.find(match);
    if (found) return found;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no such status among ${JSON.stringify(statuses)}`);
}

test('restarted without the network, the device still knows its slot from DIR and plays it', { skip, timeout: 90_000 }, async (t) => {
  const { port, mq, at, dir, run: first } = await offlineWorld(t, { inS: 10, config: () => ({ prayer: 'fajr' }) });
  await deviceLine(first, /offline azaan: recording kept/, 15_000);
  await stopped(first);
  await mq.down();
  const wav = path.join(dir, 'second.wav');
  const second = device(t, dir, port, wav);
  await deviceLine(second, /CONNECTING -> PLAYING \(offline_fallback\)/, (at + GRACE + 5) * 1000 - Date.now());
  await deviceLine(second, /PLAYING -> CONNECTING \(local_done\)/, 10_000);
  const loud = firstLoudMs(second, wav);
  assert.ok(loud !== null && Math.abs(loud / 1000 - (at + GRACE)) < 5, 'the recording played at the slot');
  await stopped(second);
});

test('a recording whose SHA-256 is not the config\'s is deleted with one clear line and never played', { skip, timeout: 60_000 }, async (t) => {
  const { mq, at, dir, wav, run } = await offlineWorld(t, { inS: 7, config: () => ({ sha256: 'ab'.repeat(32) }) });
  await deviceLine(run, /offline azaan: recording REJECTED and deleted: sha256 mismatch: got [0-9a-f]{64}, announced (ab){32}; no recording kept/, 15_000);
  assert.deepEqual(fs.readdirSync(dir).filter((n) => n.includes('azaan')), [], 'nothing of it stays');
  await mq.down();
  await deviceLine(run, /maghrib slot at \S+: not played: no recording kept/, (at + GRACE + 5) * 1000 - Date.now());
  await stopped(run);
  assert.equal(firstLoudMs(run, wav), null, 'silence');
});

test('a lease that expired before the slot plays nothing', { skip, timeout: 60_000 }, async (t) => {
  const { mq, at, wav, run } = await offlineWorld(t, { inS: 8, config: (slotAt) => ({ leaseExpiresAt: slotAt - 3 }) });
  await deviceLine(run, /offline azaan: recording kept/, 15_000);
  await mq.down();
  await deviceLine(run, /maghrib slot at \S+: not played: (the device is UNBOUND|lease_expired)/, (at + GRACE + 5) * 1000 - Date.now());
  await sleepUntil((at + GRACE + 2) * 1000);
  await stopped(run);
  assert.equal(firstLoudMs(run, wav), null, 'silence');
});

test('a broadcast start within the grace plays the stream, and no local file', { skip, timeout: 60_000 }, async (t) => {
  const { files, mq, at, wav, run } = await offlineWorld(t, { inS: 8, live: tone(t, 440, 20) });
  await deviceLine(run, /offline azaan: recording kept/, 15_000);
  await sleepUntil((at - 1) * 1000);
  mq.publish(`mosques/${MOSQUE}/broadcast`, { v: '1.0', broadcast_id: 'b-1', kind: 'azaan', action: 'start', stream_url: `${files.url}/m/${MOSQUE}`, ts: nowS() });
  await deviceLine(run, /ONLINE -> PLAYING \(broadcast_start\)/, 10_000);
  await deviceLine(run, /maghrib slot at \S+: a broadcast (plays|started)/, (at + GRACE + 5) * 1000 - Date.now());
  await sleepUntil((at + GRACE + 3) * 1000);
  await stopped(run);
  assert.doesNotMatch(run.stdout(), /offline_fallback/);
  const s = (at + GRACE) - wavStartMs(run) / 1000;
  const heard = loudestHalfSecond(readWav(wav), s - 1, s + 3);
  assert.ok(heard.rms > 1000 && Math.abs(heard.hz - 440) < 20, `the stream's 440 Hz, not the recording's 1 kHz: ${heard.hz.toFixed(1)} Hz, rms ${heard.rms.toFixed(0)}`);
});

test('a start whose stream fails its 3 retries (STREAM_ERROR) is covered by the recording; a start while the file plays replaces it with the stream', { skip, timeout: 90_000 }, async (t) => {
  const { files, mq, at, wav, run } = await offlineWorld(t, { inS: 7, recordingS: 8, live: tone(t, 440, 20) });
  await deviceLine(run, /offline azaan: recording kept/, 15_000);
  await sleepUntil((at - 1) * 1000);
  // A start naming an address nothing answers (port 9): connection refused, retried, STREAM_ERROR after 3 retries.
  mq.publish(`mosques/${MOSQUE}/broadcast`, { v: '1.0', broadcast_id: 'b-dead', kind: 'azaan', action: 'start', stream_url: 'http://127.0.0.1:9/dead', ts: nowS() });
  await deviceLine(run, /-> STREAM_ERROR \(stream_unreachable\)/, 20_000);
  await deviceLine(run, /STREAM_ERROR -> PLAYING \(offline_fallback\)/, 5_000);
  const local = await waitForStatus(mq.statuses, (s) => s.status === 'PLAYING' && s.detail.source === 'local');
  assert.equal(local.detail.slot_at, at, 'published at once while connected');
  await new Promise((r) => setTimeout(r, 2500));
  mq.publish(`mosques/${MOSQUE}/broadcast`, { v: '1.0', broadcast_id: 'b-live', kind: 'azaan', action: 'start', stream_url: `${files.url}/m/${MOSQUE}`, ts: nowS() });
  await deviceLine(run, /PLAYING -> PLAYING \(broadcast_start\)/, 10_000);
  await new Promise((r) => setTimeout(r, 5000));
  await stopped(run);
  const out = run.stdout();
  const localAt = secondsAt(out, /STREAM_ERROR -> PLAYING \(offline_fallback\)/);
  const openedAt = secondsAt(out, /opening http\S+\/m\/\S+ for broadcast b-live/);
  const streamAt = secondsAt(out, /PLAYING -> PLAYING \(broadcast_start\)/);
  const audio = readWav(wav);
  const before = loudestHalfSecond(audio, localAt, openedAt - 0.1);
  assert.ok(before.rms > 1000 && Math.abs(before.hz - 1000) < 30, `the recording before the start: ${before.hz.toFixed(1)} Hz, rms ${before.rms.toFixed(0)}`);
  const afterStart = loudestHalfSecond(audio, streamAt + 1, streamAt + 4.5);
  assert.ok(afterStart.rms > 1000 && Math.abs(afterStart.hz - 440) < 20, `the stream after it, the recording stopped: ${afterStart.hz.toFixed(1)} Hz, rms ${afterStart.rms.toFixed(0)}`);
});
