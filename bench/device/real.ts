/**
 * minaret-device end to end on real processes (docs/devices/raspberry-pi.md): the service in its own process
 * (bench/device-server.ts), Debian's icecast2 and ffmpeg, and `minaret-device` as bin/minaret-device.mjs runs it
 * from dist/. Each figure over several rounds (median, p99, range), beside a baseline measured in the same run:
 *
 * a) pairing: a `minaret-device pair` process shows its code, the member approves it over the API (docs/api.md,
 *    "Pairing a device") at a random point of the device's poll interval, then `run` comes ONLINE (its output
 *    line): approval -> credentials stored, approval -> ONLINE (goal p99 <= 2 s). Baseline: `run` start -> ONLINE
 *    with the credentials already stored.
 * b) a broadcast's start (the API call) -> the first sound in the player's WAV output, through a real Icecast
 *    whose source is a transmitter (`run --input tone`) (goal <= 1.5 s). Baseline: ffmpeg reading the same live
 *    mount, from its spawn to its first sound.
 * c) offline (docs/firmware.md, "4.1 Config"): with the broker gone, a slot's at + grace_s -> the first sound of
 *    the kept recording (goal <= 1 s). Baseline: ffmpeg decoding the same MP3 from disk to its first sound.
 * d) idle RSS and CPU of a connected player beside a bare mqtt.js client: bench/device/idle.ts, run as it is.
 *
 *   npm run bench:devices-real -- [--rounds 5] [--only pair,broadcast,offline,idle] [--offline-lead 7]
 *                                 [--idle-rounds 2] [--idle-window 15] [--no-write] [--trace]
 *
 * --trace prints each broadcast round's device output lines, ms after the start, to see where the time goes.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { audioToolsMissing, startPlainIcecast } from '../../test/audio/icecast-plain.ts';
import { runBench } from '../cluster/processes.ts';
import { ROOT, cli, fmt, machine, percentile, range, writeSubsection } from '../support.ts';
import { GRACE_S, offlineRound, toneMp3 } from './offline.ts';
import { device, ffmpegFirstSample, firstLoud, killStarted, mosqueAndMember, sleep, startServiceChild, wavDataBytes, writeState, type Proc, type ServiceChild } from './processes.ts';

const USAGE = 'usage: npm run bench:devices-real -- [--rounds 5] [--only pair,broadcast,offline,idle] [--offline-lead 7] [--idle-rounds 2] [--idle-window 15] [--no-write] [--trace]';
const opts = cli(USAGE, {
  rounds: { type: 'number', default: 5, min: 1 },
  only: { type: 'string', default: 'pair,broadcast,offline,idle' },
  'offline-lead': { type: 'number', default: 7, min: 4 },
  'idle-rounds': { type: 'number', default: 2, min: 1 },
  'idle-window': { type: 'number', default: 15, min: 5 },
  'no-write': { type: 'boolean' },
  trace: { type: 'boolean' },
});
const PARTS = new Set(opts.only.split(','));
/** The pairing poll's interval (docs/api.md, "Pairing a device": 5 s); approvals land anywhere within it. */
const POLL_INTERVAL_MS = 5000;
const ONLINE = /-> ONLINE \(/;

type People = Awaited<ReturnType<typeof mosqueAndMember>>;
/** `goalMs`: the most its p99 may be. */
interface Figure { name: string; values: number[]; goalMs?: number }

async function pairing(s: ServiceChild, people: People, dir: string): Promise<{ figures: Figure[]; player: string }> {
  const stored: number[] = [], online: number[] = [], approve: number[] = [], baseline: number[] = [], oneProcess: number[] = [];
  let player = '';
  for (let r = 0; r < opts.rounds; r++) {
    const state = path.join(dir, `player-${r}`);
    const pair = device(`pair ${r}`, dir, ['pair', '--server', s.base, '--kind', 'player', '--name', `bench ${r}`, '--state', state]);
    const code = (await pair.line(/enter the code\s+([A-Z]{4}-[A-Z]{4})/, 30_000)).match[1]!;
    await sleep(Math.random() * POLL_INTERVAL_MS);
    const approvedAt = Date.now();
    await s.api('POST', '/devices/pairing/approve', { user_code: code, mosque_id: people.mosqueId }, people.member);
    approve.push(Date.now() - approvedAt);
    stored.push((await pair.line(/^Paired: device \S+, credentials stored/, 30_000)).at - approvedAt);
    if ((await pair.exited) !== 0) throw new Error(`pair exited non-zero: ${pair.tail()}`);
    // What a board's service manager does next: start `run` on the stored state.
    const run = device(`run ${r}`, dir, ['run', '--state', state, '--output', path.join(state, 'out.wav')]);
    online.push((await run.line(ONLINE, 20_000)).at - approvedAt);
    await run.stop();
    const again = device(`rerun ${r}`, dir, ['run', '--state', state, '--output', path.join(state, 'again.wav')]);
    baseline.push((await again.line(ONLINE, 20_000)).at - again.startedAt);
    await again.stop();
    player ||= state;
    // The same in one process, as a board's unit runs it: `run --server --kind` pairs, then connects at once.
    const oneState = path.join(dir, `player-one-${r}`);
    const one = device(`run+pair ${r}`, dir, ['run', '--server', s.base, '--kind', 'player', '--name', `bench one ${r}`, '--state', oneState, '--output', path.join(dir, `one-${r}.wav`)]);
    const oneCode = (await one.line(/enter the code\s+([A-Z]{4}-[A-Z]{4})/, 30_000)).match[1]!;
    await sleep(Math.random() * POLL_INTERVAL_MS);
    const oneApproved = Date.now();
    await s.api('POST', '/devices/pairing/approve', { user_code: oneCode, mosque_id: people.mosqueId }, people.member);
    oneProcess.push((await one.line(ONLINE, 20_000)).at - oneApproved);
    await one.stop();
  }
  return {
    player,
    figures: [
      { name: 'a) approval -> credentials stored (`Paired:` line)', values: stored },
      { name: 'a) approval -> ONLINE, one process (`run --server --kind` pairs, then connects)', values: oneProcess, goalMs: 2_000 },
      { name: 'a) approval -> ONLINE, two steps (`pair` exits, then `run` starts and connects)', values: online },
      { name: 'a) the approve request itself', values: approve },
      { name: 'a) baseline: `run` start -> ONLINE, credentials stored', values: baseline },
    ],
  };
}

/** One broadcast, started and stopped over the API: ms from the start to each sign of it, and the bare listener's. */
async function broadcastRound(s: ServiceChild, people: People, o: { txRun: Proc; player: Proc; wav: string; url: string }, r: number) {
  const { txRun, player } = o;
  const from = wavDataBytes(o.wav);
  const mark = player.lines.length;
  const txMark = txRun.lines.length;
  const t0 = Date.now();
  const b = await s.api('POST', `/mosques/${people.mosqueId}/broadcasts`, { kind: 'azaan' }, people.root);
  const sound = (await firstLoud(o.wav, from, 20_000)) - t0;
  const playing = (await player.line(/ONLINE -> PLAYING \(broadcast_start\)/, 5000, mark)).at - t0;
  const tx = (await txRun.line(/ONLINE -> PLAYING \(broadcast_start\)/, 5000, txMark)).at - t0;
  const baseline = await ffmpegFirstSample(['-f', 'mp3', '-probesize', '32768', '-analyzeduration', '0', '-fflags', 'nobuffer'], o.url);
  await s.api('POST', `/mosques/${people.mosqueId}/broadcasts/${b.id}/stop`, {}, people.root);
  await player.line(/PLAYING -> ONLINE \((broadcast_stop|stream_lost)\)/, 10_000, mark);
  await txRun.line(/PLAYING -> ONLINE \(broadcast_stop\)/, 10_000, txMark);
  if (opts.trace) {
    for (const [who, p, m] of [['transmitter', txRun, txMark], ['player', player, mark]] as const) {
      for (const l of p.lines.slice(m)) console.log(`round ${r} ${who} +${l.at - t0} ms: ${l.text.replace(/^\S+ /, '')}`);
    }
  }
  await sleep(4000); // what Icecast sent ahead plays out, and the mount is gone, before the next start
  return { sound, playing, tx, baseline };
}

async function broadcast(s: ServiceChild, people: People, dir: string, playerState: string): Promise<Figure[]> {
  const tx = await s.api('POST', `/mosques/${people.mosqueId}/devices`, { kind: 'transmitter', name: 'minbar' }, people.root);
  const txState = path.join(dir, 'transmitter');
  writeState(txState, s.base, tx);
  const mount = `/m/${people.mosqueId}`;
  // test/audio/icecast-plain.ts's Icecast (per-mount source users, as the transmitter authenticates); its
  // clean-ups run at the end of this part instead of a test's.
  const cleanups: Array<() => Promise<void> | void> = [];
  const icecast = await startPlainIcecast({ after: (fn: () => Promise<void>) => void cleanups.push(fn) } as unknown as TestContext, [{ name: mount, username: tx.device.id, password: tx.credentials.password }]);
  const startMs: number[] = [], playingMs: number[] = [], txMs: number[] = [], baseline: number[] = [];
  try {
    await s.api('PATCH', `/mosques/${people.mosqueId}`, { stream_url: `${icecast.url}${mount}` }, people.root);
    const txRun = device('transmitter', dir, ['run', '--state', txState, '--input', 'tone', '--output', path.join(txState, 'tx.wav')]);
    const wav = path.join(playerState, 'broadcast.wav');
    const player = device('player', dir, ['run', '--state', playerState, '--output', wav]);
    await txRun.line(ONLINE, 20_000);
    await player.line(ONLINE, 20_000);
    await sleep(2000); // the config with the stream address and lease arrives after ONLINE
    for (let r = 0; r < opts.rounds; r++) {
      const round = await broadcastRound(s, people, { txRun, player, wav, url: `${icecast.url}${mount}` }, r);
      startMs.push(round.sound);
      playingMs.push(round.playing);
      txMs.push(round.tx);
      baseline.push(round.baseline);
    }
    await player.stop();
    await txRun.stop();
  } finally {
    for (const fn of cleanups) await fn();
  }
  return [
    { name: 'b) broadcast start (API call) -> first sound in the player\'s WAV', values: startMs, goalMs: 1_500 },
    { name: 'b) broadcast start -> the player\'s `PLAYING (broadcast_start)` line', values: playingMs },
    { name: 'b) broadcast start -> the transmitter\'s `PLAYING (broadcast_start)` line', values: txMs },
    { name: 'b) baseline: ffmpeg spawn -> first sound, the same live mount, the player\'s input options', values: baseline },
  ];
}

async function offline(dir: string): Promise<Figure[]> {
  const mp3 = toneMp3(dir, 1000, 3);
  const recording = fs.readFileSync(mp3);
  const delays: number[] = [], baseline: number[] = [];
  for (let r = 0; r < opts.rounds; r++) {
    delays.push(await offlineRound(path.join(dir, `offline-${r}`), recording, opts['offline-lead']));
    baseline.push(await ffmpegFirstSample(['-re'], mp3));
  }
  return [
    { name: `c) offline: slot's at + grace_s (${GRACE_S} s) -> first sound of the kept recording`, values: delays, goalMs: 1_000 },
    { name: 'c) baseline: ffmpeg spawn -> first sound, the same MP3 from disk (`-re`, as the player plays it)', values: baseline },
  ];
}

/** bench/device/idle.ts as `npm run bench:device-idle` runs it (dist/ is built already): its table. */
function idle(): string {
  const args = ['--import', 'tsx', path.join(ROOT, 'bench/device/idle.ts'), '--rounds', String(opts['idle-rounds']), '--window', String(opts['idle-window'])];
  const r = spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`bench/device/idle.ts failed: ${r.stderr}`);
  return r.stdout.trim();
}

