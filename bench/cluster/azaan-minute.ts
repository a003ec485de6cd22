/**
 * The azaan minute: every mosque's azaan due in the same minute, started by the scheduler itself (auto_start,
 * docs/schedule.md), against the same fan-out on bare aedes (one retained start per mosque topic, all published
 * at once). Latency is from the instant every azaan is due (the whole minute the schedule names; bare: the
 * instant the publishes are sent) to each player's receipt of its mosque's `start`, and from that mosque's own
 * start (the broadcast committed and its event handed to the broker) to the same receipt.
 */
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import { percentile, pool } from '../support.ts';
import { api } from '../world/registration.ts';
import { cpuWindow, type Spent, type Watched } from './processes.ts';
import { Watch, type Fleet } from './world.ts';

export const PRAYERS = ['fajr', 'dhuhr', 'asr', 'maghrib', 'isha'] as const;

export interface MinuteFigures {
  /** ms after the due instant: first receipt, p50 and p99 over the players, the last. */
  first: number;
  p50: number;
  p99: number;
  last: number;
  /** p99 over the mosques of (its last player's receipt - its first player's): the fan-out within a mosque. */
  spreadP99: number;
  /**
   * ms from each player's mosque's start to the player's receipt: p50 and p99 over the players, the last (absent
   * from rounds files older than it). Minaret: the start as the node that started it told its listeners, once the
   * broadcast was committed and its event handed to the broker; bare aedes: the instant the publishes were sent.
   */
  fromStart?: { p50: number; p99: number; last: number };
  /** The window: from 2 s before the due instant to the last receipt. */
  spent: Spent;
  /** How long the 1,000 PATCHes took (Minaret only), and how many of them each node served. */
  patchS: number;
}

const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
const sleepUntil = (epochMs: number) => new Promise((r) => setTimeout(r, Math.max(0, epochMs - Date.now())));

function figures(watch: Watch, dueEpochMs: number, mosqueOf: (i: number) => number, mosques: number, startOf: (i: number) => number = () => dueEpochMs): Omit<MinuteFigures, 'spent' | 'patchS'> {
  // Receipts are performance.now() times; the due instant is wall-clock: one offset converts (same process, same clock).
  const offset = Date.now() - performance.now();
  const after = Array.from(watch.at, (t) => t + offset - dueEpochMs);
  const fromStart = Array.from(watch.at, (t, i) => t + offset - startOf(i));
  if (fromStart.some((x) => Number.isNaN(x))) throw new Error('a player heard a start no node reported');
  const lo = new Float64Array(mosques).fill(Infinity);
  const hi = new Float64Array(mosques).fill(-Infinity);
  after.forEach((t, i) => {
    const m = mosqueOf(i);
    lo[m] = Math.min(lo[m]!, t);
    hi[m] = Math.max(hi[m]!, t);
  });
  return {
    first: Math.min(...after), p50: percentile(after, 50), p99: percentile(after, 99), last: Math.max(...after),
    spreadP99: percentile(Array.from(hi, (h, m) => h - lo[m]!), 99),
    fromStart: { p50: percentile(fromStart, 50), p99: percentile(fromStart, 99), last: Math.max(...fromStart) },
  };
}

/**
 * Minaret: PATCHes every mosque (as its owner, through the nodes in turn) so that `prayer`'s azaan is fixed at
 * the next whole minute at least 150 s away with auto_start on, and every other prayer hours later (a fixed
 * time so that no computed one falls inside the bench); each node's scheduler hears the change on the feed.
 * Then waits for every player's start, and stops the broadcasts over the API.
 */
