import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BrowserContext, Page } from 'playwright-core';
import { openDatabase } from '../../src/platform/db.ts';
import { waitFor } from '../support/devices.ts';
import { member } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { WAIT_MS, fromMenu, launchBrowser, phonePage, signIn } from './browser.ts';

// docs/console.md "Token storage": a reload stays signed in through the HttpOnly session cookie, which script never
// reads, another site cannot use, and signing out (here or everywhere) ends.

const COOKIE = 'minaret_console';

function sessionRows(ts: TestService): Array<{ id: string; last_used_at: number }> {
  const db = openDatabase(ts.config.databasePath);
  try {
    return db.prepare('SELECT id, last_used_at FROM console_sessions ORDER BY created_at').all() as never;
  } finally {
    db.close();
  }
}

const sessionCookie = async (context: BrowserContext) => (await context.cookies()).find((c) => c.name === COOKIE);

/** Waits until the page shows its signed-in account page (the nav names the person). */
async function onAccountPage(page: Page, email: string) {
  await page.getByRole('heading', { name: 'Your account' }).waitFor({ timeout: WAIT_MS });
  await page.locator('#nav').getByText(email).waitFor({ state: 'attached', timeout: WAIT_MS }); // behind the menu on a phone
}

test('a reload stays signed in on the same page; the cookie is HttpOnly and SameSite=Strict; sign out clears it', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const amina = await member(ts, 'amina@session.test');
  const browser = await launchBrowser(t);
  const { page, context, problems } = await phonePage(browser, t);
  await page.goto(`${ts.url}/account`);
  await signIn(page, amina.email);
  await onAccountPage(page, amina.email);

  const cookie = await sessionCookie(context);
  assert.ok(cookie, 'the browser holds the session cookie');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.equal(cookie.path, '/api/v1/auth/session');
  assert.equal(cookie.secure, false, 'plain http on 127.0.0.1: the development exception (docs/console.md)');
  assert.equal((await page.evaluate(() => String((globalThis as any).document.cookie))).includes(COOKIE), false, 'script cannot read it');
  assert.equal(sessionRows(ts).length, 1);

  const minted = page.waitForResponse((r) => r.url().endsWith('/api/v1/auth/session/token'));
  await page.reload();
  assert.equal((await minted).status(), 200, 'one request for a token before the first render');
  await onAccountPage(page, amina.email);
  assert.equal(new URL(page.url()).pathname, '/account', 'the same page, not the sign-in page');

  // Signing out ends the session and the browser forgets the cookie.
  await (await fromMenu(page, 'button', 'Sign out')).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await sessionCookie(context), undefined);
  assert.deepEqual(sessionRows(ts), []);
  await page.goto(`${ts.url}/account`);
  await page.getByRole('heading', { name: 'Sign in' }).waitFor({ timeout: WAIT_MS });
  assert.deepEqual(problems, []);
});

test('"sign out everywhere" in a second browser ends the first one\'s session: its next request and a reload land on sign-in', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const bilal = await member(ts, 'bilal@session.test');
  const browser = await launchBrowser(t);
  const first = await phonePage(browser, t);
  const second = await phonePage(browser, t);
  for (const { page } of [first, second]) {
    await page.goto(`${ts.url}/account`);
    await signIn(page, bilal.email);
    await onAccountPage(page, bilal.email);
  }
  assert.equal(sessionRows(ts).length, 2, 'one session per browser');

  second.page.once('dialog', (d) => void d.accept());
  await second.page.getByRole('button', { name: 'Sign out everywhere' }).click();
  await second.page.getByRole('heading', { name: 'Sign in' }).waitFor({ timeout: WAIT_MS });
  assert.deepEqual(sessionRows(ts), []);

  // The first page's token was minted before: its next request is refused, the cookie too, and it goes to sign-in.
  const refused = first.page.waitForResponse((r) => r.url().endsWith('/api/v1/auth/session/token'));
  await (await fromMenu(first.page, 'link', 'Home')).click();
  assert.equal((await refused).status(), 401);
  await first.page.getByRole('heading', { name: 'Sign in' }).waitFor({ timeout: WAIT_MS });
  await first.page.goto(`${ts.url}/account`);
  await first.page.getByRole('heading', { name: 'Sign in' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await sessionCookie(first.context), undefined, 'the refused cookie was cleared');
  assert.deepEqual([...first.problems, ...second.problems], []);
});

test('a cross-origin POST carrying the cookie is refused with 403 and changes nothing', async (t) => {
  const ts = await startTestService(t, { logLevel: 'info', env: { LOG_REQUESTS: '1' } }); // the request log shows what the other origin cannot read
  const hafsa = await member(ts, 'hafsa@session.test');
  // Another origin on the same host (another port): same-site, so SameSite=Strict still sends the cookie, and only
  // the Origin rule stands between that page and a token.
  const foreign = http.createServer((_req, res) => void res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>elsewhere</title><p>elsewhere</p>'));
  await new Promise<void>((resolve) => foreign.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => foreign.close(() => resolve())));
  const foreignUrl = `http://127.0.0.1:${(foreign.address() as AddressInfo).port}`;

  const browser = await launchBrowser(t);
  const { page, context, problems } = await phonePage(browser, t);
  await page.goto(`${ts.url}/account`);
  await signIn(page, hafsa.email);
  await onAccountPage(page, hafsa.email);
  const before = sessionRows(ts);
  assert.equal(before.length, 1);

  const other = await context.newPage();
  await other.goto(foreignUrl);
  const target = `${ts.url}/api/v1/auth/session/token`;
  const refusedInLog = () => ts.logs.map((line) => JSON.parse(line)).filter((l) => l.msg === 'request' && l.path === '/api/v1/auth/session/token' && l.status === 403).length;

  // A script on the other origin: the browser sends the POST (a "simple" request needs no preflight) with the cookie.
  const outcome = await other.evaluate(async (url) => {
    try {
      const res = await fetch(url, { method: 'POST', credentials: 'include' });
      return `read ${res.status}`;
    } catch {
      return 'unreadable';
    }
  }, target);
  assert.equal(outcome, 'unreadable', 'the other origin cannot read the answer (no CORS grant)');
  await waitFor('the service answered that POST 403', () => refusedInLog() === 1, WAIT_MS);

  // A form on the other origin posting there (the classic CSRF): the answer is visible to the test as a navigation.
  const answered = other.waitForResponse(target);
  await other.evaluate((url) => {
    const form = (globalThis as any).document.createElement('form');
    Object.assign(form, { method: 'POST', action: url });
    (globalThis as any).document.body.append(form);
    form.submit();
  }, target);
  const response = await answered;
  const sent = await response.request().allHeaders();
  assert.equal(sent.origin, foreignUrl);
  assert.match(sent.cookie ?? '', /minaret_console=/, 'same-site: the browser did send the cookie, only the Origin rule refuses it');
  assert.equal(response.status(), 403);
  assert.equal((await response.json()).error.code, 'forbidden');
  await waitFor('the form\'s POST in the log', () => refusedInLog() === 2, WAIT_MS);
  assert.deepEqual(sessionRows(ts), before, 'the session was not used');

  await page.reload();
  await onAccountPage(page, hafsa.email);
  assert.deepEqual(problems, []);
});
