/**
 * The console's first load on a phone's slow link (docs/console.md, "Decisions"; goal: docs/sizing.md, "Goals"): a real service with a member who
 * has an approved membership and an online player, Debian's chromium at a phone's viewport, Chrome
 * DevTools' "Fast 3G" conditions through the DevTools protocol, a cold cache (a fresh browser context),
 * then a second (warm) visit in the same context. Beside it, in the same run: the same loads unthrottled,
 * and a bare page of the same byte count in one response from node:http (the floor the link alone sets).
 *
 *   npm run bench:console [-- --runs 3] [--no-write] [--before <console folder>]
 *
 * --before serves an older console/ folder (`git archive <commit> console | tar -x -C /tmp/before`) from a
 * second service of this code, measured in the same run, alternating with this one.
 *
 * Figures: encoded bytes (headers + compressed body, CDP `Network.loadingFinished.encodedDataLength`,
 * summed), and two times, each "usable" = the page's mark plus a 500 ms main-thread quiet window
 * (bench/console/page.ts): the sign-in page interactive, from navigation start; and Home rendered with the
 * player listed, from the sign-in submit.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { loadConfig } from '../../src/platform/config.ts';
import type { OutgoingMessage } from '../../src/platform/notify.ts';
import { silentLogger } from '../../src/platform/log.ts';
import { startService } from '../../src/service.ts';
import { SimDevice } from '../../simulator/device.ts';
import { FAST_3G, PAGE_PROBE, QUIET_MS, UNTHROTTLED, recordNetwork, waitUsable, type NetworkConditions, type Resource } from './page.ts';
import { ROOT, cli, fmt, machine, packageVersion, writeSubsection } from '../support.ts';

const opts = cli('usage: npm run bench:console [-- --runs 3] [--no-write] [--before <console folder>]', {
  runs: { type: 'number', default: 3, min: 1 },
  'no-write': { type: 'boolean' },
  before: { type: 'string' },
});
const RUNS = opts.runs;
const WRITE = !opts['no-write'];
const GOAL_BYTES = 150 * 1024;
const GOAL_MS = 3000;
const MEMBER = { email: 'amina@bench.example', password: 'a long member password' };
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const hmac = (key: string, msg: string) => crypto.createHmac('sha256', key).update(msg).digest('hex');

async function call(base: string, method: string, route: string, token: string | null, body?: unknown) {
  const res = await fetch(`${base}/api/v1${route}`, {
    method,
    headers: { ...(token && { authorization: `Bearer ${token}` }), ...(body !== undefined && { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = res.status === 204 ? null : await res.json();
  if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${JSON.stringify(data)}`);
  return data as any;
}

/** The world the member page shows: built over the HTTP API (and the operator CLI for the superadmin). */
async function buildWorld(base: string, mqttUrl: string, databasePath: string, messages: OutgoingMessage[], idle: () => Promise<void>) {
  const cli = spawnSync(process.execPath, ['--import', 'tsx', 'cli/index.ts', 'superadmin', 'create', '--email', 'root@bench.example'], {
    cwd: ROOT, input: 'a long root password\n', encoding: 'utf8', env: { ...process.env, DATABASE_PATH: databasePath },
  });
  if (cli.status !== 0) throw new Error(`superadmin create: ${cli.stderr}`);
  const step1 = await call(base, 'POST', '/auth/superadmin-2fa', null, { identifier_hash: sha('root@bench.example'), password_hash: sha('a long root password') });
  await idle();
  const otp = messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!;
  const timestamp = Math.floor(Date.now() / 1000);
  const root = (await call(base, 'POST', '/auth/superadmin-2fa/verify', null, { session_token: step1.session_token, timestamp, hmac: hmac(step1.session_token, `${otp}|${timestamp}`) })).access_token;
  const imam = await call(base, 'POST', '/auth/signup', null, { email: 'imam@bench.example', password_hash: sha('the imam password') });
  const member = await call(base, 'POST', '/auth/signup', null, { email: MEMBER.email, password_hash: sha(MEMBER.password) });
  const mosque = await call(base, 'POST', '/mosques', root, { name: 'Masjid Al-Noor', owner_user_id: imam.user.id, stream_url: 'https://radio.example/noor' });
  const membership = await call(base, 'POST', '/join', member.access_token, { code: mosque.join_code });
  await call(base, 'PATCH', `/memberships/${membership.id}`, imam.access_token, { status: 'approved' });
  const player = await call(base, 'POST', '/devices', member.access_token, { kind: 'stream_player', mosque_id: mosque.id, name: 'kitchen' });
  const sim = new SimDevice({ kind: 'stream_player', id: player.device.id, password: player.credentials.password, mqttUrl, startTimeoutMs: 15_000 });
  await sim.start();
  return sim;
}

