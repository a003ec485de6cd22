// Phone first, proven: every page of the console, filled with the longest names people have, fits a 320 px
// phone, a 390 px phone and a 768 px tablet without sideways scrolling, and every control is a 44 px target
// (docs/console.md, "Phone first").
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';
import { API, member } from '../support/people.ts';
import { createSuperadmin } from '../support/superadmin.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { mosqueWithOwner, registerPlayer, registerTransmitter } from '../support/devices.ts';
import { launchBrowser, phonePage, signIn } from './browser.ts';

const WIDTHS = [320, 390, 768];
/** 80 characters, most of them one word with no place to break: the worst a name can do to a layout. */
const LONG_NAME = `Masjid ${'Noorulislamwalmuslimeenjamiatulhudaassalafiyyahwalkhayriyyahmarkaz'.padEnd(73, 'x')}`;
/** 80 characters: a 60-character local part and a long domain. */
const LONG_EMAIL = `${'imam.of.the.central.jamia.masjid.noor.ul.islam.and.the.madr'.padEnd(60, 'a')}@mosques-net.example`;
assert.equal(LONG_NAME.length, 80);
assert.equal(LONG_EMAIL.length, 80);
const ROOT = { email: `${'root.of.the.network'.padEnd(60, 'r')}@minaret-operators.example`, password: 'root password 123' };

// The in-page scripts are strings: the test runner's TypeScript loader wraps named functions in a helper
// the page does not have.
const QUIET = `new Promise((resolve) => {
  let timer;
  const observer = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(done, 400); });
  function done() { observer.disconnect(); resolve(); }
  timer = setTimeout(done, 400);
  observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
})`;

const MISFITS = `(() => {
  const found = [];
  if (document.documentElement.scrollWidth > innerWidth) found.push('scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + innerWidth);
  const name = (el) => el.tagName.toLowerCase() + (el.type ? '[' + el.type + ']' : '') + ' "' + (el.textContent || el.getAttribute('aria-label') || el.name || '').trim().slice(0, 40) + '"';
  for (const el of document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea, summary')) {
    if (el.closest('[hidden], .skip') || el.getClientRects().length === 0) continue;
    let target = el;
    if (el.type === 'checkbox' || el.type === 'radio') target = el.closest('label') || el;
    if (el.tagName === 'A' && getComputedStyle(el).display === 'inline') {
      const around = ((el.parentElement && el.parentElement.textContent) || '').trim();
      if (around.length > (el.textContent || '').trim().length) continue; // a link in a sentence
    }
    const box = target.getBoundingClientRect();
    if (box.height < 43.5 || box.width < 43.5) found.push(name(el) + ' is ' + Math.round(box.width) + ' x ' + Math.round(box.height));
    if (box.right > innerWidth + 0.5 || box.left < -0.5) found.push(name(el) + ' sticks out of the page (' + Math.round(box.left) + '..' + Math.round(box.right) + ')');
  }
  return found;
})()`;

/** Moves inside the console as a click on a link does (a reload would ask to sign in again without a session). */
async function open(page: Page, path: string): Promise<void> {
  await page.evaluate((p) => {
    const w = globalThis as any;
    w.history.pushState(null, '', p);
    w.dispatchEvent(new w.PopStateEvent('popstate'));
  }, path);
  await page.locator('main h1').first().waitFor();
  // The page reads the API after its heading: wait until nothing has changed in it for 400 ms.
  await page.evaluate(QUIET);
}

/**
 * What does not fit: sideways scroll, and controls smaller than 44 x 44 CSS px. A link inside a sentence is
 * exempt, as WCAG 2.5.5 exempts inline targets; a checkbox counts by its label, which is what a thumb hits.
 */
async function misfits(page: Page): Promise<string[]> {
  return page.evaluate(MISFITS) as Promise<string[]>;
}

