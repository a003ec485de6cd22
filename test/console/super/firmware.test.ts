// The superadmin's firmware page (docs/console.md, "Firmware updates"; docs/api.md, "Firmware updates"): an image
// uploaded with the CLI's signature, a rollout started from the page, its groups' bars moving as real devices over
// MQTT update, pause and resume, and each device's history on its own page.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import type { Locator, Page } from 'playwright-core';
import { API, createMosque, member, signInSuperadmin } from '../../support/people.ts';
import { startTestService, type TestService } from '../../support/service.ts';
import { registerTransmitter, waitFor } from '../../support/devices.ts';
import { ROLLOUT_TICK_MS } from '../../../src/firmware/runner.ts';
import { digestOf, newKeyPair, signDigest } from '../../../src/platform/keys/signatures.ts';
import { fakeDevice, type Behaviour, type FakeDevice } from '../../firmware/fleet.ts';
import { assertAccessible, fromMenu, launchBrowser, phonePage, shot, signIn, superadminSignsIn } from '../browser.ts';

const ROOT = { email: 'root@console.test', password: 'root password 123' };

/** The superadmin's two steps in the page: password, then the one-time code the service sent. */
async function superadminPage(t: TestContext, ts: TestService): Promise<{ page: Page; problems: string[] }> {
  const { page, problems } = await phonePage(await launchBrowser(t), t);
  await superadminSignsIn(page, ts, ROOT.email, ROOT.password);
  await (await fromMenu(page, 'link', 'All mosques')).click();
  await page.getByRole('link', { name: 'Firmware updates' }).click();
  await page.getByRole('heading', { name: 'Firmware updates', level: 1 }).waitFor();
  return { page, problems };
}

/**
 * A service with firmware updates on, a mosque with `devices` transmitters on 1.0.0 / T1 that answer an offer as
 * `behaviour` says (their hw_rev learned), and a signed image of `bytes` random bytes for them, uploaded.
 */
async function firmwareWorld(t: TestContext, o: { devices: number; behaviour: Behaviour; bytes: number; notes?: string }) {
  const keys = newKeyPair();
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: keys.publicRaw }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts, ROOT.email, ROOT.password);
  const owner = await member(ts, 'imam@console.test');
  const mosque = await createMosque(ts, root.token, owner);
  const publicKey = crypto.createPublicKey(keys.publicPem);
  const devices: FakeDevice[] = [];
  for (let i = 0; i < o.devices; i++) {
    const tx = await registerTransmitter(ts, owner.token, mosque.id, `minbar ${i}`);
    devices.push(await fakeDevice(t, ts.url, tx.credentials, { fw: '1.0.0', hwRev: 'T1', publicKey, behaviour: o.behaviour }));
    // Its hw_rev is learned from get_state, as a person's command asks it (docs/decisions.md, "Firmware rollouts").
    assert.equal((await ts.http.post(`${API}/devices/${tx.device.id}/commands`, { name: 'get_state' }, owner.token)).status, 200);
  }
  const image = crypto.randomBytes(o.bytes);
  const uploaded = await ts.http.request('PUT', `${API}/firmware/images/transmitter/T1/1.1.0`, {
    token: root.token, raw: image, headers: {
      'content-type': 'application/octet-stream', 'x-firmware-signature': signDigest(keys.privatePem, digestOf(image).raw),
      ...(o.notes !== undefined && { 'x-firmware-notes': encodeURIComponent(o.notes) }),
    },
  });
  assert.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
  return { ts, root, devices, uploaded };
}

/** How many devices of a group the page says are in a part ("2 updated"), from the words beside the bar. */
async function count(group: Locator, part: string): Promise<number> {
  const key = group.locator(`[data-part=${part}]`);
  return (await key.count()) === 0 ? 0 : Number(await key.getAttribute('data-count'));
}

