import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';
import { createManualClock } from '../../../src/platform/clock.ts';
import { makeAdmin, member, signInSuperadmin } from '../../support/people.ts';
import { mosqueWithOwner } from '../../support/devices.ts';
import { startTestService, type TestService } from '../../support/service.ts';
import { WAIT_MS, assertAccessible, fromMenu, launchBrowser, shot, signedInAdminPage } from '../browser.ts';

// Wednesday 10 June 2026, 08:00 UTC (09:00 in London, summer time): every prayer of the day but Fajr is ahead.
const NOW = Date.parse('2026-06-10T08:00:00Z');

async function mosqueOf(ts: TestService, token: string, id: string) {
  const res = await ts.http.get(`/api/v1/mosques/${id}`, token);
  assert.equal(res.status, 200);
  return res.body as Record<string, any>;
}

/** What the page shows is what fits: no sideways scroll, and every control at least 44 px high. */
async function assertFits(page: Page, what: string) {
  for (const width of [320, 390, 768]) {
    await page.setViewportSize({ width, height: 800 });
    const { scroll, inner, out } = await page.evaluate(() => {
      const w = globalThis as any;
      // The elements that stick out, innermost first, name the culprit when this fails.
      const out = [...w.document.querySelectorAll('body *')].filter((el: any) => el.getBoundingClientRect().right > w.innerWidth + 0.5 || el.scrollWidth > el.clientWidth + 1)
        .slice(-5).map((el: any) => `${el.tagName.toLowerCase()}.${el.className} ${Math.round(el.getBoundingClientRect().right)}/${el.scrollWidth}>${el.clientWidth}`);
      return { scroll: w.document.documentElement.scrollWidth as number, inner: w.innerWidth as number, out };
    });
    assert.ok(scroll <= inner, `${what} at ${width} px scrolls sideways (${scroll} > ${inner}): ${out.join(', ')}`);
    const small = await page.evaluate(() => [...(globalThis as any).document.querySelectorAll('main button, main select, main input:not([type=checkbox]), main label.check, main nav.tabs a')]
      .filter((el: any) => el.offsetParent !== null)
      .map((el: any) => ({ el: `${el.tagName.toLowerCase()} ${el.getAttribute('name') ?? el.textContent?.slice(0, 30)}`, height: el.getBoundingClientRect().height }))
      .filter((x: { height: number }) => x.height < 44));
    assert.deepEqual(small, [], `${what} at ${width} px: touch targets under 44 px`);
  }
  await page.setViewportSize({ width: 390, height: 844 });
}

