// Phone first, proven: every page of the console, filled with the longest names people have, in English and in
// Arabic, fits a 320 px phone, a 390 px phone and a 768 px tablet without sideways scrolling; every control is a
// 44 px target; no word of a header link, button, tab, label or select is split across lines or cut; and the
// header is one row, at most HEADER_MAX px tall, with its menu opening and closing by keyboard (docs/console.md,
// "Phone first").
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';
import { API, member, superadminToken } from '../support/people.ts';
import { createSuperadmin } from '../support/superadmin.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { mosqueWithOwner, registerPlayer, registerTransmitter } from '../support/devices.ts';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { launchBrowser, phonePage, signIn } from './browser.ts';

const WIDTHS = [320, 390, 768];
/** One row of 44 px targets with the bar's 8 px padding above and below, and a little slack for rounding. */
const HEADER_MAX = 64;
/**
 * Words up to this many characters are never split; longer ones are names and addresses people typed (the 80-character
 * ones below), which must wrap rather than widen the page. The longest word in the console's own strings is 15.
 */
const LONGEST_WORD = 24;
/** 80 characters, most of them one word with no place to break: the worst a name can do to a layout. */
const LONG_NAME = `Masjid ${'Noorulislamwalmuslimeenjamiatulhudaassalafiyyahwalkhayriyyahmarkaz'.padEnd(73, 'x')}`;
/** 80 characters: a 60-character local part and a long domain. */
const LONG_EMAIL = `${'imam.of.the.central.jamia.masjid.noor.ul.islam.and.the.madr'.padEnd(60, 'a')}@mosques-net.example`;
assert.equal(LONG_NAME.length, 80);
assert.equal(LONG_EMAIL.length, 80);
const ROOT = { email: `${'root.of.the.network'.padEnd(60, 'r')}@minaret-operators.example`, password: 'root password 123' };
/** Firmware updates on, so the superadmin's Firmware page shows its lists and forms (docs/api.md, "Firmware updates"). */
const FIRMWARE = newKeyPair();

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
    // A tab scrolled out of its row is reached by scrolling the row: the row itself must fit the page.
    const outer = el.closest('nav.tabs') ? el.closest('nav.tabs').getBoundingClientRect() : box;
    if (outer.right > innerWidth + 0.5 || outer.left < -0.5) found.push(name(el) + ' sticks out of the page (' + Math.round(box.left) + '..' + Math.round(box.right) + ')');
  }
  return found;
})()`;

// Every word of a header's text, button, tab, label and summary must sit on one line box: a Range over the word gives
// one client rect per line it occupies. A select cannot wrap: it must be as wide as its widest option (a clone
// sized to its content measures that), else an option's text is cut.
const SPLIT = `((longest, headerMax) => {
  const found = [];
  const visible = (el) => el && !el.closest('[hidden]') && el.getClientRects().length > 0;
  const label = (el) => el.tagName.toLowerCase() + ' "' + (el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 40) + '"';
  const roots = [...document.querySelectorAll('header, main button, main nav.tabs a, main a.button, main label, main summary')];
  const checked = new Set();
  for (const root of roots) {
    if (!visible(root)) continue;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (checked.has(node)) continue;
      checked.add(node);
      const parent = node.parentElement;
      if (!visible(parent) || parent.closest('select, option, .skip')) continue;
      for (const m of node.data.matchAll(/[^\\s\u2010-\u2014-]+/g)) {
        if ([...m[0]].length > longest) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = [...range.getClientRects()].filter((r) => r.width > 0.5).map((r) => r.top).sort((a, b) => a - b);
        const lines = tops.filter((top, i) => i === 0 || top - tops[i - 1] > 4).length;
        if (lines > 1) found.push(label(parent) + ' splits "' + m[0] + '" across ' + lines + ' lines');
      }
    }
  }
  for (const select of document.querySelectorAll('select')) {
    if (!visible(select)) continue;
    const clone = select.cloneNode(true);
    // A name or an address longer than any line is cut as it would be wrapped anywhere else.
    for (const option of [...clone.options]) if (option.text.split(/\\s+/).some((w) => [...w].length > longest)) option.remove();
    if (clone.options.length === 0) continue;
    clone.style.cssText = 'position:absolute;visibility:hidden;width:max-content !important;max-width:none !important;min-width:0 !important';
    select.parentElement.append(clone);
    const needed = clone.getBoundingClientRect().width;
    clone.remove();
    const has = select.getBoundingClientRect().width;
    if (has + 0.5 < needed) found.push('select "' + (select.name || select.id) + '" cuts its options: ' + Math.round(has) + ' px of ' + Math.round(needed) + ' px');
  }
  const bar = document.querySelector('header').getBoundingClientRect().height;
  const open = document.getElementById('menu-button').getAttribute('aria-expanded') === 'true';
  if (!open && bar > headerMax) found.push('the header is ' + Math.round(bar) + ' px tall (at most ' + headerMax + ')');
  return found;
})`;

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

/** Splits and cuts as SPLIT finds them, and a header taller than HEADER_MAX while its menu is closed. */
async function splits(page: Page): Promise<string[]> {
  return page.evaluate(`${SPLIT}(${LONGEST_WORD}, ${HEADER_MAX})`) as Promise<string[]>;
}

/**
 * On a phone the navigation is behind the menu button: it opens (aria-expanded), its links are whole words and
 * 44 px targets, and Escape closes it and gives the button its focus back.
 */
async function menuMisfits(page: Page): Promise<string[]> {
  const button = page.locator('#menu-button');
  if (!(await button.isVisible())) return [];
  const found: string[] = [];
  await button.focus();
  await page.keyboard.press('Enter');
  if (await button.getAttribute('aria-expanded') !== 'true') found.push('Enter on the menu button did not open the menu');
  if (!(await page.locator('#nav').isVisible())) found.push('the open menu does not show the navigation');
  found.push(...(await misfits(page)).filter((m) => !m.startsWith('scrolls')).map((m) => `menu open: ${m}`));
  found.push(...(await splits(page)).map((m) => `menu open: ${m}`));
  await page.keyboard.press('Tab');
  await page.keyboard.press('Escape');
  if (await button.getAttribute('aria-expanded') !== 'false') found.push('Escape did not close the menu');
  if (!(await button.evaluate((b) => b === (b.ownerDocument as any).activeElement))) found.push('Escape did not give the menu button its focus back');
  if (await page.locator('#nav').isVisible()) found.push('the closed menu still shows the navigation');
  return found;
}

async function checkEvery(t: TestContext, page: Page, paths: string[], who: string): Promise<string[]> {
  const failures: string[] = [];
  for (const lang of ['en', 'ar']) {
    await page.evaluate((l) => {
      const select = (globalThis as any).document.getElementById('lang');
      select.value = l;
      select.dispatchEvent(new (globalThis as any).Event('change'));
    }, lang);
    await page.waitForFunction((l) => (globalThis as any).document.documentElement.lang === l, lang);
    for (const width of WIDTHS) {
      await page.setViewportSize({ width, height: 800 });
      for (const path of paths) {
        await open(page, path);
        const where = `${who} ${lang} ${path} at ${width} px`;
        for (const m of [...await misfits(page), ...await splits(page), ...await menuMisfits(page)]) failures.push(`${where}: ${m}`);
      }
    }
  }
  t.diagnostic(`${who}: ${paths.length} pages at ${WIDTHS.join(', ')} px, in English and Arabic`);
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

test('every page fits 320, 390 and 768 px in English and Arabic with 80-character names: 44 px targets, no split word, a one-row header', async (t) => {
  const ts = await startTestService(t, { env: { FIRMWARE_PUBLIC_KEY: FIRMWARE.publicRaw }, logLevel: 'warn' });
  const { owner, mosque, tx, listener, player, membership } = await world(ts);
  const browser = await launchBrowser(t);
  const failures: string[] = [];

  // Signed out: the pages a stranger sees.
  const stranger = await phonePage(browser, t);
  await stranger.page.goto(`${ts.url}/signin`);
  await stranger.page.locator('main h1').first().waitFor();
  // The check itself: a button squeezed until "Your account" breaks inside a word, and a select narrower than
  // its option, are both reported (the header's old fault, and the settings page's).
  await stranger.page.evaluate(() => {
    const d = (globalThis as any).document;
    const probe = d.createElement('div');
    probe.id = 'probe';
    // Markup without style attributes (the page's CSP refuses them); sizes through the CSSOM, which it allows.
    probe.innerHTML = '<button type="button">Your account</button><label><span>Azaan</span><select name="probe"><option>At the start of the prayer time</option></select></label>';
    Object.assign(probe.querySelector('button').style, { inlineSize: '60px', overflowWrap: 'anywhere' });
    probe.querySelector('select').style.inlineSize = '120px';
    d.querySelector('main').append(probe);
  });
  const caught = await splits(stranger.page);
  assert.ok(caught.some((m) => m.includes('splits "account"')), `a split word is reported: ${caught.join('; ')}`);
  assert.ok(caught.some((m) => m.startsWith('select "probe" cuts its options')), `a cut select is reported: ${caught.join('; ')}`);
  await stranger.page.evaluate(() => (globalThis as any).document.getElementById('probe').remove());
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
  await root.page.getByRole('link', { name: 'All mosques', includeHidden: true }).waitFor({ state: 'attached' });
  // An image with the longest notes and version a release has, and a rollout of it (its group empty: no device reported T1).
  const image = Buffer.from('firmware');
  const rootToken = await superadminToken(ts, ROOT.email, ROOT.password);
  const put = await ts.http.request('PUT', `${API}/firmware/images/transmitter/T1/10.20.30-rc.123`, { token: rootToken, raw: image,
    headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': signDigest(FIRMWARE.privatePem, digestOf(image).raw), 'x-firmware-notes': encodeURIComponent(LONG_NAME) } });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  assert.equal((await ts.http.post(`${API}/firmware/rollouts`, { image_id: put.body.id, groups: [{ devices: 2 }, { percent: 100 }] }, rootToken)).status, 201);
  failures.push(...await checkEvery(t, root.page, ['/admin', '/admin/firmware', base], 'superadmin'));

  assert.deepEqual(failures, [], `${failures.length} misfits:\n${failures.join('\n')}`);
  for (const { problems } of [stranger, home, imam, root]) assert.deepEqual(problems, []);
});
