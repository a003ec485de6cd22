/**
 * The offline azaan's stage for bench/device/real.ts (as test/device/offline.test.ts sets it up): a plain aedes
 * broker holding the retained config with `offline` (docs/firmware.md, "4.1 Config"), a small HTTP server standing
 * in for the recording download (docs/api.md, "Recorded azaan"), and a real 1 kHz MP3 made by ffmpeg. One round:
 * the device keeps the recording, the broker goes down, and the slot's at + grace_s passes without a start.
 */
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { Aedes } from 'aedes';
import { FFMPEG, device, firstLoud, type Proc } from './processes.ts';

const ID = 'bench-offline-player';
const MOSQUE = 'bench-offline-mosque';
const LEASE = 'bench-offline-lease-0123456789abcdef';
export const GRACE_S = 2;

export function toneMp3(dir: string, hz: number, seconds: number): string {
  const file = path.join(dir, `tone-${hz}.mp3`);
  execFileSync(FFMPEG, ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', `sine=frequency=${hz}:duration=${seconds}`, '-c:a', 'libmp3lame', '-b:a', '64k', file]);
  return file;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** The recording's download, checking the lease as the service does. */
async function fileServer(body: Buffer): Promise<{ url: string; close(): void }> {
  const server = http.createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname !== `/audio/recordings/${MOSQUE}` || u.searchParams.get('lease') !== LEASE) return void res.writeHead(403).end();
    res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': body.length }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, close: () => (server.closeAllConnections(), server.close()) };
}

async function broker(port: number, config: Record<string, unknown>): Promise<{ down(): Promise<void> }> {
  const aedes = await Aedes.createBroker();
  const server = net.createServer((s) => aedes.handle(s));
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  await new Promise<void>((r, j) => aedes.publish({ cmd: 'publish', topic: `devices/${ID}/config`, payload: Buffer.from(JSON.stringify(config)), qos: 1, retain: true, dup: false }, (e) => (e ? j(e) : r())));
  let gone = false;
  return {
    async down() {
      if (gone) return;
      gone = true;
      // Stop listening first: a device reconnecting to a closed aedes would hold the server open.
      const closed = new Promise<void>((r) => server.close(() => r()));
      await new Promise<void>((r) => aedes.close(() => r()));
      await closed;
    },
  };
}

/**
 * One offline round in `dir`: a fresh device keeps `recording`, the broker goes down, and the slot (due
 * `leadS` seconds after the start) passes; the ms from at + grace_s to the first loud sample in its WAV.
 */
export async function offlineRound(dir: string, recording: Buffer, leadS: number): Promise<number> {
  const files = await fileServer(recording);
  const port = await freePort();
  const at = Math.floor(Date.now() / 1000) + leadS;
  const config = {
    v: '1.0', config_version: 3, heartbeat_secs: 300, log_enabled: false, volume: 100, mosque_id: MOSQUE,
    stream_url: `${files.url}/m/${MOSQUE}`, lease: { token: LEASE, expires_at: at + 86_400 },
    offline: {
      slots: [{ prayer: 'maghrib', at }],
      recording: { url: `${files.url}/audio/recordings/${MOSQUE}`, sha256: crypto.createHash('sha256').update(recording).digest('hex'), size: recording.length },
      grace_s: GRACE_S,
    },
  };
  const mq = await broker(port, config);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const credentials = { client_id: ID, username: ID, password: 'device-password-0123456789abcdef', mqtt_url: `mqtt://127.0.0.1:${port}`, mqtts_url: null };
  fs.writeFileSync(path.join(dir, 'device.json'), JSON.stringify({ server: 'http://127.0.0.1:9', device: { id: ID, kind: 'stream_player' }, credentials }), { mode: 0o600 });
  const wav = path.join(dir, 'out.wav');
  let run: Proc | null = null;
  try {
    run = device('offline player', dir, ['run', '--state', dir, '--output', wav], { MINARET_DEVICE_RECONNECT_MAX_MS: '1000' });
    await run.line(/offline azaan: recording kept/, 15_000);
    await mq.down();
    await run.line(/broker connection lost/, 10_000);
    const due = (at + GRACE_S) * 1000;
    if (Date.now() > due - 500) throw new Error(`the slot came before the broker was down: give --offline-lead more than ${leadS} s`);
    const loud = await firstLoud(wav, 0, due - Date.now() + 10_000);
    await run.line(/-> PLAYING \(offline_fallback\)/, 5000);
    return loud - due;
  } finally {
    await run?.stop();
    await mq.down().catch(() => undefined);
    files.close();
  }
}
