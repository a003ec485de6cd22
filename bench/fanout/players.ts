/**
 * Stream players as a fan-out bench holds them: one plain mqtt.js client each (MQTT 3.1.1), connected, given its
 * leased config and subscribed to its mosque's broadcast topic (QoS 1); the receipt time of each player for one
 * broadcast's start or stop; and one measured fan-out: POST /mosques/{id}/broadcasts -> every player has the
 * start, then the stop. Shared by bench/broadcast.ts and bench/firmware/firmware.ts.
 */
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import { percentile, pool } from '../support.ts';
import { api } from '../world/registration.ts';
import { cpuWindow, sleep, type Child, type CpuSpent } from './children.ts';

/** What a fan-out needs of the world: the service's address, the mosque and its owner (who triggers). */
export interface FanoutWorld {
  base: string;
  ownerToken: string;
  mosqueId: string;
}

/** One fan-out being watched: the receipt time of each receiver, for one action. */
export class Watch {
  readonly at: Float64Array;
  readonly ids: Array<string | undefined>;
  count = 0;
  private resolveAll: (() => void) | null = null;
  readonly expected: number;

  constructor(n: number, readonly action: 'start' | 'stop', readonly receivers: Set<number> | null) {
    this.at = new Float64Array(n).fill(Number.NaN);
    this.ids = new Array(n);
    this.expected = receivers ? receivers.size : n;
  }

  saw(i: number, t: number, event: { action?: unknown; broadcast_id?: unknown }): void {
    if (event.action !== this.action || !Number.isNaN(this.at[i]!)) return;
    this.at[i] = t;
    this.ids[i] = typeof event.broadcast_id === 'string' ? event.broadcast_id : undefined;
    this.count++;
    if (this.resolveAll && this.receivedExpected() >= this.expected) this.resolveAll();
  }

  private receivedExpected(): number {
    if (!this.receivers) return this.count;
    let k = 0;
    for (const i of this.receivers) if (!Number.isNaN(this.at[i]!)) k++;
    return k;
  }

  /** Resolves once every expected receiver has it, or after `timeoutMs` (then some are missing). */
  all(timeoutMs: number): Promise<void> {
    if (this.receivedExpected() >= this.expected) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.resolveAll = null;
        resolve();
      }, timeoutMs);
      this.resolveAll = () => {
        clearTimeout(t);
        this.resolveAll = null;
        resolve();
      };
    });
  }
}

export interface Conn {
  client: mqtt.MqttClient;
}

export interface Fleet {
  conns: Conn[];
  connectS: number;
  /** CPU while the fleet got ready (broker child, this process, other processes). */
  connectCpu: CpuSpent | null;
  readyP50: number;
  readyP99: number;
  lost: () => number;
  watch: Watch | null;
  /** Player index -> what a config message resolves (ban measurement). */
  configWaiters: Map<number, (t: number, cfg: Record<string, unknown>) => void>;
}

export function newFleet(n: number): Fleet {
  return { conns: new Array(n), connectS: 0, connectCpu: null, readyP50: 0, readyP99: 0, lost: () => 0, watch: null, configWaiters: new Map() };
}

