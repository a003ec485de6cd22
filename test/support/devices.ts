import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import mqtt from 'mqtt';
import { API, createMosque, member, signInSuperadmin, type Person } from './people.ts';
import type { TestService } from './service.ts';

/** Helpers for the device-plane tests: registration over HTTP, devices over real sockets. */

export interface Credentials {
  client_id: string;
  username: string;
  password: string;
  mqtt_url: string;
  mqtts_url: string | null;
  ws_url: string;
  api_url: string;
}

export interface Registered {
  device: Record<string, any> & { id: string; kind: string; config_version: number };
  credentials: Credentials;
}

/** A superadmin, a mosque owner (manager of the mosque) and the mosque. */
export async function mosqueWithOwner(ts: TestService, extra: Record<string, unknown> = {}, ownerEmail = 'owner@example.com') {
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, ownerEmail);
  const mosque = await createMosque(ts, root.token, owner, extra);
  return { root, owner, mosque };
}

/** POST /mosques/{id}/devices as `token`; fails unless 201. */
export async function registerTransmitter(ts: TestService, token: string, mosqueId: string, name = 'minbar'): Promise<Registered> {
  const res = await ts.http.post(`${API}/mosques/${mosqueId}/devices`, { kind: 'transmitter', name }, token);
  assert.equal(res.status, 201, `register transmitter: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as Registered;
}

/**
 * POST /devices (a stream player owned by `person`); fails unless 201. Binding to a mosque takes a place there
 * (docs/api.md, "Devices"): a person with none asks to join first (their membership, pending unless the
 * mosque auto-approves; an existing one is left as it is).
 */
export async function registerPlayer(ts: TestService, person: Person, mosqueId?: string, name = 'kitchen'): Promise<Registered> {
  if (mosqueId) {
    const mine = await ts.http.get(`${API}/me`, person.token);
    const placed = mine.body.user?.role === 'superadmin' || mine.body.memberships?.some((m: { mosque_id: string }) => m.mosque_id === mosqueId)
      || mine.body.admin_of?.some((a: { mosque_id: string; can_manage: boolean }) => a.mosque_id === mosqueId && a.can_manage);
    if (!placed) assert.equal((await ts.http.post(`${API}/mosques/${mosqueId}/join`, {}, person.token)).status, 201, 'join before binding a player');
  }
  const res = await ts.http.post(`${API}/devices`, { kind: 'stream_player', name, ...(mosqueId && { mosque_id: mosqueId }) }, person.token);
  assert.equal(res.status, 201, `register player: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as Registered;
}

export const wsUrlOf = (ts: TestService) => ts.url.replace('http://', 'ws://') + '/mqtt';

const baseOptions: mqtt.IClientOptions = { reconnectPeriod: 0, connectTimeout: 3000, protocolVersion: 4, keepalive: 60 };

/** Connects once and reports the CONNACK outcome: the return code of a refusal, or 'connected'. */
export function connectOnce(url: string, opts: mqtt.IClientOptions): Promise<number | 'connected'> {
  return new Promise((resolve) => {
    const client = mqtt.connect(url, { ...baseOptions, ...opts });
    client.once('connect', () => {
      client.end(true);
      resolve('connected');
    });
    client.once('error', (err: Error & { code?: number | string }) => {
      client.end(true);
      resolve(typeof err.code === 'number' ? err.code : -1);
    });
    // A socket closed without a CONNACK: no return code to report.
    client.once('close', () => resolve(-1));
  });
}

/** A connected device client with the registration's credentials; ended (forcefully) when the test ends. */
export async function connectDevice(t: TestContext, creds: Credentials, opts: mqtt.IClientOptions & { url?: string } = {}): Promise<mqtt.MqttClient> {
  const { url, ...rest } = opts;
  const client = mqtt.connect(url ?? creds.mqtt_url, { ...baseOptions, clientId: creds.client_id, username: creds.username, password: creds.password, ...rest });
  t.after(() => endClient(client));
  await new Promise<void>((resolve, reject) => {
    client.once('connect', () => resolve());
    client.once('error', reject);
    client.once('close', () => reject(new Error('closed before CONNACK')));
  });
  client.on('error', () => undefined); // later protocol errors are asserted through 'close'
  client.once('close', () => closedClients.add(client));
  return client;
}

/**
 * A device client that reconnects by itself (as firmware does) and so sends again what was not acknowledged;
 * ended when the test ends even while it is reconnecting (connectDevice's end would leave that one running).
 */
export async function firmwareClient(t: TestContext, url: string, creds: Credentials): Promise<mqtt.MqttClient> {
  const client = mqtt.connect(url, { clientId: creds.client_id, username: creds.username, password: creds.password, protocolVersion: 4, reconnectPeriod: 200, connectTimeout: 3000 });
  t.after(() => new Promise<void>((resolve) => client.end(true, {}, () => resolve())));
  await new Promise<void>((resolve, reject) => client.once('connect', () => resolve()).once('error', reject));
  client.on('error', () => undefined);
  return client;
}

/** A will on the device's own status topic, the way firmware sets it. */
export const statusWill = (deviceId: string, reason = 'lwt'): mqtt.IClientOptions['will'] => ({
  topic: `devices/${deviceId}/status`,
  payload: Buffer.from(JSON.stringify({ v: '1.0', status: 'OFFLINE', reason, ts: 1_767_225_600 })),
  qos: 1,
  retain: true,
});

export const nowTs = () => Math.floor(Date.now() / 1000);

export const statusPayload = (status: string, extra: Record<string, unknown> = {}) => JSON.stringify({ v: '1.0', status, ts: nowTs(), ...extra });
export const heartbeatPayload = (status: string, extra: Record<string, unknown> = {}) => JSON.stringify({ v: '1.0', status, ts: nowTs(), ...extra });
export const logPayload = (msg: string, level = 'warn') => JSON.stringify({ v: '1.0', level, msg, ts: nowTs() });

/** Publishes and waits for the PUBACK (QoS 1) or the write (QoS 0). */
export function publish(client: mqtt.MqttClient, topic: string, payload: string | Buffer, opts: { qos?: 0 | 1; retain?: boolean } = {}): Promise<void> {
  return new Promise((resolve, reject) => {
    client.publish(topic, payload, { qos: opts.qos ?? 1, retain: opts.retain ?? false }, (err) => (err ? reject(err) : resolve()));
  });
}

/** Subscribes and returns the SUBACK return code of the one filter (0/1 granted, 128 refused). */
export function subscribeCode(client: mqtt.MqttClient, filter: string, qos: 0 | 1 = 1): Promise<number> {
  return new Promise((resolve, reject) => {
    client.subscribe(filter, { qos }, (err, granted) => {
      // A refusal comes back as an error carrying the SUBACK packet (mqtt.js 5).
      const refused = (err as (Error & { packet?: { granted?: number[] } }) | null)?.packet?.granted?.[0];
      if (typeof refused === 'number') return resolve(refused);
      if (err) return reject(err);
      resolve(granted?.[0]?.qos ?? -1);
    });
  });
}

/** The next message on `topic`, parsed as JSON; fails after `timeoutMs`. */
export function nextMessage(client: mqtt.MqttClient, topic: string, timeoutMs = 2000, match: (body: any) => boolean = () => true): Promise<{ body: any; retain: boolean }> {
  return new Promise((resolve, reject) => {
    const onMessage = (t: string, payload: Buffer, packet: mqtt.IPublishPacket) => {
      if (t !== topic) return;
      const body = payload.length ? JSON.parse(payload.toString('utf8')) : null;
      if (!match(body)) return;
      clearTimeout(timer);
      client.off('message', onMessage);
      resolve({ body, retain: packet.retain });
    };
    const timer = setTimeout(() => {
      client.off('message', onMessage);
      reject(new Error(`no message on ${topic} within ${timeoutMs} ms`));
    }, timeoutMs);
    client.on('message', onMessage);
  });
}

const closedClients = new WeakSet<mqtt.MqttClient>();

/** Ends a client forcefully; an already ended client (whose end callback never fires again) is left alone. */
export function endClient(client: mqtt.MqttClient): Promise<void> {
  if (client.disconnecting || client.disconnected) return Promise.resolve();
  return new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
}

/** Resolves when the client's connection has closed (or already had); fails after `timeoutMs`. */
export function closed(client: mqtt.MqttClient, timeoutMs = 2000): Promise<void> {
  if (closedClients.has(client)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`connection still open after ${timeoutMs} ms`)), timeoutMs);
    client.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** Polls `check` every 25 ms until it returns a truthy value; fails with the last value after `timeoutMs`. */
