/**
 * The device's one MQTT connection (docs/firmware.md, "1. Credentials and connecting"): clientId = username = the
 * device id, MQTT 3.1.1, clean session, keepalive 60 s, the will on its own status topic, and reconnects with
 * exponential backoff and jitter so that a fleet coming back after an outage does not arrive all at once.
 * What to do on each CONNACK and message is the firmware's (device/contract/firmware.ts).
 */
import mqtt from 'mqtt';
import type { FirmwareCounters } from './types.ts';

export interface LinkOptions {
  mqttUrl: string;
  /** start() rejects with code 'timeout' when no CONNACK arrived within this many ms (default 30000; 0 = never). */
  startTimeoutMs?: number;
  /** Reconnect delays: the first after minMs, doubling up to maxMs, each with jitter (none when they are equal). */
  reconnect?: { minMs: number; maxMs: number };
  /**
   * Keep retrying after a refused CONNACK too (a device in the field: the refusal may be the server's passing fault,
   * CONNACK 3, or a password an operator is about to restore). Off, a refusal ends the retries.
   */
  retryRefused?: boolean;
  /** Certificate authority for mqtts:// (else the system's). */
  ca?: string | Buffer;
}

export interface LinkEvents {
  will(): string;
  connected(): void;
  lost(): void;
  attempt(n: number): void;
  message(topic: string, payload: Buffer): void;
  error(message: string): void;
  say(line: string): void;
}

/** Error from start(): `code` is the CONNACK return code (4 bad credentials, 5 not authorized) or 'timeout'. */
export class ConnectError extends Error {
  readonly code: number | string;
  constructor(message: string, code: number | string) {
    super(message);
    this.name = 'SimConnectError';
    this.code = code;
  }
}

const DEFAULT_RECONNECT = { minMs: 1000, maxMs: 1000 };

export class MqttLink {
  online = false;
  private client: mqtt.MqttClient | null = null;
  private stopped = false;
  private failedInRow = 0;
  private abortStart: (() => void) | null = null;

  constructor(
    private readonly opts: LinkOptions,
    private readonly id: string,
    private readonly password: string,
    private readonly counters: FirmwareCounters,
    private readonly events: LinkEvents,
  ) {}

  /** The next reconnect delay: exponential from minMs to maxMs, then a random 50 to 100 % of it. */
  private nextDelay(): number {
    const { minMs, maxMs } = this.opts.reconnect ?? DEFAULT_RECONNECT;
    const base = Math.min(maxMs, minMs * 2 ** Math.min(this.failedInRow, 16));
    return minMs === maxMs ? base : Math.round(base * (0.5 + Math.random() / 2));
  }

  start(): Promise<void> {
    if (this.client) return Promise.reject(new Error('already started'));
    this.stopped = false;
    this.counters.connectAttempts = 1;
    const client = mqtt.connect(this.opts.mqttUrl, {
      protocolVersion: 4,
      clientId: this.id,
      username: this.id,
      password: this.password,
      clean: true,
      keepalive: 60,
      reconnectPeriod: this.nextDelay(),
      reconnectOnConnackError: this.opts.retryRefused ?? false,
      connectTimeout: 10_000,
      resubscribe: false, // subscriptions are made by hand on every connect
      queueQoSZero: false, // heartbeats and logs are dropped while offline, never queued
      will: this.will(),
      ...(this.opts.ca !== undefined && { ca: this.opts.ca }),
    });
    this.client = client;
    const startTimeoutMs = this.opts.startTimeoutMs ?? 30_000;

    return new Promise<void>((resolve, reject) => {
      let settled = false;
      let timer: NodeJS.Timeout | null = null;
      const settle = (err?: Error): void => {
        if (settled) return;
        settled = true;
        if (timer) clearTimeout(timer);
        this.abortStart = null;
        if (err) reject(err);
        else resolve();
      };
      this.abortStart = () => settle(new ConnectError('stopped before the first CONNACK', 'stopped'));
      if (startTimeoutMs > 0) {
        timer = setTimeout(() => {
          this.shutdown();
          settle(new ConnectError(`no CONNACK from ${redactUrl(this.opts.mqttUrl)} within ${startTimeoutMs} ms`, 'timeout'));
        }, startTimeoutMs);
      }
      client.on('connect', () => {
        this.online = true;
        this.failedInRow = 0;
        client.options.reconnectPeriod = this.nextDelay();
        this.counters.connects++;
        if (this.counters.connects > 1) this.counters.reconnects++;
        this.events.connected();
        settle();
      });
      client.on('reconnect', () => {
        this.counters.connectAttempts++;
        this.failedInRow++;
        // mqtt.js reads reconnectPeriod when this attempt fails: the delay after it grows.
        client.options.reconnectPeriod = this.nextDelay();
        this.events.attempt(this.counters.connectAttempts);
        // The will rides in each CONNECT: refresh it so its prev names the state the device is in now.
        client.options.will = this.will();
      });
      client.on('close', () => {
        if (!this.online) return;
        this.online = false;
        this.counters.disconnects++;
        this.events.lost();
      });
      client.on('error', (err: Error & { code?: unknown }) => {
        this.counters.errors++;
        if (typeof err.code !== 'number') return this.events.error(`mqtt: ${err.message}`);
        this.counters.refusals++;
        if (!settled && !this.opts.retryRefused) {
          this.shutdown();
          return settle(new ConnectError(`connect refused by broker: return code ${err.code} (${err.message})`, err.code));
        }
        this.events.error(`connect refused (return code ${err.code})${this.opts.retryRefused ? '; retrying' : '; not retrying'}`);
      });
      client.on('message', (topic, payload) => this.events.message(topic, payload));
    });
  }

