import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';
import { API, confirmAddress, joinMosque, makeAdmin, member, mosqueMemberships, setStatus, type Person } from '../../support/people.ts';
import { connectDevice, mosqueWithOwner, registerPlayer, subscribeCode, waitFor, type Registered } from '../../support/devices.ts';
import { sha256, startTestService, type TestService } from '../../support/service.ts';
import { PASSWORD, assertAccessible, launchBrowser, phonePage, shot, signIn, signedInAdminPage } from '../browser.ts';

// docs/console.md, "The members pages": the mosque's members list and one member's page, where an admin
// approves, rejects, bans, lifts a ban or removes, and the member's stream player follows within a second.

const STREAM = 'https://radio.example/noor/live';
/** docs/console.md, "The members pages": the player's config follows a status change within this. */
const FOLLOW_MS = 1000;

interface Seen {
  at: number;
  body: Record<string, any>;
}

/** A real MQTT connection as the player, recording every config it receives (with when) on its own topic. */
async function watchPlayer(t: TestContext, ts: TestService, reg: Registered) {
  const client = await connectDevice(t, reg.credentials, { url: ts.service.mqttUrl });
  const configs: Seen[] = [];
  const topic = `devices/${reg.device.id}/config`;
  client.on('message', (tp, payload) => {
    if (tp === topic && payload.length > 0) configs.push({ at: performance.now(), body: JSON.parse(payload.toString('utf8')) });
  });
  assert.equal(await subscribeCode(client, topic), 1);
  await waitFor('the retained config', () => configs.length > 0, 5000);
  return { latest: () => configs.at(-1)!.body, configs };
}

/** A config carries a lease and the stream only while the player is entitled (docs/firmware.md, section 5). */
const entitled = (config: Record<string, any>) => Boolean(config.lease) && typeof config.stream_url === 'string';

/**
 * Clicks the action, then its "Yes" in the page's confirm step, and answers when the browser got the API's
 * answer to it (performance.now() in this process), with that answer's status.
 */
async function confirmAction(page: Page, action: string, yes: string, method: 'PATCH' | 'DELETE') {
  await page.locator('[data-actions]').getByRole('button', { name: action, exact: true }).click();
  const confirm = page.getByRole('group').filter({ has: page.getByRole('button', { name: yes }) });
  await confirm.waitFor();
  const answer = page.waitForResponse((r) => r.url().includes('/api/v1/memberships/') && r.request().method() === method);
  await confirm.getByRole('button', { name: yes }).click();
  const res = await answer;
  return { at: performance.now(), status: res.status() };
}

/** Waits for a config newer than `version` matching `want`, and fails unless it came within FOLLOW_MS of `answeredAt`. */
async function followed(player: Awaited<ReturnType<typeof watchPlayer>>, version: number, answeredAt: number, want: (c: Record<string, any>) => boolean, what: string) {
  const seen = await waitFor(what, () => player.configs.find((c) => c.body.config_version > version && want(c.body)), FOLLOW_MS + 500);
  assert.ok(seen.at - answeredAt <= FOLLOW_MS, `${what}: ${Math.round(seen.at - answeredAt)} ms after the API's answer`);
  return seen;
}

/** What sticks out sideways, for the failure message: the page's widths, then each element wider than its box. */
const OVERFLOWING = `[document.documentElement.scrollWidth + '/' + window.innerWidth,
  ...[...document.querySelectorAll('body *')].filter((e) => e.scrollWidth > e.clientWidth + 1)
    .map((e) => e.tagName + '.' + e.className + ': ' + (e.textContent || '').slice(0, 40)).slice(0, 8)]`;

async function world(t: TestContext) {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid An-Nur', stream_url: STREAM }, 'imam@members.test');
  return { ts, root, owner, mosque };
}

/** A person who joins the mosque and is given `status` by its owner (pending: left as joined). */
async function memberWith(w: Awaited<ReturnType<typeof world>>, person: Person, status: string) {
  const membership = await joinMosque(w.ts, person, w.mosque.id);
  if (status !== 'pending') await setStatus(w.ts, w.owner.token, membership.id, status);
  return membership;
}