export async function scheduledMinute(o: {
  fleet: Fleet; bases: string[]; ownerToken: string; mosqueIds: string[]; mosqueOf: (i: number) => number; prayer: (typeof PRAYERS)[number]; watched: Watched[];
  /** Every start the nodes made since the last ask: epoch ms by broadcast id (bench/device-server.ts, 'starts'). */
  starts: () => Promise<Record<string, number>>;
}): Promise<MinuteFigures> {
  const n = o.fleet.clients.length;
  // 150 s of lead: each PATCH also re-pushes its mosque's leased players' configs with the new offline plan
  // (docs/firmware.md, "The azaan without the network"): 19,000 configs took the two nodes about 75 s, and that
  // work must be over before the measured minute's window opens.
  const due = Math.ceil((Date.now() + 150_000) / 60_000) * 60_000;
  const azaan = Object.fromEntries(PRAYERS.map((p, k) => [p, { fixed: hhmm(p === o.prayer ? due : due + (4 * 60 + 10 * k) * 60_000) }]));
  const body = {
    timezone: 'UTC', latitude: 51.5176, longitude: -0.0654, prayer_times: { method: 'muslim_world_league', madhab: 'shafi' }, azaan, auto_start: true,
  };
  const t0 = performance.now();
  await pool(o.mosqueIds.length, 20, async (m) => {
    await api(o.bases[m % o.bases.length]!, 'PATCH', `/api/v1/mosques/${o.mosqueIds[m]}`, body, o.ownerToken);
  });
  const patchS = (performance.now() - t0) / 1000;
  if (Date.now() > due - 3000) throw new Error(`the PATCHes took ${patchS.toFixed(1)} s: the azaan minute ${hhmm(due)} came too soon`);
  o.fleet.watch = new Watch(n, 'start');
  await sleepUntil(due - 2000);
  const w = cpuWindow(o.watched);
  await o.fleet.watch.all(due + 120_000 - Date.now());
  const spent = w();
  const starts = await o.starts();
  const ids = o.fleet.watch.ids;
  const f = figures(o.fleet.watch, due, o.mosqueOf, o.mosqueIds.length, (i) => starts[ids[i] ?? ''] ?? Number.NaN);
  // The broadcast each mosque's players heard, stopped as its admin would; every player hears the stop.
  const started = new Map<number, string>();
  o.fleet.watch.ids.forEach((id, i) => id && started.set(o.mosqueOf(i), id));
  if (started.size !== o.mosqueIds.length) throw new Error(`${started.size}/${o.mosqueIds.length} mosques' starts carried a broadcast_id`);
  o.fleet.watch = new Watch(n, 'stop');
  await pool(o.mosqueIds.length, 20, async (m) => {
    await api(o.bases[m % o.bases.length]!, 'POST', `/api/v1/mosques/${o.mosqueIds[m]}/broadcasts/${started.get(m)}/stop`, undefined, o.ownerToken);
  });
  await o.fleet.watch.all(60_000);
  o.fleet.watch = null;
  return { ...f, spent, patchS };
}

/** Bare aedes: one retained QoS 1 start per mosque topic, all sent at once by one publisher. */
export async function bareMinute(o: { fleet: Fleet; url: string; topicOf: (m: number) => string; mosques: number; mosqueOf: (i: number) => number; watched: Watched[] }): Promise<MinuteFigures> {
  const n = o.fleet.clients.length;
  const publisher = await mqtt.connectAsync(o.url, { clientId: 'bench-minute-publisher', reconnectPeriod: 0 });
  try {
    const event = (m: number, action: string) => JSON.stringify({ v: '1.0', broadcast_id: `bare-${m}`, kind: 'azaan', action, ts: Math.floor(Date.now() / 1000) });
    o.fleet.watch = new Watch(n, 'start');
    const w = cpuWindow(o.watched);
    await new Promise((r) => setTimeout(r, 2000)); // the same 2 s before the due instant as Minaret's window
    const due = Date.now();
    const sends = Array.from({ length: o.mosques }, (_, m) => publisher.publishAsync(o.topicOf(m), event(m, 'start'), { qos: 1, retain: true }));
    await Promise.all(sends);
    await o.fleet.watch.all(120_000);
    const spent = w();
    const f = figures(o.fleet.watch, due, o.mosqueOf, o.mosques);
    o.fleet.watch = new Watch(n, 'stop');
    await Promise.all(Array.from({ length: o.mosques }, (_, m) => publisher.publishAsync(o.topicOf(m), event(m, 'stop'), { qos: 1, retain: true })));
    await o.fleet.watch.all(60_000);
    o.fleet.watch = null;
    return { ...f, spent, patchS: Number.NaN };
  } finally {
    await publisher.endAsync();
  }
}