interface Load {
  signinInteractive: number;
  memberAfterSubmit: number;
  loadBytes: number;
  signinBytes: number;
  resources: Resource[];
}

/** One visit: open `/`, wait until sign-in is usable, sign in, wait until Home lists the player. */
async function visit(page: import('playwright-core').Page, net: Awaited<ReturnType<typeof recordNetwork>>, url: string): Promise<Load> {
  net.take();
  net.setPhase('load');
  await page.goto(url, { waitUntil: 'commit' });
  const signin = await waitUsable(page, 'signin', 60_000);
  const form = page.locator('form', { has: page.getByRole('heading', { name: 'With your password' }) });
  await form.getByLabel('Email').fill(MEMBER.email);
  await form.getByLabel('Password').fill(MEMBER.password);
  net.setPhase('signin');
  await form.getByRole('button', { name: 'Sign in' }).click();
  const member = await waitUsable(page, 'member', 60_000);
  const resources = net.take();
  const sum = (phase: Resource['phase']) => resources.filter((r) => r.phase === phase).reduce((s, r) => s + r.bytes, 0);
  return { signinInteractive: signin.interactive, memberAfterSubmit: member.interactive - member.marks['submit']!, loadBytes: sum('load'), signinBytes: sum('signin'), resources };
}

async function measureConsole(browser: Browser, url: string, conditions: NetworkConditions) {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, locale: 'en-US', deviceScaleFactor: 1 });
  try {
    const page = await context.newPage();
    await page.addInitScript(PAGE_PROBE);
    const net = await recordNetwork(context, page, conditions);
    const cold = await visit(page, net, url);
    const warm = await visit(page, net, url);
    return { cold, warm };
  } finally {
    await context.close();
  }
}