test("a manager sets a new mosque up from nothing to today's times: zone, location, method, a preview, then the schedule", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', clock: createManualClock(NOW) });
  const name = 'Masjid Al-Noor wa Al-Huda Community Centre and Islamic Education Trust London E1';
  assert.equal(name.length, 80);
  const { owner, mosque } = await mosqueWithOwner(ts, { name }, 'imam@settings.test');
  assert.equal((await mosqueOf(ts, owner.token, mosque.id)).timezone, 'UTC', 'a mosque made without a zone starts in UTC');

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/schedule`, clockAt: NOW });
  // The schedule has nothing to show yet, and tells a manager where to fix that.
  const notSetUp = page.locator('[data-not-set-up]');
  await notSetUp.waitFor();
  await notSetUp.getByRole('link', { name: 'Set up the prayer times' }).click();
  await page.getByRole('heading', { name: 'Place and prayer times' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'Settings' }).getAttribute('aria-current'), 'page');

  const place = page.locator('form', { has: page.getByLabel('Calculation method') });
  await place.getByLabel('Time zone').fill('Europe/London');
  await place.getByLabel('Latitude (degrees, north positive)').fill('51.5072');
  await place.getByLabel('Longitude (degrees, east positive)').fill('-0.1276');
  await place.getByLabel('Calculation method').selectOption('muslim_world_league');
  await place.getByRole('button', { name: "Preview today's times" }).click();
  const preview = place.locator('table[data-preview]');
  await preview.waitFor();
  await place.getByText('Wednesday, June 10 in Europe/London, with these settings (not saved yet):').waitFor();
  assert.deepEqual(await preview.locator('tbody th').allTextContents(), ['Fajr', 'Dhuhr', 'Asr', 'Maghrib', 'Isha']);
  const previewed = Object.fromEntries(await Promise.all((await preview.locator('tbody tr').all()).map(async (row) => [await row.getAttribute('data-prayer'), await row.locator('td').nth(1).textContent()])));
  // London's Dhuhr on 10 June is 13:01-13:02 summer time; in UTC it would read 12:0x.
  assert.match(previewed.dhuhr ?? '', /^13:0[0-3]$/);
  const before = await mosqueOf(ts, owner.token, mosque.id);
  assert.deepEqual([before.timezone, before.latitude, before.prayer_times], ['UTC', null, null], 'a preview saves nothing');
  await assertAccessible(page, 'settings page with a preview');
  await shot(page, 'settings-preview');

  await place.getByRole('button', { name: 'Save' }).click();
  await place.getByText('Saved: time zone, location, and calculation method.').waitFor();
  const saved = await mosqueOf(ts, owner.token, mosque.id);
  assert.deepEqual([saved.timezone, saved.latitude, saved.longitude, saved.prayer_times], ['Europe/London', 51.5072, -0.1276, { method: 'muslim_world_league', madhab: 'shafi' }]);

  // The schedule page now lists today's slots at the previewed times.
  await page.getByRole('link', { name: 'Azaan schedule' }).click();
  await page.getByRole('heading', { name: `Azaan schedule: ${name}` }).waitFor();
  for (const prayer of ['dhuhr', 'asr', 'maghrib', 'isha']) await page.locator(`li[data-slot="${prayer}-${previewed[prayer]}"]`).waitFor();
  assert.equal(await page.locator('[data-not-set-up]').count(), 0);

  // Back on the settings page with the 80-character name: it fits a phone and a tablet.
  await page.getByRole('link', { name: `Back to ${name}` }).click();
  await page.getByRole('link', { name: 'Settings' }).click();
  await page.getByRole('heading', { name: 'Azaan, iqamah and Jumu\'ah' }).waitFor();
  await assertFits(page, 'settings page');
  await assertAccessible(page, 'settings page');
  assert.deepEqual(problems, []);
});

test('azaan, iqamah and Jumu\'ah rules are saved as the API models them and shape the schedule', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', clock: createManualClock(NOW) });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Rules', timezone: 'Europe/London', latitude: 51.5072, longitude: -0.1276, prayer_times: { method: 'muslim_world_league', madhab: 'shafi' } }, 'rules@settings.test');
  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/settings`, clockAt: NOW });
  const dhuhr = page.locator('fieldset[data-rules=dhuhr]');
  await dhuhr.getByRole('combobox', { name: /^Azaan/ }).selectOption('fixed');
  await dhuhr.getByLabel('Azaan time').fill('13:30');
  await dhuhr.getByRole('combobox', { name: /^Iqamah/ }).selectOption('minutes');
  await dhuhr.getByLabel('Iqamah: minutes after the azaan').fill('15');
  assert.equal(await dhuhr.getByLabel('Azaan: minutes after the start (negative: before)').isVisible(), false, 'the unused input is hidden');
  await page.locator('fieldset[data-rules=isha]').getByRole('combobox', { name: /^Azaan/ }).selectOption('minutes');
  await page.locator('fieldset[data-rules=isha]').getByLabel('Azaan: minutes after the start (negative: before)').fill('10');
  await page.getByLabel("Jumu'ah time 1").fill('13:15');
  const rules = page.locator('form', { has: dhuhr });
  await rules.getByRole('button', { name: 'Save' }).click();
  await rules.getByText("Saved: azaan times, iqamah times, and Jumu'ah times.").waitFor();
  const saved = await mosqueOf(ts, owner.token, mosque.id);
  assert.deepEqual([saved.azaan, saved.iqamah, saved.jumuah, saved.auto_start], [{ dhuhr: { fixed: '13:30' }, isha: { offset_minutes: 10 } }, { dhuhr: { after_minutes: 15 } }, ['13:15'], false]);
  const slots = (await ts.http.get(`/api/v1/mosques/${mosque.id}/schedule?date=2026-06-10`, owner.token)).body as Array<{ prayer: string; azaan_local: string }>;
  assert.equal(slots.find((s) => s.prayer === 'dhuhr')?.azaan_local, '13:30');

  // Saving again with nothing changed sends nothing and says so.
  await rules.getByRole('button', { name: 'Save' }).click();
  await rules.getByText('Nothing to save: nothing changed.').waitFor();
  assert.deepEqual(problems, []);
});

