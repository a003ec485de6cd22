import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';
import { encode } from 'uqr';
import { API, joinMosque, makeAdmin, member, mosqueActivity, mosqueAdmins, mosqueMemberships, setStatus, signInSuperadmin } from '../../support/people.ts';
import { mosqueWithOwner, registerTransmitter } from '../../support/devices.ts';
import { startTestService } from '../../support/service.ts';
import { createSuperadmin } from '../../support/superadmin.ts';
import { WAIT_MS, assertAccessible, fromMenu, launchBrowser, phonePage, shot, signIn, signedInAdminPage, superadminSignsIn } from '../browser.ts';

const QR_OPTIONS = { ecc: 'M', border: 0 } as const; // console/qr.js

/** The dark modules the page drew (one `M x y h1v1h-1z` per module) as uqr's boolean matrix. */
async function drawnMatrix(page: Page): Promise<boolean[][]> {
  const { size, d } = await page.locator('svg.qr').evaluate((svg) => ({ size: Number(svg.getAttribute('data-size')), d: svg.querySelector('path')!.getAttribute('d')! }));
  const grid = Array.from({ length: size }, () => Array<boolean>(size).fill(false));
  for (const [, x, y] of d.matchAll(/M(\d+) (\d+)h1v1h-1z/g)) grid[Number(y)]![Number(x)] = true;
  return grid;
}

