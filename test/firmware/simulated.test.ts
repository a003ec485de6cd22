import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { API, createMosque, joinMosque, member, signInSuperadmin } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import { registerPlayer, waitFor } from '../support/devices.ts';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { cuttingHop, simPlayer, type SimPlayer } from './sim-fleet.ts';

// docs/api.md, "Firmware updates", end to end: the service's rollout runner, simulated players (simulator/device.ts,
// device/'s own firmware) over real MQTT, the real download (HTTP Basic, Range) through a hop that can drop it, and
// each mosque's window taken from its schedule (docs/schedule.md): a reboot during the azaan is the one failure a
// mosque will not forgive. The runner looks every 5 s (ROLLOUT_TICK_MS): waits are generous for a loaded machine.

const IMAGE_BYTES = 300_000;
const CUT_AFTER = 100_000;
const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
const MINUTE = 60_000;

async function world(t: TestContext) {
  const keys = newKeyPair();
  const hop = await cuttingHop(t, CUT_AFTER);
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: keys.publicRaw, PUBLIC_URL: hop.url }, logLevel: 'warn' });
  hop.forwardTo(ts.url);
  const root = await signInSuperadmin(ts);
  const upload = async (version: string) => {
    const image = crypto.randomBytes(IMAGE_BYTES);
    const res = await ts.http.request('PUT', `${API}/firmware/images/stream_player/sp-rev-b/${version}`, {
      token: root.token, raw: image, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signDigest(keys.privatePem, digestOf(image).raw) },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body as { id: string };
  };
  /** A mosque (in UTC, its five azaans at the times given) and `n` players of one member, on 1.0.0, their hw_rev learned through get_state. */
  const mosqueOfPlayers = async (n: number, azaans: number[], failing: (rank: number) => boolean = () => false) => {
    const person = await member(ts, `m${crypto.randomUUID()}@example.com`);
    const mosque = await createMosque(ts, root.token, null, { auto_approve_members: true });
    const prayers = ['fajr', 'dhuhr', 'asr', 'maghrib', 'isha'];
    const schedule = {
      timezone: 'UTC', latitude: 21.42, longitude: 39.83, prayer_times: { method: 'umm_al_qura', madhab: 'shafi' },
      azaan: Object.fromEntries(prayers.map((p, i) => [p, { fixed: hhmm(azaans[i]!) }])),
    };
    const patched = await ts.http.patch(`${API}/mosques/${mosque.id}`, schedule, root.token);
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    await joinMosque(ts, person, mosque.id);
    const registered = [];
    for (let i = 0; i < n; i++) registered.push(await registerPlayer(ts, person, mosque.id, `room ${i}`));
    // The rollout places devices in groups by id: rank by id so a test can say which ones are the canary.
    registered.sort((a, b) => a.device.id.localeCompare(b.device.id));
    const players: SimPlayer[] = [];
    for (const [rank, reg] of registered.entries()) {
      players.push(await simPlayer(t, reg.credentials, { key: keys.publicRaw, failUpdate: failing(rank) }));
      const asked = await ts.http.post(`${API}/devices/${reg.device.id}/commands`, { name: 'get_state' }, person.token);
      assert.equal(asked.status, 200, JSON.stringify(asked.body));
    }
    return { mosqueId: mosque.id, person, players };
  };
  const rollout = async (id: string) => (await ts.http.get(`${API}/firmware/rollouts/${id}`, root.token)).body;
  return { ts, root, hop, upload, mosqueOfPlayers, rollout };
}

const sum = (groups: Array<Record<string, number>>, key: string) => groups.reduce((n, g) => n + g[key]!, 0);
/** Five azaans each at least three hours from now (in any day's copy of them). */
const farFrom = (now: number) => [3, 4, 5, 6, 7].map((h) => now + h * 60 * MINUTE);