/** A person who signed up with an email and a phone number. */
async function withPhone(ts: TestService, email: string, phone: string): Promise<Person> {
  const res = await ts.http.post(`${API}/auth/signup`, { email, phone, password_hash: sha256(PASSWORD) });
  assert.equal(res.status, 201, `signup: ${JSON.stringify(res.body)}`);
  // Confirmed, as the console leads a newcomer to: an account that has confirmed nothing cannot join.
  await confirmAddress(ts, res.body.access_token, 'email', email);
  return { token: res.body.access_token, id: res.body.user.id, email };
}

test("an admin bans, lifts the ban, approves and removes a member from their page; the player's entitlement follows within a second each time", async (t) => {
  const w = await world(t);
  const amina = await member(w.ts, 'amina@members.test');
  const membership = await memberWith(w, amina, 'approved');
  const reg = await registerPlayer(w.ts, amina, w.mosque.id, 'Kitchen radio');
  const player = await watchPlayer(t, w.ts, reg);
  await waitFor('an entitled config', () => entitled(player.latest()), 5000);

  const { page, problems } = await signedInAdminPage(t, w.ts, w.owner, { path: `/mosques/${w.mosque.id}/members/${membership.id}` });
  await page.getByRole('heading', { name: 'amina@members.test' }).waitFor();
  const playerRow = page.locator(`li[data-player="${reg.device.id}"]`);
  await playerRow.getByText('Allowed to play.').waitFor();
  await page.locator('[data-status="approved"]').waitFor();
  // From approved, only ban and remove mean something.
  assert.deepEqual(await page.locator('[data-actions] button').allTextContents(), ['Ban', 'Remove from the mosque']);
  await assertAccessible(page, 'member page');

  // Cancel asks nothing of the API.
  await page.locator('[data-actions]').getByRole('button', { name: 'Ban', exact: true }).click();
  await page.getByRole('button', { name: 'Cancel' }).click();
  assert.equal((await w.ts.http.get(`${API}/memberships/${membership.id}`, w.owner.token)).body.status, 'approved');

  // Ban: the player's retained config loses its lease and stream within a second of the API's answer.
  let version = player.latest().config_version;
  const ban = await confirmAction(page, 'Ban', 'Yes, ban', 'PATCH');
  assert.equal(ban.status, 200);
  const banned = await followed(player, version, ban.at, (c) => !entitled(c), 'the unentitled config after the ban');
  await page.locator('[data-status="banned"]').waitFor();
  await page.getByText('Banned: their players no longer play.').waitFor();
  await playerRow.getByText('Not allowed to play: the membership is not approved.').waitFor();
  assert.equal((await w.ts.http.get(`${API}/memberships/${membership.id}`, w.owner.token)).body.status, 'banned');
  assert.deepEqual(await page.locator('[data-actions] button').allTextContents(), ['Lift the ban', 'Remove from the mosque']);
  await shot(page, 'member-banned');

  // Lifting the ban puts them back in the waiting list: the page says so, and the player stays silent.
  const lift = await confirmAction(page, 'Lift the ban', 'Yes, lift the ban', 'PATCH');
  assert.equal(lift.status, 200);
  await page.getByText('The ban is lifted. They are waiting for approval: approve them for their players to play.').waitFor();
  await page.locator('[data-status="pending"]').waitFor();
  await playerRow.getByText('Not allowed to play: waiting for approval.').waitFor();
  assert.equal((await w.ts.http.get(`${API}/memberships/${membership.id}`, w.owner.token)).body.status, 'pending');
  assert.equal(entitled(player.latest()), false, 'a lifted ban alone does not entitle the player');

  // Approve: the entitlement comes back within a second.
  version = Math.max(banned.body.config_version, player.latest().config_version);
  const approve = await confirmAction(page, 'Approve', 'Yes, approve', 'PATCH');
  assert.equal(approve.status, 200);
  await followed(player, version, approve.at, entitled, 'the entitled config after approval');
  await playerRow.getByText('Allowed to play.').waitFor();

  // The history names each step, newest first.
  const steps = await page.locator('li[data-kind="membership.status_changed"] > div').allTextContents();
  assert.deepEqual(steps.slice(0, 3), [
    'imam@members.test approved amina@members.test',
    'imam@members.test moved amina@members.test back to waiting',
    'imam@members.test banned amina@members.test',
  ]);

  // Remove: the membership is gone and the player unentitled within a second.
  version = player.latest().config_version;
  const remove = await confirmAction(page, 'Remove from the mosque', 'Yes, remove', 'DELETE');
  assert.equal(remove.status, 204);
  await followed(player, version, remove.at, (c) => !entitled(c), 'the unentitled config after the removal');
  await page.getByText('They are no longer a member of this mosque, and their players no longer play.').waitFor();
  assert.equal((await w.ts.http.get(`${API}/memberships/${membership.id}`, w.owner.token)).status, 404);
  assert.equal((await mosqueMemberships(w.ts, w.owner.token, w.mosque.id)).some((m) => m.user_id === amina.id), false);
  assert.deepEqual(problems, []);
});