test('a manager adds an admin by email, changes and removes them, invites by email and WhatsApp, rotates the join code and prints the notice', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid At-Taqwa' }, 'imam@people.test');
  const amina = await member(ts, 'amina@people.test');
  await joinMosque(ts, amina, mosque.id);
  const banned = await member(ts, 'banned@people.test');
  await setStatus(ts, owner.token, (await joinMosque(ts, banned, mosque.id)).id, 'banned');
  const someone = await member(ts, 'someone@people.test');
  await member(ts, 'confirmed@people.test');

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}/team` });
  await page.getByRole('heading', { name: 'Admins', exact: true }).waitFor();
  const ownerRow = page.locator('li[data-admin="imam@people.test"]');
  await ownerRow.locator('.badge', { hasText: 'Owner' }).waitFor();
  assert.equal(await ownerRow.getByRole('checkbox').count(), 0, 'only a superadmin may demote or remove the owner');

  // Add by email: one answer whether or not someone confirmed the address (docs/api.md, "Addresses: claims and
  // proof"); an address nobody has confirmed waits, a confirmed one is an admin just after the answer.
  const addForm = page.locator('form', { has: page.getByRole('heading', { name: 'Add an admin' }) });
  await addForm.getByLabel("Member's email").fill('later@people.test');
  await addForm.getByRole('button', { name: 'Add admin' }).click();
  await page.locator('#flash', { hasText: 'later@people.test is an admin now if they have confirmed that address' }).waitFor();
  await ts.service.notifier.idle(); // the work after the answer
  assert.deepEqual((await mosqueAdmins(ts, root.token, mosque.id)).map((a) => a.email), ['imam@people.test']);
  await addForm.getByLabel("Member's email").fill('amina@people.test');
  await addForm.getByLabel('May start broadcasts').check();
  await addForm.getByRole('button', { name: 'Add admin' }).click();
  const aminaRow = page.locator('li[data-admin="amina@people.test"]');
  await aminaRow.waitFor();
  let row = (await mosqueAdmins(ts, root.token, mosque.id)).find((a) => a.email === 'amina@people.test');
  assert.deepEqual([row?.user_id, row?.can_trigger, row?.can_manage, row?.is_owner], [amina.id, true, false, false]);
  assert.equal(await aminaRow.getByLabel('May start broadcasts').isChecked(), true, 'the page shows what the API holds');

  await aminaRow.getByLabel('May manage admins and devices').check();
  await page.locator('#flash', { hasText: 'Saved for amina@people.test.' }).waitFor();
  row = (await mosqueAdmins(ts, root.token, mosque.id)).find((a) => a.email === 'amina@people.test');
  assert.equal(row?.can_manage, true);
  await shot(page, 'admin-team');
  await assertAccessible(page, 'admins and invites page');

  page.once('dialog', (d) => void d.accept());
  await aminaRow.getByRole('button', { name: 'Remove admin: amina@people.test' }).click();
  await aminaRow.waitFor({ state: 'detached' });
  assert.deepEqual((await mosqueAdmins(ts, root.token, mosque.id)).map((a) => a.email), ['imam@people.test']);

  // Invites: the outcome is the membership the API made.
  const inviteForm = page.locator('form', { has: page.getByRole('button', { name: 'Send invitation' }) });
  const outcome = page.locator('[data-invite-outcome]');
  await inviteForm.getByLabel('Email address or WhatsApp number').fill('new@people.test');
  await inviteForm.getByLabel('Make them a member at once').check();
  await inviteForm.getByRole('button', { name: 'Send invitation' }).click();
  await outcome.filter({ hasText: 'Invitation sent to new@people.test. They become a member once they confirm that address' }).waitFor();
  await inviteForm.getByLabel('Send the invitation by').selectOption('whatsapp');
  await inviteForm.getByLabel('Email address or WhatsApp number').fill('+44 7700 900123');
  await inviteForm.getByRole('button', { name: 'Send invitation' }).click();
  await outcome.filter({ hasText: 'Invitation sent to +44 7700 900123. They become a member once they confirm that address' }).waitFor();
  // Nothing lands on an account until the address is confirmed; a confirmed one gets its membership at once.
  assert.equal((await mosqueMemberships(ts, owner.token, mosque.id)).find((m) => m.user_email === 'new@people.test'), undefined);
  await inviteForm.getByLabel('Send the invitation by').selectOption('email');
  await inviteForm.getByLabel('Email address or WhatsApp number').fill('confirmed@people.test');
  await inviteForm.getByLabel('Make them a member at once').check();
  await inviteForm.getByRole('button', { name: 'Send invitation' }).click();
  await outcome.filter({ hasText: 'Invitation sent to confirmed@people.test. They are a member.' }).waitFor();
  const memberships = await mosqueMemberships(ts, owner.token, mosque.id);
  assert.equal(memberships.find((m) => m.user_email === 'confirmed@people.test')?.status, 'approved');
  assert.equal(memberships.filter((m) => m.status === 'pending').length, 0, 'the WhatsApp invitee has confirmed nothing yet');
  await inviteForm.getByLabel('Send the invitation by').selectOption('email');
  await inviteForm.getByLabel('Email address or WhatsApp number').fill('banned@people.test');
  await inviteForm.getByRole('button', { name: 'Send invitation' }).click();
  await inviteForm.getByRole('alert').filter({ hasText: 'banned@people.test is banned from this mosque. Lift the ban before inviting them.' }).waitFor();

  // The join code: what the page shows is the API's; rotating stops the old code at once.
  const oldCode = mosque.join_code;
  assert.equal(await page.locator('[data-join-code]').innerText(), oldCode);
  assert.equal(await page.locator('[data-join-link]').innerText(), `${ts.url}/join/${oldCode}`);
  page.once('dialog', (d) => { assert.match(d.message(), /old code .* stop working/); void d.accept(); });
  await page.getByRole('button', { name: 'New join code' }).click();
  await page.locator('[data-join-code]').filter({ hasNotText: oldCode }).waitFor();
  const newCode = await page.locator('[data-join-code]').innerText();
  assert.equal(await page.evaluate(() => (globalThis as any).document.activeElement?.hasAttribute('data-join-code')), true, 'the focus lands on the new code');
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}`, owner.token)).body.join_code, newCode);
  assert.equal((await ts.http.post(`${API}/join`, { code: oldCode }, someone.token)).status, 404, 'the old code stopped working');
  assert.equal((await ts.http.post(`${API}/join`, { code: newCode }, someone.token)).status, 201);

  // The notice-board sheet: name, QR of the link, the link in text, one line of instructions.
  await page.getByRole('link', { name: 'Print a notice' }).click();
  await page.getByRole('heading', { name: 'Masjid At-Taqwa' }).waitFor();
  const link = `${ts.url}/join/${newCode}`;
  await page.getByRole('img', { name: `QR code for ${link}` }).waitFor();
  assert.deepEqual(await drawnMatrix(page), encode(link, QR_OPTIONS).data, 'the drawn modules are uqr\'s matrix of the link');
  assert.equal(await page.locator('.sheet-link').innerText(), link);
  await assertAccessible(page, 'print page');
  await page.emulateMedia({ media: 'print' });
  assert.equal(await page.locator('header.bar').isVisible(), false, 'the printed sheet has no header');
  assert.equal(await page.getByRole('button', { name: 'Print' }).isVisible(), false);
  await shot(page, 'admin-print-sheet');
  assert.deepEqual(problems, []);
});

