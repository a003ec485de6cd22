/**
 * The walk-through (docs/walkthrough.md), done in the browser the way an imam, a member and the operator
 * would: Debian's chromium (playwright-core) drives the console of a fresh service (its own data folder,
 * ports 0, 127.0.0.1), the superadmin is made with the operator CLI, and the simulator plays the member's
 * player. Every step is checked; the first that fails stops the run with its name (and a picture of the
 * page in the temp folder). One picture per main page at phone width lands in --out (`<page>.png`, the
 * ones docs/console.md and the README show and git keeps) and one at desktop width in --out/desktop/ (git-ignored under docs/:
 * no folder may hold more than 12 files, and the docs show phones, as members use them).
 *
 *   npm run screenshots [-- --out docs/console/walkthrough]
 *
 * Elements are found by role and label, never by position, so pages that gain sections keep working.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium, type Browser, type Page } from 'playwright-core';
import { loadConfig } from '../src/platform/config.ts';
import { silentLogger } from '../src/platform/log.ts';
import type { OutgoingMessage } from '../src/platform/notify.ts';
import { startService, type Service } from '../src/service.ts';
import { SimDevice } from '../simulator/device.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({ options: { out: { type: 'string', default: path.join(ROOT, 'docs', 'console', 'walkthrough') } } });
const OUT = path.resolve(values.out!);
const PHONE = { width: 390, height: 844 };
const DESKTOP = { width: 1280, height: 800 };
const WAIT_MS = 30_000;
const PEOPLE = {
  root: { email: 'root@walkthrough.example', password: 'a long root password' },
  imam: { email: 'imam@walkthrough.example', password: 'the imam password' },
  member: { email: 'amina@walkthrough.example', password: 'a long password' },
};
const MOSQUE = 'Masjid Al-Noor';

let current = '';
/** Runs one step of the story; a failure names the step and keeps a picture of the page it happened on. */
async function step<T>(name: string, page: Page | null, action: () => Promise<T>): Promise<T> {
  current = name;
  try {
    const result = await action();
    console.log(`ok: ${name}`);
    return result;
  } catch (err) {
    const picture = path.join(os.tmpdir(), `minaret-screenshots-failed.png`);
    await page?.screenshot({ path: picture, fullPage: true }).catch(() => {});
    throw new Error(`step "${name}" failed: ${(err as Error).message.split('\n')[0]}${page ? ` (the page: ${picture})` : ''}`);
  }
}

/** The page as it is, at phone width and at desktop width. */
async function picture(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
  await page.setViewportSize(DESKTOP);
  await page.screenshot({ path: path.join(OUT, 'desktop', `${name}.png`), fullPage: true });
  await page.setViewportSize(PHONE);
}

async function person(browser: Browser, locale = 'en-US'): Promise<Page> {
  const context = await browser.newContext({ viewport: PHONE, locale, deviceScaleFactor: 1 });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on('pageerror', (e) => console.error(`page error (${current}): ${e.message}`));
  return page;
}

async function signUp(page: Page, who: { email: string; password: string }) {
  await page.getByRole('heading', { name: 'Create an account' }).waitFor();
  await page.getByLabel('Email').fill(who.email);
  await page.getByLabel('Password').fill(who.password);
  await page.getByRole('button', { name: 'Create account' }).click();
}

/** A link of the header's navigation: on a phone it is behind the menu button (console/nav.js), opened first. */
async function menuLink(page: Page, name: string) {
  await page.locator('#nav').getByRole('link', { name, exact: true, includeHidden: true }).waitFor({ state: 'attached' });
  const button = page.locator('#menu-button');
  if (await button.isVisible() && await button.getAttribute('aria-expanded') !== 'true') await button.click();
  return page.locator('#nav').getByRole('link', { name, exact: true });
}

/** From anywhere in the console: Home, then the mosque (its page reads the pending list when it opens). */
async function openMosque(page: Page) {
  await (await menuLink(page, 'Home')).click();
  await page.getByRole('heading', { name: 'Mosques you run' }).waitFor();
  await page.getByRole('link', { name: MOSQUE }).click();
  await page.getByRole('heading', { name: MOSQUE, level: 1 }).waitFor();
  await page.getByText('Updating live').waitFor();
}