test('20 simulated players in two mosques, one with an azaan due by its schedule: none of its players is offered the update, every other one updates; one download cut mid-file resumes with Range', { timeout: 300_000 }, async (t) => {
  const w = await world(t);
  const now = Date.now();
  const quiet = await w.mosqueOfPlayers(10, farFrom(now));
  // Fajr 5 minutes ahead (FIRMWARE_QUIET_MINUTES is 20): the window stays shut for the whole test.
  const busy = await w.mosqueOfPlayers(10, [now + 5 * MINUTE, ...farFrom(now).slice(1)]);
  const due = (await w.ts.http.get(`${API}/mosques/${busy.mosqueId}/schedule?days=2`, w.root.token)).body as Array<{ azaan_at: string }>;
  assert.ok(due.some((s) => Math.abs(Date.parse(s.azaan_at) - now) < 20 * MINUTE), `an azaan due within the quiet minutes: ${JSON.stringify(due)}`);
  const resumer = quiet.players[3]!;
  w.hop.cutFor(resumer.id);

  const image = await w.upload('1.1.0');
  const made = await w.ts.http.post(`${API}/firmware/rollouts`, { image_id: image.id, groups: [{ percent: 100 }], max_concurrent: 20 }, w.root.token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(made.body.groups[0].size, 20);
  const settled = await waitFor('the quiet mosque updated, the busy one waiting for its window', async () => {
    const r = await w.rollout(made.body.id);
    return sum(r.groups, 'succeeded') === 10 && sum(r.groups, 'waiting_for_window') === 10 ? r : null;
  }, 150_000);
  assert.equal(settled.status, 'running', 'the busy mosque still waits');
  assert.equal(sum(settled.groups, 'failed'), 0);
  for (const p of quiet.players) {
    assert.equal(p.device.fw, '1.1.0', `${p.id} runs the new image`);
    assert.equal(p.updates, 1, `${p.id} was asked once`);
  }
  for (const p of busy.players) {
    assert.equal(p.updates, 0, `${p.id}: no update offered inside its mosque's window`);
    assert.equal(p.device.fw, '1.0.0');
  }
  const fws = await Promise.all(quiet.players.map(async (p) => (await w.ts.http.get(`${API}/devices/${p.id}`, quiet.person.token)).body.fw));
  assert.deepEqual(new Set(fws), new Set(['1.1.0']), 'the service saw each come back on 1.1.0');

  // The dropped download: cut once after CUT_AFTER bytes, then asked again from there, and the service answered 206.
  const downloads = w.hop.seen.filter((s) => s.user === resumer.id && s.path.endsWith('/download'));
  assert.equal(downloads[0]?.cut, true, JSON.stringify(w.hop.seen));
  const resumed = downloads.find((s) => s.range !== undefined);
  assert.ok(resumed, `a Range request followed the cut: ${JSON.stringify(downloads)}`);
  const from = Number(/^bytes=(\d+)-$/.exec(resumed.range!)?.[1]);
  assert.ok(from > 0 && from <= CUT_AFTER, `resumed from byte ${from}`);
  assert.equal(resumed.status, 206, 'the service itself served the rest');
  // Every other player downloaded once, whole.
  for (const p of quiet.players.filter((q) => q !== resumer)) {
    assert.deepEqual(w.hop.seen.filter((s) => s.user === p.id).map((s) => [s.status, s.range]), [[200, undefined]], p.id);
  }
});

test('a canary of 2 simulated players whose image rolls back pauses the rollout (paused_by_errors) before any other player is offered it', { timeout: 240_000 }, async (t) => {
  const w = await world(t);
  const fleet = await w.mosqueOfPlayers(6, farFrom(Date.now()), (rank) => rank < 2);
  const image = await w.upload('2.0.0');
  const made = await w.ts.http.post(`${API}/firmware/rollouts`, { image_id: image.id, groups: [{ devices: 2 }, { percent: 100 }], error_threshold_pct: 50 }, w.root.token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const paused = await waitFor('paused by errors', async () => {
    const r = await w.rollout(made.body.id);
    return r.status === 'paused_by_errors' ? r : null;
  }, 150_000);
  assert.deepEqual(paused.groups.map((g: any) => [g.size, g.failed, g.waiting]), [[2, 2, 0], [4, 0, 4]]);
  const [a, b, ...rest] = fleet.players;
  for (const canary of [a!, b!]) {
    assert.equal(canary.updates, 1, `${canary.id}: the canary was asked once`);
    assert.equal(canary.device.fw, '1.0.0', 'rolled back to what it ran');
  }
  // Two more ticks: the pause holds, and nobody else was asked.
  await new Promise((r) => setTimeout(r, 11_000));
  assert.equal((await w.rollout(made.body.id)).status, 'paused_by_errors');
  for (const p of rest) assert.equal(p.updates, 0, `${p.id} was never offered the image`);
  const history = await w.ts.http.get(`${API}/devices/${a!.id}/firmware`, w.root.token);
  assert.deepEqual(history.body.map((h: any) => [h.state, h.from_fw, h.target_fw]), [['failed', '1.0.0', '2.0.0']]);
});
