/**
 * Firmware downloads during a broadcast (npm run bench:firmware): D devices download a signed image through a
 * rollout's concurrency limit while a broadcast fans out to N players of another mosque, against the same
 * fan-out without the rollout, in the same run; and what serving the image costs the service per MB.
 *
 *   npx tsx bench/firmware/firmware.ts [--players <n>=10000] [--devices <d>=1000] [--image-bytes <b>=1500000]
 *     [--max-concurrent <c>=50] [--device-kbps <k>=2000] [--rounds <r>=3] [--players-per-member <m>=50] [--http-concurrency <h>=50]
 *     [--connect-concurrency <c>=40] [--quiet-wait <s>=5] [--idle <s>=10] [--timeout <s>] [--no-write]
 *
 * Processes, all on 127.0.0.1: the service (bench/broadcast-server.ts: SQLite, FIRMWARE_PUBLIC_KEY set,
 * FIRMWARE_QUIET_MINUTES 1), this load generator (one mqtt.js client per player, as bench/broadcast.ts), and
 * bench/firmware/takers.ts (the D update-takers). World: bench/firmware/world.ts.
 *
 * Rounds, alternating, R of each: a fan-out with no download under way (the rollout not yet made, or paused and
 * drained), then one with the rollout's downloads in flight: the rollout is made (first round) or resumed, which
 * offers the update to max_concurrent devices at once; the broadcast is triggered as the first download starts.
 * A fan-out is bench/fanout/players.ts's: POST /mosques/{id}/broadcasts -> every player's receipt of the start,
 * p50/p99/max over the players, then the stop. After the rounds the rollout is resumed to its end alone: the
 * service's CPU (user + sys, /proc/<pid>/stat) and RSS (VmRSS, sampled every 250 ms) against the MB served.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { cli, openFilesLimit, percentile } from '../support.ts';
import { api, createFirstSuperadminRow } from '../world/registration.ts';
import { Child, cpuWindow, serverChild, killChildrenSync, rssBytes, sleep, startWebhook, waitQuiet, type ChildMessage, type Webhook } from '../fanout/children.ts';
import { connectFleet, endFleet, minaretFanout, newFleet, type FanoutRun } from '../fanout/players.ts';
import { writeFanoutSubsection } from '../fanout/report.ts';
import { FROM_FW, HW_REV, buildFirmwareWorld, firmwareKeys, learnHardware, type FirmwareWorld } from './world.ts';
import { SECTION, report, type Downloads, type Final, type Options, type Round } from './report.ts';

const HOST = '127.0.0.1';
const FD_MARGIN = 512;
const USAGE =
  'usage: npx tsx bench/firmware/firmware.ts [--players <n>=10000] [--devices <d>=1000] [--image-bytes <b>=1500000] [--max-concurrent <c>=50] [--device-kbps <k>=2000] ' +
  '[--rounds <r>=3] [--players-per-member <m>=50] [--http-concurrency <h>=50] [--connect-concurrency <c>=40] [--quiet-wait <s>=5] [--idle <s>=10] [--timeout <s>] [--no-write]';

function parseOptions(argv: string[]): Options {
  const a = cli(USAGE, {
    players: { type: 'number', default: 10_000, min: 2 },
    devices: { type: 'number', default: 1000, min: 1 },
    'image-bytes': { type: 'number', default: 1_500_000, min: 1024 },
    'max-concurrent': { type: 'number', default: 50, min: 1 },
    // 2 Mbit/s: a home Wi-Fi link as a small board sees it; 1.5 MB then takes 6 s.
    'device-kbps': { type: 'number', default: 2000, min: 1 },
    rounds: { type: 'number', default: 3, min: 1 },
    'players-per-member': { type: 'number', default: 50, min: 1 },
    'http-concurrency': { type: 'number', default: 50, min: 1 },
    // Below MQTT_MAX_HANDSHAKES_PER_ADDRESS (50): every client connects from one address.
    'connect-concurrency': { type: 'number', default: 40, min: 1 },
    'quiet-wait': { type: 'number', default: 5 },
    idle: { type: 'number', default: 10, min: 1 },
    timeout: { type: 'number', min: 60 },
    'no-write': { type: 'boolean' },
  }, argv);
  return {
    players: a.players, devices: a.devices, imageBytes: a['image-bytes'], maxConcurrent: a['max-concurrent'], deviceKbps: a['device-kbps'], rounds: a.rounds, playersPerMember: a['players-per-member'],
    httpConcurrency: a['http-concurrency'], connectConcurrency: a['connect-concurrency'], quietWaitS: a['quiet-wait'], idleS: a.idle, timeoutS: a.timeout ?? 0, write: !a['no-write'],
  };
}

let tempDir: string | null = null;
let webhook: Webhook | null = null;
function cleanupSync(): void {
  killChildrenSync();
  webhook?.close();
  webhook = null;
  if (tempDir) fs.rmSync(tempDir, { recursive: true, force: true });
  tempDir = null;
}

const epochMs = () => performance.timeOrigin + performance.now();

/** The takers' downloads as their child reports them: each one's start and end (epoch ms) and bytes. */
class DownloadLog {
  readonly done: Array<{ start: number; end: number; bytes: number; ok: boolean; throttled: boolean }> = [];
  /** Whether the devices read at their link's rate now (the parent's last 'rate' message). */
  throttled = false;
  /** Device id -> its download's start. */
  private readonly open = new Map<string, number>();
  private startWaiters: Array<() => void> = [];
  on(m: ChildMessage): void {
    const device = String(m['device']);
    if (m['phase'] === 'start') {
      this.open.set(device, Number(m['at']));
      for (const w of this.startWaiters.splice(0)) w();
    } else {
      this.done.push({ start: this.open.get(device) ?? Number(m['at']), end: Number(m['at']), bytes: Number(m['bytes']), ok: m['ok'] === true, throttled: this.throttled });
      if (m['ok'] !== true) console.warn(`  download by ${device} failed: ${String(m['error'])}`);
      this.open.delete(device);
    }
  }
  get inFlight(): number {
    return this.open.size;
  }
  /** Resolves at the next download's start (or after timeoutMs, false). */
  nextStart(timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(false), timeoutMs);
      this.startWaiters.push(() => {
        clearTimeout(t);
        resolve(true);
      });
    });
  }
  /** Downloads overlapping [from, to] (epoch ms), and their bytes pro rata of the overlap. */
  during(from: number, to: number): Downloads {
    let count = 0;
    let bytes = 0;
    for (const d of this.done) {
      const overlap = Math.min(d.end, to) - Math.max(d.start, from);
      if (overlap < 0) continue;
      count++;
      bytes += d.end > d.start ? (d.bytes * overlap) / (d.end - d.start) : d.bytes;
    }
    const stillOpen = [...this.open.values()].filter((s) => s <= to);
    const atStart = this.done.filter((d) => d.start <= from && d.end > from).length + stillOpen.filter((s) => s <= from).length;
    return { atStart, count: count + stillOpen.length, bytes };
  }
}

