import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { durableFiles, httpClient, startTestService, TEST_JWT_SECRET } from '../support/service.ts';
import { API, createMosque, joinMosque, member, setStatus, signInSuperadmin } from '../support/people.ts';
import { registerPlayer, waitFor } from '../support/devices.ts';
import { freePort } from '../support/redis.ts';
import { baseEnv, listening, startProcess, tempDir, type Run } from '../support/process.ts';
import { audioToolsMissing } from '../audio/icecast-plain.ts';
import { deviceLine, firstLoudMs, loudestHalfSecond, readWav, runDeviceOn, startDevice, tone, wavStartMs } from './support.ts';

// The azaan without the network, the whole chain with real processes (docs/firmware.md, "4.1 Config": offline;
// docs/devices/raspberry-pi.md): the Minaret service as `npm start` runs it (dist/src/main.js, a SQLite file)
// pushes the config with the mosque's slots and recorded azaan to a real `minaret-device run`, which downloads
// the recording with its lease; the service is killed (SIGKILL) before the slot; the device plays its copy into
// its WAV output at the slot's time + OFFLINE_GRACE_S; the service comes back on the same files and ports, and
// the PLAYING the device made offline counts the player as covered locally (docs/api.md, "Broadcasts and their
// delivery report").

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;
const GRACE_S = 5;
const nowS = (): number => Math.floor(Date.now() / 1000);
/** Asr is never replaced by Jumu'ah on a Friday, so a fixed Asr is a slot on every day. */
const PRAYER = 'asr';

/** The first whole minute at least `leadS` seconds from now (fixed azaan times are "HH:MM", docs/schedule.md). */
const minuteAfter = (leadS: number): number => Math.ceil((nowS() + leadS) / 60) * 60;
const hhmm = (s: number): string => new Date(s * 1000).toISOString().slice(11, 16);
const dateOf = (s: number): string => new Date(s * 1000).toISOString().slice(0, 10);

/**
 * A mosque in UTC with a 1 kHz recorded azaan, its owner, and an approved member's player, made on a service of
 * the test's own on durable files (a superadmin has no HTTP route, test/support/superadmin.ts) and left on disk
 * for the real process, which then starts on the same files and fixed ports (the player's credentials name them).
 */
