import { test } from 'node:test';
import assert from 'node:assert/strict';
import { hmacHex, sha256, startTestService } from '../support/service.ts';
import { createSuperadmin } from '../support/superadmin.ts';
import { assertError } from '../support/api.ts';
import { assertAccessible, launchBrowser, phonePage, WAIT_MS } from '../console/browser.ts';

/** docs/operator.md, "The first superadmin": a setup link logged while none exists, used once, then closed (POST 404). */

const AUTH = '/api/v1/auth';

function setupUrlOf(logs: string[]): string {
  const line = logs.map((l) => JSON.parse(l) as { setup_url?: string }).find((l) => l.setup_url);
  assert.ok(line, 'the start logs one line with the setup link');
  return line.setup_url!;
}

/** The token with its first character changed: always a different token (its last character carries only 4 bits,
 *  so replacing that one could give the same token back one time in sixteen). */
function wrongToken(token: string): string {
  return `${token[0] === 'A' ? 'B' : 'A'}${token.slice(1)}`;
}

test('a fresh service logs a setup link; its token creates the first superadmin once, who then signs in in two steps', async (t) => {
  const ts = await startTestService(t);
  const url = setupUrlOf(ts.logs);
  assert.match(url, new RegExp(`^${ts.url}/setup#token=[A-Za-z0-9_-]{43}$`));
  const token = url.split('#token=')[1]!;
  assert.deepEqual((await ts.http.get(`${AUTH}/setup`)).body, { status: 'open' });
  assertError(await ts.http.post(`${AUTH}/setup`, { token: wrongToken(token), email: 'root@example.com', password_hash: sha256('a long password') }), 400, 'invalid_token');
  assertError(await ts.http.post(`${AUTH}/setup`, { token, email: 'not-an-email', password_hash: sha256('a long password') }), 400, 'validation_failed');

  const made = await ts.http.post(`${AUTH}/setup`, { token, email: ' Root@Example.com ', password_hash: sha256('a long password') });
  assert.equal(made.status, 201);
  assert.deepEqual([made.body.user.email, made.body.user.role], ['root@example.com', 'superadmin']);
  // Used up: the same token, and the setup page's check, are gone.
  assertError(await ts.http.post(`${AUTH}/setup`, { token, email: 'other@example.com', password_hash: sha256('x') }), 404, 'not_found');
  assert.deepEqual((await ts.http.get(`${AUTH}/setup`)).body, { status: 'closed' }, 'closed is an answer: the console page asks it signed out');

  const step1 = await ts.http.post(`${AUTH}/superadmin-2fa`, { identifier_hash: sha256('root@example.com'), password_hash: sha256('a long password') });
  assert.equal(step1.status, 200);
  await ts.service.notifier.idle();
  const otp = ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!;
  const timestamp = Math.floor(ts.clock() / 1000);
  const step2 = await ts.http.post(`${AUTH}/superadmin-2fa/verify`, { session_token: step1.body.session_token, timestamp, hmac: hmacHex(step1.body.session_token, `${otp}|${timestamp}`) });
  assert.equal(step2.status, 200);
  assert.equal(step2.body.user.role, 'superadmin');
});

test('a superadmin made by the CLI closes the setup link even after the service logged it', async (t) => {
  const ts = await startTestService(t);
  const token = setupUrlOf(ts.logs).split('#token=')[1]!;
  await createSuperadmin(ts, 'ops@example.com', 'operator password');
  assert.deepEqual((await ts.http.get(`${AUTH}/setup`)).body, { status: 'closed' }, 'closed is an answer: the console page asks it signed out');
  assertError(await ts.http.post(`${AUTH}/setup`, { token, email: 'late@example.com', password_hash: sha256('x') }), 404, 'not_found');
});

test('the setup page in the browser creates the first superadmin from the link, and says so once it is done', async (t) => {
  const ts = await startTestService(t, { logLevel: 'info' });
  const browser = await launchBrowser(t);
  const { page, problems } = await phonePage(browser, t);
  await page.goto(setupUrlOf(ts.logs));
  await page.getByRole('heading', { name: 'Set up Minaret' }).waitFor({ timeout: WAIT_MS });
  await assertAccessible(page, 'setup page');
  await page.getByLabel('Email').fill('imam@setup.test');
  await page.getByLabel('Password').fill('a long enough password');
  await page.getByRole('button', { name: 'Create the superadmin' }).click();
  await page.getByText('The superadmin is created.').waitFor({ timeout: WAIT_MS });
  assert.equal(new URL(page.url()).hash, '', 'the used token leaves the address bar');
  const login = await ts.http.post(`${AUTH}/superadmin-2fa`, { identifier_hash: sha256('imam@setup.test'), password_hash: sha256('a long enough password') });
  assert.equal(login.status, 200, 'the page hashed the password as the API requires');
  await page.reload();
  await page.getByText('This service is set up already.').waitFor({ timeout: WAIT_MS });
  assert.deepEqual(problems, []);
});
