import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SimDevice } from '../../../simulator/device.ts';
import { joinMosque, member, mosqueMemberships } from '../../support/people.ts';
import { mosqueWithOwner } from '../../support/devices.ts';
import { startTestService } from '../../support/service.ts';
import { WAIT_MS, assertAccessible, launchBrowser, phonePage, shot, signIn, signedInAdminPage } from '../browser.ts';

test('a mosque admin approves a member, watches a transmitter go offline live, and starts and stops a broadcast', async (t) => {
  // The stream is a local Icecast over plain http, which the operator lists (docs/api.md, "Flags decide").
  const ts = await startTestService(t, { logLevel: 'warn', env: { STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Al-Huda', stream_url: 'http://127.0.0.1:8000/live' }, 'imam@admin.test');
  const joiner = await member(ts, 'yusuf@admin.test');
  await joinMosque(ts, joiner, mosque.id);
  const reg = await ts.http.post(`/api/v1/mosques/${mosque.id}/devices`, { kind: 'transmitter', name: 'Minbar transmitter' }, owner.token);
  const sim = new SimDevice({ kind: 'transmitter', id: reg.body.device.id, password: reg.body.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 15_000 });
  await sim.start();
  t.after(() => sim.stop().catch(() => {}));

  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await page.goto(`${ts.url}/`);
  const passwordForm = page.locator('form', { has: page.getByRole('heading', { name: 'With your password' }) });
  await passwordForm.getByLabel('Email').fill('imam@admin.test');
  await passwordForm.getByLabel('Password').fill('wrong password');
  await passwordForm.getByRole('button', { name: 'Sign in' }).click();
  await passwordForm.getByRole('alert').filter({ hasText: 'The email or password is not right.' }).waitFor();
  await signIn(page, 'imam@admin.test');
  await page.getByRole('heading', { name: 'Mosques you run' }).waitFor();
  await page.getByRole('link', { name: 'Masjid Al-Huda' }).click();
  await page.getByRole('heading', { name: 'Masjid Al-Huda' }).waitFor();
  await page.getByText('Updating live').waitFor({ timeout: WAIT_MS });

  // Pending member -> approved.
  await page.getByRole('button', { name: 'Approve: yusuf@admin.test' }).click();
  await page.getByText('Nobody is waiting.').waitFor();
  const approved = (await mosqueMemberships(ts, owner.token, mosque.id)).find((m) => m.user_email === 'yusuf@admin.test');
  assert.equal(approved?.status, 'approved');

  await shot(page, 'admin-mosque');
  await assertAccessible(page, 'mosque admin page');

  // Start a broadcast and see its delivery report; stop it.
  await page.getByLabel('What').selectOption('azaan');
  await page.getByLabel('Prayer').selectOption('maghrib');
  await page.getByRole('button', { name: 'Start broadcast' }).click();
  const live = page.locator('li[data-broadcast]').filter({ has: page.locator('.badge', { hasText: 'Live' }) });
  await live.waitFor();
  await live.getByRole('group').or(live.locator('dl')).first().waitFor();
  const list = await ts.http.get(`/api/v1/mosques/${mosque.id}/broadcasts`, owner.token);
  assert.equal(list.body[0].status, 'live');
  assert.equal(list.body[0].prayer, 'maghrib');
  await shot(page, 'admin-broadcast-live');
  await live.getByRole('button', { name: 'Stop broadcast' }).click();
  await page.locator(`li[data-broadcast="${list.body[0].id}"] .badge`, { hasText: 'Stopped' }).waitFor();
  assert.equal((await ts.http.get(`/api/v1/mosques/${mosque.id}/broadcasts/${list.body[0].id}`, owner.token)).body.status, 'stopped');

  // The devices tab: the transmitter's status arrives over the event stream, without a reload.
  await page.getByRole('link', { name: 'Devices' }).click();
  const device = page.locator(`li[data-device="${reg.body.device.id}"]`);
  await device.locator('.badge', { hasText: 'Online' }).waitFor({ timeout: WAIT_MS });
  await device.locator('[data-rssi]').filter({ hasText: /^(Good|Fair|Weak)$/ }).waitFor();
  await page.getByText('Updating live').waitFor({ timeout: WAIT_MS });

  // The transmitter goes away: the stream tells the page.
  await sim.stop();
  await device.locator('.badge', { hasText: 'Offline' }).waitFor({ timeout: WAIT_MS });

  // The device page: facts, why, a command to an offline device answers in plain words.
  await device.getByRole('link', { name: 'Minbar transmitter' }).click();
  await page.getByRole('heading', { name: 'Minbar transmitter' }).waitFor();
  await page.getByRole('button', { name: 'Ping' }).click();
  await page.getByText('The device is not connected.').waitFor();
  await page.getByRole('heading', { name: 'Timeline' }).waitFor();
  await shot(page, 'admin-device');
  await assertAccessible(page, 'device page');
  assert.deepEqual(problems, []);
});

test('a command to a connected device shows its answer on the device page', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Ar-Rahma' }, 'tech@admin.test');
  const reg = await ts.http.post(`/api/v1/mosques/${mosque.id}/devices`, { kind: 'transmitter', name: 'Roof' }, owner.token);
  const sim = new SimDevice({ kind: 'transmitter', id: reg.body.device.id, password: reg.body.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 15_000 });
  await sim.start();
  t.after(() => sim.stop().catch(() => {}));
  const { page, problems } = await signedInAdminPage(t, ts, owner);
  await page.getByRole('link', { name: 'Masjid Ar-Rahma' }).click();
  await page.getByRole('link', { name: 'Devices' }).click();
  await page.getByRole('link', { name: 'Roof' }).click();
  await page.getByRole('button', { name: 'Ping' }).click();
  await page.getByRole('status').filter({ hasText: /^Ping: done\. \(\d+ ms\)/ }).waitFor({ timeout: WAIT_MS });
  assert.deepEqual(problems, []);
});
