import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SimDevice } from '../../simulator/device.ts';
import { createMosque, member, mosqueMemberships, setStatus, signInSuperadmin } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import { WAIT_MS, assertAccessible, fromMenu, launchBrowser, phonePage, shot } from './browser.ts';

test('a member signs up from a join link, registers a player and sees it become online once an admin approves them', async (t) => {
  // The stream is a local Icecast over plain http, which the operator lists (docs/api.md, "Flags decide").
  const ts = await startTestService(t, { logLevel: 'warn', env: { STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'imam@console.test');
  const mosque = await createMosque(ts, root.token, owner, { name: 'Masjid An-Nur', stream_url: 'http://127.0.0.1:8000/live' });
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);

  // The join link of a signed-out visitor names the mosque and asks for an account first, then comes back to the join.
  await page.goto(`${ts.url}/join/${mosque.join_code}`);
  await page.getByRole('heading', { name: 'Join Masjid An-Nur' }).waitFor();
  await page.getByText('You are invited to join Masjid An-Nur on Minaret.').waitFor();
  await shot(page, 'join-signed-out');
  await page.getByRole('main').getByRole('link', { name: 'Sign up' }).click();
  await page.getByRole('heading', { name: 'Create an account' }).waitFor();
  await page.getByLabel('Email').fill('  Aisha@Console.Test ');
  await page.getByLabel('Password').fill('a long enough password');
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.getByRole('heading', { name: 'Join Masjid An-Nur' }).waitFor();
  await page.getByText('Join Masjid An-Nur on Minaret?').waitFor();
  // An account that has confirmed nothing holds nothing: the join page asks for the email's code first, then joins.
  assert.equal(await page.getByRole('button', { name: 'Join' }).count(), 1);
  const banner = page.locator('[data-unproven=email]');
  await banner.getByRole('button', { name: 'Send me a code' }).click();
  await banner.getByLabel('6-digit code').waitFor();
  await ts.service.notifier.idle();
  const code = ts.messages.filter((m) => m.purpose === 'confirm_address' && m.to === 'aisha@console.test').at(-1)?.code;
  assert.ok(code, 'a confirmation code went to the address');
  await banner.getByLabel('6-digit code').fill(code);
  await banner.getByRole('button', { name: 'Confirm' }).click();
  await page.getByText('Your email is confirmed.').waitFor();
  await page.getByRole('button', { name: 'Join' }).click();

  // Home: the pending membership, said in plain words.
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  await page.getByText('Waiting: an admin of the mosque must approve you.').waitFor();
  const pending = (await mosqueMemberships(ts, owner.token, mosque.id)).find((m) => m.user_email === 'aisha@console.test');
  assert.equal(pending?.status, 'pending', 'the browser hashed and normalised the email as the API requires');

  // A notification toggle is saved through the API.
  await page.getByRole('checkbox', { name: 'Waaz (talks)' }).uncheck();
  await page.getByText('Saved.').waitFor();
  const afterToggle = (await mosqueMemberships(ts, owner.token, mosque.id)).find((m) => m.id === pending!.id);
  assert.equal(afterToggle?.notify_waaz, false);

  // Register a player by hand (folded away under the pairing form): the credentials show once.
  await page.getByText('Advanced: register a player and copy its credentials by hand').click();
  await page.getByLabel('Player name').fill('Kitchen speaker');
  await page.getByRole('button', { name: 'Add player' }).click();
  const password = await page.locator('[data-credential=password]').textContent({ timeout: WAIT_MS });
  const id = await page.locator('[data-credential=username]').textContent();
  assert.ok(password && password.length >= 32 && id);
  // Not entitled yet: the why chain says who must act.
  const row = page.locator(`li[data-device="${id}"]`);
  await row.getByText('An admin must approve you before the player can play.').waitFor();
  await shot(page, 'member-home');

  // The player connects (the simulator, over real MQTT) and shows online, still waiting for the approval.
  const sim = new SimDevice({ kind: 'stream_player', id: id!, password: password!, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 15_000 });
  await sim.start();
  t.after(() => sim.stop().catch(() => {}));
  await row.locator('.badge', { hasText: 'Not entitled' }).waitFor({ timeout: WAIT_MS });
  await row.getByText('An admin must approve you before the player can play.').waitFor();

  await setStatus(ts, owner.token, pending!.id, 'approved');
  await row.locator('.badge', { hasText: 'Online' }).waitFor({ timeout: WAIT_MS });
  await row.getByText('Online and ready to play.').waitFor({ timeout: WAIT_MS });
  // The membership list is read when the page opens (the token lives in memory: move inside the page, not reload).
  await (await fromMenu(page, 'link', 'Home')).click();
  await page.getByText('You are a member.').waitFor();
  await shot(page, 'member-player-online');
  await assertAccessible(page, 'member home');
  assert.deepEqual(problems, []);
});

test('a member signs in with a 6-digit code sent by email', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await member(ts, 'coder@console.test');
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await page.goto(`${ts.url}/`);
  const codeForm = page.locator('form', { has: page.getByRole('heading', { name: 'With a code by email' }) });
  await codeForm.getByLabel('Email').fill('coder@console.test');
  await codeForm.getByRole('button', { name: 'Send me a code' }).click();
  await page.getByLabel('6-digit code').waitFor();
  await ts.service.notifier.idle();
  const code = ts.messages.filter((m) => m.purpose === 'login_code').at(-1)?.code;
  assert.match(code ?? '', /^\d{6}$/);
  await page.getByLabel('6-digit code').fill('000000' === code ? '111111' : '000000');
  await page.getByRole('button', { name: 'Sign in' }).last().click();
  await page.getByRole('alert').filter({ hasText: 'The code is wrong, expired or used up.' }).waitFor();
  await page.getByLabel('6-digit code').fill(code!);
  await page.getByRole('button', { name: 'Sign in' }).last().click();
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  assert.deepEqual(problems, []);
});
