import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API, confirmAddress, joinMosque, makeAdmin, member, type Person } from '../../support/people.ts';
import { mosqueWithOwner } from '../../support/devices.ts';
import { sha256, startTestService, type TestService } from '../../support/service.ts';
import { assertAccessible, shot, signedInAdminPage } from '../browser.ts';

// docs/console.md, "The members pages": an address its owner has not proven carries a "not confirmed" mark on every
// page where admins see people (the overview's waiting list, the members list, a member's page, the admins list),
// so an admin approving a member knows when they approve a claim (docs/api.md, "Addresses: claims and proof").

/**
 * An account that proved its phone but not its email: it may hold a membership (one address is proven), and its email
 * is only a claim (docs/api.md, "Addresses: claims and proof").
 */
async function phoneProven(ts: TestService, email: string, phone: string): Promise<Person> {
  const res = await ts.http.post(`${API}/auth/signup`, { email, phone, password_hash: sha256('correct horse battery staple') });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  await confirmAddress(ts, res.body.access_token, 'sms', phone);
  return { token: res.body.access_token, id: res.body.user.id, email };
}

test('an unproven member carries the "not confirmed" mark on every admin page, in English and Arabic; a proven one does not', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid An-Nur' }, 'imam@proof.test');
  const claimed = await phoneProven(ts, 'claimed@proof.test', '+442079460123');
  const proven = await member(ts, 'proven@proof.test');
  const claimedMembership = await joinMosque(ts, claimed, mosque.id);
  const provenMembership = await joinMosque(ts, proven, mosque.id);
  await makeAdmin(ts, root.token, mosque.id, await phoneProven(ts, 'named@proof.test', '+442079460124'));

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}` });
  const marks = (scope: ReturnType<typeof page.locator>) => scope.locator('[data-unproven]').allTextContents();

  // The overview's waiting list, where an admin approves at a click.
  const waiting = (email: string) => page.locator('li', { has: page.getByRole('link', { name: email, exact: true }) });
  await waiting('claimed@proof.test').waitFor();
  assert.deepEqual(await marks(waiting('claimed@proof.test')), ['not confirmed']);
  assert.deepEqual(await marks(waiting('proven@proof.test')), []);

  // The members list.
  await page.getByRole('link', { name: 'Members', exact: true }).click();
  const row = (id: string) => page.locator(`li[data-member="${id}"]`);
  await row(claimedMembership.id).waitFor();
  assert.deepEqual(await marks(row(claimedMembership.id)), ['not confirmed']);
  assert.deepEqual(await marks(row(provenMembership.id)), []);
  await assertAccessible(page, 'members list with an unproven member');
  await shot(page, 'members-unproven');

  // Each member's page: the mark sits beside the address itself.
  await row(claimedMembership.id).getByRole('link').click();
  const facts = page.locator('dl.facts');
  await facts.waitFor();
  assert.equal(await facts.locator('dd', { hasText: 'claimed@proof.test' }).locator('[data-unproven="email"]').textContent(), 'not confirmed');
  await assertAccessible(page, 'member page of an unproven member');
  await page.getByRole('link', { name: 'All members' }).click();
  await row(provenMembership.id).getByRole('link').click();
  await page.locator('dl.facts dd', { hasText: 'proven@proof.test' }).waitFor();
  assert.deepEqual(await marks(page.locator('main')), []);

  // The admins list: the owner proved their address, the admin named by user_id did not.
  await page.getByRole('link', { name: 'Admins and invites' }).click();
  const admin = (email: string) => page.locator(`li[data-admin="${email}"]`);
  await admin('named@proof.test').waitFor();
  assert.deepEqual(await marks(admin('named@proof.test')), ['not confirmed']);
  assert.deepEqual(await marks(admin('imam@proof.test')), []);

  // In Arabic, the same mark in Arabic.
  await page.getByLabel('Language').selectOption('ar');
  await page.getByRole('heading', { name: 'المشرفون', exact: true }).waitFor();
  // The list is read again after the heading shows: wait for its rows in Arabic.
  await admin('named@proof.test').getByText('غير مؤكَّد').waitFor();
  assert.deepEqual(await marks(admin('named@proof.test')), ['غير مؤكَّد']);
  assert.deepEqual(await marks(admin('imam@proof.test')), []);
  await page.getByRole('link', { name: 'الأعضاء', exact: true }).click();
  await row(claimedMembership.id).waitFor();
  assert.deepEqual(await marks(row(claimedMembership.id)), ['غير مؤكَّد']);
  assert.deepEqual(await marks(row(provenMembership.id)), []);
  await assertAccessible(page, 'Arabic members list with an unproven member');
  assert.deepEqual(problems, []);
});
