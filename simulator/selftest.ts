/**
 * Self-test of simulator/device.ts against a bare, in-process aedes broker (no Minaret server):
 *
 *   npx tsx simulator/selftest.ts [--no-cli]
 *
 * What the device publishes is observed at the broker ('publish' events carry the QoS and retain
 * flags exactly as the device sent them); configs and commands go in through a second MQTT client.
 * Prints one PASS/FAIL line per check and exits 1 when any check failed. Not part of `npm test`.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Aedes, type AuthenticateError } from 'aedes';
import mqtt from 'mqtt';
import { SimDevice, SimConnectError, type DeviceKind } from './device.ts';

// ---------------------------------------------------------------------------------------------------
// Harness

let failures = 0;
let passes = 0;
function check(name: string, ok: boolean, info?: unknown): void {
  if (ok) {
    passes++;
    console.log(`PASS ${name}`);
  } else {
    failures++;
    console.log(`FAIL ${name}${info === undefined ? '' : `  -- ${typeof info === 'string' ? info : JSON.stringify(info)}`}`);
  }
}

interface Seen {
  topic: string;
  qos: number;
  retain: boolean;
  body: Record<string, unknown>;
  raw: string;
  from: string | null;
  at: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const nowS = (): number => Math.floor(Date.now() / 1000);
const isInt = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v);

class Recorder {
  readonly seen: Seen[] = [];
  readonly subscribes: { client: string; topic: string; qos: number }[] = [];
  readonly unsubscribes: { client: string; topic: string }[] = [];
  private waiters: (() => void)[] = [];

  constructor(broker: Aedes) {
    broker.on('publish', (packet, client) => {
      if (packet.topic.startsWith('$SYS')) return;
      const raw = Buffer.isBuffer(packet.payload) ? packet.payload.toString('utf8') : String(packet.payload);
      let body: Record<string, unknown> = {};
      try {
        const parsed: unknown = JSON.parse(raw);
        if (typeof parsed === 'object' && parsed !== null) body = parsed as Record<string, unknown>;
      } catch {
        // not JSON (a malformed input on purpose)
      }
      this.seen.push({ topic: packet.topic, qos: packet.qos, retain: packet.retain, body, raw, from: client?.id ?? null, at: Date.now() });
      this.wake();
    });
    broker.on('subscribe', (subs, client) => {
      for (const s of subs) this.subscribes.push({ client: client.id, topic: s.topic, qos: s.qos });
      this.wake();
    });
    broker.on('unsubscribe', (topics, client) => {
      for (const t of topics) this.unsubscribes.push({ client: client.id, topic: t });
      this.wake();
    });
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  mark(): number {
    return this.seen.length;
  }

  since(mark: number, pred: (s: Seen) => boolean = () => true): Seen[] {
    return this.seen.slice(mark).filter(pred);
  }

  /** First message from `mark` on that satisfies pred, or null after timeoutMs. */
  async waitFor(mark: number, pred: (s: Seen) => boolean, timeoutMs = 3000): Promise<Seen | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.seen.slice(mark).find(pred);
      if (hit) return hit;
      const left = deadline - Date.now();
      if (left <= 0) return null;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  async waitUntil(pred: () => boolean, timeoutMs = 3000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (pred()) return true;
      await sleep(20);
    }
    return pred();
  }
}

const topicOf = (id: string, leaf: string): string => `devices/${id}/${leaf}`;
const isStatus = (id: string, status?: string) => (s: Seen): boolean =>
  s.topic === topicOf(id, 'status') && (status === undefined || s.body['status'] === status);
const isHeartbeat = (id: string) => (s: Seen): boolean => s.topic === topicOf(id, 'heartbeat');
const isAck = (id: string, cmdId: string) => (s: Seen): boolean => s.topic === topicOf(id, 'ack') && s.body['id'] === cmdId;
const isLog = (id: string) => (s: Seen): boolean => s.topic === topicOf(id, 'log');

function checkStatusShape(label: string, s: Seen | null, kind: DeviceKind): void {
  if (!s) return check(`${label}: status published`, false, 'nothing seen');
  const b = s.body;
  const problems: string[] = [];
  if (b['v'] !== '1.0') problems.push('v');
  for (const k of ['status', 'prev', 'reason', 'fw', 'mac', 'ssid', 'ip']) if (typeof b[k] !== 'string') problems.push(k);
  if (!isInt(b['rssi']) || (b['rssi'] as number) >= 0) problems.push('rssi');
  for (const k of ['uptime_s', 'config_version', 'ts']) if (!isInt(b[k])) problems.push(k);
  if (typeof b['detail'] !== 'object' || b['detail'] === null) problems.push('detail');
  if (kind === 'transmitter' && typeof b['temp_c'] !== 'number') problems.push('temp_c missing');
  if (kind === 'stream_player' && 'temp_c' in b) problems.push('temp_c on a player');
  if (Math.abs((b['ts'] as number) - nowS()) > 5) problems.push('ts not Unix seconds');
  check(`${label}: status shape (docs/firmware.md 3.1 fields and types)`, problems.length === 0, problems);
  check(`${label}: status is QoS 1, retained`, s.qos === 1 && s.retain === true, { qos: s.qos, retain: s.retain });
}

