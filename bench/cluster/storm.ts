/**
 * The reconnect storm: every player connected to one node, that node crashed (SIGKILL) and started again on the
 * same store and Redis, and every player coming back to it at once (as many CONNECTs in flight as the node lets
 * one address have) doing what firmware does after each CONNACK (docs/firmware.md): SUBSCRIBE its config and
 * wait for the leased one, SUBSCRIBE its mosque's broadcast topic, publish its status ONLINE (QoS 1, retained)
 * and a heartbeat. Done when every status is PUBACKed, then when the store holds every player ONLINE, connected
 * and heard from since the crash. The other node stays up all along (its scheduler, feed and sweeps run).
 */
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import { pool } from '../support.ts';
import { Child, HOST, cpuWindow, type Spent, type Watched } from './processes.ts';
import { onlineDevices } from './postgres.ts';
import { connectAll, endAll, heartbeatBody, readyAll, statusBody, type Fleet, type Player } from './world.ts';

export interface StormFigures {
  /** From the restarted node's 'ready' to the last status PUBACK. */
  seconds: number;
  /** From the crash to the last status PUBACK (the restart included). */
  fromCrashS: number;
  /** From the crash until the store held every player ONLINE (NaN if it never did within 60 s). */
  storedS: number;
  /** Players the store held ONLINE at the end. */
  stored: number;
  /** Statuses never PUBACKed within 60 s (their write dropped), counted in the wall time at 60 s each. */
  unacked?: number;
  /** The window from the restarted node's 'ready' to the last PUBACK: [restarted node, other node, ...watched]. */
  spent: Spent;
}