async function story(service: Service, browser: Browser, messages: OutgoingMessage[], databasePath: string) {
  const url = service.httpUrl;
  await step('the operator creates the superadmin with the CLI (password on standard input)', null, async () => {
    const cli = spawnSync(process.execPath, ['--import', 'tsx', 'cli/index.ts', 'superadmin', 'create', '--email', PEOPLE.root.email], {
      cwd: ROOT, input: `${PEOPLE.root.password}\n`, encoding: 'utf8', env: { ...process.env, DATABASE_PATH: databasePath },
    });
    if (cli.status !== 0) throw new Error(cli.stderr.trim());
  });

  const arabic = await person(browser, 'ar-EG');
  await step('an Arabic phone gets the sign-in page in Arabic, right to left', arabic, async () => {
    await arabic.goto(`${url}/`);
    await arabic.getByRole('heading', { name: 'تسجيل الدخول' }).waitFor();
    if ((await arabic.locator('html').getAttribute('dir')) !== 'rtl') throw new Error('the page is not right to left');
    await picture(arabic, 'signin-arabic');
    await arabic.context().close();
  });

  const imam = await person(browser);
  await step('the imam opens the console and creates an account', imam, async () => {
    await imam.goto(`${url}/`);
    await imam.getByRole('heading', { name: 'Sign in' }).waitFor();
    await picture(imam, 'signin');
    await imam.getByRole('link', { name: 'Sign up' }).first().click();
    await signUp(imam, PEOPLE.imam);
    await imam.getByRole('heading', { name: 'Your Minaret' }).waitFor();
  });

  // What is addressed to an email (here, the mosque's ownership) goes only to an account that confirmed it.
  await step('the imam confirms the email with the code sent to it', imam, async () => {
    const banner = imam.locator('[data-unproven=email]');
    await banner.getByRole('button', { name: 'Send me a code' }).click();
    await banner.getByLabel('6-digit code').waitFor();
    await service.notifier.idle();
    const code = messages.filter((m) => m.purpose === 'confirm_address' && m.to === PEOPLE.imam.email).at(-1)?.code;
    if (!code) throw new Error('no confirmation code was sent to the imam');
    await picture(imam, 'confirm-email');
    await banner.getByLabel('6-digit code').fill(code);
    await banner.getByRole('button', { name: 'Confirm' }).click();
    await imam.getByText('Your email is confirmed.').waitFor();
  });

  const root = await person(browser);
  await step('the superadmin signs in at /superadmin in two steps (the code is signed in the browser)', root, async () => {
    await root.goto(`${url}/superadmin`);
    await root.getByRole('textbox', { name: 'Email' }).fill(PEOPLE.root.email);
    await root.locator('input[name=password]').fill(PEOPLE.root.password);
    await root.getByRole('button', { name: 'Continue' }).click();
    await root.getByLabel('One-time code', { exact: true }).waitFor();
    await service.notifier.idle();
    const otp = messages.filter((m) => m.purpose === 'superadmin_otp' && m.to === PEOPLE.root.email).at(-1)?.code;
    if (!otp) throw new Error('no one-time code was sent to the superadmin');
    await root.getByLabel('One-time code', { exact: true }).fill(otp);
    await picture(root, 'superadmin-step2');
    await root.getByRole('button', { name: 'Verify and sign in' }).click();
    await (await menuLink(root, 'All mosques')).click();
    await root.getByRole('heading', { name: 'All mosques' }).waitFor();
  });

  await step('the superadmin creates the mosque with the imam as its owner and its stream address', root, async () => {
    await root.getByLabel('Name', { exact: true }).fill(MOSQUE);
    await root.getByLabel("Owner's email").fill(PEOPLE.imam.email);
    await root.getByLabel('Stream address').fill('https://radio.example/noor');
    await root.getByRole('button', { name: 'Create mosque' }).click();
    await root.getByRole('link', { name: MOSQUE }).waitFor();
    await picture(root, 'superadmin-mosques');
  });

  const joinLink = await step('the imam opens the mosque and finds its join link under Admins and invites', imam, async () => {
    await openMosque(imam);
    await imam.getByRole('link', { name: 'Admins and invites' }).click();
    const link = await imam.locator('a[data-join-link]').textContent();
    if (!link || !/\/join\/[A-Za-z0-9_-]+$/.test(link)) throw new Error(`no join link on the page: ${link}`);
    return link;
  });

  const member = await person(browser);
  await step('a member opens the join link, signs up and joins: waiting for approval', member, async () => {
    await member.goto(joinLink);
    // Signed out, the link names its mosque (GET /api/v1/join/<code>) and offers sign-in or sign-up.
    await member.getByText(/^You are invited to join .+ on Minaret\./).waitFor();
    await member.getByRole('main').getByRole('link', { name: 'Sign up' }).click();
    await signUp(member, PEOPLE.member);
    await member.getByText(/^Join .+ on Minaret\?/).waitFor();
    // An account that has confirmed nothing holds nothing: the join page asks for the code first.
    const banner = member.locator('[data-unproven=email]');
    await banner.getByRole('button', { name: 'Send me a code' }).click();
    await banner.getByLabel('6-digit code').waitFor();
    await service.notifier.idle();
    const code = messages.filter((m) => m.purpose === 'confirm_address' && m.to === PEOPLE.member.email).at(-1)?.code;
    if (!code) throw new Error('no confirmation code was sent to the member');
    await banner.getByLabel('6-digit code').fill(code);
    await banner.getByRole('button', { name: 'Confirm' }).click();
    await member.getByText('Your email is confirmed.').waitFor();
    await member.getByRole('button', { name: 'Join' }).click();
    await member.getByRole('heading', { name: 'Your Minaret' }).waitFor();
    await member.getByText('Waiting: an admin of the mosque must approve you.').waitFor();
  });

  const credentials = await step('the member adds a stream player and sees its credentials once', member, async () => {
    // Pairing by a code is the way shown first; registering by hand is folded under "Advanced".
    await member.getByText('Advanced: register a player and copy its credentials by hand').click();
    await member.getByLabel('Player name').fill('Kitchen speaker');
    await member.getByRole('button', { name: 'Add player' }).click();
    const password = await member.locator('[data-credential=password]').textContent();
    const id = await member.locator('[data-credential=username]').textContent();
    const mqttUrl = await member.locator('[data-credential=mqtt_url]').textContent();
    if (!password || password.length < 32 || !id || !mqttUrl) throw new Error('the credentials are not shown');
    await member.locator(`li[data-device="${id}"]`).getByText('An admin must approve you before the player can play.').waitFor();
    await picture(member, 'member-player-credentials');
    return { id, password, mqttUrl };
  });

  await step('the imam sees the member waiting and approves them', imam, async () => {
    await openMosque(imam);
    const approve = imam.getByRole('button', { name: `Approve: ${PEOPLE.member.email}` });
    await approve.waitFor();
    await picture(imam, 'admin-member-waiting');
    await approve.click();
    await imam.getByText('Nobody is waiting.').waitFor();
  });

  const sim = new SimDevice({ kind: 'stream_player', id: credentials.id, password: credentials.password, mqttUrl: credentials.mqttUrl, startTimeoutMs: 15_000 });
  try {
    await step('the simulator plays the player with those credentials: ONLINE on the member\'s and the imam\'s pages', member, async () => {
      await imam.getByRole('link', { name: 'Devices' }).click();
      await sim.start();
      const imamRow = imam.locator(`li[data-device="${credentials.id}"]`);
      await imamRow.locator('.badge', { hasText: 'Online' }).waitFor();
      const memberRow = member.locator(`li[data-device="${credentials.id}"]`);
      // A member's page reads the players again every 10 s (no event stream for members).
      await memberRow.getByText('Online and ready to play.').waitFor();
      await (await menuLink(member, 'Home')).click();
      await member.getByText('You are a member.').waitFor();
      await memberRow.getByText('Online and ready to play.').waitFor();
      await picture(member, 'member-player-online');
    });

    await step('the imam starts the Maghrib azaan and sees the delivery report count the player', imam, async () => {
      await imam.getByRole('link', { name: 'Overview' }).click();
      await imam.getByText('Updating live').waitFor();
      await imam.getByLabel('What').selectOption('azaan');
      await imam.getByLabel('Prayer').selectOption('maghrib');
      await imam.getByRole('button', { name: 'Start broadcast' }).click();
      const live = imam.locator('li[data-broadcast]').filter({ has: imam.locator('.badge', { hasText: 'Live' }) });
      // The report is read again every 5 s while the broadcast is live.
      await live.locator('dd[data-report=playing]', { hasText: /^[1-9]\d*$/ }).waitFor();
      await picture(imam, 'admin-broadcast-live');
      await live.getByRole('button', { name: 'Stop broadcast' }).click();
      await imam.locator('li[data-broadcast] .badge', { hasText: 'Stopped' }).first().waitFor();
    });
  } finally {
    await sim.stop().catch(() => {});
  }
}

async function main() {
  fs.mkdirSync(path.join(OUT, 'desktop'), { recursive: true });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-screenshots-'));
  const messages: OutgoingMessage[] = [];
  const loaded = loadConfig({
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir,
    BCRYPT_COST: '10', LOG_LEVEL: 'silent',
  });
  if (!loaded.ok) throw new Error(loaded.error);
  // The outgoing messages (the superadmin's one-time code) are kept here, as the console transport would print them.
  const service = await startService(loaded.config, { logger: silentLogger, transport: { name: 'screenshots', deliver: async (m) => { messages.push(m); } } });
  const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!fs.existsSync(executablePath)) throw new Error(`${executablePath} is missing (apt-get install chromium, or set CHROMIUM_PATH)`);
  const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  try {
    await story(service, browser, messages, loaded.config.databasePath);
    console.log(`walk-through complete; pictures in ${OUT}`);
  } finally {
    await browser.close();
    await service.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  console.error(`FAILED: ${err.message}`);
  process.exit(1);
});