function checkHeartbeatShape(label: string, s: Seen | null): void {
  if (!s) return check(`${label}: heartbeat published`, false, 'nothing seen');
  const b = s.body;
  const problems: string[] = [];
  if (b['v'] !== '1.0') problems.push('v');
  if (typeof b['status'] !== 'string') problems.push('status');
  if (typeof b['ip'] !== 'string') problems.push('ip');
  for (const k of ['rssi', 'uptime_s', 'free_heap', 'volume', 'config_version', 'ts']) if (!isInt(b[k])) problems.push(k);
  if ((b['rssi'] as number) >= 0) problems.push('rssi not negative');
  const keys = Object.keys(b).sort().join(',');
  if (keys !== 'config_version,free_heap,ip,rssi,status,ts,uptime_s,v,volume') problems.push(`keys ${keys}`);
  check(`${label}: heartbeat shape`, problems.length === 0, problems);
  check(`${label}: heartbeat is QoS 0, not retained`, s.qos === 0 && s.retain === false, { qos: s.qos, retain: s.retain });
}

// ---------------------------------------------------------------------------------------------------
// Broker, control client

async function startBroker(opts: Parameters<typeof Aedes.createBroker>[0] = {}): Promise<{ broker: Aedes; server: net.Server; url: string; close: () => Promise<void> }> {
  const broker = await Aedes.createBroker(opts);
  const server = net.createServer((socket) => broker.handle(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as net.AddressInfo).port;
  return {
    broker,
    server,
    url: `mqtt://127.0.0.1:${port}`,
    close: async () => {
      await new Promise<void>((resolve) => broker.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function control(url: string): Promise<mqtt.MqttClient> {
  const c = mqtt.connect(url, { clientId: 'selftest-control', protocolVersion: 4, reconnectPeriod: 0 });
  await new Promise<void>((resolve, reject) => {
    c.once('connect', () => resolve());
    c.once('error', reject);
  });
  return c;
}

function pub(c: mqtt.MqttClient, topic: string, body: unknown, retain = false): Promise<void> {
  const payload = typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => c.publish(topic, payload, { qos: 1, retain }, (err) => (err ? reject(err) : resolve())));
}

let cmdSeq = 0;
function command(name: string, args: Record<string, unknown> = {}, expiresIn = 60): Record<string, unknown> {
  cmdSeq++;
  return { v: '1.0', id: `cmd-${cmdSeq}-${name}`, name, args, ts: nowS(), expires_at: nowS() + expiresIn };
}

async function sendCommand(
  rec: Recorder,
  ctl: mqtt.MqttClient,
  id: string,
  name: string,
  args: Record<string, unknown> = {},
): Promise<Seen | null> {
  const cmd = command(name, args);
  const mark = rec.mark();
  await pub(ctl, topicOf(id, 'cmd'), cmd);
  return rec.waitFor(mark, isAck(id, cmd['id'] as string));
}

function ackOk(s: Seen | null): boolean {
  return !!s && s.body['ok'] === true && s.body['v'] === '1.0' && isInt(s.body['ts']) && s.qos === 1 && s.retain === false;
}

// ---------------------------------------------------------------------------------------------------
// Transmitter

async function transmitterSuite(url: string, rec: Recorder, ctl: mqtt.MqttClient): Promise<void> {
  const id = 'tx-0001';
  const lines: string[] = [];
  const dev = new SimDevice({ kind: 'transmitter', id, password: 'pw', mqttUrl: url, heartbeatSecsOverride: 1, logger: (l) => lines.push(l) });
  const events: string[] = [];
  dev.on('status', (now: string, prev: string, reason: string) => events.push(`${prev}->${now}:${reason}`));

  let mark = rec.mark();
  await dev.start();
  check('tx: start() resolves on CONNACK, state ONLINE', dev.status === 'ONLINE', dev.status);
  const st = await rec.waitFor(mark, isStatus(id));
  checkStatusShape('tx connect', st, 'transmitter');
  check('tx: first status ONLINE, prev CONNECTING, reason connected', st?.body['status'] === 'ONLINE' && st.body['prev'] === 'CONNECTING' && st.body['reason'] === 'connected', st?.body);
  const hb = await rec.waitFor(mark, isHeartbeat(id), 500);
  check('tx: first heartbeat at once after connect', hb !== null && hb.at - (st?.at ?? 0) < 500);
  checkHeartbeatShape('tx', hb);
  check('tx: heartbeat status mirrors ONLINE', hb?.body['status'] === 'ONLINE');
  const subs = await rec.waitUntil(() => rec.subscribes.filter((s) => s.client === id).length >= 2);
  const mine = rec.subscribes.filter((s) => s.client === id);
  check(
    'tx: subscribed to own config and cmd at QoS 1',
    subs && mine.some((s) => s.topic === topicOf(id, 'config') && s.qos === 1) && mine.some((s) => s.topic === topicOf(id, 'cmd') && s.qos === 1),
    mine,
  );
  check('tx: status event emitted (CONNECTING->ONLINE:connected)', events.includes('CONNECTING->ONLINE:connected'), events);

  // Heartbeat cadence with the override (1 s).
  mark = rec.mark();
  await sleep(2600);
  const hbs = rec.since(mark, isHeartbeat(id));
  check('tx: heartbeats every heartbeat_secs (override 1 s: 2-3 in 2.6 s)', hbs.length >= 2 && hbs.length <= 3, hbs.length);

  // Config: retained, QoS 1; logging on.
  mark = rec.mark();
  let configEvent: unknown = null;
  dev.once('config', (c: unknown) => (configEvent = c));
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 3, heartbeat_secs: 20, log_enabled: true, volume: 55 }, true);
  await rec.waitUntil(() => dev.configVersion === 3);
  check('tx: config applied (config_version 3, event emitted)', dev.configVersion === 3 && configEvent !== null);
  const hb2 = await rec.waitFor(rec.mark(), isHeartbeat(id), 1500);
  check('tx: heartbeat carries config_version and volume from the config', hb2?.body['config_version'] === 3 && hb2.body['volume'] === 55, hb2?.body);

  // Logs: rate limit, size, QoS 0, not retained.
  mark = rec.mark();
  for (let i = 0; i < 6; i++) await sendCommand(rec, ctl, id, 'ping');
  await sleep(3200);
  const logs = rec.since(mark, isLog(id));
  check('tx: log_enabled produces log lines', logs.length >= 2, logs.length);
  const gaps = logs.slice(1).map((l, i) => l.at - (logs[i]?.at ?? 0));
  check('tx: at most 1 log line per second', gaps.every((g) => g >= 950), gaps);
  check('tx: log lines under 512 bytes', logs.every((l) => Buffer.byteLength(l.raw) < 512));
  check(
    'tx: log shape {v, level, msg, ts}, QoS 0, not retained',
    logs.every((l) => l.body['v'] === '1.0' && ['warn', 'info', 'debug'].includes(l.body['level'] as string) && typeof l.body['msg'] === 'string' && isInt(l.body['ts']) && l.qos === 0 && !l.retain),
    logs[0],
  );
  check('tx: excess log lines dropped and counted', dev.counters.logsDropped > 0, dev.counters);

  // Commands.
  const ping = await sendCommand(rec, ctl, id, 'ping');
  check('tx: ping acked {pong:true, uptime_s}', ackOk(ping) && (ping?.body['result'] as Record<string, unknown>)['pong'] === true && isInt((ping?.body['result'] as Record<string, unknown>)['uptime_s']), ping?.body);
  check('tx: ack echoes id and name', ping?.body['name'] === 'ping' && typeof ping?.body['id'] === 'string');
  const gs = await sendCommand(rec, ctl, id, 'get_state');
  const gsr = (gs?.body['result'] ?? {}) as Record<string, unknown>;
  check(
    'tx: get_state = full status + capabilities, config_schema, hw_rev',
    ackOk(gs) && gsr['status'] === 'ONLINE' && typeof gsr['mac'] === 'string' && typeof gsr['temp_c'] === 'number' && Array.isArray(gsr['capabilities']) &&
      (gsr['capabilities'] as string[]).includes('local') && typeof gsr['config_schema'] === 'object' && typeof gsr['hw_rev'] === 'string',
    gsr,
  );
  const pt = await sendCommand(rec, ctl, id, 'play_test');
  check('tx: play_test {played:tone, duration_ms}', ackOk(pt) && (pt?.body['result'] as Record<string, unknown>)['played'] === 'tone' && isInt((pt?.body['result'] as Record<string, unknown>)['duration_ms']), pt?.body);
  const ident = await sendCommand(rec, ctl, id, 'identify');
  check('tx: identify {method:led_blink}', ackOk(ident) && (ident?.body['result'] as Record<string, unknown>)['method'] === 'led_blink', ident?.body);
  const diag = await sendCommand(rec, ctl, id, 'diag_bundle');
  const dr = (diag?.body['result'] ?? {}) as Record<string, unknown>;
  check(
    'tx: diag_bundle shape',
    ackOk(diag) && Array.isArray(dr['transitions']) && (dr['transitions'] as unknown[]).length <= 10 && dr['config_version'] === 3 && isInt(dr['uptime_s']) &&
      dr['reset_reason'] === 'power_on' && isInt(dr['free_heap']) && typeof dr['wifi'] === 'object' && typeof dr['broker'] === 'object' && 'last_error' in dr,
    dr,
  );
  check('tx: diag_bundle ack stays under 4 KiB', !!diag && Buffer.byteLength(diag.raw) < 4096, diag?.raw.length);

  mark = rec.mark();
  const bs = await sendCommand(rec, ctl, id, 'broadcast_start', { broadcast_id: 'b1', kind: 'azaan', prayer: 'fajr' });
  const playing = await rec.waitFor(mark, isStatus(id, 'PLAYING'));
  check('tx: broadcast_start acked ok', ackOk(bs), bs?.body);
  check(
    'tx: broadcast_start -> PLAYING detail {source:local, broadcast_id}',
    playing?.body['prev'] === 'ONLINE' && (playing.body['detail'] as Record<string, unknown>)['source'] === 'local' && (playing.body['detail'] as Record<string, unknown>)['broadcast_id'] === 'b1',
    playing?.body,
  );
  mark = rec.mark();
  const bstop = await sendCommand(rec, ctl, id, 'broadcast_stop', { broadcast_id: 'b1' });
  const back = await rec.waitFor(mark, isStatus(id, 'ONLINE'));
  check('tx: broadcast_stop -> ONLINE (prev PLAYING)', ackOk(bstop) && back?.body['prev'] === 'PLAYING', back?.body);

  const sll = await sendCommand(rec, ctl, id, 'set_log_level', { level: 'debug', ttl_s: 10 });
  check('tx: set_log_level on a transmitter -> unsupported_command', sll?.body['ok'] === false && sll.body['error'] === 'unsupported_command', sll?.body);
  const unk = await sendCommand(rec, ctl, id, 'self_destruct');
  check('tx: unknown command -> unsupported_command', unk?.body['ok'] === false && unk.body['error'] === 'unsupported_command', unk?.body);

  const expired = command('ping', {}, -5);
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'cmd'), expired);
  const expAck = await rec.waitFor(mark, isAck(id, expired['id'] as string), 800);
  check('tx: expired command ignored (no ack)', expAck === null && dev.counters.commandsExpired === 1);

  const dup = command('identify');
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'cmd'), dup);
  await pub(ctl, topicOf(id, 'cmd'), dup);
  await sleep(400);
  const dupAcks = rec.since(mark, isAck(id, dup['id'] as string));
  check('tx: redelivered command answered again, run once', dupAcks.length === 2 && dev.counters.commandsDuplicate === 1, dupAcks.length);

  const before = dev.counters.malformedCommands;
  await pub(ctl, topicOf(id, 'cmd'), 'not json{');
  await pub(ctl, topicOf(id, 'cmd'), { name: 'ping' });
  await pub(ctl, topicOf(id, 'cmd'), [1, 2, 3]);
  await sleep(300);
  check('tx: malformed commands counted, device survives', dev.counters.malformedCommands === before + 3 && dev.status === 'ONLINE');

  // Config that cannot be applied: ONLINE -> CONFIG_ERROR -> ONLINE on the next good one.
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 4, heartbeat_secs: 'often', log_enabled: true }, true);
  const cerr = await rec.waitFor(mark, isStatus(id, 'CONFIG_ERROR'));
  check(
    'tx: bad config -> CONFIG_ERROR with offending keys',
    !!cerr && ((cerr.body['detail'] as Record<string, unknown>)['keys'] as string[]).includes('heartbeat_secs') && dev.counters.malformedConfigs === 1,
    cerr?.body,
  );
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'config'), 'garbage', true);
  await sleep(200);
  check('tx: unparseable config counted, no crash', dev.counters.malformedConfigs === 2 && dev.status === 'CONFIG_ERROR');
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 5, heartbeat_secs: 30, log_enabled: true }, true);
  const ok = await rec.waitFor(mark, isStatus(id, 'ONLINE'));
  check('tx: next good config -> ONLINE', ok?.body['prev'] === 'CONFIG_ERROR' && dev.configVersion === 5, ok?.body);

  // Network blip: will fires at the broker, device reconnects and republishes its status unprompted.
  mark = rec.mark();
  const hbBefore = dev.counters.heartbeats;
  dev.dropConnection();
  const will = await rec.waitFor(mark, isStatus(id, 'OFFLINE'));
  check(
    'tx: dropped socket -> broker publishes will OFFLINE reason lwt, prev ONLINE, retained QoS 1',
    will?.body['reason'] === 'lwt' && will.body['prev'] === 'ONLINE' && will.body['v'] === '1.0' && isInt(will.body['ts']) && will.qos === 1 && will.retain === true,
    will && { body: will.body, qos: will.qos, retain: will.retain },
  );
  // (A QoS 1 status still unacknowledged at the drop is resent by mqtt.js before 'connect': it may precede this one.)
  const again = await rec.waitFor(mark, (s) => isStatus(id, 'ONLINE')(s) && s.body['reason'] === 'reconnect', 4000);
  check(
    'tx: reconnect republishes status (unchanged state, prev = status, reason reconnect)',
    again?.body['prev'] === 'ONLINE' && again.qos === 1 && again.retain === true && again.from === id,
    again?.body,
  );
  // (aedes reports a QoS 0 publish before a retained QoS 1 one sent just ahead of it: compare either side.)
  const hbAfter = await rec.waitFor(mark, (s) => isHeartbeat(id)(s) && s.at >= (will?.at ?? Infinity) + 500 && Math.abs(s.at - (again?.at ?? 0)) < 300, 500);
  check('tx: heartbeat at once after reconnect', hbAfter !== null && dev.counters.heartbeats > hbBefore);
  check('tx: counters see the reconnect', dev.counters.connects === 2 && dev.counters.disconnects === 1 && dev.counters.reconnects === 1, dev.counters);
  const resubscribed = await rec.waitUntil(() => rec.subscribes.filter((s) => s.client === id && s.topic === topicOf(id, 'cmd')).length === 2);
  check('tx: resubscribed to config and cmd after reconnect (clean session)', resubscribed && rec.subscribes.filter((s) => s.client === id && s.topic === topicOf(id, 'config')).length === 2);
  const cfgBack = await rec.waitUntil(() => dev.counters.configsApplied >= 3);
  check('tx: retained config redelivered and applied again after reconnect', cfgBack && dev.configVersion === 5 && dev.status === 'ONLINE');

  // Retained status as a late subscriber sees it.
  const retained = await retainedStatus(url, id);
  check('tx: retained status on the broker is ONLINE', retained?.['status'] === 'ONLINE', retained);

  // Graceful stop: OFFLINE reason shutdown, no will.
  mark = rec.mark();
  await dev.stop({ graceful: true });
  const off = await rec.waitFor(mark, isStatus(id, 'OFFLINE'));
  check(
    'tx: graceful stop publishes OFFLINE reason shutdown (retained, QoS 1)',
    off?.body['reason'] === 'shutdown' && off.body['prev'] === 'ONLINE' && off.from === id && off.qos === 1 && off.retain === true,
    off?.body,
  );
  await sleep(400);
  check('tx: graceful stop fires no will', rec.since(mark, (s) => isStatus(id)(s) && s.body['reason'] === 'lwt').length === 0);
  check('tx: stop clears every timer', noTimers(dev));
  const retainedAfter = await retainedStatus(url, id);
  check('tx: retained status after graceful stop is OFFLINE/shutdown', retainedAfter?.['status'] === 'OFFLINE' && retainedAfter['reason'] === 'shutdown', retainedAfter);
  check('tx: local logger printed transitions and commands', lines.some((l) => l.includes('ONLINE -> PLAYING')) && lines.some((l) => l.startsWith('cmd ping')), lines.slice(0, 5));

  // Crash: the broker publishes the will.
  const dev2 = new SimDevice({ kind: 'transmitter', id: 'tx-0002', password: 'pw', mqttUrl: url, heartbeatSecsOverride: 1 });
  await dev2.start();
  await sleep(200);
  mark = rec.mark();
  await dev2.crash();
  const lwt = await rec.waitFor(mark, isStatus('tx-0002', 'OFFLINE'));
  check('tx: crash -> will OFFLINE reason lwt, prev ONLINE, published by the broker', lwt?.body['reason'] === 'lwt' && lwt.body['prev'] === 'ONLINE' && lwt.retain === true && lwt.qos === 1, lwt?.body);
  check('tx: will payload has the status fields', typeof lwt?.body['fw'] === 'string' && isInt(lwt?.body['uptime_s']) && typeof lwt?.body['detail'] === 'object');
  check('tx: crash clears every timer', noTimers(dev2));
}

