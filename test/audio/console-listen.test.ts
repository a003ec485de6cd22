import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createMosque, joinMosque, member, signInSuperadmin } from '../support/people.ts';
import { audioWorld, HOOK_SECRET } from './icecast.ts';
import { WAIT_MS, launchBrowser, phonePage, signIn } from '../console/browser.ts';
import { startTestService } from '../support/service.ts';

/** "Listen now" on a member's home (docs/console.md): an address the audio server admits for that member. */
test('an approved member listens in the console through the gate; without an audio server the button says so', async (t) => {
  const { ts } = await audioWorld(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@listen.test');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true });
  await joinMosque(ts, await member(ts, 'amina@listen.test'), mosque.id);
  // The page may play the audio server's stream (its CSP names that origin in media-src).
  const csp = (await fetch(`${ts.url}/`)).headers.get('content-security-policy') ?? '';
  assert.match(csp, new RegExp(`media-src 'self' ${new URL(ts.config.icecast!.url).origin.replace(/[.]/g, '\\.')}`));
  const browser = await launchBrowser(t);
  const { page } = await phonePage(browser, t);
  await page.goto(`${ts.url}/signin`);
  await signIn(page, 'amina@listen.test');
  await page.getByRole('button', { name: 'Listen now' }).click();
  const audio = page.getByLabel("The mosque's live audio");
  await audio.waitFor({ timeout: WAIT_MS });
  const src = await audio.getAttribute('src');
  assert.match(src!, new RegExp(`/m/${mosque.id}\\?ticket=`));
  // The address the page got is one the gate admits: Minaret's answer to Icecast's listener_add for it.
  const url = new URL(src!);
  const answer = await fetch(`${ts.url}/api/v1/audio/hooks/listener_add`, {
    method: 'POST',
    headers: { authorization: `Basic ${Buffer.from(`icecast:${HOOK_SECRET}`).toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ action: 'listener_add', client: '7', mount: `${url.pathname}${url.search}`, server: '127.0.0.1', port: url.port, ip: '127.0.0.1', agent: 'test', user: '', pass: '' }),
  });
  assert.equal(answer.status, 200, await answer.text());
  assert.equal(answer.headers.get('icecast-auth-user'), '1');

  const plain = await startTestService(t, { logLevel: 'warn' });
  const root2 = await signInSuperadmin(plain);
  const owner2 = await member(plain, 'owner@listen.test');
  const m2 = await createMosque(plain, root2.token, owner2, { auto_approve_members: true });
  await joinMosque(plain, await member(plain, 'bilal@listen.test'), m2.id);
  const other = await phonePage(browser, t);
  await other.page.goto(`${plain.url}/signin`);
  await signIn(other.page, 'bilal@listen.test');
  await other.page.getByRole('button', { name: 'Listen now' }).click();
  await other.page.getByText('Listening in the browser is not set up on this server.').waitFor({ timeout: WAIT_MS });
});
