import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import { mosqueWithOwner, registerPlayer, registerTransmitter } from '../support/devices.ts';
import { audioToolsMissing, startPlainIcecast } from '../audio/icecast-plain.ts';
import { deviceLine, measure, readWav, secondsAt, startDevice } from './support.ts';

// The whole audio path with two real minaret-device processes (docs/devices/raspberry-pi.md): a broadcast started over the API
// sends broadcast_start to the transmitter, which sends ffmpeg's 440 Hz tone to its Icecast mount as the source;
// the player hears the start on its mosque's topic, plays its stream_url through ffmpeg into its WAV output, and
// stops on the stop event, and again when its member is banned (a config without stream_url and lease).

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;

test('a broadcast puts the transmitter\'s tone into the player\'s output through Icecast, silence follows the stop, and a ban stops it too', { skip, timeout: 150_000 }, async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: { STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const listener = await member(ts, 'listener@example.com');
  const membership = await joinMosque(ts, listener, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  const player = await registerPlayer(ts, listener, mosque.id);
  const mount = `/m/${mosque.id}`;
  const icecast = await startPlainIcecast(t, [{ name: mount, username: tx.device.id, password: tx.credentials.password }]);
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: `${icecast.url}${mount}` }, owner.token)).status, 200);

  const wav = path.join(os.tmpdir(), `minaret-device-path-${process.pid}.wav`);
  t.after(() => fs.rmSync(wav, { force: true }));
  const txRun = startDevice(t, tx, ts.url, ['--input', 'tone', '--output', path.join(os.tmpdir(), `minaret-device-tx-${process.pid}.wav`)]).run;
  const playerRun = startDevice(t, player, ts.url, ['--output', wav]).run;
  await deviceLine(txRun, /CONNECTING -> ONLINE \(connected\)/, 20_000);
  await deviceLine(playerRun, /-> ONLINE \((connected|entitled)\)/, 20_000);

  const started = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token);
  assert.equal(started.status, 201, JSON.stringify(started.body));
  await deviceLine(txRun, /ONLINE -> PLAYING \(broadcast_start\)/, 20_000);
  await deviceLine(playerRun, /ONLINE -> PLAYING \(broadcast_start\)/, 20_000);
  await new Promise((r) => setTimeout(r, 4000));
  const stop = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${(started.body as { id: string }).id}/stop`, {}, owner.token);
  assert.ok(stop.status === 200 || stop.status === 204, JSON.stringify(stop.body));
  // The transmitter's source ends with the stop, so the player may lose its stream just before the stop event.
  await deviceLine(playerRun, /PLAYING -> ONLINE \((broadcast_stop|stream_lost)\)/, 10_000);
  await deviceLine(playerRun, /closed http\S+ after \d+ audio bytes/, 10_000);
  await deviceLine(txRun, /PLAYING -> ONLINE \(broadcast_stop\)/, 10_000);
  await new Promise((r) => setTimeout(r, 4000));

  // A second broadcast, and the member banned while it plays: the player stops at once (UNBOUND).
  const again = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan' }, owner.token);
  assert.equal(again.status, 201, JSON.stringify(again.body));
  const mark = playerRun.stdout().length;
  await deviceLine(playerRun, /ONLINE -> PLAYING \(broadcast_start\)/, 20_000, mark);
  await new Promise((r) => setTimeout(r, 2000));
  await setStatus(ts, owner.token, membership.id, 'banned');
  await deviceLine(playerRun, /PLAYING -> UNBOUND/, 10_000);
  await new Promise((r) => setTimeout(r, 4000));
  playerRun.child.kill('SIGTERM');
  assert.equal((await playerRun.exited).code, 0, playerRun.stderr());

  const out = playerRun.stdout();
  const audio = readWav(wav);
  const seconds = audio.samples.length / audio.rate;
  const playing = secondsAt(out, /ONLINE -> PLAYING \(broadcast_start\)/);
  const stopped = secondsAt(out, /PLAYING -> ONLINE \((broadcast_stop|stream_lost)\)/);
  const banned = secondsAt(out, /PLAYING -> UNBOUND/);
  // The tone while on air: 440 Hz, loud.
  const onAir = measure(audio, playing + 1, stopped - 0.5);
  assert.ok(onAir.rms > 1000, `the tone is loud on air: rms ${onAir.rms.toFixed(0)}`);
  assert.ok(Math.abs(onAir.hz - 440) < 15, `the transmitter's 440 Hz tone: ${onAir.hz.toFixed(1)} Hz`);
  // After the stop, once what the audio server sent ahead (its burst) has played out: silence until the second start.
  const after = measure(audio, stopped + 2.5, stopped + 3.5);
  assert.equal(after.rms, 0, `silence after the stop (${stopped.toFixed(1)} s of ${seconds.toFixed(1)} s)`);
  // After the ban: silence to the end.
  const afterBan = measure(audio, banned + 2.5, seconds);
  assert.ok(seconds > banned + 3, `the file runs past the ban: ${seconds.toFixed(1)} s, ban at ${banned.toFixed(1)} s`);
  assert.equal(afterBan.rms, 0, 'silence after the ban');
  assert.doesNotMatch(out, /lease=ey|eyJ[\w-]+\.[\w-]+\.[\w-]+/, 'the lease is never printed');
});