function noTimers(dev: SimDevice): boolean {
  return dev['hbTimer'] === null && dev['leaseTimer'] === null && dev['logTtlTimer'] === null && dev['quietTimer'] === null;
}

async function retainedStatus(url: string, id: string): Promise<Record<string, unknown> | null> {
  const c = mqtt.connect(url, { clientId: `peek-${Math.random().toString(16).slice(2)}`, protocolVersion: 4, reconnectPeriod: 0 });
  try {
    return await new Promise<Record<string, unknown> | null>((resolve) => {
      const t = setTimeout(() => resolve(null), 1500);
      c.on('message', (_topic, payload, packet) => {
        clearTimeout(t);
        resolve(packet.retain ? (JSON.parse(payload.toString()) as Record<string, unknown>) : null);
      });
      c.on('connect', () => c.subscribe(topicOf(id, 'status'), { qos: 1 }));
    });
  } finally {
    c.end(true);
  }
}

// ---------------------------------------------------------------------------------------------------
// Stream player

function fakeLease(id: string, mosque: string, expiresAt: number): { token: string; expires_at: number } {
  const enc = (o: unknown): string => Buffer.from(JSON.stringify(o)).toString('base64url');
  return { token: `${enc({ alg: 'EdDSA', typ: 'JWT' })}.${enc({ sub: id, mosque_id: mosque, exp: expiresAt })}.c2ln`, expires_at: expiresAt };
}