test('a timetable file with a bad line shows that line\'s mistake; a good one is saved, then the month is deleted', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', clock: createManualClock(NOW) });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Timetable', timezone: 'Europe/London' }, 'tt@settings.test');
  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/settings`, clockAt: NOW });
  page.on('dialog', (d) => void d.accept());
  const section = page.getByRole('region', { name: 'Uploaded timetable' });
  await section.getByLabel('Month').selectOption('6');
  // Line 1 is the header, line 3 is blank, line 4 has "1300" for Dhuhr.
  const bad = 'Day,Fajr,Shuruk,Duhr,Asr,Maghrib,Isha\n1,02:50,03:43,12:02,16:25,20:18,21:30\n\n2,02:49,03:43,1300,16:25,20:19,21:31\n';
  await section.getByLabel('Timetable file (CSV)').setInputFiles({ name: 'june.csv', mimeType: 'text/csv', buffer: Buffer.from(bad) });
  await section.getByRole('button', { name: 'Upload for this month' }).click();
  await section.getByText('Not saved: the file for June has mistakes. Fix these lines and upload it again.').waitFor();
  assert.deepEqual(await section.locator('[data-problems] li').allTextContents(), ['Line 4, Dhuhr: expected "HH:MM"']);
  await shot(page, 'settings-timetable-refused');
  let slots = (await ts.http.get(`/api/v1/mosques/${mosque.id}/schedule?date=2026-06-02`, owner.token)).body as Array<{ source: string }>;
  assert.deepEqual(slots, [], 'nothing was stored');

  const good = bad.replace('1300', '12:02');
  await section.getByLabel('Timetable file (CSV)').setInputFiles({ name: 'june.csv', mimeType: 'text/csv', buffer: Buffer.from(good) });
  await section.getByRole('button', { name: 'Upload for this month' }).click();
  await section.getByText('Saved: the timetable for June (2 days). Those days use it now.').waitFor();
  assert.equal(await section.locator('[data-problems]').count(), 0, 'the old mistakes are gone');
  slots = (await ts.http.get(`/api/v1/mosques/${mosque.id}/schedule?date=2026-06-02`, owner.token)).body;
  assert.deepEqual([...new Set(slots.map((s) => s.source))], ['timetable']);

  await section.getByRole('button', { name: "Delete this month's timetable" }).click();
  await section.getByText('Deleted: June uses the computed times again.').waitFor();
  assert.deepEqual((await ts.http.get(`/api/v1/mosques/${mosque.id}/schedule?date=2026-06-02`, owner.token)).body, []);
  await section.getByRole('button', { name: "Delete this month's timetable" }).click();
  await section.getByText('No timetable is uploaded for June.').waitFor();
  assert.deepEqual(problems, []);
});

test('an admin who may not manage sees no Settings tab and no settings forms, and is told why', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Helpers' }, 'owner@settings.test');
  const helper = await member(ts, 'helper@settings.test');
  await makeAdmin(ts, root.token, mosque.id, helper, { can_trigger: true });
  const { page, problems } = await signedInAdminPage(t, ts, helper, { path: `/mosques/${mosque.id}` });
  await page.getByRole('link', { name: 'Azaan schedule' }).waitFor();
  assert.equal(await page.getByRole('navigation', { name: 'Mosque pages' }).getByRole('link', { name: 'Settings' }).count(), 0);
  await page.goto(`${ts.url}/mosques/${mosque.id}/settings`); // a typed or shared link (the console session keeps it signed in)
  await page.getByText("You cannot change this mosque's settings: only its managers (admins who may manage the mosque) and superadmins can.").waitFor();
  assert.equal(await page.locator('main form').count(), 0);
  assert.equal(await page.getByLabel('Mosque name').count(), 0);
  await assertAccessible(page, 'settings page, not a manager');
  assert.deepEqual(problems, []);
});

test("a stream address the API refuses shows its reason and changes nothing; an https one is saved", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Stream', stream_url: 'https://radio.example.org/live' }, 'stream@settings.test');
  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/settings` });
  const stream = page.locator('form', { has: page.getByLabel('The mosque\'s live audio address (empty: no stream)') });
  const input = stream.getByLabel('The mosque\'s live audio address (empty: no stream)');
  assert.equal(await input.inputValue(), 'https://radio.example.org/live');
  await input.fill('http://radio.example.org/live');
  await stream.getByRole('button', { name: 'Save' }).click();
  await stream.getByRole('alert').filter({ hasText: 'Not saved. stream address: must be an https URL' }).waitFor();
  assert.equal((await mosqueOf(ts, owner.token, mosque.id)).stream_url, 'https://radio.example.org/live', 'the refused address changed nothing');
  assert.equal(await stream.locator('[data-saved]').textContent(), '');

  await input.fill('https://radio.example.org/azaan');
  await stream.getByRole('button', { name: 'Save' }).click();
  await stream.getByText('Saved: stream address.').waitFor();
  assert.equal(await stream.locator('[role=alert]').textContent(), '', 'the old refusal is gone');
  assert.equal((await mosqueOf(ts, owner.token, mosque.id)).stream_url, 'https://radio.example.org/azaan');
  assert.deepEqual(problems, []);
});

