import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import type { TestService } from '../support/service.ts';

/** Debian's chromium (the Playwright download cannot be reached here); .ci/run installs it. */
export const chromiumPath = () => process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const SHOTS = path.resolve('.tmp/console-shots');
/** Generous: the machine is shared and loaded; every wait is on a condition, never a fixed sleep. */
export const WAIT_MS = 30_000;

let shared: Promise<Browser> | null = null;
// Registered when a test file loads this module, so it runs at the root, once the file's last test is done.
after(async () => {
  if (shared) await (await shared).close();
});

/**
 * The file's browser: one chromium per test file, launched by the first test that asks (a launch costs about
 * twice the CPU of a context). Tests stay apart as separate browsers kept them: each test's contexts (cookies,
 * storage, permissions) are its own and are closed when it ends. The tests in a file run one at a time.
 */
export async function launchBrowser(t: TestContext): Promise<Browser> {
  const executable = chromiumPath();
  if (!fs.existsSync(executable)) {
    throw new Error(`console tests need a browser: ${executable} is missing (apt-get install chromium, or set CHROMIUM_PATH)`);
  }
  let browser = shared && (await shared.catch(() => null));
  if (!browser?.isConnected()) {
    shared = chromium.launch({ executablePath: executable, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
    browser = await shared;
  }
  const earlier = new Set(browser.contexts());
  const own = browser;
  t.after(() => Promise.all(own.contexts().filter((c) => !earlier.has(c)).map((c) => c.close())));
  return browser;
}

/**
 * A phone-sized page (members use phones). Script errors and CSP violations fail the test: the console
 * must run under its own Content-Security-Policy without a single refused resource.
 */
export async function phonePage(browser: Browser, t: TestContext, opts: { locale?: string } = {}): Promise<{ page: Page; context: BrowserContext; problems: string[] }> {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, locale: opts.locale ?? 'en-US', deviceScaleFactor: 1 });
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  return { page, context, problems };
}

/**
 * A link or button of the header's navigation, ready to click: on a phone it is behind the menu button
 * (console/nav.js), which this opens once the navigation holds it (every page change renders it anew, closed).
 */
export async function fromMenu(page: Page, role: 'link' | 'button', name: string): Promise<Locator> {
  await page.locator('#nav').getByRole(role, { name, exact: true, includeHidden: true }).waitFor({ state: 'attached' });
  const button = page.locator('#menu-button');
  if (await button.isVisible() && await button.getAttribute('aria-expanded') !== 'true') await button.click();
  return page.locator('#nav').getByRole(role, { name, exact: true });
}

/** The password of every person test/support/service.ts signupMember makes. */
export const PASSWORD = 'correct horse battery staple';

/** Fills the password form on the page shown and waits until the console has left the sign-in page. */
export async function signIn(page: Page, email: string, password = PASSWORD): Promise<void> {
  const passwordForm = page.locator('form', { has: page.getByRole('heading', { name: 'With your password' }) });
  await passwordForm.getByLabel('Email').fill(email);
  await passwordForm.getByLabel('Password').fill(password);
  await passwordForm.getByRole('button', { name: 'Sign in' }).click();
  await passwordForm.waitFor({ state: 'detached' });
}

/**
 * A phone page in a context of its own (in the file's browser), sent to `path` and signed in as `admin` (the console asks a
 * signed-out visitor to sign in, then shows the page asked for). The test builds its service, mosque and
 * devices first (test/support/devices.ts mosqueWithOwner), so the page reads what the test set up.
 * `clockAt` installs the page's clock at that time before it opens (a phone agrees with the service).
 */
export async function signedInAdminPage(t: TestContext, ts: TestService, admin: { email: string }, opts: { path?: string; clockAt?: number } = {}) {
  const browser = await launchBrowser(t);
  const { page, context, problems } = await phonePage(browser, t);
  if (opts.clockAt !== undefined) await page.clock.install({ time: opts.clockAt });
  await page.goto(`${ts.url}${opts.path ?? '/'}`);
  await signIn(page, admin.email);
  return { browser, context, page, problems };
}

export async function shot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

const axeSource = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** Runs axe-core (from the npm package) in the page; serious or critical violations fail with their rules. */
export async function assertAccessible(page: Page, what: string): Promise<void> {
  // Evaluated through the DevTools protocol, which the page's CSP does not govern.
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const result = await (globalThis as unknown as { axe: { run(): Promise<{ violations: Array<{ id: string; impact: string; nodes: Array<{ target: string[] }> }> }> } }).axe.run();
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, targets: v.nodes.map((n) => n.target.join(' ')).slice(0, 3) }));
  });
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad, [], `${what}: axe found serious or critical violations`);
}

/** The superadmin's two steps on /superadmin: the password, then the one-time code the service sent (docs/api.md, "Signing in"). */
export async function superadminSignsIn(page: Page, ts: TestService, email: string, password: string): Promise<void> {
  await page.goto(`${ts.url}/superadmin`);
  // Should the form not appear, the failure says what the page showed instead (its address and text).
  await page.getByRole('textbox', { name: 'Email' }).waitFor().catch(async (err: Error) => {
    throw new Error(`${err.message}\nthe page at ${page.url()} showed: ${(await page.locator('body').innerText({ timeout: 1000 }).catch(() => '(unreadable)')).slice(0, 500)}`);
  });
  await page.getByRole('textbox', { name: 'Email' }).fill(email);
  await page.locator('input[name=password]').fill(password);
  await page.getByRole('button', { name: 'Continue' }).click();
  await page.getByLabel('One-time code', { exact: true }).waitFor();
  await ts.service.notifier.idle();
  await page.getByLabel('One-time code', { exact: true }).fill(ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!);
  await page.getByRole('button', { name: 'Verify and sign in' }).click();
}
