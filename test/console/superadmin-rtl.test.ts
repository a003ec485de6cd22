import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSuperadmin } from '../support/superadmin.ts';
import { startTestService } from '../support/service.ts';
import { assertAccessible, fromMenu, launchBrowser, phonePage, shot } from './browser.ts';

test('a superadmin signs in in two steps and the one-time code never leaves the page', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await createSuperadmin(ts, 'root@console.test', 'root password 123');
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  const bodies: string[] = [];
  page.on('request', (r) => bodies.push(`${r.url()} ${r.postData() ?? ''}`));

  await page.goto(`${ts.url}/superadmin`);
  await page.getByRole('textbox', { name: 'Email' }).fill('root@console.test');
  await page.getByRole('textbox', { name: 'Password' }).or(page.locator('input[name=password]')).first().fill('root password 123');
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByLabel('One-time code', { exact: true }).waitFor();
  await ts.service.notifier.idle();
  const otp = ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)?.code;
  assert.match(otp ?? '', /^\d{6}$/);
  await page.getByLabel('One-time code', { exact: true }).fill(otp!);
  await shot(page, 'superadmin-step2');
  await page.getByRole('button', { name: 'Verify and sign in' }).click();
  await (await fromMenu(page, 'link', 'All mosques')).click();
  await page.getByRole('heading', { name: 'All mosques' }).waitFor();

  // The superadmin creates a mosque from the page.
  await page.getByLabel('Name', { exact: true }).fill('Masjid Al-Falah');
  await page.getByRole('button', { name: 'Create mosque' }).click();
  await page.getByRole('link', { name: 'Masjid Al-Falah' }).waitFor();
  await shot(page, 'superadmin-mosques');
  await assertAccessible(page, 'superadmin page');

  const sent = bodies.join('\n');
  assert.ok(!sent.includes(otp!), 'the OTP itself was never sent: only its HMAC');
  assert.ok(!sent.includes('root password 123') && !sent.includes('root@console.test'), 'the password and email were sent only as hashes');
  assert.match(sent, /superadmin-2fa\/verify .*"hmac":"[0-9a-f]{64}"/);
  assert.deepEqual(problems, []);
});

test('an Arabic browser gets the console in Arabic, right to left, until the user picks English', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t, { locale: 'ar-EG' });
  await page.goto(`${ts.url}/`);
  await page.getByRole('heading', { name: 'تسجيل الدخول' }).waitFor();
  assert.equal(await page.evaluate(() => (globalThis as any).document.documentElement.dir), 'rtl');
  assert.equal(await page.evaluate(() => (globalThis as any).document.documentElement.lang), 'ar');
  // Right to left in layout, not only in the attribute: the submit button's text starts at the right.
  const heading = await page.getByRole('heading', { level: 1 }).boundingBox();
  const viewport = page.viewportSize()!;
  assert.ok(heading && heading.x + heading.width > viewport.width / 2, 'the heading sits on the right');
  await shot(page, 'signin-arabic');
  await assertAccessible(page, 'Arabic sign-in page');

  // A wrong password answers with the API's code, in Arabic.
  const form = page.locator('form').first();
  await form.getByLabel('البريد الإلكتروني').fill('nobody@console.test');
  await form.getByLabel('كلمة المرور').fill('not a password');
  await form.getByRole('button', { name: 'دخول' }).click();
  await form.getByRole('alert').filter({ hasText: 'البريد أو كلمة المرور غير صحيحين.' }).waitFor();

  // The user's pick wins over the browser's language.
  await page.getByLabel('اللغة').selectOption('en');
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  assert.equal(await page.evaluate(() => (globalThis as any).document.documentElement.dir), 'ltr');
  await assertAccessible(page, 'English sign-in page');
  assert.deepEqual(problems, []);
});
