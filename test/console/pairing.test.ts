import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mosqueWithOwner } from '../support/devices.ts';
import { API, createMosque, joinMosque, member } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { WAIT_MS, assertAccessible, launchBrowser, phonePage, shot, signIn } from './browser.ts';

/** docs/api.md, "Pairing a device", from the console: the device's side is plain HTTP, as firmware calls it. */

async function startPairing(ts: TestService, kind: string) {
  const res = await ts.http.post(`${API}/devices/pairing`, { kind });
  assert.equal(res.status, 200);
  return res.body as { device_code: string; user_code: string; verification_uri_complete: string };
}

test('a member types the code on Home and the device gets its credentials; a wrong code shows the API\'s message', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root } = await mosqueWithOwner(ts);
  const mosque = await createMosque(ts, root.token, null, { name: 'Masjid Al-Huda', auto_approve_members: true });
  const amina = await member(ts, 'amina@console.test');
  await joinMosque(ts, amina, mosque.id);
  const device = await startPairing(ts, 'stream_player');

  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await page.goto(`${ts.url}/`);
  await signIn(page, amina.email);
  const pair = page.locator('form[data-pair]');
  await pair.getByLabel('Code on the device').fill('BCDF-GHJK');
  await pair.getByLabel('Name (optional)').fill('Bedroom');
  await pair.getByRole('button', { name: 'Pair' }).click();
  await pair.getByRole('alert').filter({ hasText: 'No pairing waits under that code' }).waitFor({ timeout: WAIT_MS });

  await pair.getByLabel('Code on the device').fill(device.user_code.toLowerCase());
  await pair.getByRole('button', { name: 'Pair' }).click();
  await pair.getByText('Paired: Bedroom').waitFor({ timeout: WAIT_MS });
  await page.getByRole('link', { name: 'Bedroom' }).waitFor({ timeout: WAIT_MS });
  await shot(page, 'pair-home');
  await assertAccessible(page, 'member home with the pairing form');

  const taken = await ts.http.post(`${API}/devices/pairing/token`, { device_code: device.device_code });
  assert.equal(taken.status, 200, JSON.stringify(taken.body));
  assert.equal(taken.body.device.name, 'Bedroom');
  assert.equal(taken.body.device.owner_user_id, amina.id);
  assert.ok(taken.body.credentials.password.length >= 32);
  assert.deepEqual(problems, []);
});

test('the link a device shows signs a visitor in, lands on /pair with the code, and a manager pairs a transmitter', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const device = await startPairing(ts, 'transmitter');

  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await page.goto(device.verification_uri_complete);
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await signIn(page, owner.email);
  await page.getByRole('heading', { name: 'Pair a device' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await page.getByLabel('Code on the device').inputValue(), device.user_code, 'prefilled from ?code=');
  await page.getByRole('button', { name: 'Pair' }).click();
  await page.getByText('Paired:').waitFor({ timeout: WAIT_MS });
  await shot(page, 'pair-link');

  const taken = await ts.http.post(`${API}/devices/pairing/token`, { device_code: device.device_code });
  assert.equal(taken.status, 200, JSON.stringify(taken.body));
  assert.deepEqual([taken.body.device.kind, taken.body.device.mosque_id], ['transmitter', mosque.id]);

  // The mosque's Devices tab offers the same to its managers.
  // Moved inside the page (the token lives in its memory), as a link would.
  await page.evaluate((path) => {
    const w = globalThis as unknown as { history: { pushState(s: null, u: string, p: string): void }; dispatchEvent(e: unknown): void; PopStateEvent: new (type: string) => unknown };
    w.history.pushState(null, '', path);
    w.dispatchEvent(new w.PopStateEvent('popstate'));
  }, `/mosques/${mosque.id}/devices`);
  await page.locator('form[data-pair]').getByRole('heading', { name: 'Add a transmitter' }).waitFor({ timeout: WAIT_MS });
  assert.deepEqual(problems, []);
});
