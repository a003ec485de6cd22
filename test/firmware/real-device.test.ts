import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import { mosqueWithOwner, registerPlayer, waitFor } from '../support/devices.ts';
import { ROOT, tempDir } from '../support/process.ts';
import { audioToolsMissing } from '../audio/icecast-plain.ts';
import { deviceLine, startDevice } from '../device/support.ts';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { HW_REV } from '../../src/firmware/images.ts';
import { ROLLOUT_TICK_MS } from '../../src/firmware/runner.ts';

// The whole update path with nothing stood in (docs/api.md, "Firmware updates"; docs/firmware.md, "4.4"): the real
// service, a real `minaret-device run` player with a pinned key, an image the superadmin uploads for the hardware the
// player reported, and a rollout with no fw_range: the player is targeted by the version it reports, downloads from
// the service with its own credentials, checks and installs the image, and comes back on the new version.

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;

/** The next major version after `version` (plain semver): above whatever the package is now. */
const nextMajor = (version: string) => `${Number(version.split('.')[0]) + 1}.0.0`;

test('a real player is targeted by a rollout without fw_range, downloads and installs the image, and comes back on target_fw; the rollout ends done', { skip, timeout: 120_000 }, async (t) => {
  const keys = newKeyPair();
  // No quiet window around prayers: the mosque has no schedule, and the test must not depend on the time of day.
  const ts = await startTestService(t, { logLevel: 'warn', env: { FIRMWARE_PUBLIC_KEY: keys.publicRaw, FIRMWARE_QUIET_MINUTES: '0', STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const { root, owner, mosque } = await mosqueWithOwner(ts);
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: 'http://127.0.0.1:9/m' }, owner.token)).status, 200);
  const listener = await member(ts, 'listener@example.com');
  await setStatus(ts, owner.token, (await joinMosque(ts, listener, mosque.id)).id, 'approved');
  const player = await registerPlayer(ts, listener, mosque.id);
  const out = path.join(tempDir(t, 'minaret-fw-e2e-'), 'out.wav');
  const { run, dir } = startDevice(t, player, ts.url, ['--output', out, '--firmware-key', keys.publicRaw]);
  await deviceLine(run, /-> ONLINE \((connected|entitled)\)/, 20_000);

  // What it runs and on what: the package's version, and a hw_rev the service records (learned from get_state).
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
  const state = await ts.http.post(`${API}/devices/${player.device.id}/commands`, { name: 'get_state' }, listener.token);
  assert.equal(state.status, 200, JSON.stringify(state.body));
  const { fw, hw_rev: hwRev } = state.body.result as { fw: string; hw_rev: string };
  assert.equal(fw, pkg.version);
  assert.match(hwRev, HW_REV, 'a hw_rev images can be uploaded under');

  const target = nextMajor(pkg.version);
  const image = crypto.randomBytes(150_000);
  const uploaded = await ts.http.request('PUT', `${API}/firmware/images/stream_player/${hwRev}/${target}`, {
    token: root.token, raw: image, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signDigest(keys.privatePem, digestOf(image).raw) },
  });
  assert.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
  const made = await ts.http.post(`${API}/firmware/rollouts`, { image_id: uploaded.body.id, groups: [{ percent: 100 }] }, root.token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(made.body.fw_range, null);
  assert.deepEqual(made.body.groups.map((g: { size: number }) => g.size), [1], 'the player, on the version below the image, is targeted');

  // The device's own side: the download, the checks against its pinned key, the install and the reboot in the process.
  await deviceLine(run, new RegExp(`update ${target.replace(/\./g, '\\.')}: verified \\(${image.length} bytes`), 30_000);
  await deviceLine(run, new RegExp(`update ${target.replace(/\./g, "\\.")}: installed; rebooting`), 30_000);
  const rollout = await waitFor('the rollout done', async () => {
    const r = (await ts.http.get(`${API}/firmware/rollouts/${made.body.id}`, root.token)).body;
    return r.status === 'done' ? r : null;
  }, 4 * ROLLOUT_TICK_MS + 30_000);
  assert.equal(rollout.groups[0].succeeded, 1);
  assert.equal(rollout.groups[0].failed, 0);
  assert.equal((await ts.http.get(`${API}/devices/${player.device.id}`, listener.token)).body.fw, target, 'the service sees it on target_fw');
  const [entry] = (await ts.http.get(`${API}/devices/${player.device.id}/firmware`, root.token)).body;
  assert.deepEqual([entry.from_fw, entry.target_fw, entry.state, entry.error], [pkg.version, target, 'succeeded', null]);
  assert.deepEqual(fs.readFileSync(path.join(dir, 'firmware', target)), image, 'the image it installed is the one uploaded');
  assert.doesNotMatch(run.stdout() + run.stderr(), new RegExp(player.credentials.password), 'the password is never printed');
  run.child.kill('SIGTERM');
  assert.equal((await run.exited).code, 0, run.stderr());
});