test('a superadmin starts a rollout in the page, watches each group move, pauses and resumes it; the device page shows its history', { timeout: 180_000 }, async (t) => {
  const { ts, root, devices, uploaded } = await firmwareWorld(t, { devices: 3, behaviour: 'update', bytes: 40_000, notes: 'Quieter relay click' });

  const { page, problems } = await superadminPage(t, ts);
  const item = page.locator(`[data-image="${uploaded.body.id}"]`);
  await item.getByText('Transmitter T1 · 1.1.0').waitFor();
  await item.getByText('Quieter relay click').waitFor();
  assert.match(await item.innerText(), new RegExp(`SHA-256 ${uploaded.body.sha256.slice(0, 12)}`));

  // The form shows the API's defaults; a canary of one device, then the rest, one device at a time.
  const form = page.locator('form[data-new-rollout]');
  assert.equal(await form.getByLabel('Stop when this % of a group failed').inputValue(), '20');
  assert.equal(await form.getByLabel('Groups, in order').inputValue(), '2, 50%, 100%');
  await form.getByLabel('Groups, in order').fill('1, 100%');
  await form.getByLabel('Devices updating at once, at most').fill('1');
  await form.getByRole('button', { name: 'Start rollout' }).click();
  const rollout = page.locator('[data-rollout]');
  await rollout.waitFor();
  const id = (await rollout.getAttribute('data-rollout'))!;
  const [canary, rest] = [rollout.locator('[data-group="0"]'), rollout.locator('[data-group="1"]')];
  assert.match(await canary.innerText(), /Group 1 \(test group\) · 1 device\b/);
  assert.match(await rest.innerText(), /Group 2 · 2 devices/);
  const made = (await ts.http.get(`${API}/firmware/rollouts/${id}`, root.token)).body;
  assert.deepEqual(made.groups.map((g: any) => g.size), [1, 2], 'the page sent the groups as written');
  assert.equal(made.max_concurrent, 1);

  // The canary updates on the page, then the next group starts: the bars move without a reload.
  await waitFor('the canary updated on the page', async () => (await count(canary, 'succeeded')) === 1, 60_000);
  assert.ok((await canary.locator('.fw-bar .fw-succeeded').boundingBox())!.width > 0, 'the bar shows it');
  await waitFor('the second group moving', async () => (await count(rest, 'offered')) + (await count(rest, 'updating')) + (await count(rest, 'succeeded')) > 0, 60_000);
  await shot(page, 'firmware-rollout');

  // Paused: the page and the service agree, and no device is offered anything new.
  await rollout.getByRole('button', { name: 'Pause' }).click();
  await page.locator(`[data-rollout="${id}"][data-status=paused]`).waitFor();
  await rollout.getByText('Paused', { exact: true }).waitFor();
  assert.equal((await ts.http.get(`${API}/firmware/rollouts/${id}`, root.token)).body.status, 'paused');
  const offeredWhenPaused = devices.reduce((n, d) => n + d.offers, 0);
  assert.ok(offeredWhenPaused < 3, 'paused before every device was offered it');
  await assertAccessible(page, 'firmware page');

  await rollout.getByRole('button', { name: 'Resume' }).click();
  await page.locator(`[data-rollout="${id}"][data-status=done]`).waitFor({ timeout: 90_000 });
  assert.equal(await count(rest, 'succeeded'), 2);
  assert.equal(await rollout.getByRole('button').count(), 0, 'a finished rollout has nothing to press');
  assert.ok(devices.every((d) => d.fw === '1.1.0' && d.offers === 1), 'each device updated, asked once');

  // The device's page says what came of it, in words.
  // Moved to as a link does (a reload on plain http may find no session to restore).
  await page.evaluate((path) => {
    const w = globalThis as any;
    w.history.pushState(null, '', path);
    w.dispatchEvent(new w.PopStateEvent('popstate'));
  }, `/devices/${devices[0]!.id}`);
  const history = page.locator('[data-firmware-history]');
  await history.getByText('1.0.0 → 1.1.0:').waitFor();
  assert.match(await history.innerText(), /1\.0\.0 → 1\.1\.0: updated/);
  assert.deepEqual(problems, []);
});

test('a superadmin cancels a running rollout in the page: asked first, then cancelled in the page and the API, and nothing more is offered', { timeout: 120_000 }, async (t) => {
  // Silent devices accept the offer and never come back, so the rollout is still running when Cancel is pressed.
  const { ts, root, devices, uploaded } = await firmwareWorld(t, { devices: 2, behaviour: 'silent', bytes: 20_000 });
  const made = await ts.http.post(`${API}/firmware/rollouts`, { image_id: uploaded.body.id, groups: [{ devices: 1 }, { percent: 100 }], max_concurrent: 1 }, root.token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.id as string;
  await waitFor('the canary offered its update', async () => devices.reduce((n, d) => n + d.offers, 0) === 1, 30_000);

  const { page, problems } = await superadminPage(t, ts);
  const rollout = page.locator(`[data-rollout="${id}"]`);
  await page.locator(`[data-rollout="${id}"][data-status=running]`).waitFor();
  // Dismissing the question changes nothing.
  page.once('dialog', (d) => void d.dismiss());
  await rollout.getByRole('button', { name: 'Cancel rollout' }).click();
  assert.equal((await ts.http.get(`${API}/firmware/rollouts/${id}`, root.token)).body.status, 'running');
  await rollout.getByRole('button', { name: 'Pause' }).waitFor();

  let asked = '';
  page.once('dialog', (d) => void ((asked = d.message()), d.accept()));
  await rollout.getByRole('button', { name: 'Cancel rollout' }).click();
  await page.locator(`[data-rollout="${id}"][data-status=cancelled]`).waitFor();
  await rollout.getByText('Cancelled', { exact: true }).waitFor();
  assert.match(asked, /Cancel this rollout\?/);
  assert.equal(await rollout.getByRole('button').count(), 0, 'a cancelled rollout has nothing to press');
  assert.equal((await ts.http.get(`${API}/firmware/rollouts/${id}`, root.token)).body.status, 'cancelled');

  // Past two of the runner's ticks, the second device has been offered nothing, and the page still says cancelled.
  await new Promise((r) => setTimeout(r, 2 * ROLLOUT_TICK_MS + 500));
  assert.deepEqual(devices.map((d) => d.offers).sort(), [0, 1]);
  assert.equal(await rollout.getAttribute('data-status'), 'cancelled');
  assert.deepEqual(problems, []);
});

test('with updates off the page says so; a mosque owner is refused the page', { timeout: 60_000 }, async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await signInSuperadmin(ts, ROOT.email, ROOT.password);
  const { page, problems } = await superadminPage(t, ts);
  await page.locator('[data-firmware-off]').getByText(/Firmware updates are off on this service.*FIRMWARE_PUBLIC_KEY/).waitFor();
  assert.equal(await page.locator('form').count(), 0, 'no form that could only fail');
  assert.deepEqual(problems, []);

  // The attacker's test: someone who is no superadmin opens the address and gets the refusal, not the page.
  const owner = await member(ts, 'imam@console.test');
  const other = await phonePage(await launchBrowser(t), t);
  await other.page.goto(`${ts.url}/admin/firmware`);
  await signIn(other.page, owner.email);
  await other.page.getByRole('alert').filter({ hasText: /\S/ }).first().waitFor();
  assert.equal(await other.page.locator('[data-new-rollout], [data-firmware-off]').count(), 0);
});