  private will(): mqtt.IClientOptions['will'] {
    return { topic: `devices/${this.id}/status`, payload: Buffer.from(this.events.will()), qos: 1, retain: true };
  }

  refreshWill(): void {
    if (this.client) this.client.options.will = this.will();
  }

  publish(topic: string, body: string, qos: 0 | 1, retain: boolean, what: string): void {
    const client = this.client;
    if (!client || !this.online) return;
    this.counters.publishes++;
    client.publish(topic, body, { qos, retain }, (err) => {
      if (err) this.events.error(`${what} publish failed: ${err.message}`);
    });
  }

  publishAsync(topic: string, body: string, retain: boolean): Promise<void> {
    const client = this.client;
    if (!client || !client.connected) return Promise.reject(new Error('not connected'));
    this.counters.publishes++;
    return new Promise((resolve, reject) => client.publish(topic, body, { qos: 1, retain }, (err) => (err ? reject(err) : resolve())));
  }

  subscribe(topics: string[]): void {
    if (!this.client || !this.online) return;
    this.client.subscribe(Object.fromEntries(topics.map((t) => [t, { qos: 1 as const }])), (err, granted) => {
      if (err) return this.events.error(`subscribe failed: ${err.message}`);
      for (const g of granted ?? []) if (g.qos === 128) this.events.error(`subscription to ${g.topic} refused by broker`);
    });
  }

  unsubscribe(topic: string): void {
    if (!this.client || !this.online) return;
    this.client.unsubscribe(topic, (err) => {
      if (err) this.events.error(`unsubscribe ${topic} failed: ${err.message}`);
    });
  }

  drop(): void {
    const stream = this.client?.stream;
    if (stream && this.online) stream.destroy();
  }

  /**
   * Ends the connection: with `finalStatus`, published (QoS 1, retained) first and a clean DISCONNECT, so no will
   * fires; without, the socket is destroyed and the broker publishes the will.
   */
  async end(finalStatus: string | null): Promise<void> {
    this.stopped = true;
    this.abortStart?.();
    const client = this.client;
    if (!client) return;
    this.client = null; // a later start() (a reboot in the process) makes a new client
    if (finalStatus === null || !this.online) {
      await new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
      this.online = false;
      return;
    }
    this.counters.publishes++;
    this.counters.statusPublishes++;
    const status = new Promise<void>((resolve, reject) =>
      client.publish(`devices/${this.id}/status`, finalStatus, { qos: 1, retain: true }, (err) => (err ? reject(err) : resolve())),
    );
    await withTimeout(status, 5000).catch((err: unknown) => this.events.error(`final status: ${err instanceof Error ? err.message : String(err)}`));
    // A graceful end waits for messages in flight; with the broker gone they never complete: end it hard after a bound.
    await withTimeout(new Promise<void>((resolve) => client.end(false, {}, () => resolve())), 5000).catch(() => client.end(true));
    this.online = false;
  }

  private shutdown(): void {
    this.stopped = true;
    this.client?.end(true);
  }

  get isStopped(): boolean {
    return this.stopped;
  }
}

/** An address fit for a log line: no user or password. */
export function redactUrl(raw: string): string {
  try {
    const u = new URL(raw);
    u.username = '';
    u.password = '';
    return u.toString();
  } catch {
    return raw;
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