async function playerSuite(url: string, rec: Recorder, ctl: mqtt.MqttClient): Promise<void> {
  const id = 'sp-0001';
  const mosque = 'm-42';
  const btopic = `mosques/${mosque}/broadcast`;
  const dev = new SimDevice({ kind: 'stream_player', id, password: 'pw', mqttUrl: url, heartbeatSecsOverride: 1 });
  const broadcasts: unknown[] = [];
  dev.on('broadcast', (m: unknown) => broadcasts.push(m));

  let mark = rec.mark();
  await dev.start();
  const st = await rec.waitFor(mark, isStatus(id));
  checkStatusShape('sp connect', st, 'stream_player');
  check(
    'sp: CONNECTING -> UNBOUND on connect, detail reason no_mosque (no config yet)',
    st?.body['status'] === 'UNBOUND' && st.body['prev'] === 'CONNECTING' && (st.body['detail'] as Record<string, unknown>)['reason'] === 'no_mosque',
    st?.body,
  );
  checkHeartbeatShape('sp', await rec.waitFor(mark, isHeartbeat(id), 500));

  // get_state while UNBOUND (remote diagnostics must answer).
  const gs = await sendCommand(rec, ctl, id, 'get_state');
  const gsr = (gs?.body['result'] ?? {}) as Record<string, unknown>;
  check(
    'sp: get_state answered while UNBOUND, capabilities stream/local/bluetooth, no temp_c',
    ackOk(gs) && gsr['status'] === 'UNBOUND' && JSON.stringify(gsr['capabilities']) === JSON.stringify(['stream', 'local', 'bluetooth']) && !('temp_c' in gsr),
    gsr,
  );

  // Config without mosque: stays UNBOUND/no_mosque, no new status.
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 1, heartbeat_secs: 300, log_enabled: false }, true);
  await rec.waitUntil(() => dev.configVersion === 1);
  await sleep(200);
  check('sp: config without mosque keeps UNBOUND/no_mosque, no republish', dev.status === 'UNBOUND' && rec.since(mark, isStatus(id)).length === 0);

  // Mosque but no approval yet.
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 2, heartbeat_secs: 300, log_enabled: false, mosque_id: mosque }, true);
  const aw = await rec.waitFor(mark, isStatus(id, 'UNBOUND'));
  check('sp: config with mosque, no stream_url -> UNBOUND reason awaiting_approval', aw?.body['reason'] === 'awaiting_approval' && (aw.body['detail'] as Record<string, unknown>)['reason'] === 'awaiting_approval', aw?.body);

  mark = rec.mark();
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 3, heartbeat_secs: 300, log_enabled: false, mosque_id: mosque, unbound_reason: 'membership_lapsed' }, true);
  const lapsed = await rec.waitFor(mark, isStatus(id, 'UNBOUND'));
  check('sp: config unbound_reason is taken as the reason', (lapsed?.body['detail'] as Record<string, unknown> | undefined)?.['reason'] === 'membership_lapsed', lapsed?.body);

  // Entitled: stream_url + lease.
  mark = rec.mark();
  const exp = nowS() + 4;
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 4, heartbeat_secs: 300, log_enabled: false, mosque_id: mosque, stream_url: 'http://icecast.local/m42', lease: fakeLease(id, mosque, exp) }, true);
  const on = await rec.waitFor(mark, isStatus(id, 'ONLINE'));
  check('sp: config with stream_url + lease -> ONLINE (prev UNBOUND, reason entitled)', on?.body['prev'] === 'UNBOUND' && on.body['reason'] === 'entitled', on?.body);
  const sub = await rec.waitUntil(() => rec.subscribes.some((s) => s.client === id && s.topic === btopic));
  check('sp: subscribes to its mosque broadcast topic while holding the lease', sub && rec.subscribes.some((s) => s.client === id && s.topic === btopic && s.qos === 1));

  // Broadcast start/stop.
  mark = rec.mark();
  await pub(ctl, btopic, { v: '1.0', broadcast_id: 'b9', kind: 'azaan', action: 'start', stream_url: 'http://icecast.local/m42', ts: nowS() });
  const pl = await rec.waitFor(mark, isStatus(id, 'PLAYING'));
  const pd = (pl?.body['detail'] ?? {}) as Record<string, unknown>;
  check('sp: broadcast start -> PLAYING detail {source:stream, stream_url, broadcast_id}', pd['source'] === 'stream' && pd['stream_url'] === 'http://icecast.local/m42' && pd['broadcast_id'] === 'b9', pl?.body);
  check('sp: broadcast event emitted', broadcasts.length === 1);
  mark = rec.mark();
  await pub(ctl, btopic, { v: '1.0', broadcast_id: 'b9', kind: 'azaan', action: 'stop', ts: nowS() });
  const ps = await rec.waitFor(mark, isStatus(id, 'ONLINE'));
  check('sp: broadcast stop -> ONLINE', ps?.body['prev'] === 'PLAYING' && ps.body['reason'] === 'broadcast_stop', ps?.body);
  const before = dev.counters.malformedBroadcasts;
  await pub(ctl, btopic, '{nope');
  await sleep(200);
  check('sp: malformed broadcast counted, ignored', dev.counters.malformedBroadcasts === before + 1 && dev.status === 'ONLINE');

  const bsx = await sendCommand(rec, ctl, id, 'broadcast_start', { broadcast_id: 'x', kind: 'azaan' });
  check('sp: broadcast_start command on a player -> unsupported_command', bsx?.body['ok'] === false && bsx.body['error'] === 'unsupported_command', bsx?.body);

  // set_log_level: logs while the ttl runs, none after.
  const sll = await sendCommand(rec, ctl, id, 'set_log_level', { level: 'debug', ttl_s: 3 });
  const sr = (sll?.body['result'] ?? {}) as Record<string, unknown>;
  check('sp: set_log_level acked {level, expires_at}', ackOk(sll) && sr['level'] === 'debug' && isInt(sr['expires_at']) && (sr['expires_at'] as number) >= nowS() + 2, sll?.body);
  mark = rec.mark();
  // Lease expires at `exp` (about now + 4 - elapsed); heartbeats every 1 s check it.
  const lx = await rec.waitFor(mark, isStatus(id, 'UNBOUND'), 6000);
  check('sp: lease expiry -> UNBOUND reason lease_expired', lx?.body['reason'] === 'lease_expired' && (lx.body['detail'] as Record<string, unknown>)['reason'] === 'lease_expired' && lx.body['prev'] === 'ONLINE', lx?.body);
  check('sp: lease expiry noticed within a heartbeat of expires_at', !!lx && lx.at <= exp * 1000 + 1100, lx && lx.at - exp * 1000);
  const unsub = await rec.waitUntil(() => rec.unsubscribes.some((u) => u.client === id && u.topic === btopic));
  check('sp: unsubscribes from the broadcast topic when the lease is lost', unsub);
  await sleep(1500);
  const dlogs = rec.since(mark, isLog(id));
  check('sp: set_log_level produced log lines (QoS 0, <512 B)', dlogs.length >= 1 && dlogs.every((l) => l.qos === 0 && !l.retain && Buffer.byteLength(l.raw) < 512), dlogs.length);
  await sleep(1200);
  const quiet = rec.mark();
  await sendCommand(rec, ctl, id, 'ping');
  await sleep(1500);
  check('sp: no log lines after ttl_s ended', rec.since(quiet, isLog(id)).length === 0 && dev.logLevel === null);

  // Rebind, then unbind_mosque.
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 5, heartbeat_secs: 300, log_enabled: false, mosque_id: mosque, stream_url: 'http://icecast.local/m42', lease: fakeLease(id, mosque, nowS() + 3600) }, true);
  const on2 = await rec.waitFor(mark, isStatus(id, 'ONLINE'));
  check('sp: renewed lease -> ONLINE again', on2?.body['prev'] === 'UNBOUND', on2?.body);
  mark = rec.mark();
  const ub = await sendCommand(rec, ctl, id, 'unbind_mosque');
  const ubs = await rec.waitFor(mark, isStatus(id, 'UNBOUND'));
  check('sp: unbind_mosque acked and -> UNBOUND reason no_mosque', ackOk(ub) && (ubs?.body['detail'] as Record<string, unknown> | undefined)?.['reason'] === 'no_mosque', ubs?.body);
  check('sp: local config no longer carries mosque/stream/lease', dev.config?.['stream_url'] === undefined && dev.config?.['lease'] === undefined);

  // Reconnect: the retained (older) config must not rebind; status republished as is.
  mark = rec.mark();
  dev.dropConnection();
  const back = await rec.waitFor(mark, (s) => isStatus(id, 'UNBOUND')(s) && s.from === id && s.body['reason'] === 'reconnect', 4000);
  check('sp: reconnect republishes UNBOUND (reason reconnect, detail reason kept)', (back?.body['detail'] as Record<string, unknown> | undefined)?.['reason'] === 'no_mosque', back?.body);
  await rec.waitUntil(() => dev.counters.connects === 2);
  await sleep(300);
  check('sp: redelivered retained config (same version) does not rebind after unbind_mosque', dev.status === 'UNBOUND');

  // Entitled again while offline, lease expiring while disconnected: transition goes out on reconnect.
  mark = rec.mark();
  await pub(ctl, topicOf(id, 'config'), { v: '1.0', config_version: 6, heartbeat_secs: 300, log_enabled: false, mosque_id: mosque, stream_url: 'http://icecast.local/m42', lease: fakeLease(id, mosque, nowS() + 3600) }, true);
  check('sp: newer config rebinds', (await rec.waitFor(mark, isStatus(id, 'ONLINE'))) !== null);

  const diag = await sendCommand(rec, ctl, id, 'diag_bundle');
  const dr = (diag?.body['result'] ?? {}) as Record<string, unknown>;
  const trs = (dr['transitions'] ?? []) as Record<string, unknown>[];
  check('sp: diag_bundle carries the last 10 transitions with ts', trs.length === 10 && trs.every((t) => isInt(t['ts']) && typeof t['to'] === 'string'), trs.length);
  check('sp: diag_bundle broker counters', (dr['broker'] as Record<string, unknown>)['connects'] === 2 && (dr['broker'] as Record<string, unknown>)['disconnects'] === 1, dr['broker']);

  mark = rec.mark();
  await dev.stop({ graceful: true });
  const off = await rec.waitFor(mark, isStatus(id, 'OFFLINE'));
  check('sp: graceful stop -> OFFLINE shutdown (prev ONLINE)', off?.body['reason'] === 'shutdown' && off.body['prev'] === 'ONLINE' && !('temp_c' in off.body), off?.body);
  check('sp: stop clears every timer', noTimers(dev));
}