/** One player's return after CONNACK; resolves when its status is PUBACKed. */
async function rejoin(url: string, p: Player, broadcastTopic: string): Promise<{ client: mqtt.MqttClient; lost: boolean }> {
  const client = await mqtt.connectAsync(url, {
    protocolVersion: 4, clientId: p.id, username: p.id, password: p.password, clean: true, keepalive: 300, reconnectPeriod: 0, connectTimeout: 60_000, resubscribe: false,
  });
  client.on('error', () => undefined);
  const topic = `devices/${p.id}/config`;
  const leased = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${p.id}: no leased config within 60 s of the storm`)), 60_000);
    client.on('message', (t, payload) => {
      if (t === topic && payload.includes('"lease"')) (clearTimeout(timer), resolve());
    });
  });
  leased.catch(() => undefined); // awaited below; a failed SUBSCRIBE must not leave it unhandled
  await client.subscribeAsync(topic, { qos: 1 });
  await leased;
  await client.subscribeAsync(broadcastTopic, { qos: 1 });
  // A status the service could not write (PostgreSQL's deadlock detector aborted its batch, logged "dropped")
  // is never PUBACKed: firmware would send it again on its next reconnect. The storm counts it and goes on.
  let timer: NodeJS.Timeout | undefined;
  const unacked = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), UNACKED_MS)));
  const acked = Promise.all([
    client.publishAsync(`devices/${p.id}/status`, statusBody('ONLINE', 'OFFLINE'), { qos: 1, retain: true }),
    client.publishAsync(`devices/${p.id}/heartbeat`, heartbeatBody('ONLINE'), { qos: 0 }),
  ]).then(() => false);
  const lost = await Promise.race([acked, unacked]);
  clearTimeout(timer);
  return { client, lost };
}

/** The same return on bare aedes: the wall time and the window [broker, ...watched]. */
export interface BareStormFigures {
  seconds: number;
  spent: Spent;
}

/**
 * The baseline of the storm's work: the same return of every player (the CONNECTs with as many in flight, the
 * config SUBSCRIBE answered by a retained leased config, the broadcast SUBSCRIBE, a retained QoS 1 status and a
 * heartbeat) on bare aedes with its persistence and pub/sub in Redis as the libraries ship them (bench/bare-broker.ts),
 * the parts a broker shared by several hosts needs. Each player's retained config is published first, outside the
 * window; `redisUrl` names a database of its own, emptied at the end (Minaret's retained configs are in another).
 */
export async function bareStorm(o: { players: Player[]; topicOf: (i: number) => string; redisUrl: string; concurrency: number; watched: Watched[]; window?: StormWindow }): Promise<BareStormFigures> {
  const broker = new Child('bare aedes on Redis', 'bare-broker.ts', { HOST, REDIS_URL: o.redisUrl });
  const fleet: Fleet = { clients: [], watch: null };
  try {
    const url = String((await broker.next('ready'))['mqttUrl']);
    const publisher = await mqtt.connectAsync(url, { clientId: 'bench-storm-configs', reconnectPeriod: 0 });
    await pool(o.players.length, o.concurrency, async (i) => {
      const id = o.players[i]!.id;
      await publisher.publishAsync(`devices/${id}/config`, JSON.stringify({ v: '1.0', device_id: id, lease: { token: 'bench', expires_at: 0 } }), { qos: 1, retain: true });
    });
    await publisher.endAsync();
    await o.window?.('start');
    const t0 = performance.now();
    const w = cpuWindow([broker.pid, ...o.watched]);
    await pool(o.players.length, o.concurrency, async (i) => {
      fleet.clients[i] = (await rejoin(url, o.players[i]!, o.topicOf(i))).client;
    });
    const spent = w();
    const seconds = (performance.now() - t0) / 1000;
    await o.window?.('end');
    return { seconds, spent };
  } finally {
    await endAll(fleet);
    await broker.stop();
    const { Redis } = await import('ioredis');
    const db = new Redis(o.redisUrl);
    await db.flushdb();
    db.disconnect();
  }
}

/** Told as the measured window opens and once it closed (bench/cluster/return.ts counts Redis commands and PostgreSQL transactions in it). */
export type StormWindow = (edge: 'start' | 'end') => Promise<void>;

/** How long a status may wait for its PUBACK before the storm counts it as never acknowledged. */
const UNACKED_MS = 60_000;

export async function reconnectStorm(o: {
  players: Player[]; topicOf: (i: number) => string; env: Record<string, string>; databaseUrl: string; concurrency: number; watched: Watched[]; log: (line: string) => void;
  window?: StormWindow;
}): Promise<StormFigures> {
  const n = o.players.length;
  const first = new Child('minaret 1', 'device-server.ts', o.env);
  const other = new Child('minaret 2', 'device-server.ts', o.env);
  let again: Child | null = null;
  const fleet: Fleet = { clients: [], watch: null };
  try {
    const url = String((await first.next('ready'))['mqttUrl']);
    await other.next('ready');
    await connectAll(fleet, o.players, () => url, o.concurrency);
    await readyAll(fleet, o.players, o.topicOf, o.concurrency);
    o.log(`storm: ${n} players ready on node 1; crashing it`);
    const crash = performance.now();
    const crashS = Math.ceil(Date.now() / 1000);
    await first.kill();
    await endAll(fleet);
    again = new Child('minaret 1 (restarted)', 'device-server.ts', o.env);
    const againUrl = String((await again.next('ready'))['mqttUrl']);
    await o.window?.('start');
    const t0 = performance.now();
    const w = cpuWindow([again.pid, other.pid, ...o.watched]);
    let unacked = 0;
    await pool(n, o.concurrency, async (i) => {
      const back = await rejoin(againUrl, o.players[i]!, o.topicOf(i));
      fleet.clients[i] = back.client;
      if (back.lost) unacked++;
    });
    const spent = w();
    const end = performance.now();
    await o.window?.('end');
    o.log(`storm: every player back in ${((end - t0) / 1000).toFixed(1)} s`);
    let stored = 0;
    let storedS = Number.NaN;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 250))) {
      stored = await onlineDevices(o.databaseUrl, crashS);
      if (stored >= n) {
        storedS = (performance.now() - crash) / 1000;
        break;
      }
    }
    await endAll(fleet);
    return { seconds: (end - t0) / 1000, fromCrashS: (end - crash) / 1000, storedS, stored, unacked, spent };
  } finally {
    await endAll(fleet);
    await Promise.all([first.stop(), other.stop(), again?.stop()]);
  }
}