async function world(t: TestContext, settings: Record<string, string> = {}) {
  const files = durableFiles(t, 'offline-service');
  const env = {
    ...files.env, HTTP_PORT: String(await freePort()), MQTT_PORT: String(await freePort()), JWT_SECRET: TEST_JWT_SECRET,
    OFFLINE_GRACE_S: String(GRACE_S), STREAM_HTTP_HOSTS: '127.0.0.1', ...settings,
  };
  const ts = await startTestService(t, { env, logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@offline-service.test');
  const mosque = await createMosque(ts, root.token, owner, {
    timezone: 'UTC', latitude: 51.5072, longitude: -0.1276, prayer_times: { method: 'muslim_world_league', madhab: 'shafi' },
    // docs/firmware.md, "4.1 Config": a player is entitled once its config carries the stream address and a lease.
    stream_url: 'http://127.0.0.1:9/m',
  });
  const recording = tone(t, 1000, 3);
  const put = await ts.http.request('PUT', `${API}/mosques/${mosque.id}/recording`, { raw: recording, headers: { 'content-type': 'audio/mpeg' }, token: owner.token });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const listener = await member(ts, 'listener@offline-service.test');
  await setStatus(ts, owner.token, (await joinMosque(ts, listener, mosque.id)).id, 'approved');
  const reg = await registerPlayer(ts, listener, mosque.id);
  const postgres: Record<string, string> = ts.config.postgres ? { DATABASE_URL: ts.config.postgres.url } : {};
  await ts.service.close();
  const serviceEnv = baseEnv(files.dir, { ...env, ...postgres });
  return { owner, mosque, listener, reg, recording, serviceEnv, url: `http://127.0.0.1:${env.HTTP_PORT}` };
}

/** The service as `npm start` runs it, on the world's files and ports; ready when it says it listens. */
async function service(t: TestContext, env: Record<string, string>): Promise<Run> {
  const run = startProcess(t, env);
  await listening(run);
  return run;
}

async function killed(run: Run): Promise<void> {
  run.child.kill('SIGKILL');
  assert.equal((await run.exited).signal, 'SIGKILL');
}

/** The offline plan the device keeps in its state folder (device/state/recording.ts), once it names `slotAt`. */
function keptPlan(dir: string, slotAt: number): Promise<Record<string, any>> {
  return waitFor(`the device's kept plan with the slot at ${slotAt}`, () => {
    const file = path.join(dir, 'offline.json');
    if (!fs.existsSync(file)) return null;
    const config = JSON.parse(fs.readFileSync(file, 'utf8')).config as Record<string, any> | null;
    return config?.offline?.slots?.some((s: { prayer: string; at: number }) => s.prayer === PRAYER && s.at === slotAt) ? config : null;
  }, 15_000);
}

/** Moves the mosque's Asr to the whole minute `slotAt` (UTC); the service pushes the new plan to the player. */
async function asrAt(url: string, owner: { token: string }, mosqueId: string, slotAt: number): Promise<void> {
  const res = await httpClient(url).patch(`${API}/mosques/${mosqueId}`, { azaan: { [PRAYER]: { fixed: hhmm(slotAt) } } }, owner.token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
}

test('the service killed before the slot: the player plays its kept recording at the slot + grace, and once the service is back it counts as covered locally', { skip, timeout: 240_000 }, async (t) => {
  const w = await world(t);
  const first = await service(t, w.serviceEnv);
  const wav = path.join(tempDir(t, 'minaret-offline-wav-'), 'out.wav');
  const { run, dir } = startDevice(t, w.reg, w.url, ['--output', wav], { MINARET_DEVICE_RECONNECT_MAX_MS: '1000' });
  await deviceLine(run, /offline azaan: recording kept as \S+azaan-[0-9a-f]{64}\.mp3/, 30_000);
  assert.deepEqual(fs.readFileSync(path.join(dir, fs.readdirSync(dir).find((n) => n.startsWith('azaan-'))!)), w.recording, 'the uploaded bytes');

  // A slot far enough ahead for the new plan to reach the device before the service goes.
  const slotAt = minuteAfter(25);
  await asrAt(w.url, w.owner, w.mosque.id, slotAt);
  const plan = await keptPlan(dir, slotAt);
  assert.equal(plan.offline.grace_s, GRACE_S, 'OFFLINE_GRACE_S reaches the config');
  assert.ok(plan.lease.expires_at > slotAt, 'the lease outlives the slot');
  await killed(first);
  await deviceLine(run, /broker connection lost/, 15_000);
  assert.ok(nowS() < slotAt, 'the service went before the slot');

  const playedLine = await deviceLine(run, /-> PLAYING \(offline_fallback\)/, (slotAt + GRACE_S + 15) * 1000 - Date.now());
  await deviceLine(run, /PLAYING -> \w+ \(local_done\)/, 20_000, playedLine.index);
  const loud = firstLoudMs(run, wav);
  assert.ok(loud !== null, 'the recording played');
  const delay = (loud - (slotAt + GRACE_S) * 1000) / 1000;
  console.log(`# offline azaan with the service killed: first loud sample ${delay.toFixed(3)} s after the slot + grace`);
  assert.ok(Math.abs(delay) <= 5, `it starts at the slot + OFFLINE_GRACE_S: ${delay.toFixed(3)} s`);
  const from = (loud - wavStartMs(run)) / 1000;
  const heard = loudestHalfSecond(readWav(wav), from, from + 3);
  // ffmpeg's sine is at 1/8 of full scale (RMS ~2900 of 32767) and the config's volume is 100.
  assert.ok(heard.rms > 2000 && heard.rms < 4000, `the recording's level: rms ${heard.rms.toFixed(0)}`);
  assert.ok(Math.abs(heard.hz - 1000) < 30, `the recording's 1 kHz: ${heard.hz.toFixed(1)} Hz`);

  // Back on the same files and ports: the device reconnects and reports the PLAYING it made while cut off.
  const second = await service(t, w.serviceEnv);
  await deviceLine(run, /broker connection restored/, 30_000);
  const api = httpClient(w.url);
  const local = await waitFor('the local play in the timeline', async () => {
    const events = (await api.get(`${API}/devices/${w.reg.device.id}/events`, w.listener.token)).body as Array<Record<string, any>>;
    return events.find((e) => e.kind === 'status' && e.to === 'PLAYING') ?? null;
  }, 15_000);
  assert.equal(local.reason, 'offline_fallback');
  assert.deepEqual(local.detail.detail, { source: 'local', reason: 'offline_fallback', prayer: PRAYER, slot_at: slotAt });
  const slot = await waitFor('the slot counting the player', async () => {
    const res = await api.get(`${API}/mosques/${w.mosque.id}/schedule?date=${dateOf(slotAt)}`, w.owner.token);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const s = (res.body as Array<Record<string, any>>).find((v) => v.prayer === PRAYER);
    return s?.covered_locally === 1 ? s : null;
  }, 15_000);
  assert.equal(Date.parse(slot.azaan_at) / 1000, slotAt);
  assert.equal(slot.broadcast_id, null, 'no broadcast: the service was down at its time');
  assert.doesNotMatch(second.stdout() + run.stdout(), new RegExp(w.reg.credentials.password), 'the password is never printed');
});

/**
 * A node preload that sets the device's wall clock `aheadMs` ahead (Date only; its timers run as ever): the hours
 * a player spends cut off from the service, which the test cannot wait through.
 */
function clockAhead(t: TestContext, aheadMs: number): string[] {
  const file = path.join(tempDir(t, 'minaret-clock-'), 'clock-ahead.mjs');
  fs.writeFileSync(file, `const Real = Date;
const ahead = ${Math.round(aheadMs)};
globalThis.Date = class extends Real {
  constructor(...args) { if (args.length === 0) super(Real.now() + ahead); else super(...args); }
  static now() { return Real.now() + ahead; }
};
`);
  return ['--import', pathToFileURL(file).href];
}

test('a player whose lease expired before the slot (the service gone for longer than LEASE_TTL_HOURS) plays nothing', { skip, timeout: 180_000 }, async (t) => {
  const w = await world(t, { LEASE_TTL_HOURS: '1' });
  const svc = await service(t, w.serviceEnv);
  const wav = path.join(tempDir(t, 'minaret-offline-wav-'), 'first.wav');
  const { run, dir } = startDevice(t, w.reg, w.url, ['--output', wav], { MINARET_DEVICE_RECONNECT_MAX_MS: '1000' });
  await deviceLine(run, /offline azaan: recording kept/, 30_000);
  // A slot past the one-hour lease, still within the config's 48 hours of slots.
  const slotAt = minuteAfter(3600 + 120);
  await asrAt(w.url, w.owner, w.mosque.id, slotAt);
  const plan = await keptPlan(dir, slotAt);
  assert.ok(plan.lease.expires_at < slotAt, `the lease (${plan.lease.expires_at}) ends before the slot (${slotAt})`);
  await killed(svc);
  run.child.kill('SIGTERM');
  assert.equal((await run.exited).code, 0, run.stderr());

  // Started again with the service still gone and its clock 20 s short of the slot: the plan comes from DIR.
  const later = path.join(path.dirname(wav), 'later.wav');
  const again = runDeviceOn(t, dir, ['--output', later], { MINARET_DEVICE_RECONNECT_MAX_MS: '1000' }, clockAhead(t, (slotAt - 20) * 1000 - Date.now()));
  await deviceLine(again, new RegExp(`${PRAYER} slot at \\S+: not played: lease_expired`), 60_000);
  assert.doesNotMatch(again.stdout(), /offline_fallback/, 'no local play');
  await new Promise((r) => setTimeout(r, 3000)); // what would have played has had its chance
  again.child.kill('SIGTERM');
  assert.equal((await again.exited).code, 0, again.stderr());
  assert.equal(firstLoudMs(again, later), null, `silence:\n${again.stdout()}`);
});