async function checkEvery(t: TestContext, page: Page, paths: string[], who: string): Promise<string[]> {
  const failures: string[] = [];
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: 800 });
    for (const path of paths) {
      await open(page, path);
      for (const m of await misfits(page)) failures.push(`${who} ${path} at ${width} px: ${m}`);
    }
  }
  t.diagnostic(`${who}: ${paths.length} pages at ${WIDTHS.join(', ')} px`);
  return failures;
}

async function world(ts: TestService) {
  await createSuperadmin(ts, ROOT.email, ROOT.password);
  const { owner, mosque } = await mosqueWithOwner(ts, { name: LONG_NAME, timezone: 'Asia/Karachi', latitude: 24.86, longitude: 67.01, prayer_times: { method: 'karachi', madhab: 'hanafi' } }, LONG_EMAIL);
  const tx = await registerTransmitter(ts, owner.token, mosque.id, LONG_NAME);
  const listener = await member(ts, `listener.${'x'.repeat(50)}@family-of-the-mosque.example`);
  const player = await registerPlayer(ts, listener, mosque.id, LONG_NAME);
  const memberships = (await ts.http.get(`${API}/mosques/${mosque.id}/memberships`, owner.token)).body as Array<{ id: string; user_id: string }>;
  const theirs = memberships.find((m) => m.user_id === listener.id)!;
  assert.equal((await ts.http.patch(`${API}/memberships/${theirs.id}`, { status: 'approved' }, owner.token)).status, 200);
  const started = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'announcement', title: LONG_NAME }, owner.token);
  assert.equal(started.status, 201);
  return { owner, mosque, tx, listener, player, membership: theirs };
}

test('every page fits 320, 390 and 768 px with 80-character names, and every control is a 44 px target', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque, tx, listener, player, membership } = await world(ts);
  const browser = await launchBrowser(t);
  const failures: string[] = [];

  // Signed out: the pages a stranger sees.
  const stranger = await phonePage(browser, t);
  await stranger.page.goto(`${ts.url}/signin`);
  failures.push(...await checkEvery(t, stranger.page, ['/signin', '/signup', '/superadmin', '/setup', `/join/${mosque.join_code}`], 'stranger'));

  // A member: home (prayer times, their players, notifications), the account page, a join link.
  const home = await phonePage(browser, t);
  await home.page.goto(`${ts.url}/signin`);
  await signIn(home.page, listener.email);
  failures.push(...await checkEvery(t, home.page, ['/', '/account', `/join/${mosque.join_code}`], 'member'));

  // The mosque's owner: every mosque page and both kinds of device page.
  const imam = await phonePage(browser, t);
  await imam.page.goto(`${ts.url}/signin`);
  await signIn(imam.page, owner.email);
  const base = `/mosques/${mosque.id}`;
  failures.push(...await checkEvery(t, imam.page,
    ['/', base, `${base}/members`, `${base}/members/${membership.id}`, `${base}/devices`, `${base}/team`, `${base}/activity`, `${base}/schedule`, `${base}/settings`, `${base}/print`, `/devices/${tx.device.id}`, `/devices/${player.device.id}`, '/account'], 'admin'));

  // The superadmin: all mosques and people.
  const root = await phonePage(browser, t);
  await root.page.goto(`${ts.url}/superadmin`);
  await root.page.getByRole('textbox', { name: 'Email' }).fill(ROOT.email);
  await root.page.locator('input[name=password]').fill(ROOT.password);
  await root.page.getByRole('button', { name: 'Continue' }).click();
  await root.page.getByLabel('One-time code', { exact: true }).waitFor();
  await ts.service.notifier.idle();
  const otp = ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!;
  await root.page.getByLabel('One-time code', { exact: true }).fill(otp);
  await root.page.getByRole('button', { name: 'Verify and sign in' }).click();
  await root.page.getByRole('link', { name: 'All mosques' }).waitFor();
  failures.push(...await checkEvery(t, root.page, ['/admin', base], 'superadmin'));

  assert.deepEqual(failures, [], `${failures.length} misfits:\n${failures.join('\n')}`);
  for (const { problems } of [stranger, home, imam, root]) assert.deepEqual(problems, []);
});