/** The floor: one uncompressed response of `bytes` bytes from node:http, its form at the very end. */
async function startBarePage(bytes: number) {
  const head = '<!doctype html><html><head><meta charset="utf-8"><title>bare</title></head><body><main><!-- ';
  const tail = ' --><h1>Sign in</h1><form><input type="password" aria-label="p"><button type="submit">Go</button></form></main></body></html>';
  const filler = crypto.randomBytes(bytes).toString('base64').slice(0, Math.max(0, bytes - head.length - tail.length - 200));
  const body = Buffer.from(head + filler + tail);
  const server = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(body));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as import('node:net').AddressInfo).port}/`, close: () => new Promise((r) => server.close(r)) };
}

async function measureBare(browser: Browser, url: string, conditions: NetworkConditions) {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
  try {
    const page = await context.newPage();
    await page.addInitScript(PAGE_PROBE);
    const net = await recordNetwork(context, page, conditions);
    await page.goto(url, { waitUntil: 'commit' });
    const signin = await waitUsable(page, 'signin', 60_000);
    return { interactive: signin.interactive, bytes: net.take().reduce((s, r) => s + r.bytes, 0) };
  } finally {
    await context.close();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const kb = (b: number) => `${fmt(b / 1024, 1)} KB`;
const s = (ms: number) => `${fmt(ms / 1000, 2)} s`;
/** The median, then the range over the runs. */
const stat = (xs: number[], f: (x: number) => string) => `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`;

/** Body bytes of the first load's console files as sent raw and as sent with brotli (node:http, no decoding). */
async function bodySizes(resources: Resource[]): Promise<{ raw: number; br: number }> {
  const get = (url: string, coding: string) => new Promise<number>((resolve, reject) => {
    http.get(url, { headers: { 'accept-encoding': coding } }, (res) => {
      let n = 0;
      res.on('data', (c: Buffer) => (n += c.length));
      res.on('end', () => resolve(n));
    }).on('error', reject);
  });
  let raw = 0;
  let br = 0;
  for (const r of resources.filter((x) => x.phase === 'load' && x.status === 200)) {
    raw += await get(r.url, 'identity');
    br += await get(r.url, 'br');
  }
  return { raw, br };
}

interface Variant {
  label: string;
  url: string;
  runs: Record<'fast3g' | 'open', Array<{ cold: Load; warm: Load }>>;
}

/** A service with the bench's world; `consoleDir` serves another console (--before) from the same code. */
async function startWorld(consoleDir?: string) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-console-'));
  const messages: OutgoingMessage[] = [];
  const loaded = loadConfig({
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir,
    JWT_SECRET: 'bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz', LOG_LEVEL: 'silent', AUTH_RATE_LIMIT: '100000', AUTH_IDENTIFIER_RATE_LIMIT: '100000',
    ...(consoleDir && { CONSOLE_DIR: consoleDir }),
  });
  if (!loaded.ok) throw new Error(loaded.error);
  const service = await startService(loaded.config, { logger: silentLogger, transport: { name: 'bench', deliver: async (m) => { messages.push(m); } } });
  const sim = await buildWorld(service.httpUrl, service.mqttUrl, loaded.config.databasePath, messages, () => service.notifier.idle());
  return {
    url: `${service.httpUrl}/`,
    close: async () => {
      await sim.stop().catch(() => {});
      await service.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function main() {
  const beforeDir = opts.before === undefined ? null : path.resolve(opts.before);
  const worlds = [await startWorld(), ...(beforeDir ? [await startWorld(beforeDir)] : [])];
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  try {
    const variants: Variant[] = worlds.map((w, i) => ({ label: i === 0 ? 'this console' : `before (${opts.before})`, url: w.url, runs: { fast3g: [], open: [] } }));
    // Alternating, so a burst of load from the other tenants of this machine spreads over every condition.
    for (let i = 0; i < RUNS; i++) {
      for (const [name, conditions] of [['fast3g', FAST_3G], ['open', UNTHROTTLED]] as const) {
        for (const v of variants) {
          const r = await measureConsole(browser, v.url, conditions);
          v.runs[name].push(r);
          console.log(`run ${i + 1} ${v.label} ${name}: cold ${kb(r.cold.loadBytes)} sign-in ${s(r.cold.signinInteractive)} member ${s(r.cold.memberAfterSubmit)}; warm ${kb(r.warm.loadBytes)} sign-in ${s(r.warm.signinInteractive)} member ${s(r.warm.memberAfterSubmit)}`);
        }
      }
    }
    const bare = await startBarePage(median(variants[0]!.runs.fast3g.map((r) => r.cold.loadBytes)));
    const bareRuns: Record<'fast3g' | 'open', Array<{ interactive: number; bytes: number }>> = { fast3g: [], open: [] };
    try {
      for (let i = 0; i < RUNS; i++) {
        bareRuns.fast3g.push(await measureBare(browser, bare.url, FAST_3G));
        bareRuns.open.push(await measureBare(browser, bare.url, UNTHROTTLED));
      }
    } finally {
      await bare.close();
    }
    const sizes = await bodySizes(variants[0]!.runs.fast3g[0]!.cold.resources);
    const report = render(variants, bareRuns, sizes, browser.version());
    console.log(`\n${report}`);
    if (WRITE) {
      writeSubsection('## Console first load (npm run bench:console)',
        'The member page of the browser console on Chrome DevTools\' "Fast 3G" conditions, cold and warm cache, beside the same loads unthrottled and a bare page of the same bytes (bench/console/first-load.ts).',
        report, () => 0);
      console.log(`written to bench/RESULTS.md`);
    }
  } finally {
    await browser.close();
    for (const w of worlds) await w.close();
  }
}

function render(variants: Variant[], bare: Record<'fast3g' | 'open', Array<{ interactive: number; bytes: number }>>, sizes: { raw: number; br: number }, chromiumVersion: string): string {
  const rows = (v: Variant, prefix: string) => {
    const col = (name: 'fast3g' | 'open', which: 'cold' | 'warm') => v.runs[name].map((r) => r[which]);
    const row = (label: string, f: (l: Load) => number, fmt: (x: number) => string) =>
      `| ${prefix}${label} | ${(['cold', 'warm'] as const).map((w) => stat(col('fast3g', w).map(f), fmt)).join(' | ')} | ${(['cold', 'warm'] as const).map((w) => stat(col('open', w).map(f), fmt)).join(' | ')} |`;
    return [
      row('first load, bytes (to sign-in usable)', (l) => l.loadBytes, kb),
      row('sign-in interactive', (l) => l.signinInteractive, s),
      row('sign in -> Home rendered', (l) => l.memberAfterSubmit, s),
      ...(prefix ? [] : [row('sign-in + Home API bytes', (l) => l.signinBytes, kb)]),
    ];
  };
  const cold = variants[0]!.runs.fast3g.map((r) => r.cold);
  const bytes = median(cold.map((l) => l.loadBytes));
  const tti = median(cold.map((l) => l.signinInteractive));
  const member = median(cold.map((l) => l.memberAfterSubmit));
  const sample = [...cold].sort((a, b) => a.signinInteractive - b.signinInteractive)[Math.floor(cold.length / 2)]!;
  return [
    `### Member page, Fast 3G (cold and warm) and unthrottled`,
    '',
    ...machine(),
    `- Chromium ${chromiumVersion} (Debian, headless, \`--no-sandbox\`), playwright-core ${packageVersion('playwright-core')}; viewport 390 x 844; date ${new Date().toISOString().slice(0, 10)}`,
    `- Command: \`npm run bench:console${variants.length > 1 ? ` -- --before ${opts.before}` : ''}\` (${RUNS} repetitions, alternating conditions; median (min–max)). Fast 3G = latency 562.5 ms, down 180,000 B/s, up 84,375 B/s (DevTools' preset, bench/console/page.ts); cold = a fresh browser context, warm = a second visit in it`,
    `- "Sign-in interactive": navigation start to the password form in the page, plus a ${QUIET_MS} ms main-thread quiet window (no long task). "Home rendered": the sign-in submit to Home listing the member's player, plus the same quiet window (the token lives in memory, so Home always follows a sign-in: POST /auth/login, then /me, /mosques, /devices, /devices/{id}/why). Bytes: headers + encoded body, from CDP; the first load counts every request started before the sign-in submit (the views fetched after the first page included)`,
    '',
    '| | Fast 3G cold | Fast 3G warm | unthrottled cold | unthrottled warm |',
    '|---|---|---|---|---|',
    ...rows(variants[0]!, ''),
    ...variants.slice(1).flatMap((v) => rows(v, `${v.label}: `)),
    `| bare page, same bytes in one response (baseline) | ${stat(bare.fast3g.map((b) => b.interactive), s)} (${kb(median(bare.fast3g.map((b) => b.bytes)))}) | | ${stat(bare.open.map((b) => b.interactive), s)} | |`,
    '',
    `Goal (docs/sizing.md, "Goals"): under 150 KB compressed and interactive under 3 s. First load ${kb(bytes)}: ${bytes < GOAL_BYTES ? 'met' : 'NOT met'}. Sign-in interactive ${s(tti)}: ${tti < GOAL_MS ? 'met' : 'NOT met'}; Home rendered ${s(member)} after the submit: ${member < GOAL_MS ? 'under' : 'over'} 3 s. The first load's response bodies are ${kb(sizes.br)} with brotli, ${kb(sizes.raw)} uncompressed.`,
    '',
    `Per resource, the median cold Fast 3G run (ms from the navigation's first request):`,
    '',
    '| resource | type | status | encoding | bytes | start | end |',
    '|---|---|---|---|---|---|---|',
    ...sample.resources.map((r) => `| ${r.phase === 'signin' ? '(after sign-in) ' : ''}\`${r.path}\` | ${r.type} | ${r.status} | ${r.encoding || 'none'} | ${r.bytes} | ${r.start} | ${r.end} |`),
  ].join('\n');
}

main().catch((err: Error) => {
  console.error(`bench/console: ${err.stack ?? err.message}`);
  process.exit(1);
});