// ---------------------------------------------------------------------------------------------------
// Refused CONNACK

async function refusalSuite(): Promise<void> {
  const b = await startBroker({
    authenticate: (_client, _username, _password, done) => {
      done(Object.assign(new Error('bad creds'), { returnCode: 4 }) as AuthenticateError, false);
    },
  });
  try {
    const dev = new SimDevice({ kind: 'transmitter', id: 'tx-bad', password: 'nope', mqttUrl: b.url });
    let err: unknown = null;
    try {
      await dev.start();
    } catch (e) {
      err = e;
    }
    check('refused CONNACK rejects start() with the return code', err instanceof SimConnectError && err.code === 4, err instanceof Error ? err.message : err);
    check('refused device leaves no timers', noTimers(dev));
    await dev.stop({ graceful: true });
  } finally {
    await b.close();
  }

  const dead = new SimDevice({ kind: 'stream_player', id: 'sp-nowhere', password: 'x', mqttUrl: 'mqtt://127.0.0.1:1', startTimeoutMs: 1500 });
  let err: unknown = null;
  try {
    await dead.start();
  } catch (e) {
    err = e;
  }
  check('unreachable broker: start() rejects with code timeout', err instanceof SimConnectError && err.code === 'timeout', err instanceof Error ? err.message : err);
  check('timed-out device leaves no timers', noTimers(dead));

  const early = new SimDevice({ kind: 'transmitter', id: 'tx-early', password: 'x', mqttUrl: 'mqtt://127.0.0.1:1', startTimeoutMs: 0 });
  const pending = early.start().then(
    () => null,
    (e: unknown) => e,
  );
  await sleep(300);
  await early.stop({ graceful: true });
  const earlyErr = await Promise.race([pending, sleep(1000).then(() => 'still pending')]);
  check('stop() before the first CONNACK rejects start() with code stopped', earlyErr instanceof SimConnectError && earlyErr.code === 'stopped', earlyErr instanceof Error ? earlyErr.message : earlyErr);
  check('stopped-early device leaves no timers', noTimers(early));
}


