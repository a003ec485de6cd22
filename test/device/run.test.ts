import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { durableFiles, startTestService } from '../support/service.ts';
import { mosqueWithOwner, registerPlayer, registerTransmitter, waitFor, waitForStatus } from '../support/devices.ts';
import { freePort } from '../support/redis.ts';
import { audioToolsMissing } from '../audio/icecast-plain.ts';
import { deviceLine, measure, readWav, startDevice } from './support.ts';

// `minaret-device run` (docs/devices/raspberry-pi.md) as a real process against the real service: the firmware contract of
// docs/firmware.md over MQTT, and play_test through ffmpeg into a WAV file that stands in for the sound card.

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;

test('an approved member\'s player goes ONLINE, answers ping and get_state, and play_test puts a real 1 kHz tone of the asked length into its output', { skip }, async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: { STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  // docs/firmware.md, "4.1 Config": a player is entitled once its config carries the mosque's stream address and a lease.
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: 'http://127.0.0.1:9/m' }, owner.token)).status, 200);
  const listener = await member(ts, 'listener@example.com');
  await setStatus(ts, owner.token, (await joinMosque(ts, listener, mosque.id)).id, 'approved');
  const player = await registerPlayer(ts, listener, mosque.id);
  const dir = path.join((await import('node:os')).tmpdir(), `minaret-device-wav-${process.pid}-${Date.now()}`);
  const wav = `${dir}.wav`;
  t.after(async () => (await import('node:fs')).rmSync(wav, { force: true }));
  const { run } = startDevice(t, player, ts.url, ['--output', wav]);
  // Its config arrives just after the CONNACK: UNBOUND (no config yet), then ONLINE (entitled).
  await deviceLine(run, /-> ONLINE \((connected|entitled)\)/, 15_000);

  const command = (name: string, args: Record<string, unknown> = {}) => ts.http.post(`${API}/devices/${player.device.id}/commands`, { name, args }, listener.token);
  const ping = await command('ping');
  assert.equal(ping.status, 200, JSON.stringify(ping.body));
  assert.equal(ping.body.result.pong, true);
  const state = await command('get_state');
  assert.equal(state.status, 200, JSON.stringify(state.body));
  assert.equal(state.body.result.status, 'ONLINE');
  assert.deepEqual(state.body.result.capabilities, ['stream', 'local', 'bluetooth']);
  assert.equal(state.body.result.config_schema.heartbeat_secs.minimum, 60);
  assert.equal(typeof state.body.result.hw_rev, 'string');
  assert.match(state.body.result.fw, /^\d+\.\d+\.\d+/); // plain semver, as rollouts compare it

  const played = await command('play_test', { duration_ms: 1500 });
  assert.equal(played.status, 200, JSON.stringify(played.body));
  assert.deepEqual(played.body.result, { played: 'tone', duration_ms: 1500 });
  // On a loaded machine ffmpeg can take a second to start: wait well past the tone's end.
  await new Promise((r) => setTimeout(r, 4500));
  run.child.kill('SIGTERM');
  assert.equal((await run.exited).code, 0, run.stderr());
  await waitFor('the retained OFFLINE shutdown', async () => (await ts.http.get(`${API}/devices/${player.device.id}`, listener.token)).body.status === 'OFFLINE', 5000);

  const audio = readWav(wav);
  // Quarter-second windows: the loud ones are the tone, and only they.
  const windows = Array.from({ length: Math.floor(audio.samples.length / audio.rate / 0.25) }, (_, i) => measure(audio, i * 0.25, (i + 1) * 0.25));
  const loud = windows.filter((w) => w.rms > 1000);
  assert.ok(loud.length >= 5 && loud.length <= 8, `about 1.5 s of tone: ${loud.length} loud quarter-seconds of ${windows.length}`);
  for (const w of loud.slice(1, -1)) assert.ok(Math.abs(w.hz - 1000) < 30, `a 1 kHz tone: ${w.hz.toFixed(1)} Hz`);
  assert.ok(windows.slice(-2).every((w) => w.rms === 0), 'silence after the tone, up to the end');
  assert.doesNotMatch(run.stdout() + run.stderr(), new RegExp(player.credentials.password), 'the password is never printed');
});

test('a transmitter goes ONLINE and a player awaiting approval UNBOUND, then ONLINE once approved; a wrong password is refused and never printed', { skip }, async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: { STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: 'http://127.0.0.1:9/m' }, owner.token)).status, 200);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const pending = await member(ts, 'pending@example.com');
  const player = await registerPlayer(ts, pending, mosque.id);
  const txRun = startDevice(t, tx, ts.url, ['--output', `/tmp/tx-${process.pid}-${Date.now()}.wav`]).run;
  const playerRun = startDevice(t, player, ts.url, ['--output', `/tmp/player-${process.pid}-${Date.now()}.wav`]).run;
  await deviceLine(txRun, /CONNECTING -> ONLINE \(connected\)/, 15_000);
  await deviceLine(playerRun, /CONNECTING -> UNBOUND \(connected\)/, 15_000);
  // The device prints its transition before the service's group commit lands it: wait for the write, not one read.
  const seen = await waitForStatus(ts, pending.token, player.device.id, 'UNBOUND', 5000);
  assert.equal(seen.status, 'UNBOUND');
  const ack = await ts.http.post(`${API}/devices/${tx.device.id}/commands`, { name: 'diag_bundle', args: {} }, owner.token);
  assert.equal(ack.status, 200, `${JSON.stringify(ack.body)}\n${txRun.stdout()}`);
  assert.equal(ack.body.result.broker.connects, 1);

  // Approval reaches the running player as a config: UNBOUND -> ONLINE without a restart.
  const membership = (await ts.http.get(`${API}/me`, pending.token)).body.memberships.find((m: { mosque_id: string }) => m.mosque_id === mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  await deviceLine(playerRun, /UNBOUND -> ONLINE \(entitled\)/, 10_000);

  const stranger = { ...tx, credentials: { ...tx.credentials, password: 'not-the-password-0123456789abcdefghij' } };
  const refused = startDevice(t, stranger, ts.url, ['--output', `/tmp/refused-${process.pid}.wav`]).run;
  await deviceLine(refused, /connect refused \(return code 4\); retrying/, 15_000);
  assert.doesNotMatch(refused.stdout(), /not-the-password/, 'a refused password is not printed either');
});

test('the device reconnects after the broker restarts, and publishes its state again', { skip }, async (t) => {
  const files = durableFiles(t, 'device-reconnect');
  const env = { ...files.env, HTTP_PORT: String(await freePort()), MQTT_PORT: String(await freePort()) };
  let ts = await startTestService(t, { logLevel: 'warn', env });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const { run } = startDevice(t, tx, ts.url, ['--output', `/tmp/reconnect-${process.pid}.wav`], { MINARET_DEVICE_RECONNECT_MAX_MS: '2000' });
  await deviceLine(run, /CONNECTING -> ONLINE \(connected\)/, 15_000);
  await ts.service.close();
  await deviceLine(run, /broker connection lost; retrying/, 10_000);
  ts = await startTestService(t, { logLevel: 'warn', env });
  await deviceLine(run, /broker connection restored/, 20_000);
  await waitFor('ONLINE at the restarted service', async () => (await ts.http.get(`${API}/devices/${tx.device.id}`, owner.token)).body.status === 'ONLINE', 10_000);
  const ping = await ts.http.post(`${API}/devices/${tx.device.id}/commands`, { name: 'ping', args: {} }, owner.token);
  assert.equal(ping.status, 200, `${JSON.stringify(ping.body)}\n${run.stdout()}`);
});