function table(figures: Figure[]): string[] {
  const ms = (v: number) => fmt(v, 0);
  return [
    '| measure, ms | median | p99 | range | goal |',
    '|---|---:|---:|---:|---|',
    ...figures.map((f) => {
      const p99 = percentile(f.values, 99);
      const goal = f.goalMs === undefined ? '' : `p99 ≤ ${ms(f.goalMs)}: ${p99 <= f.goalMs ? 'met' : '**not met**'}`;
      return `| ${f.name} | ${ms(percentile(f.values, 50))} | ${ms(p99)} | ${range(f.values, 0)} | ${goal} |`;
    }),
  ];
}

async function main(): Promise<void> {
  const missing = audioToolsMissing();
  if (missing && (PARTS.has('broadcast') || PARTS.has('offline'))) throw new Error(missing);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-devices-real-'));
  fs.chmodSync(dir, 0o755); // icecast2 runs as its own user
  const figures: Figure[] = [];
  let idleTable = '';
  try {
    if (PARTS.has('pair') || PARTS.has('broadcast')) {
      const s = await startServiceChild(dir);
      try {
        const people = await mosqueAndMember(s);
        const paired = await pairing(s, people, dir);
        if (PARTS.has('pair')) figures.push(...paired.figures);
        if (PARTS.has('broadcast')) figures.push(...await broadcast(s, people, dir, paired.player));
      } finally {
        await s.child.stop();
      }
    }
    if (PARTS.has('offline')) figures.push(...await offline(dir));
    if (PARTS.has('idle')) idleTable = idle();
  } finally {
    killStarted();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const lines = [
    `- Date: ${new Date().toISOString().slice(0, 10)}; command: \`npm run bench:devices-real${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}\` (${opts.rounds} rounds; load average ${os.loadavg()[0]!.toFixed(1)} at the end)`,
    ...machine(),
    '',
    ...(figures.length ? table(figures) : []),
    ...(idleTable ? ['', 'd) idle, `bench/device/idle.ts`:', '', idleTable] : []),
  ];
  console.log(lines.join('\n'));
  if (!opts['no-write']) {
    const intro = '`bench/device/real.ts`: the service in its own process, Debian\'s icecast2 and ffmpeg, and `minaret-device` from dist/ as `bin/minaret-device.mjs` runs it; each figure over the rounds (median, p99 by nearest rank, so the highest of under 100 rounds; range) beside a baseline of the same run. Times are read from the wall clock when a process\'s output line arrived or when the first sample louder than 1,000 of 32,767 appeared in a WAV output (read every 10 ms).';
    // The latest run first; a hand-written subsection after it is kept.
    writeSubsection('## minaret-device on real processes (npm run bench:devices-real)', intro, ['### Latest run', '', ...lines].join('\n'), (sub) => (sub.startsWith('### Latest run') ? 0 : 1));
  }
}

runBench('bench/devices-real', async () => {
  process.on('exit', killStarted);
  await main();
});