test('an admin who may not manage sees no manager controls, the API refuses them, and a refusal shows in plain words', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: { PUBLIC_URL: 'https://minaret.example.org' } });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid As-Salam' }, 'owner@people.test');
  const helper = await member(ts, 'helper@people.test');
  await makeAdmin(ts, root.token, mosque.id, helper, { can_trigger: true });
  const deputy = await member(ts, 'deputy@people.test');
  await makeAdmin(ts, root.token, mosque.id, deputy, { can_manage: true });

  const { browser, page, problems } = await signedInAdminPage(t, ts, helper, { path: `/mosques/${mosque.id}/team` });
  await page.getByText('Only admins who may manage can add, change or remove admins.').waitFor();
  await page.locator('li[data-admin="deputy@people.test"]').getByText('May manage admins and devices').waitFor();
  assert.equal(await page.getByRole('button', { name: 'New join code' }).count(), 0);
  assert.equal(await page.getByRole('heading', { name: 'Add an admin' }).count(), 0);
  assert.equal(await page.getByRole('checkbox').count() - await page.locator('form', { has: page.getByRole('button', { name: 'Send invitation' }) }).getByRole('checkbox').count(), 0, 'no flag boxes');
  assert.equal(await page.locator('[data-join-link]').innerText(), `https://minaret.example.org/join/${mosque.join_code}`, 'the link names PUBLIC_URL, not the address the admin used');
  await assertAccessible(page, 'admins page of a non-manager');
  // ...and the API refuses what the page hides.
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/join-code`, {}, helper.token)).status, 403);
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/admins`, { user_id: owner.id }, helper.token)).status, 403);
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${deputy.id}`, helper.token)).status, 403);

  // A manager demoted while the page is open: the API's refusal reads as words, and the code stays.
  const { context } = await phonePage(browser, t);
  const deputyPage = await context.newPage();
  await deputyPage.goto(`${ts.url}/mosques/${mosque.id}/team`);
  await signIn(deputyPage, deputy.email);
  await deputyPage.getByRole('button', { name: 'New join code' }).waitFor();
  assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${deputy.id}`, { can_manage: false }, root.token)).status, 200);
  deputyPage.once('dialog', (d) => void d.accept());
  await deputyPage.getByRole('button', { name: 'New join code' }).click();
  await deputyPage.locator('#flash', { hasText: 'You are not allowed to do this.' }).waitFor({ timeout: WAIT_MS });
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}`, owner.token)).body.join_code, mosque.join_code);
  await deputyPage.getByRole('link', { name: 'Overview' }).click();
  await deputyPage.getByRole('link', { name: 'Admins and invites' }).click();
  await deputyPage.getByText('Only admins who may manage can add, change or remove admins.').waitFor();
  assert.equal(await deputyPage.getByRole('button', { name: 'New join code' }).count(), 0);
  assert.deepEqual(problems, []);
});

test('the activity feed names who approved whom, newest first, and loads older pages', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Al-Amin' }, 'imam@activity.test');
  const ali = await member(ts, 'ali@activity.test');
  await joinMosque(ts, ali, mosque.id);
  const helper = await member(ts, 'helper@activity.test');
  await makeAdmin(ts, root.token, mosque.id, helper);
  for (let i = 0; i < 24; i += 1) {
    assert.equal((await ts.http.patch(`${API}/mosques/${mosque.id}/admins/${helper.id}`, { can_trigger: i % 2 === 0 }, owner.token)).status, 200);
  }
  await registerTransmitter(ts, owner.token, mosque.id, 'Minbar');

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}` });
  await page.getByRole('button', { name: 'Approve: ali@activity.test' }).click();
  await page.getByText('Nobody is waiting.').waitFor();
  await page.getByRole('link', { name: 'Activity' }).click();
  const rows = page.locator('li[data-activity]');
  await rows.first().filter({ hasText: 'imam@activity.test approved ali@activity.test' }).waitFor();
  assert.equal(await rows.count(), 20, 'one page of 20');
  await rows.filter({ hasText: 'imam@activity.test changed what helper@activity.test may do' }).first().waitFor();
  await rows.filter({ hasText: 'imam@activity.test registered the device Minbar' }).waitFor();
  await shot(page, 'admin-activity');
  await assertAccessible(page, 'activity page');

  await page.getByRole('button', { name: 'Load older' }).click();
  const all = await mosqueActivity(ts, root.token, mosque.id, '?limit=200');
  assert.ok(all.length > 20 && all.length < 40, `two pages in all (${all.length})`);
  await page.waitForFunction((n) => (globalThis as any).document.querySelectorAll('li[data-activity]').length === n, all.length);
  assert.deepEqual(await rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-activity'))), all.map((a) => a.id), 'newest first, as the API orders them');
  assert.equal(await page.getByRole('button', { name: 'Load older' }).count(), 0, 'no button once the last page is short');
  const focused = await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute('data-activity'));
  assert.equal(focused, all[20]!.id, 'the focus moves to the first older row, not back to the top of the page');
  await rows.last().filter({ hasText: 'created the mosque' }).waitFor();
  assert.deepEqual(problems, []);
});

