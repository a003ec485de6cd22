import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { API, createMosque, member, signInSuperadmin } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { registerTransmitter, waitFor } from '../support/devices.ts';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { windowOpen } from '../../src/firmware/windows.ts';
import { groupSizes } from '../../src/firmware/rollouts.ts';
import { satisfies } from '../../src/firmware/versions.ts';
import { outcomeOf } from '../../src/firmware/outcomes.ts';
import { fakeDevice, type Behaviour, type FakeDevice } from './fleet.ts';

/** docs/api.md, "Firmware updates": staged rollouts, offered only inside each mosque's prayer-aware window. */

async function world(t: TestContext) {
  const keys = newKeyPair();
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: keys.publicRaw }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const publicKey = crypto.createPublicKey(keys.publicPem);
  const upload = async (version: string, image = crypto.randomBytes(50_000), signature = signDigest(keys.privatePem, digestOf(image).raw)) => {
    const res = await ts.http.request('PUT', `${API}/firmware/images/transmitter/T1/${version}`, { token: root.token, raw: image, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signature } });
    return res;
  };
  /** `n` transmitters of a new mosque, each on 1.0.0, their hw_rev learned through get_state as a person's command would. */
  const fleet = async (n: number, behaviour: (i: number) => Behaviour, email: string): Promise<{ mosqueId: string; devices: FakeDevice[] }> => {
    const owner = await member(ts, email);
    const mosque = await createMosque(ts, root.token, owner);
    const devices: FakeDevice[] = [];
    for (let i = 0; i < n; i++) {
      const tx = await registerTransmitter(ts, owner.token, mosque.id, `tx${i}`);
      devices.push(await fakeDevice(t, ts.url, tx.credentials, { fw: '1.0.0', hwRev: 'T1', publicKey, behaviour: behaviour(i) }));
      const asked = await ts.http.post(`${API}/devices/${tx.device.id}/commands`, { name: 'get_state' }, owner.token);
      assert.equal(asked.status, 200, JSON.stringify(asked.body));
    }
    return { mosqueId: mosque.id, devices };
  };
  const rollout = async (id: string) => (await ts.http.get(`${API}/firmware/rollouts/${id}`, root.token)).body;
  return { ts, root, upload, fleet, rollout, owner: () => member(ts, `x${crypto.randomUUID()}@example.com`) };
}

const sum = (groups: Array<Record<string, number>>, key: string) => groups.reduce((n, g) => n + g[key]!, 0);

