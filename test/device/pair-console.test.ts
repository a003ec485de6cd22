import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { nodeArgsFor, startProcess, tempDir } from '../support/process.ts';
import { mosqueWithOwner, waitFor } from '../support/devices.ts';
import { API, createMosque, joinMosque, member } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import { WAIT_MS, launchBrowser, phonePage, signIn } from '../console/browser.ts';
import { deviceLine } from './support.ts';

/**
 * docs/devices/raspberry-pi.md and docs/api.md, "Pairing a device", end to end with real processes: the real
 * `minaret-device pair` prints a code, a member types it in the console in Chromium, the device stores its
 * credentials, and `minaret-device run` comes ONLINE with a lease.
 */
test('minaret-device pair prints a code, the member types it on Home, and the player is ONLINE within 10 s', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root } = await mosqueWithOwner(ts);
  const mosque = await createMosque(ts, root.token, null, { name: 'Masjid Al-Huda', auto_approve_members: true, stream_url: 'https://radio.example/huda' });
  const amina = await member(ts, 'amina@pair.test');
  await joinMosque(ts, amina, mosque.id);

  const dir = tempDir(t, 'minaret-device-');
  const env = { PATH: process.env.PATH ?? '', HOME: dir };
  const pair = startProcess(t, env, process.execPath, [...nodeArgsFor('device/index.ts'), 'pair', '--server', ts.url, '--kind', 'player', '--name', 'Kitchen', '--state', dir]);
  const code = (await deviceLine(pair, /enter the code\s+([A-Z]{4}-[A-Z]{4})/, 30_000))[1]!;

  const browser = await launchBrowser(t);
  const { page } = await phonePage(browser, t);
  await page.goto(`${ts.url}/`);
  await signIn(page, amina.email);
  const form = page.locator('form[data-pair]');
  await form.getByLabel('Code on the device').fill(code.toLowerCase());
  await form.getByRole('button', { name: 'Pair' }).click();
  await form.getByText('Paired: Kitchen').waitFor({ timeout: WAIT_MS });
  const approved = Date.now();

  // The device's poll collects the credentials (every `interval`, 5 s) and stores them for its owner alone.
  await waitFor('minaret-device pair to exit', () => pair.child.exitCode !== null, 20_000);
  assert.equal(pair.child.exitCode, 0, pair.stderr());
  const file = path.join(dir, 'device.json');
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  const stored = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.equal(stored.device.name, 'Kitchen');
  assert.ok(!pair.stdout().includes(stored.credentials.password), 'the password is never printed');

  const run = startProcess(t, env, process.execPath, [...nodeArgsFor('device/index.ts'), 'run', '--state', dir, '--output', path.join(dir, 'out.wav')]);
  const device = await waitFor('the player ONLINE', async () => {
    const res = await ts.http.get(`${API}/devices/${stored.device.id}`, amina.token);
    return res.body.status === 'ONLINE' ? res.body : null;
  }, 15_000).catch(async (err: Error) => {
    const res = await ts.http.get(`${API}/devices/${stored.device.id}`, amina.token);
    throw new Error(`${err.message}; the device: ${JSON.stringify(res.body)}\n--- minaret-device\n${run.stdout().slice(-2000)}\n${run.stderr().slice(-1000)}`);
  });
  const tookS = (Date.now() - approved) / 1000;
  console.log(`# code typed -> device ONLINE: ${tookS.toFixed(1)} s`);
  assert.ok(tookS < 10, `ONLINE ${tookS} s after the approval`);
  assert.equal(device.owner_user_id, amina.id);
  assert.ok(!run.stdout().includes(stored.credentials.password), 'the password is never logged');
});