test('a superadmin finds people in the users list by search', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await createSuperadmin(ts, 'root@users.test', 'root password 123');
  for (const email of ['ali.hassan@users.test', 'fatima@users.test', 'alina@users.test', 'bilal@users.test']) await member(ts, email);
  await ts.http.post(`${API}/auth/signup`, { phone: '+4712345678' });

  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await superadminSignsIn(page, ts, 'root@users.test', 'root password 123');
  await (await fromMenu(page, 'link', 'All mosques')).click();
  await page.getByRole('heading', { name: 'People' }).waitFor();

  const token = (await signInSuperadmin(ts, 'root2@users.test')).token;
  const users = (await ts.http.get(`${API}/users?limit=200`, token)).body as Array<{ id: string; email: string; email_is_placeholder: boolean }>;
  const people = page.locator('li[data-user]');
  // root2 signed up after the page read the list: the page shows the users it read.
  await page.getByText(`Showing ${users.length - 1} of ${users.length - 1} people.`).waitFor();
  await page.getByLabel('Search people by email or phone').fill('ali');
  await page.getByText(`Showing 2 of ${users.length - 1} people.`).waitFor();
  const shown = await people.evaluateAll((els) => els.map((e) => e.getAttribute('data-user')).sort());
  assert.deepEqual(shown, users.filter((u) => !u.email_is_placeholder && u.email.includes('ali')).map((u) => u.id).sort());
  assert.equal(shown.length, 2, 'ali.hassan and alina, not the phone account whose placeholder email has "invalid"');
  await page.getByLabel('Search people by email or phone').fill('+4712');
  await people.filter({ hasText: '+4712345678' }).waitFor();
  assert.equal(await people.count(), 1);
  await shot(page, 'superadmin-users');
  await assertAccessible(page, 'superadmin page with users');
  assert.deepEqual(problems, []);
});
