/**
 * bench/firmware/firmware.ts's subsection of bench/RESULTS.md: the fan-out with and without the rollout's
 * downloads in flight (round by round, ratios against the same round's fan-out without), and the rollout alone:
 * the service's CPU and RSS against the MB it served.
 */
import os from 'node:os';
import { fmt, percentile, range, ratios } from '../support.ts';
import type { CpuSpent } from '../fanout/children.ts';
import type { FanoutRun } from '../fanout/players.ts';
import { delivered, head, num, otherCores, perRun } from '../fanout/report.ts';
import type { FirmwareWorld } from './world.ts';

export const SECTION = '## Firmware downloads during a broadcast (npm run bench:firmware)';
/** The goal (docs/sizing.md, "Goals"): the broadcast's p99 with the downloads within this of the p99 without. */
const GOAL_RATIO = 1.1;

export interface Options {
  players: number;
  devices: number;
  imageBytes: number;
  maxConcurrent: number;
  /** Each device's own link in the throttled rounds and the rollout's rest, kbit/s. */
  deviceKbps: number;
  rounds: number;
  playersPerMember: number;
  httpConcurrency: number;
  connectConcurrency: number;
  quietWaitS: number;
  idleS: number;
  timeoutS: number;
  write: boolean;
}

/** Downloads around one fan-out: in flight at its POST, overlapping it, and their bytes pro rata of the overlap. */
export interface Downloads {
  atStart: number;
  count: number;
  bytes: number;
}

/** One round: the fan-out without downloads, with the downloads unthrottled (a burst), with them at the device's link. */
export interface Round {
  without: FanoutRun;
  withoutDl: Downloads;
  burst: FanoutRun;
  burstDl: Downloads;
  slow: FanoutRun;
  slowDl: Downloads;
  bgBefore: number | null;
}

export interface Final {
  status: string;
  targeted: number;
  succeeded: number;
  failed: number;
  waitingForWindow: number;
  phaseS: number;
  phaseDownloads: number;
  phaseBytes: number;
  cpu: CpuSpent;
  idleCpuPerS: number;
  idleRss: number;
  rss0: number;
  rssPeak: number;
  rss1: number;
  allDownloads: number;
  allBytes: number;
  failedDownloads: number;
  askedTwice: number;
  neverAsked: number;
  updated: number;
  /** Median download time, unthrottled and at the device's link (ms). */
  burstDownloadMs: number;
  slowDownloadMs: number;
}

export interface Outcome {
  opts: Options;
  command: string;
  date: string;
  world: FirmwareWorld;
  fleetConnectS: number;
  takersConnectS: number;
  lost: number;
  rounds: Round[];
  final: Final;
}

const ms = (x: number) => fmt(x, x >= 100 ? 0 : 1);
const mib = (b: number) => fmt(b / 2 ** 20, 1);
const med = (xs: number[]) => percentile(xs, 50);

