import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { SimDevice, type DeviceStatus } from '../../simulator/device.ts';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import { mosqueWithOwner, registerPlayer, registerTransmitter, waitFor, type Registered } from '../support/devices.ts';
import { startProcess, tempDir, withTimeout } from '../support/process.ts';
import { FFMPEG_BIN, audioToolsMissing, startPlainIcecast } from './icecast-plain.ts';

// The simulator's real audio (docs/firmware.md#31-status-devicesidstatus-qos-1-retained): a transmitter with a
// source sends ffmpeg's MP3 to its mount as an Icecast source, a listening player reads its stream address,
// and each is PLAYING only while bytes flow, STREAM_ERROR after 3 failed retries. Real icecast2 and ffmpeg.

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;
// Short retries and stall bound, so an outage and its recovery fit in a few seconds.
const TIMING = { retryMs: 200, retryMaxMs: 600, stallMs: 3000 };

async function world(t: TestContext) {
  const ts = await startTestService(t, { logLevel: 'warn', env: { STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const listener = await member(ts, 'listener@example.com');
  const membership = await joinMosque(ts, listener, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  const player = await registerPlayer(ts, listener, mosque.id);
  const mount = `/m/${mosque.id}`;
  const icecast = await startPlainIcecast(t, [{ name: mount, username: tx.device.id, password: tx.credentials.password }]);
  const res = await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: `${icecast.url}${mount}` }, owner.token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return { ts, owner, listener, mosque, tx, player, mount, icecast };
}

function sim(t: TestContext, mqttUrl: string, reg: Registered, audio: { source?: true; listen?: true }) {
  const dev = new SimDevice({
    kind: reg.device.kind as 'transmitter' | 'stream_player',
    id: reg.device.id,
    password: reg.credentials.password,
    mqttUrl,
    startTimeoutMs: 3000,
    audioTiming: TIMING,
    ffmpegPath: FFMPEG_BIN,
    ...(audio.source && { source: { kind: 'tone', frequency: 440 } as const }),
    ...(audio.listen && { listen: true }),
  });
  t.after(() => dev.stop({ graceful: false }));
  return dev;
}

async function simStatus(dev: SimDevice, status: DeviceStatus, timeoutMs: number): Promise<void> {
  await waitFor(`${dev.kind} ${status}`, () => dev.status === status, timeoutMs).catch((err: Error) => {
    throw new Error(`${err.message}; now ${dev.status}, audio ${JSON.stringify(dev.audio)}, broadcasts ${dev.counters.broadcasts}, transitions ${JSON.stringify(dev.transitions.slice(-4))}`);
  });
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The world on air: both devices connected with a config, a broadcast started, the player PLAYING. */
async function onAir(t: TestContext) {
  const w = await world(t);
  const txSim = sim(t, w.ts.service.mqttUrl, w.tx, { source: true });
  const playerSim = sim(t, w.ts.service.mqttUrl, w.player, { listen: true });
  await Promise.all([txSim.start(), playerSim.start()]);
  await waitFor('configs with the stream address', () => txSim.config?.stream_url && playerSim.status === 'ONLINE', 3000);
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan' }, w.owner.token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  await simStatus(txSim, 'PLAYING', 8000);
  await simStatus(playerSim, 'PLAYING', 8000);
  return { ...w, txSim, playerSim, broadcastId: (res.body as { id: string }).id };
}

test('a transmitter with a tone source goes on air on its mount, and a listening player is PLAYING while audio bytes arrive', { skip }, async (t) => {
  const w = await onAir(t);
  assert.deepEqual(await w.icecast.liveMounts(), [w.mount], 'the mount is live in Icecast');
  const txPlaying = w.txSim.transitions.at(-1)!;
  assert.deepEqual([txPlaying.reason, txPlaying.detail['source'], txPlaying.detail['stream_url'], txPlaying.detail['broadcast_id']], ['broadcast_start', 'local', `${w.icecast.url}${w.mount}`, w.broadcastId]);

  const before = w.playerSim.audio!.bytes;
  assert.ok(before > 0, 'the player counted audio bytes');
  await sleep(1000);
  const after = w.playerSim.audio!.bytes;
  // 64 kb/s is 8,000 bytes a second: a second of a real-time stream brings thousands of bytes.
  assert.ok(after - before > 2000, `bytes keep flowing: ${before} -> ${after}`);
  assert.equal(w.playerSim.transitions.at(-1)!.detail['stream_url'], `${w.icecast.url}${w.mount}`);

  // The counts are on the wire too: a diag_bundle through the API carries them.
  const diag = await w.ts.http.post(`${API}/devices/${w.player.device.id}/commands`, { name: 'diag_bundle', args: {} }, w.listener.token);
  assert.equal(diag.status, 200, JSON.stringify(diag.body));
  assert.ok((diag.body as any).result.audio.bytes > 0, JSON.stringify(diag.body));

  const stop = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${w.broadcastId}/stop`, {}, w.owner.token);
  assert.ok(stop.status === 200 || stop.status === 204, JSON.stringify(stop.body));
  await simStatus(w.txSim, 'ONLINE', 3000);
  await simStatus(w.playerSim, 'ONLINE', 3000);
  await waitFor('the mount off air', async () => (await w.icecast.liveMounts()).length === 0, 5000);
});

test('Icecast stopped: the player reports STREAM_ERROR after 3 failed retries; restarted: both are PLAYING again', { skip }, async (t) => {
  const w = await onAir(t);
  const failuresBefore = w.playerSim.audio!.failures;
  await w.icecast.stop();

  await simStatus(w.playerSim, 'STREAM_ERROR', 8000);
  const error = w.playerSim.transitions.at(-1)!;
  assert.equal(error.reason, 'stream_unreachable');
  assert.equal(error.detail['retries'], 3);
  assert.equal(error.detail['stream_url'], `${w.icecast.url}${w.mount}`);
  assert.match(String(error.detail['error']), /ECONNREFUSED/);
  // The lost stream, then 3 retries: 4 failed attempts before the error.
  assert.equal(w.playerSim.audio!.failures - failuresBefore >= 4, true, JSON.stringify(w.playerSim.audio));
  const path = w.playerSim.transitions.slice(-3).map((x) => `${x.from}->${x.to}:${x.reason}`);
  assert.deepEqual(path, ['ONLINE->PLAYING:broadcast_start', 'PLAYING->ONLINE:stream_lost', 'ONLINE->STREAM_ERROR:stream_unreachable']);
  await simStatus(w.txSim, 'STREAM_ERROR', 8000);

  await w.icecast.start();
  // The simulators retry with backoff: on a loaded machine the next try after the restart can be seconds away.
  await simStatus(w.txSim, 'PLAYING', 15_000);
  await simStatus(w.playerSim, 'PLAYING', 15_000);
  assert.equal(w.playerSim.transitions.at(-1)!.reason, 'stream_restored');
  const bytes = w.playerSim.audio!.bytes;
  await sleep(800);
  assert.ok(w.playerSim.audio!.bytes > bytes, 'audio flows again');
  assert.deepEqual(await w.icecast.liveMounts(), [w.mount]);
});

test('npm run simulate with --source tone --on-air --listen: on air at once, the player PLAYING on a broadcast; killed with SIGKILL, no ffmpeg is left and the mount goes off air', { skip }, async (t) => {
  const w = await world(t);
  const dir = tempDir(t, 'minaret-sim-audio-');
  const creds = path.join(dir, 'devices.json');
  const devices = [w.tx, w.player].map((r) => ({ id: r.device.id, kind: r.device.kind, password: r.credentials.password }));
  fs.writeFileSync(creds, JSON.stringify(devices), { mode: 0o600 });
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir };
  const args = ['--credentials', creds, '--mqtt', w.ts.service.mqttUrl, '--source', 'tone', '--on-air', '--listen'];
  const run = startProcess(t, env, process.execPath, ['--import', 'tsx', 'simulator/index.ts', ...args]);
  await waitFor('the mount live', async () => (await w.icecast.liveMounts()).includes(w.mount), 15_000).catch((err: Error) => {
    throw new Error(`${err.message}\n${run.stdout()}\n${run.stderr()}`);
  });
  // The mount is live once Icecast accepts the source; PLAYING follows with the first bytes.
  await waitFor('PLAYING in the output', () => /ONLINE -> PLAYING \(broadcast_start\)/.test(run.stdout()), 5000);
  const ffmpegs = childrenOf(run.child.pid!).filter((p) => p.name === 'ffmpeg');
  assert.equal(ffmpegs.length, 1, 'one ffmpeg feeds the mount');
  assert.doesNotMatch(fs.readFileSync(`/proc/${ffmpegs[0]!.pid}/cmdline`, 'utf8'), new RegExp(w.tx.credentials.password), 'the device password is not in ffmpeg\'s arguments');

  const started = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan' }, w.owner.token);
  assert.equal(started.status, 201, JSON.stringify(started.body));
  const player = `[${w.player.device.id.slice(0, 8)}...] ONLINE -> PLAYING (broadcast_start)`;
  await waitFor('the player PLAYING in the output', () => run.stdout().includes(player), 10_000).catch((err: Error) => {
    throw new Error(`${err.message}\n${run.stdout()}`);
  });
  ffmpegs.push(...childrenOf(run.child.pid!).filter((p) => p.name === 'ffmpeg'));

  run.child.kill('SIGKILL');
  await withTimeout(run.exited, 5000, 'the simulator to die');
  await waitFor('ffmpeg gone', () => ffmpegs.every((p) => !isRunning(p.pid)), 5000);
  await waitFor('the mount off air', async () => (await w.icecast.liveMounts()).length === 0, 10_000);
});

/** Direct children of a process, from /proc (Linux). */
function childrenOf(pid: number): { pid: number; name: string }[] {
  const out: { pid: number; name: string }[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readStat(Number(entry));
    if (stat && stat.ppid === pid) out.push({ pid: Number(entry), name: stat.name });
  }
  return out;
}

/** Running, not a zombie waiting for init to reap it. */
function isRunning(pid: number): boolean {
  const stat = readStat(pid);
  return stat !== null && stat.state !== 'Z';
}

function readStat(pid: number): { name: string; state: string; ppid: number } | null {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const close = text.lastIndexOf(')');
  const [state, ppid] = text.slice(close + 2).split(' ');
  return { name: text.slice(text.indexOf('(') + 1, close), state: state ?? '', ppid: Number(ppid) };
}
