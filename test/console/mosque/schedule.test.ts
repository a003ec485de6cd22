import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createManualClock } from '../../../src/platform/clock.ts';
import { createMosque, joinMosque, member, signInSuperadmin } from '../../support/people.ts';
import { mosqueWithOwner, registerTransmitter } from '../../support/devices.ts';
import { startTestService } from '../../support/service.ts';
import { WAIT_MS, assertAccessible, launchBrowser, phonePage, shot, signIn, signedInAdminPage } from '../browser.ts';
import { audioFiles } from '../../audio/audio-files.ts';

// Wednesday 10 June 2026 in London (BST): Dhuhr's azaan is fixed at 13:00 local = 12:00 UTC, Asr computed
// (about 17:20 local). The ready check of Dhuhr runs at 11:50 UTC (lead 10 minutes).
const T = (hhmm: string) => Date.parse(`2026-06-10T${hhmm}:00Z`);
const SCHEDULE = {
  timezone: 'Europe/London', latitude: 51.5072, longitude: -0.1276,
  prayer_times: { method: 'muslim_world_league', madhab: 'shafi' }, azaan: { dhuhr: { fixed: '13:00' } }, iqamah: { dhuhr: { after_minutes: 15 } },
};

test("a member sees today's prayer times of each mosque in its own zone, with a countdown that ticks and moves on to the next azaan", async (t) => {
  const clock = createManualClock(T('11:40'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const root = await signInSuperadmin(ts);
  const withTimes = await createMosque(ts, root.token, null, { name: 'East London Mosque', auto_approve_members: true, ...SCHEDULE });
  const withoutTimes = await createMosque(ts, root.token, null, { name: 'Masjid Without Times', auto_approve_members: true });
  const pending = await createMosque(ts, root.token, null, { name: 'Masjid Pending', ...SCHEDULE });
  const amina = await member(ts, 'amina@times.test');
  for (const m of [withTimes, withoutTimes, pending]) await joinMosque(ts, amina, m.id);

  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  // The browser's clock agrees with the service's (a phone's clock is set by the network); it keeps running.
  await page.clock.install({ time: T('11:40') });
  await page.goto(`${ts.url}/`);
  await signIn(page, 'amina@times.test');
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();

  const times = page.getByRole('region', { name: "Today's prayer times" });
  const card = times.locator(`[data-prayer-card="${withTimes.id}"]`);
  await card.getByText('Today, Wednesday, June 10').waitFor();
  const dhuhr = card.locator('tr[data-prayer=dhuhr]');
  assert.deepEqual(await dhuhr.locator('th, td').allTextContents(), ['Dhuhr', '13:00', '13:15'], 'London summer time, not UTC');
  assert.equal(await dhuhr.getAttribute('aria-current'), 'true', 'the next azaan is marked');
  const countdown = card.getByRole('timer');
  const first = await countdown.textContent();
  assert.match(first ?? '', /^Next azaan: Dhuhr at 13:00, in 00:(20:00|19:[0-5]\d)$/);
  await countdown.filter({ hasNotText: first! }).waitFor({ timeout: WAIT_MS });
  await times.locator(`[data-prayer-card="${withoutTimes.id}"]`).getByText('This mosque has not set up its prayer times yet.').waitFor();
  assert.equal(await times.locator(`[data-prayer-card="${pending.id}"]`).count(), 0, 'a membership still pending shows no times');
  await shot(page, 'member-prayer-times');
  await assertAccessible(page, 'member home with prayer times');

  // Past Dhuhr's azaan the countdown runs to Asr, and Asr's row is the marked one.
  await page.clock.fastForward('21:00');
  await countdown.filter({ hasText: /^Next azaan: Asr at \d\d:\d\d, in \d\d:\d\d:\d\d$/ }).waitFor();
  assert.equal(await card.locator('tr[data-prayer=asr]').getAttribute('aria-current'), 'true');
  assert.equal(await dhuhr.getAttribute('aria-current'), null);

  // Arabic: the same card, right to left, in Arabic.
  await page.getByLabel('Language').selectOption('ar');
  const arabic = page.getByRole('region', { name: 'مواقيت الصلاة اليوم' }).locator(`[data-prayer-card="${withTimes.id}"]`);
  await arabic.getByRole('timer').filter({ hasText: /^الأذان التالي: العصر/ }).waitFor();
  assert.equal(await page.locator('html').getAttribute('dir'), 'rtl');
  assert.deepEqual(await arabic.locator('tr[data-prayer=dhuhr] th, tr[data-prayer=dhuhr] td').allTextContents(), ['الظهر', '13:00', '13:15']);
  await shot(page, 'member-prayer-times-arabic');
  assert.deepEqual(problems, []);
});

test('a mosque admin opens the schedule from the mosque page, sees each slot with its status, and the ready check arrives live', async (t) => {
  const clock = createManualClock(T('11:40'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'East London Mosque', ...SCHEDULE }, 'imam@times.test');
  await registerTransmitter(ts, owner.token, mosque.id, 'Minbar transmitter'); // registered, never connected

  const { page, problems } = await signedInAdminPage(t, ts, owner, { clockAt: T('11:40') });
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  await page.getByRole('link', { name: 'East London Mosque' }).click();
  await page.getByRole('link', { name: 'Azaan schedule' }).click();
  await page.getByRole('heading', { name: 'Azaan schedule: East London Mosque' }).waitFor();
  await page.getByText('Updating live').waitFor({ timeout: WAIT_MS });
  assert.equal(await page.getByLabel('Day', { exact: true }).inputValue(), '2026-06-10');

  const dhuhr = page.locator('li[data-slot="dhuhr-13:00"]');
  await dhuhr.locator('.badge', { hasText: 'Upcoming' }).waitFor();
  await dhuhr.getByText('Iqamah 13:15 · Fixed time · An admin starts it (no auto start)').waitFor();
  // Fajr came before the schedule was set up: shown, honestly, as never checked (and no alert).
  const fajr = page.locator('li[data-slot^="fajr-"]');
  await fajr.getByText('Not checked: the service was not running then, or the schedule was set up later.').waitFor();
  assert.equal(await fajr.locator('[data-alert]').count(), 0);

  // The ready check finds the transmitter offline: the slot changes on the page without a reload.
  clock.set(T('11:50'));
  await ts.service.schedule.runDue();
  await dhuhr.locator('.badge', { hasText: 'Not ready' }).waitFor({ timeout: WAIT_MS });
  await dhuhr.locator('[data-alert=azaan_not_ready]').getByText('Alert: azaan not ready, the transmitter was offline.').waitFor();
  await dhuhr.getByText('At the check: 0 of 1 transmitters connected, 0 players ready.').waitFor();
  await shot(page, 'admin-schedule');
  await assertAccessible(page, 'schedule page');

  clock.set(T('12:05'));
  await ts.service.schedule.runDue();
  await dhuhr.locator('[data-alert=azaan_missed]').getByText('Alert: azaan missed, the transmitter was offline.').waitFor({ timeout: WAIT_MS });

  // Another day from the date picker.
  await page.getByLabel('Day', { exact: true }).fill('2026-06-12');
  await page.getByRole('heading', { name: 'Friday, June 12' }).waitFor();
  await page.locator('li[data-slot^="maghrib-"] .badge', { hasText: 'Upcoming' }).waitFor();
  assert.deepEqual(problems, []);
});

test('a mosque without prayer times says so on its schedule page', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Without Times' }, 'imam@notimes.test');
  const { page, problems } = await signedInAdminPage(t, ts, owner);
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  await page.goto(`${ts.url}/mosques/${mosque.id}/schedule`); // a typed address: the console session keeps it signed in
  await page.getByRole('heading', { name: 'Azaan schedule: Masjid Without Times' }).waitFor();
  await page.getByText("No prayer times for this day: a manager must set the mosque's location and calculation method, or upload its timetable.").waitFor();
  assert.deepEqual(problems, []);
});

test('a manager uploads a recorded azaan on the schedule page and sees its length; a file over the limit or not audio is refused with a message', async (t) => {
  // A low limit (64 KiB) so a file over it is small to make; a 3-second MP3 (about 24 KB) fits.
  const ts = await startTestService(t, { logLevel: 'warn', env: { RECORDING_MAX_BYTES: '64K' } });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'East London Mosque', ...SCHEDULE }, 'imam@recording.test');
  const audio = audioFiles(t);
  const azaan = audio.write('azaan.mp3', audio.make('mp3', 3));
  const tooLong = audio.write('long-azaan.mp3', audio.make('mp3', 14));
  const notAudio = audio.write('notes.mp3', 'Not an azaan: a text file named .mp3\n'.repeat(40));

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/schedule` });
  const uploads: string[] = [];
  page.on('request', (r) => { if (r.method() === 'PUT' && r.url().endsWith('/recording')) uploads.push(r.url()); });
  const section = page.getByRole('region', { name: 'Recorded azaan' });
  await section.getByText('No recorded azaan is uploaded.').waitFor();
  await section.getByText('Played to your members\' players when the live azaan is missed. MP3, Ogg or Opus, at most 64 kB and 10 minutes.').waitFor();
  const file = section.getByLabel('Audio file (MP3, Ogg or Opus)');
  assert.equal(await file.getAttribute('accept'), '.mp3,.ogg,.opus,audio/mpeg,audio/ogg,audio/opus');

  // Over the limit: refused in the page, never sent.
  await file.setInputFiles(tooLong);
  await section.getByRole('button', { name: 'Upload recording' }).click();
  await section.getByRole('alert').filter({ hasText: /^This file is [\d.]+ kB: the largest recording accepted is 64 kB\. Nothing was uploaded\.$/ }).waitFor();
  assert.deepEqual(uploads, [], 'a file over the limit is not sent');

  // Not audio: the service reads it and says why.
  await file.setInputFiles(notAudio);
  await section.getByRole('button', { name: 'Upload recording' }).click();
  await section.getByRole('alert').filter({ hasText: 'The file was refused: The file is not audio Minaret can read: upload an MP3, Ogg Vorbis or Ogg Opus file.' }).waitFor();
  assert.equal(uploads.length, 1);

  // A real MP3: stored, and its length, size and format shown.
  await file.setInputFiles(azaan);
  await section.getByRole('button', { name: 'Upload recording' }).click();
  await section.getByRole('status').filter({ hasText: 'Recording saved.' }).waitFor();
  const facts = section.locator('[data-recording]');
  assert.match(await facts.textContent() ?? '', /^Length 0:03 · [\d.]+ kB · MP3 · uploaded .+$/);
  assert.equal(await section.getByRole('alert').filter({ hasText: /./ }).count(), 0, 'the earlier refusal is cleared');
  const stored = await ts.http.get(`/api/v1/mosques/${mosque.id}/recording`, owner.token);
  assert.equal(stored.status, 200);
  assert.ok(Math.abs(stored.body.duration_s - 3) <= 0.2, `${stored.body.duration_s} s`);
  await shot(page, 'admin-schedule-recording');
  await assertAccessible(page, 'schedule page with a recorded azaan');

  // Deleted (after the confirmation), the section says so again.
  page.once('dialog', (d) => void d.accept());
  await section.getByRole('button', { name: 'Delete recording' }).click();
  await section.getByText('No recorded azaan is uploaded.').waitFor();
  assert.equal((await ts.http.get(`/api/v1/mosques/${mosque.id}/recording`, owner.token)).status, 404);
  assert.deepEqual(problems, []);
});
