import { test } from 'node:test';
import assert from 'node:assert/strict';
import { waitFor, mosqueWithOwner } from '../support/devices.ts';
import { joinMosque, member } from '../support/people.ts';
import { startTestService } from '../support/service.ts';
import { launchBrowser, phonePage, signIn, WAIT_MS } from './browser.ts';

// docs/operator.md, "Health": with the audio server down, /healthz answers 200 naming it, and the console tells those
// who run the mosque, above their pages; a member's Home stays as it was.

test('with Icecast unreachable, an admin sees the audio server named above the mosque page; a member sees nothing', async (t) => {
  const ts = await startTestService(t, { logLevel: 'error', env: { ICECAST_URL: 'http://127.0.0.1:9', ICECAST_ADMIN_PASSWORD: 'a-long-admin-password', ICECAST_HOOK_SECRET: 'h'.repeat(40) } });
  await waitFor('/healthz names audio down', async () => (await ts.http.get('/healthz')).body.audio === 'down', 15_000);
  const health = await ts.http.get('/healthz');
  assert.equal(health.status, 200, 'an optional part down: the node still serves');
  const { owner, mosque } = await mosqueWithOwner(ts);
  const amina = await member(ts, 'amina@health.test');
  await joinMosque(ts, amina, mosque.id);

  const browser = await launchBrowser(t);
  const admin = (await phonePage(browser, t)).page;
  await admin.goto(`${ts.url}/signin`);
  await signIn(admin, owner.email);
  await admin.goto(`${ts.url}/mosques/${mosque.id}`);
  const notice = admin.locator('[data-health]');
  await notice.waitFor({ timeout: WAIT_MS });
  assert.equal(await notice.getAttribute('data-health'), 'audio');
  assert.match((await notice.textContent()) ?? '', /audio server does not answer/);

  const home = (await phonePage(browser, t)).page;
  await home.goto(`${ts.url}/signin`);
  await signIn(home, amina.email);
  await home.getByRole('heading', { level: 1 }).first().waitFor();
  await home.waitForLoadState('networkidle');
  assert.equal(await home.locator('[data-health]').count(), 0, "a member's Home shows no notice");
});