test("a refused action says why in plain words and changes nothing: a manager bans the owner; an admin's own membership has no actions", async (t) => {
  const w = await world(t);
  const manager = await member(w.ts, 'manager@members.test');
  await makeAdmin(w.ts, w.root.token, w.mosque.id, manager, { can_manage: true, can_trigger: true });
  const owners = (await mosqueMemberships(w.ts, w.owner.token, w.mosque.id)).find((m) => m.user_id === w.owner.id)!;
  assert.equal(owners.status, 'approved');

  const { page, problems } = await signedInAdminPage(t, w.ts, manager, { path: `/mosques/${w.mosque.id}/members/${owners.id}` });
  await page.getByRole('heading', { name: 'imam@members.test' }).waitFor();
  await page.getByText('Owner of this mosque').waitFor();
  const ban = await confirmAction(page, 'Ban', 'Yes, ban', 'PATCH');
  assert.equal(ban.status, 403);
  await page.getByRole('alert').filter({ hasText: "Not done: only a superadmin may change the owner's membership." }).waitFor();
  await page.locator('[data-status="approved"]').waitFor();
  assert.equal((await w.ts.http.get(`${API}/memberships/${owners.id}`, w.owner.token)).body.status, 'approved');
  await shot(page, 'member-refused');

  // Their own membership: the page offers nothing (the API would refuse it too).
  const mine = (await mosqueMemberships(w.ts, w.owner.token, w.mosque.id)).find((m) => m.user_id === manager.id)!;
  await page.goto(`${w.ts.url}/mosques/${w.mosque.id}/members/${mine.id}`); // the console session keeps it signed in
  await page.getByText('You cannot change your own membership here; a superadmin can.').waitFor();
  assert.equal(await page.locator('[data-actions]').count(), 0);
  assert.equal((await w.ts.http.patch(`${API}/memberships/${mine.id}`, { status: 'banned' }, manager.token)).status, 403);
  assert.deepEqual(problems, []);
});