// ---------------------------------------------------------------------------------------------------
// The CLI (simulator/index.ts) against a fake registration API and the bare broker

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function runCli(args: string[], token?: string, timeoutMs = 20_000): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env, MINARET_TOKEN: token ?? '' };
    const child = spawn(process.execPath, ['--import', 'tsx', 'simulator/index.ts', ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(t);
      resolve({ code, out });
    });
  });
}

async function fakeApi(mqttUrl: string): Promise<{ url: string; requests: { path: string; body: Record<string, unknown> }[]; close: () => Promise<void> }> {
  const requests: { path: string; body: Record<string, unknown> }[] = [];
  let n = 0;
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d: Buffer) => (raw += d.toString()));
    req.on('end', () => {
      const body = (raw ? JSON.parse(raw) : {}) as Record<string, unknown>;
      requests.push({ path: req.url ?? '', body });
      const send = (status: number, payload: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(payload));
      };
      if (req.headers.authorization !== 'Bearer good') return send(403, { error: { code: 'forbidden', message: 'not a manager of this mosque' } });
      const ok = req.method === 'POST' && (req.url === '/api/v1/devices' || req.url === '/api/v1/mosques/m1/devices');
      if (!ok) return send(404, { error: { code: 'not_found', message: 'no such path' } });
      n++;
      const id = `dcli${String(n).padStart(13, '0')}`;
      send(201, {
        device: { id, kind: body['kind'], name: body['name'] ?? null, mosque_id: body['mosque_id'] ?? 'm1' },
        credentials: { client_id: id, username: id, password: `pw-${id}`, mqtt_url: mqttUrl, ws_url: 'ws://127.0.0.1:1/mqtt' },
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function cliSuite(): Promise<void> {
  const b = await startBroker();
  const rec = new Recorder(b.broker);
  const api = await fakeApi(b.url);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-sim-'));
  const saved = path.join(dir, 'devices.json');
  try {
    const bad = await runCli(['--url', api.url, '--mosque', 'm1', '--transmitters', '1'], 'nope');
    check('cli: failed registration exits 1 with HTTP status and error code', bad.code === 1 && /HTTP 403 forbidden/.test(bad.out), bad.out.trim());

    const usage = await runCli(['--players', 'many']);
    check('cli: bad flag exits 2 with one line', usage.code === 2 && /--players/.test(usage.out), usage.out.trim());

    let mark = rec.mark();
    const run = await runCli(['--url', api.url, '--mosque', 'm1', '--transmitters', '1', '--players', '2', '--save', saved, '--heartbeat', '1', '--duration', '2'], 'good');
    const regs = api.requests.filter((r) => r.body['kind'] !== undefined);
    check(
      'cli: registers transmitters per mosque and players with mosque_id',
      regs.some((r) => r.path === '/api/v1/mosques/m1/devices' && r.body['kind'] === 'transmitter') &&
        regs.filter((r) => r.path === '/api/v1/devices' && r.body['kind'] === 'stream_player' && r.body['mosque_id'] === 'm1').length === 2,
      regs,
    );
    check('cli: --duration run exits 0', run.code === 0, run.out.slice(-400));
    check('cli: prints a line per transition ([id] A -> B (reason))', /\[dcli0000\.\.\.\] CONNECTING -> ONLINE \(connected\)/.test(run.out) && /CONNECTING -> UNBOUND \(connected\)/.test(run.out), run.out.slice(0, 600));
    check('cli: prints a summary', /summary after/.test(run.out) && /3 device\(s\), 0 never connected/.test(run.out), run.out.slice(-600));
    const savedCreds = JSON.parse(fs.readFileSync(saved, 'utf8')) as { id: string; kind: string; password: string }[];
    check('cli: --save writes {id, kind, password} for each registered device', savedCreds.length === 3 && savedCreds.every((c) => c.id && c.password && c.kind), savedCreds);
    const shut = rec.since(mark, (s) => s.topic.endsWith('/status') && s.body['status'] === 'OFFLINE');
    check('cli: --duration ends with a graceful OFFLINE/shutdown from every device', shut.length === 3 && shut.every((s) => s.body['reason'] === 'shutdown'), shut.map((s) => s.body['reason']));
    const hbs = rec.since(mark, (s) => s.topic.endsWith('/heartbeat'));
    check('cli: --heartbeat 1 gives about one heartbeat a second per device', hbs.length >= 6, hbs.length);

    mark = rec.mark();
    const crash = await runCli(['--credentials', saved, '--crash-after', '1']);
    check('cli: --credentials + --crash-after exits 0', crash.code === 0, crash.out.slice(-400));
    await rec.waitUntil(() => rec.since(mark, (s) => s.topic.endsWith('/status') && s.body['reason'] === 'lwt').length === 3);
    const wills = rec.since(mark, (s) => s.topic.endsWith('/status') && s.body['status'] === 'OFFLINE');
    check('cli: --crash-after makes the broker publish every will (OFFLINE/lwt)', wills.length === 3 && wills.every((s) => s.body['reason'] === 'lwt'), wills.map((s) => s.body['reason']));

    const refusing = await startBroker({
      authenticate: (_client, _username, _password, done) => {
        done(Object.assign(new Error('not authorized'), { returnCode: 5 }) as AuthenticateError, false);
      },
    });
    try {
      const refused = await runCli(['--credentials', saved, '--mqtt', refusing.url, '--duration', '1']);
      check(
        'cli: every connection refused -> one line per device and exit 1',
        refused.code === 1 && (refused.out.match(/could not connect: .*return code 5/g) ?? []).length === 3 && /no device could connect/.test(refused.out),
        refused.out.trim(),
      );
    } finally {
      await refusing.close();
    }

    fs.writeFileSync(path.join(dir, 'bad.json'), '[{"id": 1}]');
    const badCreds = await runCli(['--credentials', path.join(dir, 'bad.json')]);
    check('cli: unusable credentials file exits 1', badCreds.code === 1 && /entry 0/.test(badCreds.out), badCreds.out.trim());
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    await api.close();
    await b.close();
  }
}

// ---------------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const b = await startBroker();
  const rec = new Recorder(b.broker);
  const ctl = await control(b.url);
  try {
    await transmitterSuite(b.url, rec, ctl);
    await playerSuite(b.url, rec, ctl);
  } catch (err) {
    check('suite ran to the end', false, err instanceof Error ? err.stack : err);
  } finally {
    ctl.end(true);
    await b.close();
  }
  await refusalSuite();
  if (!process.argv.includes('--no-cli')) {
    try {
      await cliSuite();
    } catch (err) {
      check('cli suite ran to the end', false, err instanceof Error ? err.stack : err);
    }
  }
  console.log(`\n${passes} passed, ${failures} failed`);
  process.exitCode = failures ? 1 : 0;
}

const watchdog = setTimeout(() => {
  console.log('FAIL self-test watchdog: still running after 180 s');
  process.exit(1);
}, 180_000);
watchdog.unref();
await main();