export function report(o: Outcome): string {
  const { opts, rounds, final: f, world } = o;
  const n = world.players.length;
  const d = world.takers.length;
  const wo = rounds.map((r) => r.without);
  const bu = rounds.map((r) => r.burst);
  const sl = rounds.map((r) => r.slow);
  const p99Ratios = rounds.flatMap((r) => [r.burst.p99 / r.without.p99, r.slow.p99 / r.without.p99]);
  const L: string[] = [];
  L.push(...head(`${num(n)} players, ${num(d)} devices updating`, o.date, o.command));
  L.push(
    `- World: mosque A with ${num(n)} stream players (the broadcast's), mosque B with ${num(d)} stream players on ${'`1.0.0`'} hw_rev ${'`sp-rev-b`'} (the rollout's), all owned by ${num(world.members)} members ` +
      `approved in both mosques (${opts.playersPerMember} players each, MAX_PLAYERS_PER_USER raised), each member's email proven through the notifier's webhook; both mosques' azaans 3-7 h away, FIRMWARE_QUIET_MINUTES 1; ` +
      `an image of ${num(opts.imageBytes)} random bytes signed with src/platform/keys/signatures.ts and uploaded with PUT /firmware/images (${fmt(world.setupS, 1)} s in all over the HTTP API). ` +
      `The service runs in its own process (SQLite); this process holds the ${num(n)} players (${fmt(o.fleetConnectS, 1)} s to connect, lease and subscribe), a child process the ${num(d)} update-takers ` +
      `(${fmt(o.takersConnectS, 1)} s), all on the same ${os.availableParallelism()} cores.`,
  );
  L.push(
    `- Rollout: POST /firmware/rollouts {mosque_ids: [B], groups: [{devices: ${opts.maxConcurrent}}, {percent: 100}], max_concurrent: ${opts.maxConcurrent}}. ` +
      'Each update-taker acks, downloads the URL with HTTP Basic (its MQTT username and password), reports UPDATING 0 and 100, checks length, SHA-256 and the Ed25519 signature, ' +
      'goes OFFLINE (reason reboot) and comes back ONLINE on `1.1.0`. The update-takers are in mosque B because the service offers nothing to a device whose mosque has a broadcast live, and a device stops its download when its own azaan starts (docs/firmware.md, 4.4).',
    '',
  );
  const kbps = `${num(opts.deviceKbps)} kbit/s`;
  L.push(`| Figure (median of ${rounds.length} rounds [range]) | without the rollout | with its downloads, unthrottled | with / without | with its downloads, each device at ${kbps} | with / without |`, '|---|---:|---:|---:|---:|---:|');
  const cell = (xs: number[], b: string) => `${b}${ms(med(xs))}${b} [${range(xs, 0)}]`;
  const row = (label: string, f: (r: FanoutRun) => number, bold = false) => {
    const b = bold ? '**' : '';
    const [a, x, y] = [wo.map(f), bu.map(f), sl.map(f)];
    L.push(`| ${b}${label}${b} | ${cell(a, b)} | ${cell(x, b)} | ${b}${ratios(x, a)}${b} | ${cell(y, b)} | ${b}${ratios(y, a)}${b} |`);
  };
  row(`Broadcast start → ${num(n)} players, p99 (ms)`, (r) => r.p99, true);
  row('… p50 (ms)', (r) => r.p50);
  row('… last player (ms)', (r) => r.max);
  row('… first player (ms)', (r) => r.first);
  row('POST /broadcasts → 201 (ms)', (r) => r.triggerMs);
  row('Service CPU per fan-out (ms)', (r) => r.cpu.brokerCpuS * 1000);
  const dl = (label: string, f: (x: Downloads) => number, digits = 0) =>
    L.push(`| ${label} | ${range(rounds.map((r) => f(r.withoutDl)), digits)} | ${range(rounds.map((r) => f(r.burstDl)), digits)} | | ${range(rounds.map((r) => f(r.slowDl)), digits)} | |`);
  dl('Downloads in flight at the POST', (x) => x.atStart);
  dl('Downloads overlapping the fan-out (POST → last player)', (x) => x.count);
  dl('MB served during the fan-out (pro rata)', (x) => x.bytes / 1e6, 1);
  L.push('');
  const worst = Math.max(...p99Ratios);
  const medRatio = med(p99Ratios);
  const per = (runs: FanoutRun[]) => perRun(runs, (r) => r.p99, ms);
  L.push(
    `Rounds: p99 without ${per(wo)} ms, unthrottled ${per(bu)} ms, at ${kbps} ${per(sl)} ms; delivered ${delivered(wo)} / ${delivered(bu)} / ${delivered(sl)}; ` +
      `cores taken by other processes during the fan-outs: ${otherCores(wo)} / ${otherCores(bu)} / ${otherCores(sl)}. Player connections lost: ${o.lost}. ` +
      `A download took ${ms(f.burstDownloadMs)} ms unthrottled and ${ms(f.slowDownloadMs)} ms at ${kbps} (median).`,
    '',
  );
  L.push(
    `**Goal (p99 with the downloads within ${GOAL_RATIO}× of without, same round): ${worst <= GOAL_RATIO ? 'met' : medRatio <= GOAL_RATIO ? 'met at the median, not in every round' : 'not met'}** ` +
      `(median ratio ${fmt(medRatio, 2)}×, worst ${fmt(worst, 2)}× over both kinds of rounds).`,
    '',
  );
  const mb = f.phaseBytes / 1e6;
  const netCpuS = f.cpu.brokerCpuS - f.idleCpuPerS * f.cpu.seconds;
  L.push('| The rest of the rollout alone (resumed after the rounds, to its end) | |', '|---|---:|');
  const r2 = (a: string, b: string) => L.push(`| ${a} | ${b} |`);
  r2(`Devices updated in this phase (each at ${kbps}); MB served`, `${num(f.phaseDownloads)}; ${fmt(mb, 0)} MB in ${fmt(f.phaseS, 1)} s (${fmt(mb / f.phaseS, 1)} MB/s, ${fmt(f.phaseDownloads / f.phaseS, 1)} devices/s)`);
  r2('Service CPU (user + sys) in this phase', `${fmt(f.cpu.brokerCpuS, 1)} s (${fmt((f.cpu.brokerCpuS / f.cpu.seconds) * 100, 0)} % of a core); idle with everything connected: ${fmt(f.idleCpuPerS * 1000, 1)} ms/s`);
  r2('**Service CPU per MB served** (everything an update costs: command, acks, statuses, download, reconnect)', `**${fmt((f.cpu.brokerCpuS * 1000) / mb, 1)} ms/MB**; less the idle rate: ${fmt((netCpuS * 1000) / mb, 1)} ms/MB`);
  r2('Service RSS: idle / at the phase\'s start / peak / end (MiB)', `${mib(f.idleRss)} / ${mib(f.rss0)} / ${mib(f.rssPeak)} / ${mib(f.rss1)}`);
  r2('**RSS growth per MB served** (peak − start)', `**${fmt((f.rssPeak - f.rss0) / 2 ** 20 / mb * 1024, 1)} KiB/MB** (${mib(f.rssPeak - f.rss0)} MiB over ${fmt(mb, 0)} MB)`);
  r2('Other processes during the phase (cores)', f.cpu.bgCores === null ? 'n/a' : fmt(f.cpu.bgCores, 2));
  r2('Rollout at the end', `${f.status}: ${num(f.succeeded)}/${num(f.targeted)} succeeded, ${f.failed} failed, ${f.waitingForWindow} waiting for a window`);
  r2('Whole run: downloads, MB served, failed downloads', `${num(f.allDownloads)}, ${fmt(f.allBytes / 1e6, 0)} MB, ${f.failedDownloads}`);
  r2('Devices asked twice / never asked / updated (the takers\' own count)', `${f.askedTwice} / ${f.neverAsked} / ${num(f.updated)}`);
  L.push('');
  L.push(
    `Fan-out: bench/fanout/players.ts, as bench/broadcast.ts measures it (from the start of POST /mosques/{id}/broadcasts to each player's receipt of the start, then the stop; p50/p99/max over the players of one round). ` +
      `A round "without" runs with no download under way (the rollout not yet made, or paused and drained); a round "with" makes or resumes the rollout, which offers the update to ${opts.maxConcurrent} devices at once, and triggers the broadcast ` +
      `as the first download starts (unthrottled: ${opts.maxConcurrent} devices reading as fast as the host gives, the service's worst moment) or once ${opts.maxConcurrent} downloads are under way (each device reading at ${kbps}, as a board on home Wi-Fi: what a rollout looks like in the field); ` +
      'the rollout is paused after it and drained before the next round. The runner looks every 5 s (src/firmware/runner.ts, ROLLOUT_TICK_MS) and a device holds its slot until the tick after it came back, so the rollout moves at most max_concurrent devices per tick. ' +
      'CPU is the service process\'s user + system time from /proc/<pid>/stat (10 ms ticks), RSS its VmRSS sampled every 250 ms; MB are 10^6 bytes.',
  );
  L.push('');
  return L.join('\n');
}