type Falsy = null | undefined | false | 0 | '';
export async function waitFor<T>(what: string, check: () => Promise<T | Falsy> | T | Falsy, timeoutMs = 2000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | Falsy;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() > deadline) assert.fail(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** GET /devices/{id} as `token`; fails unless 200. */
export async function getDevice(ts: TestService, token: string, id: string) {
  const res = await ts.http.get(`${API}/devices/${id}`, token);
  assert.equal(res.status, 200, `get device: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as Record<string, any>;
}

export interface TimelineEntry {
  id: string;
  at: string;
  device_id: string;
  mosque_id: string | null;
  kind: string;
  from: string | null;
  to: string | null;
  reason: string | null;
  detail: Record<string, any>;
}

/** GET /devices/{id}/events as `token` (newest first); fails unless 200. */
export async function deviceEvents(ts: TestService, token: string, id: string, query = ''): Promise<TimelineEntry[]> {
  const res = await ts.http.get(`${API}/devices/${id}/events${query}`, token);
  assert.equal(res.status, 200, `device events: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as TimelineEntry[];
}

/** Waits until GET /devices/{id} shows `status`; returns the device body. */
export function waitForStatus(ts: TestService, token: string, id: string, status: string, timeoutMs = 2000): Promise<Record<string, any>> {
  return waitFor(`device ${id} ${status}`, async () => {
    const d = await getDevice(ts, token, id);
    return d.status === status ? d : null;
  }, timeoutMs);
}

/** Sleeps briefly: only to let a message that must NOT arrive have its chance. */
export const settle = (ms = 150) => new Promise((r) => setTimeout(r, ms));

/** A connected device that keeps every config it is sent, oldest first; returns once the first has come. */
export async function configListener(t: TestContext, ts: TestService, reg: Registered) {
  const client = await connectDevice(t, reg.credentials, { url: ts.service.mqttUrl });
  const topic = `devices/${reg.device.id}/config`;
  const configs: Array<Record<string, any>> = [];
  client.on('message', (tp, payload) => {
    if (tp === topic && payload.length > 0) configs.push(JSON.parse(payload.toString('utf8')));
  });
  assert.equal(await subscribeCode(client, topic), 1);
  await waitFor('the first config', () => configs.length > 0);
  return { client, configs, latest: () => configs.at(-1)! };
}

/** Connects the device, subscribes to its config and hangs up: every config it was given in that time, oldest first. */
export async function configsOnConnect(t: TestContext, ts: TestService, reg: Registered): Promise<Array<Record<string, any>>> {
  const { client, configs } = await configListener(t, ts, reg);
  await settle(200); // a second, fresher config would come now
  client.end(true);
  await closed(client).catch(() => undefined);
  return configs;
}
