/**
 * bench/cluster.ts's world and load generator: a superadmin, an owner, one mosque with a stream_url whose
 * members are approved at once, N stream players owned by a few members (so each config carries a lease),
 * and one plain mqtt.js client per player, given a port by the caller (the devices split across processes).
 */
import crypto from 'node:crypto';
import { performance } from 'node:perf_hooks';
import bcrypt from 'bcryptjs';
import mqtt from 'mqtt';
import { systemClock } from '../../src/platform/clock.ts';
import { migrate, openDatabase } from '../../src/platform/db.ts';
import { identifierHash, sha256Hex } from '../../src/platform/identifiers.ts';
import { createUserStore } from '../../src/people/users.ts';
import { percentile, pool } from '../support.ts';
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

export async function api<T = any>(base: string, method: string, p: string, body?: unknown, token?: string): Promise<T> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (token) headers['authorization'] = `Bearer ${token}`;
  const res = await fetch(`${base}${p}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  if (res.status < 200 || res.status > 299) throw new Error(`${method} ${p}: HTTP ${res.status} ${text.slice(0, 300)}`);
  return (text ? JSON.parse(text) : null) as T;
}

/** Registers the world through the HTTP API of a running service (the superadmin row goes into SQLite first). */
export async function buildWorld(child: Child, base: string, dbPath: string, n: number): Promise<World> {
  const email = 'root@bench.example';
  const password = 'bench root password';
  const db = openDatabase(dbPath);
  try {
    migrate(db);
    createUserStore(db, systemClock).create({
      email, emailHash: identifierHash(email), phone: null, phoneHash: null, passwordBcrypt: bcrypt.hashSync(sha256Hex(password), 4), role: 'superadmin',
    });
  } finally {
    db.close();
  }
  const otp = child.next('otp', 30_000);
  const step1 = await api<{ session_token: string }>(base, 'POST', '/api/v1/auth/superadmin-2fa', { identifier_hash: identifierHash(email), password_hash: sha256Hex(password) });
  const code = String((await otp)['code']);
  const timestamp = Math.floor(Date.now() / 1000);
  const hmac = crypto.createHmac('sha256', step1.session_token).update(`${code}|${timestamp}`).digest('hex');
  const root = await api<{ access_token: string }>(base, 'POST', '/api/v1/auth/superadmin-2fa/verify', { session_token: step1.session_token, timestamp, hmac });
  const signup = (e: string) => api<{ access_token: string; user: { id: string } }>(base, 'POST', '/api/v1/auth/signup', { email: e, password_hash: sha256Hex(`pw ${e}`) });
  const owner = await signup('owner@bench.example');
  const mosque = await api<{ id: string }>(base, 'POST', '/api/v1/mosques', {
    name: 'Bench Masjid', owner_user_id: owner.user.id, auto_approve_members: true, stream_url: 'https://radio.example.org/bench-noor',
  }, root.access_token);
  const members: string[] = [];
  for (let i = 0; i < Math.max(1, Math.ceil(n / 2000)); i++) {
    const token = (await signup(`member${i + 1}@bench.example`)).access_token;
    await api(base, 'POST', `/api/v1/mosques/${mosque.id}/join`, {}, token);
    members.push(token);
  }
  const players: Player[] = new Array(n);
  await pool(n, 20, async (i) => {
    const r = await api<{ credentials: { client_id: string; password: string } }>(base, 'POST', '/api/v1/devices', { kind: 'stream_player', name: `player ${i}`, mosque_id: mosque.id }, members[i % members.length]);
    players[i] = { id: r.credentials.client_id, password: r.credentials.password };
  });
  return { ownerToken: owner.access_token, mosqueId: mosque.id, players };
}

/** Receipt times of one broadcast action, per player. */
export class Watch {
  readonly at: Float64Array;
  count = 0;
  private done: (() => void) | null = null;
  constructor(n: number, readonly action: string) {
    this.at = new Float64Array(n).fill(Number.NaN);
  }
  saw(i: number, t: number, action: unknown): void {
    if (action !== this.action || !Number.isNaN(this.at[i]!)) return;
    this.at[i] = t;
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
        fleet.watch.saw(i, t, (JSON.parse(payload.toString()) as { action?: unknown }).action);
      } catch {
        /* not JSON: not ours */
      }
    });
    fleet.clients[i] = client;
  });
  return (performance.now() - t0) / 1000;
}

/** Each player: SUBSCRIBE its config, wait for the leased one, SUBSCRIBE the mosque's broadcast topic. */
export async function readyAll(fleet: Fleet, players: Player[], broadcastTopic: string, concurrency: number): Promise<number> {
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
    await client.subscribeAsync(broadcastTopic, { qos: 1 });
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