export function parse(payload: Buffer): Record<string, unknown> | null {
  try {
    const v = JSON.parse(payload.toString('utf8')) as unknown;
    return v && typeof v === 'object' ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

export function subscribe(client: mqtt.MqttClient, topic: string): Promise<void> {
  return new Promise((resolve, reject) => {
    client.subscribe(topic, { qos: 1 }, (err, granted) => {
      if (err) return reject(err);
      const g = granted?.[0];
      if (!g || g.qos === 128) return reject(new Error(`SUBACK refused ${topic}`));
      resolve();
    });
  });
}

/**
 * Connects every receiver (at most `concurrency` in flight); each is ready once `prepare` resolves. For
 * Minaret players: config subscribed, a leased config received, broadcast topic subscribed.
 */
export async function connectFleet(
  fleet: Fleet,
  url: string,
  concurrency: number,
  identity: (i: number) => { clientId: string; username?: string; password?: string },
  broadcastTopic: string,
  configTopic: ((i: number) => string) | null,
): Promise<void> {
  const n = fleet.conns.length;
  const ready = new Float64Array(n);
  let lost = 0;
  const t0 = performance.now();
  let done = 0;
  const progress = setInterval(() => console.log(`  connect: ${done}/${n} ready`), 10_000);
  try {
    await pool(n, concurrency, (i) => {
      const started = performance.now();
      const id = identity(i);
      return new Promise<void>((resolve, reject) => {
        const client = mqtt.connect(url, {
          protocolVersion: 4, clientId: id.clientId, ...(id.username !== undefined && { username: id.username }), ...(id.password !== undefined && { password: id.password }),
          clean: true, keepalive: 300, reconnectPeriod: 0, connectTimeout: 30_000, resubscribe: false,
        });
        let leased: (() => void) | null = null;
        client.on('message', (topic, payload) => {
          const t = performance.now();
          const msg = parse(payload);
          if (!msg) return;
          if (topic === broadcastTopic) {
            fleet.watch?.saw(i, t, msg);
            return;
          }
          // The player's config.
          if (leased && msg['lease']) leased();
          const waiter = fleet.configWaiters.get(i);
          if (waiter) waiter(t, msg);
        });
        const fail = (err: Error) => {
          client.end(true);
          reject(new Error(`receiver ${i} (${id.clientId}) not ready: ${err.message}`));
        };
        const closedEarly = () => fail(new Error('connection closed before it was ready'));
        client.on('error', fail);
        client.on('close', closedEarly);
        client.once('connect', () => {
          void (async () => {
            if (configTopic) {
              const gotLease = new Promise<void>((res, rej) => {
                const t = setTimeout(() => rej(new Error('no config with a lease within 30 s')), 30_000);
                leased = () => {
                  clearTimeout(t);
                  leased = null;
                  res();
                };
              });
              await subscribe(client, configTopic(i));
              await gotLease;
            }
            await subscribe(client, broadcastTopic);
          })().then(
            () => {
              ready[i] = performance.now() - started;
              client.off('error', fail);
              client.off('close', closedEarly);
              client.on('error', () => undefined);
              client.once('close', () => {
                if (!client.disconnecting) lost++;
              });
              fleet.conns[i] = { client };
              done++;
              resolve();
            },
            (err: Error) => fail(err),
          );
        });
      });
    });
  } finally {
    clearInterval(progress);
  }
  fleet.connectS = (performance.now() - t0) / 1000;
  fleet.readyP50 = percentile(ready, 50);
  fleet.readyP99 = percentile(ready, 99);
  fleet.lost = () => lost;
}

export async function endFleet(fleet: Fleet): Promise<void> {
  const conns = fleet.conns.filter(Boolean);
  const wait = Promise.all(conns.map((c) => new Promise<void>((resolve) => c.client.end(false, {}, () => resolve()))));
  await Promise.race([wait, sleep(15_000)]);
  for (const c of conns) if (!c.client.disconnected) c.client.end(true);
}

// ---------------------------------------------------------------------------------------------------
// Fan-out runs

export interface FanoutRun {
  p50: number;
  p99: number;
  max: number;
  first: number;
  received: number;
  expected: number;
  /** Receipts whose broadcast_id is not the one triggered (should be 0). */
  wrongId: number;
  /** Trigger -> response: the POST's response time (Minaret) or the PUBACK (bare). */
  triggerMs: number;
  /**
   * Minaret only (NaN for bare): GET /mosques/{id} by the same client with the same token just before the POST:
   * the HTTP request and the mosque gate without a broadcast, the part of the POST's figures bare aedes has no
   * counterpart for (its clock starts at a publish on an open MQTT connection).
   */
  doorMs: number;
  cpu: CpuSpent;
  stopP50: number;
  stopP99: number;
  stopReceived: number;
  /** Minaret only: GET of the stopped broadcast, which builds the delivery report the POST no longer waits for (NaN for bare). */
  reportMs: number;
}

export const FANOUT_TIMEOUT_MS = 60_000;

export function summarize(w: Watch, t0: number, id: string | null): { p50: number; p99: number; max: number; first: number; received: number; wrongId: number } {
  const lat: number[] = [];
  let wrongId = 0;
  for (let i = 0; i < w.at.length; i++) {
    const t = w.at[i]!;
    if (Number.isNaN(t)) continue;
    lat.push(t - t0);
    if (id !== null && w.ids[i] !== id) wrongId++;
  }
  return { p50: percentile(lat, 50), p99: percentile(lat, 99), max: percentile(lat, 100), first: percentile(lat, 0), received: lat.length, wrongId };
}

export async function minaretFanout(fleet: Fleet, world: FanoutWorld, child: Child): Promise<FanoutRun> {
  const n = fleet.conns.length;
  const base = world.base;
  const watch = new Watch(n, 'start', null);
  fleet.watch = watch;
  const d0 = performance.now();
  await api(base, 'GET', `/api/v1/mosques/${world.mosqueId}`, undefined, world.ownerToken);
  const doorMs = performance.now() - d0;
  const close = cpuWindow(child);
  const t0 = performance.now();
  const res = await api<{ id: string }>(base, 'POST', `/api/v1/mosques/${world.mosqueId}/broadcasts`, { kind: 'azaan', prayer: 'maghrib' }, world.ownerToken);
  const triggerMs = performance.now() - t0;
  await watch.all(FANOUT_TIMEOUT_MS);
  const cpu = close();
  const start = summarize(watch, t0, res.id);
  // Stop it, and wait for every player to have the stop before the next run.
  const stopWatch = new Watch(n, 'stop', null);
  fleet.watch = stopWatch;
  const s0 = performance.now();
  await api(base, 'POST', `/api/v1/mosques/${world.mosqueId}/broadcasts/${res.id}/stop`, undefined, world.ownerToken);
  await stopWatch.all(FANOUT_TIMEOUT_MS);
  const stop = summarize(stopWatch, s0, res.id);
  fleet.watch = null;
  // The delivery report alone: GET of the broadcast builds it (one statement over the mosque's devices).
  const g0 = performance.now();
  await api(base, 'GET', `/api/v1/mosques/${world.mosqueId}/broadcasts/${res.id}`, undefined, world.ownerToken);
  const reportMs = performance.now() - g0;
  return { ...start, expected: n, triggerMs, doorMs, cpu, stopP50: stop.p50, stopP99: stop.p99, stopReceived: stop.received, reportMs };
}