test('name, automatic approval and a new join code (asked first) are saved from the page', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Old Name' }, 'general@settings.test');
  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/settings` });
  const general = page.locator('form', { has: page.getByLabel('Mosque name') });
  await general.getByLabel('Mosque name').fill('Masjid New Name');
  await general.getByLabel('Approve members automatically').check();
  await general.getByRole('button', { name: 'Save' }).click();
  await general.getByText('Saved: name and automatic approval.').waitFor();
  const saved = await mosqueOf(ts, owner.token, mosque.id);
  assert.deepEqual([saved.name, saved.auto_approve_members], ['Masjid New Name', true]);

  const code = page.locator('[data-join-code]');
  assert.equal(await code.textContent(), mosque.join_code);
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); void d.dismiss(); });
  await page.getByRole('button', { name: 'New join code' }).click();
  await page.waitForFunction(() => !(globalThis as any).document.querySelector('button.danger[disabled]'));
  assert.match(asked, /old code .* stop working/);
  assert.equal((await mosqueOf(ts, owner.token, mosque.id)).join_code, mosque.join_code, 'dismissed: the code stays');
  page.once('dialog', (d) => void d.accept());
  await page.getByRole('button', { name: 'New join code' }).click();
  await page.getByText('A new join code is ready. Print a fresh notice.').waitFor();
  const fresh = (await mosqueOf(ts, owner.token, mosque.id)).join_code;
  assert.notEqual(fresh, mosque.join_code);
  assert.equal(await code.textContent(), fresh);
  assert.deepEqual(problems, []);
});

async function superadminPage(t: TestContext, ts: TestService, timezoneId: string) {
  const root = await signInSuperadmin(ts); // makes root@example.com
  const browser = await launchBrowser(t);
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, locale: 'en-US', timezoneId });
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  await page.goto(`${ts.url}/superadmin`);
  await page.getByRole('textbox', { name: 'Email' }).fill('root@example.com');
  await page.locator('input[name=password]').fill('root password 123');
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByLabel('One-time code', { exact: true }).waitFor();
  await ts.service.notifier.idle();
  const otp = ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)?.code;
  await page.getByLabel('One-time code', { exact: true }).fill(otp!);
  await page.getByRole('button', { name: 'Verify and sign in' }).click();
  await (await fromMenu(page, 'link', 'All mosques')).click();
  await page.getByRole('heading', { name: 'All mosques' }).waitFor();
  return { page, root };
}

test("the new-mosque form's time zone starts at the browser's zone, and the mosque is made in it", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { page, root } = await superadminPage(t, ts, 'Asia/Karachi');
  const zone = page.getByLabel('Time zone');
  assert.equal(await zone.inputValue(), 'Asia/Karachi');
  assert.ok(await page.locator(`datalist#${await zone.getAttribute('list')} option[value="Europe/London"]`).count() === 1, 'the list offers the IANA zones');
  await page.getByLabel('Name', { exact: true }).fill('Masjid Karachi');
  await page.getByRole('button', { name: 'Create mosque' }).click();
  await page.getByRole('link', { name: 'Masjid Karachi' }).waitFor();
  const mosques = (await ts.http.get('/api/v1/mosques', root.token)).body as Array<{ name: string; timezone: string }>;
  assert.equal(mosques.find((m) => m.name === 'Masjid Karachi')?.timezone, 'Asia/Karachi');
});

test("the device's location fills the fields when shared, and a refusal is said plainly", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Located' }, 'geo@settings.test');
  const { page, context, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/settings` });
  const locate = page.getByRole('button', { name: "Use this device's location" });
  await context.clearPermissions(); // the browser refuses, as after a person says no
  await locate.click();
  await page.getByText('This device did not share its location: permission was refused. Type the latitude and longitude instead.').waitFor();
  assert.equal(await page.getByLabel('Latitude (degrees, north positive)').inputValue(), '');

  await context.grantPermissions(['geolocation'], { origin: ts.url });
  await context.setGeolocation({ latitude: 24.46723, longitude: 39.61118, accuracy: 25 });
  await locate.click();
  await page.getByText('Location filled in (accurate to about 25 m). Check it, then save.').waitFor();
  assert.equal(await page.getByLabel('Latitude (degrees, north positive)').inputValue(), '24.4672');
  assert.equal(await page.getByLabel('Longitude (degrees, east positive)').inputValue(), '39.6112');
  assert.equal((await mosqueOf(ts, owner.token, mosque.id)).latitude, null, 'filled in, not saved until Save');
  assert.deepEqual(problems, []);
});
