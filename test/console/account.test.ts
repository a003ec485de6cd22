import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256, startTestService } from '../support/service.ts';
import { createMosque, member, signInSuperadmin } from '../support/people.ts';
import { PASSWORD, WAIT_MS, assertAccessible, fromMenu, launchBrowser, phonePage, shot, signIn } from './browser.ts';

/** The account page (docs/console.md): confirming the email, changing the password, signing out everywhere. */
test('a member confirms their email from the banner, changes the password and signs out everywhere', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'imam@console.test');
  const mosque = await createMosque(ts, root.token, owner);
  const aisha = await member(ts, 'aisha@console.test', { unproven: true });
  // An invitation to the unproven address waits on it.
  const invite = await ts.http.post('/api/v1/invites', { mosque_id: mosque.id, email: 'aisha@console.test', auto_approve: true }, owner.token);
  assert.equal(invite.body.membership, null);
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await page.goto(`${ts.url}/signin`);
  await signIn(page, 'aisha@console.test');

  // The home page says plainly that the email is not confirmed; one button sends the code.
  const banner = page.locator('[data-unproven=email]');
  await banner.getByText('Confirm your email first').waitFor({ timeout: WAIT_MS });
  await banner.getByRole('button', { name: 'Send me a code' }).click();
  await page.getByText('A code is on its way to aisha@console.test').waitFor({ timeout: WAIT_MS });
  await ts.service.notifier.idle();
  const code = ts.messages.filter((m) => m.purpose === 'confirm_address' && m.to === 'aisha@console.test').at(-1)!.code!;
  await banner.getByLabel('6-digit code').fill(code);
  await banner.getByRole('button', { name: 'Confirm' }).click();
  // Proven: the banner goes and the invited membership is hers.
  await page.getByText('Your email is confirmed.').waitFor({ timeout: WAIT_MS });
  await page.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  await page.locator('[data-unproven=email]').waitFor({ state: 'detached', timeout: WAIT_MS });
  const me = await ts.http.get('/api/v1/me', aisha.token);
  assert.equal(me.body.user.email_proven, true);
  assert.deepEqual(me.body.memberships.map((m: { mosque_id: string; status: string }) => [m.mosque_id, m.status]), [[mosque.id, 'approved']]);

  // The account page: the address is confirmed; a new password keeps this page signed in and ends the others.
  await (await fromMenu(page, 'link', 'Your account')).click();
  await page.getByRole('heading', { name: 'Your account' }).waitFor();
  await page.getByText('Confirmed', { exact: true }).waitFor();
  await assertAccessible(page, 'account');
  await shot(page, 'account');
  await page.getByLabel('Current password').fill(PASSWORD);
  await page.getByLabel('New password (at least 8 characters)').fill('a brand new password');
  await page.getByRole('button', { name: 'Change password' }).click();
  await page.getByText('Password changed.').first().waitFor({ timeout: WAIT_MS });
  assert.equal((await ts.http.get('/api/v1/me', aisha.token)).status, 401, 'the token from before the change stopped working');
  const login = await ts.http.post('/api/v1/auth/login', { identifier_hash: sha256('aisha@console.test'), password_hash: sha256('a brand new password') });
  assert.equal(login.status, 200);

  // Sign out everywhere: this page goes back to sign-in, and a token held elsewhere stops working.
  page.once('dialog', (d) => void d.accept());
  await page.getByRole('button', { name: 'Sign out everywhere' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor({ timeout: WAIT_MS });
  assert.equal((await ts.http.get('/api/v1/me', login.body.access_token)).status, 401);
  assert.deepEqual(problems, []);
});

test('signing out from the menu ends that token on the server, not only in the page', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await member(ts, 'bilal@console.test');
  const browser = await launchBrowser(t);
  const { page } = await phonePage(browser, t);
  await page.goto(`${ts.url}/signin`);
  // The page trades its sign-in token for a console session and works with the session's token from then on.
  const loggedIn = page.waitForResponse((r) => r.url().endsWith('/api/v1/auth/session') && r.status() === 201, { timeout: WAIT_MS });
  await signIn(page, 'bilal@console.test');
  const token = ((await (await loggedIn).json()) as { access_token: string }).access_token;
  assert.equal((await ts.http.get('/api/v1/me', token)).status, 200);
  const signedOut = page.waitForResponse((r) => r.url().endsWith('/api/v1/auth/logout') && r.status() === 204, { timeout: WAIT_MS });
  await (await fromMenu(page, 'button', 'Sign out')).click();
  await signedOut;
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  assert.equal((await ts.http.get('/api/v1/me', token)).status, 401);
});
