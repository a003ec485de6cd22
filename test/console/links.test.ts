import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';
import { API, createMosque, makeAdmin, member, signInSuperadmin } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { createSuperadmin } from '../support/superadmin.ts';
import { launchBrowser, phonePage, signIn, superadminSignsIn } from './browser.ts';

/** Links from messages, join links, where a sign-in lands, refusals, and signed-out pages (docs/console.md, "Links and refusals"). */

const ROOT = { email: 'root@links.test', password: 'root password 123' };

/** Every failed request (a status of 400 or more, or none) and every console error the page logs. */
function watchFailures(page: Page): string[] {
  const failures: string[] = [];
  page.on('console', (m) => { if (m.type() === 'error') failures.push(`console: ${m.text()}`); });
  page.on('requestfailed', (r) => failures.push(`failed: ${r.method()} ${r.url()} ${r.failure()?.errorText ?? ''}`));
  page.on('response', (r) => { if (r.status() >= 400) failures.push(`${r.status()}: ${r.request().method()} ${r.url()}`); });
  return failures;
}


test('an invitation is followed from its message to an approved membership', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'imam@links.test');
  const mosque = await createMosque(ts, root.token, owner, { name: 'Masjid An-Nur' });
  assert.equal((await ts.http.post(`${API}/invites`, { mosque_id: mosque.id, email: 'fatima@links.test', auto_approve: true }, owner.token)).status, 201);
  await ts.service.notifier.idle();
  const invitation = ts.messages.find((m) => m.purpose === 'invite' && m.to === 'fatima@links.test')!;
  assert.ok(invitation.link.startsWith(ts.url), invitation.link);
  assert.ok(invitation.text.includes(invitation.link));

  const { page, problems } = await phonePage(await launchBrowser(t), t);
  await page.goto(invitation.link);
  // Signed out, the link asks for the sign-in; the invitee has no password, so a code by email.
  const codeForm = page.locator('form', { has: page.getByRole('heading', { name: 'With a code by email' }) });
  await codeForm.getByLabel('Email').fill('fatima@links.test');
  await codeForm.getByRole('button', { name: 'Send me a code' }).click();
  await page.getByLabel('6-digit code').waitFor();
  await ts.service.notifier.idle();
  const code = ts.messages.filter((m) => m.purpose === 'login_code' && m.to === 'fatima@links.test').at(-1)!;
  assert.equal(code.link, `${ts.url}/signin`);
  await page.getByLabel('6-digit code').fill(code.code!);
  await page.getByRole('button', { name: 'Sign in' }).last().click();
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  const row = page.locator('li', { has: page.getByText('Masjid An-Nur', { exact: true }) });
  await row.getByText('You are a member.').waitFor();
  assert.deepEqual(problems, []);
});

test('a join link names its mosque signed out and signed in, and an unknown one says so', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null, { name: 'Masjid Al-Huda' });
  await member(ts, 'yusuf@links.test');
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  const failures = watchFailures(page);
  await page.goto(`${ts.url}/join/${mosque.join_code}`, { waitUntil: 'networkidle' });
  await page.getByRole('heading', { name: 'Join Masjid Al-Huda' }).waitFor();
  assert.deepEqual(failures, [], 'a signed-out join link makes no failing request');
  await page.getByRole('main').getByRole('link', { name: 'Sign in' }).click();
  await signIn(page, 'yusuf@links.test');
  // Back on the link, signed in: it names the mosque, not the code.
  await page.getByText('Join Masjid Al-Huda on Minaret?').waitFor();
  assert.equal(await page.getByText(mosque.join_code).count(), 0);
  await page.getByRole('button', { name: 'Join' }).click();
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();

  const other = await phonePage(browser, t);
  await other.page.goto(`${ts.url}/join/NOTACODE`);
  await other.page.getByText('This join link is not valid').waitFor();
  assert.deepEqual([...problems, ...other.problems], []);
});

