/**
 * bench/cluster.ts's world and load generator: a superadmin, an owner, one mosque with a stream_url whose
 * members are approved at once, N stream players owned by a few members (so each config carries a lease),
 * and one plain mqtt.js client per player, given a port by the caller (the devices split across processes).
 */
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import { percentile, pool } from '../support.ts';
import { registerWorld, createFirstSuperadminRow, superadminToken } from '../world/registration.ts';
import type { Child } from './processes.ts';

export interface Player {
  id: string;
  password: string;
}

export interface World {
  ownerToken: string;
  mosqueId: string;
  players: Player[];
}

/** bench/world/registration.ts's world: one auto-approving mosque with a stream_url, a member per 2,000 players. */
export async function buildWorld(child: Child, base: string, dbPath: string, n: number): Promise<World> {
  await createFirstSuperadminRow(dbPath);
  const rootToken = await superadminToken(base, async () => String((await child.next('otp', 30_000))['code']));
  const world = await registerWorld(base, rootToken, {
    mosques: [{ name: 'Bench Masjid', auto_approve_members: true, stream_url: 'https://radio.example.org/bench-noor' }],
    members: Math.max(1, Math.ceil(n / 2000)), devices: n, concurrency: 20,
    nextOtp: async () => String((await child.next('otp', 30_000))['code']),
  });
  return { ownerToken: world.ownerToken, mosqueId: world.mosqueIds[0]!, players: world.devices.map((d) => ({ id: d.id, password: d.password })) };
}

/** Receipt times of one broadcast action, per player. */
export class Watch {
  readonly at: Float64Array;
  /** The broadcast_id each player saw with the action (the azaan minute stops what the scheduler started). */
  readonly ids: Array<string | undefined>;
  count = 0;
  private done: (() => void) | null = null;
  constructor(n: number, readonly action: string) {
    this.at = new Float64Array(n).fill(Number.NaN);
    this.ids = new Array<string | undefined>(n);
  }
  saw(i: number, t: number, event: { action?: unknown; broadcast_id?: unknown }): void {
    if (event.action !== this.action || !Number.isNaN(this.at[i]!)) return;
    this.at[i] = t;
    if (typeof event.broadcast_id === 'string') this.ids[i] = event.broadcast_id;
    if (++this.count === this.at.length) this.done?.();
  }
  all(timeoutMs: number): Promise<void> {
    if (this.count === this.at.length) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.count}/${this.at.length} players had the ${this.action} within ${timeoutMs} ms`)), timeoutMs);
      this.done = () => (clearTimeout(timer), resolve());
    });
  }
  /** First receipt and p99 over the players, in ms after t0. */
  summary(t0: number): { first: number; p99: number } {
    const after = Array.from(this.at, (t) => t - t0);
    return { first: Math.min(...after), p99: percentile(after, 99) };
  }
}

export interface Fleet {
  clients: mqtt.MqttClient[];
  watch: Watch | null;
}

/** CONNECT -> CONNACK for every player at `urlOf(i)`, at most `concurrency` in flight; returns the seconds taken. */
export async function connectAll(fleet: Fleet, players: Player[], urlOf: (i: number) => string, concurrency: number): Promise<number> {
  const t0 = performance.now();
  await pool(players.length, concurrency, async (i) => {
    const p = players[i]!;
    const client = await mqtt.connectAsync(urlOf(i), {
      protocolVersion: 4, clientId: p.id, username: p.id, password: p.password, clean: true, keepalive: 300, reconnectPeriod: 0, connectTimeout: 60_000, resubscribe: false,
    });
    client.on('error', () => undefined);
    client.on('message', (_topic, payload) => {
      if (!fleet.watch) return;
      const t = performance.now();
      try {
        fleet.watch.saw(i, t, JSON.parse(payload.toString()) as { action?: unknown; broadcast_id?: unknown });
      } catch {
        /* not JSON: not ours */
      }
    });
    fleet.clients[i] = client;
  });
  return (performance.now() - t0) / 1000;
}

/** Each player: SUBSCRIBE its config, wait for the leased one, SUBSCRIBE its mosque's broadcast topic (one topic for all, or player i's). */
export async function readyAll(fleet: Fleet, players: Player[], broadcastTopic: string | ((i: number) => string), concurrency: number): Promise<number> {
  const t0 = performance.now();
  await pool(players.length, concurrency, async (i) => {
    const client = fleet.clients[i]!;
    const topic = `devices/${players[i]!.id}/config`;
    const leased = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`player ${i}: no leased config within 60 s`)), 60_000);
      const on = (t: string, payload: Buffer) => {
        if (t !== topic || !payload.includes('"lease"')) return;
        clearTimeout(timer);
        client.off('message', on);
        resolve();
      };
      client.on('message', on);
    });
    await client.subscribeAsync(topic, { qos: 1 });
    await leased;
    await client.subscribeAsync(typeof broadcastTopic === 'string' ? broadcastTopic : broadcastTopic(i), { qos: 1 });
  });
  return (performance.now() - t0) / 1000;
}

/** Every player publishes `per` messages at once (the last one QoS 1 as a fence when qos0); seconds until every PUBACK. */
export async function burst(fleet: Fleet, players: Player[], per: number, message: (i: number, k: number) => { topic: string; body: string; qos: 0 | 1; retain: boolean }): Promise<number> {
  const t0 = performance.now();
  await pool(players.length, 1000, async (i) => {
    const sends: Array<Promise<unknown>> = [];
    for (let k = 0; k < per; k++) {
      const m = message(i, k);
      sends.push(fleet.clients[i]!.publishAsync(m.topic, m.body, { qos: m.qos, retain: m.retain }));
    }
    await Promise.all(sends);
  });
  return (performance.now() - t0) / 1000;
}

export async function endAll(fleet: Fleet): Promise<void> {
  await Promise.all(fleet.clients.map((c) => c?.endAsync(true).catch(() => undefined)));
  fleet.clients.length = 0;
}

const nowS = () => Math.floor(Date.now() / 1000);
export const statusBody = (status: string, prev: string) =>
  JSON.stringify({ v: '1.0', status, prev, reason: 'bench', fw: 'minaret-sp-bench/1.0.0', mac: '02:00:00:be:0c:01', ssid: 'Bench-Net', ip: '10.0.0.2', rssi: -61, uptime_s: 120, config_version: 1, detail: {}, ts: nowS() });
export const heartbeatBody = (status: string) =>
  JSON.stringify({ v: '1.0', status, rssi: -61, ip: '10.0.0.2', uptime_s: 180, free_heap: 151_000, volume: 80, config_version: 1, ts: nowS() });