test('the members list finds people by email or phone and by status, fits a phone with an 80-character email, and is accessible', async (t) => {
  const w = await world(t);
  // 80 characters, no break in it: it must wrap rather than push the page sideways.
  const longEmail = `${'a'.repeat(50)}@long-domain-name.members.test`;
  assert.equal(longEmail.length, 80);
  const people = {
    pending: await member(w.ts, 'waiting@members.test'),
    approved: await withPhone(w.ts, 'bilal@members.test', '+447700900123'),
    rejected: await member(w.ts, 'no@members.test'),
    banned: await member(w.ts, 'out@members.test'),
    long: await member(w.ts, longEmail),
  };
  const ids: Record<string, string> = {};
  for (const [key, status] of [['pending', 'pending'], ['approved', 'approved'], ['rejected', 'rejected'], ['banned', 'banned'], ['long', 'approved']] as const) {
    ids[key] = (await memberWith(w, people[key], status)).id;
  }

  const { page, problems } = await signedInAdminPage(t, w.ts, w.owner, { path: `/mosques/${w.mosque.id}` });
  // The overview links to the list, and the tab leads there too.
  await page.getByRole('link', { name: 'All members (6)' }).waitFor();
  await page.getByRole('navigation', { name: 'Mosque pages' }).getByRole('link', { name: 'Members' }).click();
  const rows = page.locator('li[data-member]');
  await rows.first().waitFor();
  const shown = async () => (await rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-member')))).sort();
  assert.equal(await rows.count(), 6, 'the owner and five members');
  const tabs = page.getByRole('navigation', { name: 'Mosque pages' });
  assert.equal(await tabs.getByRole('link', { name: 'Settings' }).count(), 1, 'the owner manages: every tab, Settings too');
  await assertAccessible(page, 'members list');

  const filter = page.getByLabel('Status');
  await filter.selectOption('banned');
  assert.deepEqual(await shown(), [ids.banned]);
  assert.match(page.url(), /\?status=banned$/);
  await filter.selectOption('pending');
  assert.deepEqual(await shown(), [ids.pending]);
  await filter.selectOption('rejected');
  assert.deepEqual(await shown(), [ids.rejected]);
  assert.equal(await page.locator('#member-filter option[value="approved"]').textContent(), 'Approved (3)');

  await filter.selectOption('all');
  const search = page.getByLabel('Search by email or phone');
  await search.fill('BILAL');
  assert.deepEqual(await shown(), [ids.approved]);
  await search.fill('+4477009');
  assert.deepEqual(await shown(), [ids.approved]);
  await search.fill('members.test');
  await filter.selectOption('approved');
  const ownerRow = (await mosqueMemberships(w.ts, w.owner.token, w.mosque.id)).find((m) => m.user_id === w.owner.id)!;
  assert.deepEqual(await shown(), [ids.approved, ids.long, ownerRow.id].sort());
  await search.fill('nobody-here');
  await page.getByText('No member matches.').waitFor();

  // The filter survives a visit to a member's page and Back.
  await search.fill('');
  await filter.selectOption('banned');
  await page.getByRole('link', { name: 'out@members.test' }).click();
  await page.getByRole('heading', { name: 'out@members.test' }).waitFor();
  await page.goBack();
  await rows.first().waitFor();
  assert.deepEqual(await shown(), [ids.banned]);

  for (const path of [`/mosques/${w.mosque.id}/members`, `/mosques/${w.mosque.id}/members/${ids.long}`]) {
    await page.goto(`${w.ts.url}${path}`); // the console session keeps it signed in
    await page.getByText(longEmail).first().waitFor();
    for (const width of [320, 390, 768]) {
      await page.setViewportSize({ width, height: 800 });
      // Strings, evaluated in the page: this file is compiled without the DOM's types.
      const fits = await page.evaluate<boolean>('document.documentElement.scrollWidth <= window.innerWidth');
      const wide = fits ? [] : await page.evaluate<string[]>(OVERFLOWING);
      assert.ok(fits, `${path} at ${width} px scrolls sideways: ${wide.join(' | ')}`);
      const small = await page.locator('main a:visible, main button:visible, main input:visible, main select:visible').evaluateAll((els) =>
        els.map((e) => ({ what: e.textContent?.trim() || e.getAttribute('aria-label') || e.tagName, height: e.getBoundingClientRect().height })).filter((e) => e.height < 44));
      assert.deepEqual(small, [], `${path} at ${width} px: touch targets under 44 px`);
    }
    await page.setViewportSize({ width: 390, height: 844 });
  }
  await assertAccessible(page, 'member page with an 80-character email');
  await shot(page, 'member-page');
  assert.deepEqual(problems, []);
});

test("a plain member opening the members pages is refused, and the API answers them 404 for another's membership", async (t) => {
  const w = await world(t);
  const plain = await member(w.ts, 'plain@members.test');
  await memberWith(w, plain, 'approved');
  const other = await member(w.ts, 'other@members.test');
  const others = await memberWith(w, other, 'approved');
  const mine = (await mosqueMemberships(w.ts, w.owner.token, w.mosque.id)).find((m) => m.user_id === plain.id)!;

  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  for (const path of [`/mosques/${w.mosque.id}/members/${others.id}`, `/mosques/${w.mosque.id}/members`]) {
    await page.goto(`${w.ts.url}${path}`);
    if (path.endsWith(others.id)) await signIn(page, plain.email); // the first page only: the console session keeps the rest
    await page.getByRole('alert').filter({ hasText: 'You are not allowed to do this.' }).waitFor();
    assert.equal(await page.getByText('other@members.test').count(), 0, `${path} shows nothing of the other member`);
  }
  assert.equal((await w.ts.http.get(`${API}/memberships/${others.id}`, plain.token)).status, 404);
  assert.equal((await w.ts.http.get(`${API}/memberships/${mine.id}`, plain.token)).status, 403);
  assert.equal((await w.ts.http.get(`${API}/mosques/${w.mosque.id}/memberships`, plain.token)).status, 403);
  assert.deepEqual(problems, []);
});