type Rollout = { id: string; status: string; groups: Array<Record<string, number>> };
const sum = (r: Rollout, key: string) => r.groups.reduce((n, g) => n + (g[key] ?? 0), 0);

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | null>): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== null) return v;
    if (performance.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
    await sleep(250);
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opts = parseOptions(argv);
  const limit = openFilesLimit();
  if (limit && limit.soft < opts.players + opts.devices + FD_MARGIN) {
    throw new Error(`\`ulimit -n\` is ${limit.soft}: ${opts.players + opts.devices} clients need ${opts.players + opts.devices + FD_MARGIN}; raise it or lower --players/--devices`);
  }
  if (opts.timeoutS === 0) opts.timeoutS = Math.ceil(600 + (opts.players + opts.devices) * 0.25 + (opts.devices / opts.maxConcurrent) * 15);
  const command = process.env['npm_lifecycle_event'] === 'bench:firmware' ? `npm run bench:firmware${argv.length ? ` -- ${argv.join(' ')}` : ''}` : `npx tsx bench/firmware/firmware.ts${argv.length ? ` ${argv.join(' ')}` : ''}`;
  const date = new Date().toISOString();
  const overall = setTimeout(() => {
    console.error(`firmware bench: still running after ${opts.timeoutS} s (--timeout); aborting`);
    cleanupSync();
    process.exit(1);
  }, opts.timeoutS * 1000);
  overall.unref();

  tempDir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-firmware-'));
  const dbPath = path.join(tempDir, 'minaret.db');
  await createFirstSuperadminRow(dbPath);
  webhook = await startWebhook();
  const keys = firmwareKeys();
  console.log(`firmware bench: ${opts.players} players, ${opts.devices} update-takers, ${opts.imageBytes} B image, max_concurrent ${opts.maxConcurrent}, ${opts.rounds} rounds of each (timeout ${opts.timeoutS} s)`);
  const service = serverChild('minaret', 'minaret', {
    NODE_ENV: 'test', HOST, HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: dbPath, DATA_DIR: path.join(tempDir, 'data'),
    JWT_SECRET: crypto.randomBytes(32).toString('hex'), BCRYPT_COST: '4', LOG_LEVEL: 'warn',
    AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000', NOTIFY_TRANSPORT: 'webhook', NOTIFY_WEBHOOK_URL: webhook.url,
    FIRMWARE_PUBLIC_KEY: keys.publicRaw, FIRMWARE_QUIET_MINUTES: '1', MAX_PLAYERS_PER_USER: '100000',
  });
  const ready = await service.ready();
  const base = String(ready['httpUrl']);
  const mqttUrl = String(ready['mqttUrl']);

  console.log('setting up the world over the API ...');
  const world: FirmwareWorld = await buildFirmwareWorld(base, webhook, { ...opts, privatePem: keys.privatePem });
  console.log(`  ${world.players.length} + ${world.takers.length} players, ${world.members} members, image ${world.image.id} in ${world.setupS.toFixed(1)} s`);

  const takers = new Child('takers', path.join('bench', 'firmware', 'takers.ts'), {}, { args: ['takers'] });
  await takers.ready();
  const downloads = new DownloadLog();
  takers.listen('dl', (m) => downloads.on(m));
  takers.listen('error', (m) => console.error(`takers: ${String(m['message'])}`));
  const takersConnected = takers.next('connected', opts.timeoutS * 1000).then((m) => Number(m['seconds']));
  takers.proc.send({ type: 'start', mqttUrl, devices: world.takers.map((d) => ({ id: d.id, password: d.password })), fw: FROM_FW, hwRev: HW_REV, key: keys.publicRaw, concurrency: opts.connectConcurrency });
  const takersS = await takersConnected;
  await learnHardware(world, opts.httpConcurrency);
  console.log(`  ${world.takers.length} update-takers ONLINE in ${takersS.toFixed(1)} s, hw_rev learned`);

  console.log('connecting the players ...');
  const fleet = newFleet(world.players.length);
  await connectFleet(fleet, mqttUrl, opts.connectConcurrency, (i) => ({ clientId: world.players[i]!.id, username: world.players[i]!.id, password: world.players[i]!.password }),
    `mosques/${world.mosqueId}/broadcast`, (i) => `devices/${world.players[i]!.id}/config`);
  console.log(`  ${world.players.length} players leased and subscribed in ${fleet.connectS.toFixed(1)} s`);

  // The idle baseline: everything connected, nothing happening.
  await sleep(2000);
  const idleWindow = cpuWindow(service);
  await sleep(opts.idleS * 1000);
  const idle = idleWindow();
  const idleRss = rssBytes(service.pid);
  console.log(`  idle: ${(idle.brokerCpuS * 1000 / idle.seconds).toFixed(1)} ms CPU/s, RSS ${(idleRss / 2 ** 20).toFixed(0)} MiB`);

  const fanWorld = { base, ownerToken: world.ownerToken, mosqueId: world.mosqueId };
  const rolloutOf = (id: string) => api<Rollout>(base, 'GET', `/api/v1/firmware/rollouts/${id}`, undefined, world.rootToken);
  let rolloutId: string | null = null;
  let targeted = 0;
  const rounds: Round[] = [];
  /**
   * One fan-out with the rollout's downloads in flight, each device reading at `bytesPerS` (0: unthrottled): the
   * rollout made or resumed, the broadcast triggered at the first download's start (unthrottled: they are over in
   * a moment) or once max_concurrent are under way (throttled); then paused, and drained before the next round.
   */
  async function withDownloads(bytesPerS: number): Promise<{ run: FanoutRun; dl: Downloads }> {
    takers.proc.send({ type: 'rate', bytesPerS });
    downloads.throttled = bytesPerS > 0;
    await waitQuiet(service, opts.quietWaitS);
    const started = downloads.nextStart(30_000);
    if (rolloutId === null) {
      const made = await api<Rollout>(base, 'POST', '/api/v1/firmware/rollouts', {
        image_id: world.image.id, mosque_ids: [world.updatesMosqueId], groups: [{ devices: opts.maxConcurrent }, { percent: 100 }], max_concurrent: opts.maxConcurrent,
      }, world.rootToken);
      rolloutId = made.id;
      targeted = made.groups.reduce((n, g) => n + g['size']!, 0);
    } else {
      await api(base, 'POST', `/api/v1/firmware/rollouts/${rolloutId}/resume`, undefined, world.rootToken);
    }
    if (!(await started)) throw new Error('no download started within 30 s of the rollout being made or resumed');
    if (bytesPerS > 0) await until('the downloads under way', 5000, async () => (downloads.inFlight >= opts.maxConcurrent ? true : null)).catch(() => undefined);
    const w1 = epochMs();
    const run = await minaretFanout(fleet, fanWorld, service);
    const rid = rolloutId;
    await api(base, 'POST', `/api/v1/firmware/rollouts/${rid}/pause`, undefined, world.rootToken);
    // Drained: every offered device back, the runner's counts settled, before the next round without.
    await until('the paused rollout drained', 120_000, async () => {
      if (downloads.inFlight > 0) return null;
      const ro = await rolloutOf(rid);
      return sum(ro, 'offered') + sum(ro, 'updating') === 0 ? ro : null;
    });
    // Read once the downloads are over: each one's bytes are known only at its end.
    const dl = downloads.during(w1 + run.doorMs, w1 + run.doorMs + run.max);
    console.log(`  with (${bytesPerS ? `${opts.deviceKbps} kbit/s` : 'unthrottled'}): p50 ${run.p50.toFixed(0)} p99 ${run.p99.toFixed(0)} ms, ${run.received}/${run.expected}; downloads in flight at the POST ${dl.atStart}, overlapping ${dl.count} (${(dl.bytes / 1e6).toFixed(1)} MB)`);
    return { run, dl };
  }
  for (let r = 0; r < opts.rounds; r++) {
    const bg0 = await waitQuiet(service, opts.quietWaitS);
    const w0 = epochMs();
    const without = await minaretFanout(fleet, fanWorld, service);
    const withoutDl = downloads.during(w0 + without.doorMs, w0 + without.doorMs + without.max);
    console.log(`  round ${r + 1} without: p50 ${without.p50.toFixed(0)} p99 ${without.p99.toFixed(0)} ms, ${without.received}/${without.expected}; downloads meanwhile ${withoutDl.count}`);

    const burst = await withDownloads(0);
    const slow = await withDownloads(opts.deviceKbps * 125);
    rounds.push({ without, withoutDl, burst: burst.run, burstDl: burst.dl, slow: slow.run, slowDl: slow.dl, bgBefore: bg0 });
  }

  console.log('the rest of the rollout alone ...');
  const rid = rolloutId!;
  const doneBefore = downloads.done.length;
  const rss0 = rssBytes(service.pid);
  let rssPeak = rss0;
  const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, rssBytes(service.pid))), 250);
  takers.proc.send({ type: 'rate', bytesPerS: opts.deviceKbps * 125 });
  downloads.throttled = true;
  const window = cpuWindow(service);
  const f0 = epochMs();
  await api(base, 'POST', `/api/v1/firmware/rollouts/${rid}/resume`, undefined, world.rootToken);
  const last = await until('the rollout done', opts.timeoutS * 1000, async () => {
    const ro = await rolloutOf(rid);
    return ro.status !== 'running' || (downloads.inFlight === 0 && sum(ro, 'waiting') + sum(ro, 'offered') + sum(ro, 'updating') === 0) ? ro : null;
  });
  const spent = window();
  clearInterval(sampler);
  const rss1 = rssBytes(service.pid);
  const phase = downloads.done.slice(doneBefore);
  const stats = await takers.request('stats');
  const offers = stats['offers'] as number[];
  const final: Final = {
    status: last.status, targeted, succeeded: sum(last, 'succeeded'), failed: sum(last, 'failed'), waitingForWindow: sum(last, 'waiting_for_window'),
    phaseS: (epochMs() - f0) / 1000, phaseDownloads: phase.length, phaseBytes: phase.reduce((n, d) => n + d.bytes, 0), cpu: spent,
    idleCpuPerS: idle.brokerCpuS / idle.seconds, idleRss, rss0, rssPeak, rss1,
    allDownloads: downloads.done.length, allBytes: downloads.done.reduce((n, d) => n + d.bytes, 0), failedDownloads: downloads.done.filter((d) => !d.ok).length,
    burstDownloadMs: percentile(downloads.done.filter((x) => !x.throttled).map((x) => x.end - x.start), 50),
    slowDownloadMs: percentile(downloads.done.filter((x) => x.throttled).map((x) => x.end - x.start), 50),
    askedTwice: offers.filter((n) => n > 1).length, neverAsked: offers.filter((n) => n === 0).length, updated: Number(stats['updated']),
  };
  console.log(`  ${final.status}: ${final.succeeded}/${final.targeted} succeeded, ${final.phaseDownloads} downloads (${(final.phaseBytes / 1e6).toFixed(0)} MB) in ${final.phaseS.toFixed(1)} s, CPU ${spent.brokerCpuS.toFixed(1)} s`);

  await endFleet(fleet);
  await takers.stop();
  await service.stop();

  const text = report({ opts, command, date, world, fleetConnectS: fleet.connectS, takersConnectS: takersS, lost: fleet.lost(), rounds, final });
  console.log(`\n${text}`);
  if (opts.write) {
    writeFanoutSubsection(SECTION,
      '`npm run bench:firmware` runs `tsx bench/firmware/firmware.ts`: a rollout\'s downloads in flight while a broadcast fans out to another mosque\'s players, against the same fan-out without them, alternating in one run; then the rest of the rollout alone, for the service\'s CPU and memory per MB served. One subsection per size; a rerun replaces its own.',
      text);
  }
  clearTimeout(overall);
}

process.on('exit', cleanupSync);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    cleanupSync();
    process.exit(130);
  });
}

main().then(
  () => {
    cleanupSync();
    process.exit(0);
  },
  (err: unknown) => {
    const cause = err instanceof Error && err.cause ? ` (cause: ${String((err.cause as Error).stack ?? err.cause)})` : '';
    console.error(`firmware bench failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}${cause}`);
    cleanupSync();
    process.exit(1);
  },
);