test('20 transmitters in two mosques, one with an azaan broadcast live: none of its devices is offered the update, every other one updates; the history shows it', { timeout: 120_000 }, async (t) => {
  const w = await world(t);
  const quiet = await w.fleet(10, () => 'update', 'a@example.com');
  const busy = await w.fleet(10, () => 'update', 'b@example.com');
  const live = await w.ts.http.post(`${API}/mosques/${busy.mosqueId}/broadcasts`, { kind: 'azaan' }, w.root.token);
  assert.equal(live.status, 201, JSON.stringify(live.body));
  const image = (await w.upload('1.1.0')).body;
  const made = await w.ts.http.post(`${API}/firmware/rollouts`, { image_id: image.id, groups: [{ percent: 100 }], max_concurrent: 20 }, w.root.token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(made.body.groups[0].size, 20);
  const done = await waitFor('the quiet mosque updated', async () => {
    const r = await w.rollout(made.body.id);
    return sum(r.groups, 'succeeded') === 10 && sum(r.groups, 'waiting_for_window') === 10 ? r : null;
  }, 60_000);
  assert.equal(done.status, 'running', 'the busy mosque still waits for its window');
  for (const d of quiet.devices) assert.equal(d.fw, '1.1.0');
  for (const d of busy.devices) assert.equal(d.offers, 0, 'no device of the mosque with a live azaan is offered the update');
  const history = await w.ts.http.get(`${API}/devices/${quiet.devices[0]!.id}/firmware`, w.root.token);
  assert.equal(history.status, 200);
  assert.deepEqual(history.body.map((h: any) => [h.rollout_id, h.state, h.from_fw, h.target_fw]), [[made.body.id, 'succeeded', '1.0.0', '1.1.0']]);
  // A stranger to the device is refused its history.
  const stranger = await w.owner();
  assert.equal((await w.ts.http.get(`${API}/devices/${quiet.devices[0]!.id}/firmware`, stranger.token)).status, 404);
});

test('a canary group of 2 whose image rolls back pauses the rollout before any other device is touched', { timeout: 120_000 }, async (t) => {
  const w = await world(t);
  const fleet = await w.fleet(6, () => 'roll_back', 'c@example.com');
  const image = (await w.upload('2.0.0')).body;
  const made = await w.ts.http.post(`${API}/firmware/rollouts`, { image_id: image.id, groups: [{ devices: 2 }, { percent: 100 }], error_threshold_pct: 50 }, w.root.token);
  assert.equal(made.status, 201);
  const paused = await waitFor('paused by errors', async () => {
    const r = await w.rollout(made.body.id);
    return r.status === 'paused_by_errors' ? r : null;
  }, 60_000);
  assert.deepEqual(paused.groups.map((g: any) => [g.size, g.failed, g.waiting]), [[2, 2, 0], [4, 0, 4]]);
  assert.equal(fleet.devices.reduce((n, d) => n + d.offers, 0), 2, 'only the canary was offered it');
  assert.ok(fleet.devices.every((d) => d.fw === '1.0.0'));
  // Cancelled, the image can go; a rollout cancelled cannot resume.
  assert.equal((await w.ts.http.post(`${API}/firmware/rollouts/${made.body.id}/cancel`, {}, w.root.token)).body.status, 'cancelled');
  assert.equal((await w.ts.http.post(`${API}/firmware/rollouts/${made.body.id}/resume`, {}, w.root.token)).status, 409);
  assert.equal((await w.ts.http.delete(`${API}/firmware/images/${image.id}`, w.root.token)).status, 204);
});

test('a paused rollout offers nothing; the image it offers cannot be deleted, nor downloaded by a device not offered it', { timeout: 60_000 }, async (t) => {
  const w = await world(t);
  const fleet = await w.fleet(3, () => 'update', 'd@example.com');
  const image = (await w.upload('1.2.0')).body;
  const made = await w.ts.http.post(`${API}/firmware/rollouts`, { image_id: image.id, groups: [{ percent: 100 }], max_concurrent: 1 }, w.root.token);
  await waitFor('the first offer', () => fleet.devices.some((d) => d.offers === 1), 10_000);
  assert.equal((await w.ts.http.post(`${API}/firmware/rollouts/${made.body.id}/pause`, {}, w.root.token)).body.status, 'paused');
  assert.equal((await w.ts.http.post(`${API}/firmware/rollouts/${made.body.id}/pause`, {}, w.root.token)).status, 409, 'paused already');
  assert.equal((await w.ts.http.delete(`${API}/firmware/images/${image.id}`, w.root.token)).status, 409, 'an unfinished rollout names it');
  await new Promise((r) => setTimeout(r, 11_000)); // past two ticks of the runner: the first device is back on 1.2.0 by now
  assert.equal(fleet.devices.reduce((n, d) => n + d.offers, 0), 1, 'nothing new offered after the pause');
  const r = await w.rollout(made.body.id);
  assert.equal(r.status, 'paused');
  assert.deepEqual([r.groups[0].succeeded, r.groups[0].waiting], [1, 2], 'the device offered before the pause finished on its own');
  // The attacker's test: a device's own credentials are not enough without an offer.
  const other = fleet.devices.find((d) => d.offers === 0)!;
  const stolen = await fetch(`${w.ts.url}${API}/firmware/images/${image.id}/download`, { headers: { authorization: `Basic ${Buffer.from(`${other.id}:wrong`).toString('base64')}` } });
  assert.equal(stolen.status, 401);
  // Resumed, the others are offered it and the rollout ends done.
  assert.equal((await w.ts.http.post(`${API}/firmware/rollouts/${made.body.id}/resume`, {}, w.root.token)).body.status, 'running');
  await waitFor('done', async () => (await w.rollout(made.body.id)).status === 'done', 40_000);
  assert.ok(fleet.devices.every((d) => d.fw === '1.2.0' && d.offers === 1), 'each device asked once');
  // Anyone but a superadmin is refused the rollouts.
  const person = await w.owner();
  assert.equal((await w.ts.http.get(`${API}/firmware/rollouts`, person.token)).status, 403);
});

test('an image whose signature does not verify is refused by the service, and nothing is stored', { timeout: 60_000 }, async (t) => {
  const w = await world(t);
  const image = crypto.randomBytes(10_000);
  const forged = signDigest(newKeyPair().privatePem, digestOf(image).raw);
  const refused = await w.upload('3.0.0', image, forged);
  assert.equal(refused.status, 400, JSON.stringify(refused.body));
  assert.match(JSON.stringify(refused.body), /signature/);
  assert.equal((await w.ts.http.get(`${API}/firmware/images`, w.root.token)).body.length, 0, 'nothing stored');
});

test('windows, group sizes and ranges, as rules', () => {
  const now = 1_000_000_000;
  const quiet = 20 * 60_000;
  const cases: Array<[number[], boolean, boolean, string]> = [
    [[], false, true, 'no times and nothing live: open'],
    [[now + 19 * 60_000], false, false, 'an azaan in 19 minutes: shut'],
    [[now - 19 * 60_000], false, false, 'an iqamah 19 minutes ago: shut'],
    [[now + 21 * 60_000, now - 21 * 60_000], false, true, 'the nearest 21 minutes away: open'],
    [[], true, false, 'a broadcast live: shut'],
  ];
  for (const [times, live, open, why] of cases) assert.equal(windowOpen(now, times, live, quiet), open, why);
  assert.deepEqual(groupSizes([{ devices: 2 }, { percent: 50 }, { percent: 10 }], 20), [2, 10, 8]);
  assert.deepEqual(groupSizes([{ devices: 5 }, { devices: 5 }], 3), [3, 0]);
  assert.equal(satisfies('1.3.0', '>=1.2.0 <1.5.0'), true);
  assert.equal(satisfies('1.5.0-rc.1', '>=1.2.0 <1.5.0'), true);
  assert.equal(satisfies('1.5.0', '>=1.2.0 <1.5.0'), false);
  assert.equal(satisfies('0.9.0', '<1.0.0 || >=2.0.0'), true);
});

test("what a device reports moves its offer, as rules (docs/firmware.md, 4.4)", () => {
  const offeredAt = 1_000;
  const offer = (state: string, extra: Record<string, unknown> = {}) => ({
    rollout_id: 'r', device_id: 'd', image_id: 'i', group_index: 0, state, waiting_for_window: 0, from_fw: '1.0.0',
    progress_pct: null, error: null, offered_at: offeredAt, finished_at: null, updated_at: offeredAt, ...extra,
  }) as Parameters<typeof outcomeOf>[0];
  const row = (status: string, reason: string | null, detail: Record<string, unknown> = {}, fw = '1.0.0') => ({ status, status_detail: JSON.stringify({ reason, detail }), status_at: offeredAt + 5, fw });
  const now = offeredAt + 10;
  assert.deepEqual(outcomeOf(offer('offered'), row('UPDATING', 'ota', { progress_pct: 40 }), '2.0.0', now, 1800), { state: 'updating', progress_pct: 40 });
  assert.deepEqual(outcomeOf(offer('updating'), row('ONLINE', 'connected', {}, '2.0.0'), '2.0.0', now, 1800), { state: 'succeeded', error: null, finished_at: now });
  assert.deepEqual(outcomeOf(offer('updating'), row('ONLINE', 'rolled_back'), '2.0.0', now, 1800), { state: 'failed', error: 'rolled_back', finished_at: now });
  assert.deepEqual(outcomeOf(offer('offered'), row('ONLINE', 'update_failed', { error: 'bad_signature' }), '2.0.0', now, 1800), { state: 'failed', error: 'bad_signature', finished_at: now });
  assert.deepEqual(outcomeOf(offer('updating'), row('PLAYING', 'update_failed', { error: 'interrupted' }), '2.0.0', now, 1800), { state: 'waiting', offered_at: null }, 'the azaan won: offered again later');
  assert.deepEqual(outcomeOf(offer('offered'), row('ONLINE', 'connected'), '2.0.0', offeredAt + 1801, 1800), { state: 'failed', error: 'timeout', finished_at: offeredAt + 1801 });
  assert.deepEqual(outcomeOf(offer('succeeded', { finished_at: offeredAt }), row('STREAM_ERROR', 'stream_unreachable', {}, '2.0.0'), '2.0.0', now, 1800), { state: 'failed', error: 'stream_error', finished_at: now });
  assert.equal(outcomeOf(offer('succeeded', { finished_at: offeredAt - 700 }), row('STREAM_ERROR', 'stream_unreachable', {}, '2.0.0'), '2.0.0', now, 1800), null, 'past the 10 minutes after the update');
});