test('each person lands where their work is: superadmin on All mosques, an admin on their mosque, a member on Home', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await createSuperadmin(ts, ROOT.email, ROOT.password);
  const root = await signInSuperadmin(ts, 'other-root@links.test');
  const imam = await member(ts, 'imam@links.test');
  await member(ts, 'bilal@links.test');
  const mosque = await createMosque(ts, root.token, imam, { name: 'Masjid Al-Falah' });
  const second = await createMosque(ts, root.token, null, { name: 'Masjid Second' });
  const browser = await launchBrowser(t);

  const su = await phonePage(browser, t);
  await superadminSignsIn(su.page, ts, ROOT.email, ROOT.password);
  await su.page.getByRole('heading', { name: 'All mosques' }).waitFor();
  assert.equal(new URL(su.page.url()).pathname, '/admin');

  const admin = await phonePage(browser, t);
  await admin.page.goto(`${ts.url}/signin`);
  await signIn(admin.page, imam.email);
  await admin.page.waitForURL(`${ts.url}/mosques/${mosque.id}`);
  await admin.page.getByRole('heading', { name: 'Masjid Al-Falah' }).waitFor();

  const plain = await phonePage(browser, t);
  await plain.page.goto(`${ts.url}/signin`);
  await signIn(plain.page, 'bilal@links.test');
  await plain.page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  assert.equal(new URL(plain.page.url()).pathname, '/');

  // The admin of two mosques chooses on Home, which lists both.
  await makeAdmin(ts, root.token, second.id, imam);
  const both = await phonePage(browser, t);
  await both.page.goto(`${ts.url}/signin`);
  await signIn(both.page, imam.email);
  await both.page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  await both.page.getByRole('link', { name: 'Masjid Second' }).waitFor();
  await both.page.getByRole('link', { name: 'Masjid Al-Falah' }).waitFor();
  assert.deepEqual([...su.problems, ...admin.problems, ...plain.problems, ...both.problems], []);
});

test('a refusal names the field and the reason the API gave', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await createSuperadmin(ts, ROOT.email, ROOT.password);
  const { page, problems } = await phonePage(await launchBrowser(t), t);
  await superadminSignsIn(page, ts, ROOT.email, ROOT.password);
  await page.getByRole('heading', { name: 'All mosques' }).waitFor();
  const create = page.locator('form', { has: page.getByRole('heading', { name: 'New mosque' }) });
  await create.getByLabel('Name', { exact: true }).fill('Masjid Al-Nur');
  await create.getByLabel(/Stream address/).fill('http://radio.example.org/live');
  await create.getByRole('button', { name: 'Create mosque' }).click();
  const alert = create.getByRole('alert');
  await alert.getByText(/stream address: /).waitFor();
  const said = (await alert.textContent()) ?? '';
  assert.match(said, /^Please check: stream address: .*https/, said);
  assert.doesNotMatch(said, /something is missing/);
  assert.deepEqual(problems, []);
});

test('signed-out pages make no failing request, log no error and reach network idle', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const setupUrl = ts.logs.map((l) => JSON.parse(l) as { setup_url?: string }).find((l) => l.setup_url)?.setup_url;
  assert.ok(setupUrl, 'a fresh service logs its setup link');
  const browser = await launchBrowser(t);
  for (const url of [`${ts.url}/`, `${ts.url}/signin`, `${ts.url}/signup`, `${ts.url}/pair`, setupUrl]) {
    const { page, problems } = await phonePage(browser, t);
    const failures = watchFailures(page);
    await page.goto(url, { waitUntil: 'networkidle' });
    await page.getByRole('heading', { level: 1 }).first().waitFor();
    assert.deepEqual([...failures, ...problems], [], `${url}: no failure`);
  }
  // Once the service is set up, its setup link says so without a failing request.
  await signInSuperadmin(ts);
  for (const url of [setupUrl]) {
    const { page, problems } = await phonePage(browser, t);
    const failures = watchFailures(page);
    await page.goto(url, { waitUntil: 'networkidle' });
    await page.getByRole('heading', { level: 1 }).first().waitFor();
    assert.deepEqual([...failures, ...problems], [], `${url} once set up: no failure`);
  }
});
