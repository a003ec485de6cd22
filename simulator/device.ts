/**
 * SimDevice: the firmware side of one Minaret device (a mosque's transmitter or a member's stream
 * player), played over a real MQTT connection. It speaks only the wire contract (docs/firmware.md,
 * docs/asyncapi.json): no broker internals, nothing from src/.
 *
 *   const dev = new SimDevice({ kind: 'stream_player', id, password, mqttUrl: 'mqtt://127.0.0.1:1883' });
 *   dev.on('status', (now, prev, reason) => ...);
 *   await dev.start();              // resolves on the first CONNACK, rejects on a refusal (err.code 4/5)
 *   ...
 *   await dev.stop({ graceful: true });   // OFFLINE reason 'shutdown'; graceful: false lets the will fire
 *
 * Topics (own id only): publishes devices/{id}/status (QoS 1, retained), devices/{id}/heartbeat (QoS 0),
 * devices/{id}/log (QoS 0), devices/{id}/ack (QoS 1); subscribes devices/{id}/config and devices/{id}/cmd
 * (QoS 1) and, for a stream player holding a lease, mosques/{mosque_id}/broadcast.
 */
import { EventEmitter } from 'node:events';
import crypto from 'node:crypto';
import mqtt from 'mqtt';
import { AudioLink, DEFAULT_AUDIO_TIMING, publicStreamUrl, type AudioStats, type AudioTiming, type Opener } from './audio-link.ts';
import { openListener } from './audio-listener.ts';
import { openSource, type AudioSource } from './audio-source.ts';

export type DeviceKind = 'transmitter' | 'stream_player';
export type DeviceStatus =
  | 'CONNECTING'
  | 'ONLINE'
  | 'PLAYING'
  | 'UPDATING'
  | 'STREAM_ERROR'
  | 'CONFIG_ERROR'
  | 'OFFLINE'
  | 'UNBOUND'
  | 'MUTED';
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';
export type Detail = Record<string, unknown>;

export interface SimDeviceOptions {
  kind: DeviceKind;
  id: string;
  password: string;
  mqttUrl: string;
  /** For tests and benches: use this heartbeat period (seconds, may be fractional) whatever the config says. */
  heartbeatSecsOverride?: number;
  /** Human-readable local output (transitions, commands, connection changes); not the MQTT log topic. */
  logger?: (line: string) => void;
  fw?: string;
  /** start() rejects with code 'timeout' when no CONNACK arrived within this many ms (default 30000; 0 = never). */
  startTimeoutMs?: number;
  /**
   * Transmitter: on air, send this audio to the config's stream_url as an Icecast source (simulator/audio-source.ts)
   * and be PLAYING only while it flows. Without it, broadcast_start declares PLAYING at once (no audio).
   */
  source?: AudioSource;
  /** Stream player: on a broadcast start, open the stream address and be PLAYING only while bytes arrive. */
  listen?: boolean;
  /** Retry and stall timing of those streams (tests shorten it); defaults in simulator/audio-link.ts. */
  audioTiming?: Partial<AudioTiming>;
  /** The ffmpeg binary for a source (default: `ffmpeg` on PATH). */
  ffmpegPath?: string;
}

export interface DeviceLease {
  token: string;
  expires_at: number;
}

/** devices/{id}/config, as the device understood it. */
export interface DeviceConfig {
  v?: string;
  config_version: number;
  heartbeat_secs?: number;
  log_enabled?: boolean;
  volume?: number;
  quiet_hours?: unknown;
  mosque_id?: string | null;
  stream_url?: string | null;
  lease?: DeviceLease | null;
  unbound_reason?: string | null;
  [key: string]: unknown;
}

export interface StatusPayload {
  v: '1.0';
  status: DeviceStatus;
  prev: DeviceStatus;
  reason: string;
  fw: string;
  mac: string;
  ssid: string;
  ip: string;
  rssi: number;
  temp_c?: number;
  uptime_s: number;
  config_version: number;
  detail: Detail;
  ts: number;
}

export interface HeartbeatPayload {
  v: '1.0';
  status: DeviceStatus;
  rssi: number;
  ip: string;
  uptime_s: number;
  free_heap: number;
  volume: number;
  config_version: number;
  ts: number;
}

export interface CommandMessage {
  v?: string;
  id: string;
  name: string;
  args: Record<string, unknown>;
  ts?: number;
  expires_at?: number;
}

export interface AckPayload {
  v: '1.0';
  id: string;
  name: string;
  ok: boolean;
  result?: unknown;
  error?: string;
  ts: number;
}

export interface BroadcastMessage {
  v?: string;
  broadcast_id?: string;
  kind?: string;
  action: 'start' | 'stop';
  stream_url?: string;
  ts?: number;
  [key: string]: unknown;
}

export interface Transition {
  ts: number;
  from: DeviceStatus;
  to: DeviceStatus;
  reason: string;
  detail: Detail;
}

export interface SimCounters {
  connects: number;
  disconnects: number;
  reconnects: number;
  connectAttempts: number;
  refusals: number;
  publishes: number;
  statusPublishes: number;
  heartbeats: number;
  logsSent: number;
  logsDropped: number;
  acks: number;
  commands: number;
  commandsExpired: number;
  commandsDuplicate: number;
  configsApplied: number;
  malformedConfigs: number;
  malformedCommands: number;
  malformedBroadcasts: number;
  broadcasts: number;
  transitions: number;
  errors: number;
}

/** Error from start(): `code` is the CONNACK return code (4 bad credentials, 5 not authorized) or 'timeout'. */
export class SimConnectError extends Error {
  readonly code: number | string;
  constructor(message: string, code: number | string) {
    super(message);
    this.name = 'SimConnectError';
    this.code = code;
  }
}

const DEFAULT_HEARTBEAT_S: Record<DeviceKind, number> = { transmitter: 60, stream_player: 300 };
const MIN_HEARTBEAT_S: Record<DeviceKind, number> = { transmitter: 15, stream_player: 60 };
const LOG_RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };
const LOG_MAX_BYTES = 512;
const LOG_MIN_INTERVAL_MS = 1000;
const MAX_LOG_TTL_S = 3600;
const TRANSITION_HISTORY = 50;
const DIAG_TRANSITIONS = 10;
const SEEN_COMMANDS = 200;
const UNBOUND_REASONS = ['awaiting_approval', 'membership_lapsed', 'no_mosque', 'lease_expired'] as const;
/** States in which a stream player holds (or acts on) an entitlement. */
const BOUND_STATES: ReadonlySet<DeviceStatus> = new Set(['ONLINE', 'PLAYING', 'MUTED', 'STREAM_ERROR']);

const nowS = (): number => Math.floor(Date.now() / 1000);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);
const errText = (err: unknown): string => (err instanceof Error ? err.message : String(err));

type CommandOutcome = { ok: true; result: unknown } | { ok: false; error: string };

export class SimDevice extends EventEmitter {
  readonly kind: DeviceKind;
  readonly id: string;
  readonly fw: string;
  readonly mac: string;
  readonly ssid: string;
  readonly ip: string;
  readonly hwRev: string;

  private readonly password: string;
  private readonly mqttUrl: string;
  private readonly heartbeatOverride: number | undefined;
  private readonly logger: (line: string) => void;
  private readonly startTimeoutMs: number;
  private readonly source: AudioSource | undefined;
  private readonly listen: boolean;
  private readonly audioTiming: AudioTiming;
  private readonly ffmpegPath: string | undefined;
  /** The stream open for the broadcast being played (real audio only), and what PLAYING will say about it. */
  private audioLink: AudioLink | null = null;
  private audioBroadcast: { id: string; detail: Detail } | null = null;
  private lastAudio: AudioStats | null = null;

  private client: mqtt.MqttClient | null = null;
  private online = false;
  private stopped = false;
  private bootAt = Date.now();

  private _status: DeviceStatus = 'CONNECTING';
  private _prev: DeviceStatus = 'CONNECTING';
  private _reason = 'boot';
  private _detail: Detail = { attempt: 0 };
  /** A transition happened while the broker was unreachable: the next connect publishes it as is. */
  private unpublished = false;
  private readonly history: Transition[] = [];

  private _config: DeviceConfig | null = null;
  /** After unbind_mosque: configs up to this version no longer entitle (the retained one is redelivered on reconnect). */
  private unbindFloor = -1;
  private broadcastTopic: string | null = null;
  private boundMosque: string | null = null;
  private logOverride: { level: LogLevel; expiresAt: number } | null = null;
  private lastLogAt = 0;
  private lastHeartbeatAt = 0;
  private lastError: string | null = null;

  private rssi: number;
  private freeHeap: number;
  private tempC: number;

  private hbTimer: NodeJS.Timeout | null = null;
  private leaseTimer: NodeJS.Timeout | null = null;
  private logTtlTimer: NodeJS.Timeout | null = null;
  private startTimer: NodeJS.Timeout | null = null;
  private abortStart: (() => void) | null = null;

  private readonly seenCommands = new Map<string, AckPayload>();
  private readonly _counters: SimCounters = {
    connects: 0,
    disconnects: 0,
    reconnects: 0,
    connectAttempts: 0,
    refusals: 0,
    publishes: 0,
    statusPublishes: 0,
    heartbeats: 0,
    logsSent: 0,
    logsDropped: 0,
    acks: 0,
    commands: 0,
    commandsExpired: 0,
    commandsDuplicate: 0,
    configsApplied: 0,
    malformedConfigs: 0,
    malformedCommands: 0,
    malformedBroadcasts: 0,
    broadcasts: 0,
    transitions: 0,
    errors: 0,
  };

  constructor(opts: SimDeviceOptions) {
    super();
    this.kind = opts.kind;
    this.id = opts.id;
    this.password = opts.password;
    this.mqttUrl = opts.mqttUrl;
    this.heartbeatOverride = opts.heartbeatSecsOverride !== undefined && opts.heartbeatSecsOverride > 0 ? opts.heartbeatSecsOverride : undefined;
    this.logger = opts.logger ?? (() => {});
    this.startTimeoutMs = opts.startTimeoutMs ?? 30_000;
    this.source = opts.source;
    this.listen = opts.listen ?? false;
    this.audioTiming = { ...DEFAULT_AUDIO_TIMING, ...opts.audioTiming };
    this.ffmpegPath = opts.ffmpegPath;
    this.fw = opts.fw ?? (this.kind === 'transmitter' ? 'minaret-tx-sim/1.0.0' : 'minaret-sp-sim/1.0.0');
    // Stable per-device hardware identity derived from the id.
    const h = crypto.createHash('sha256').update(this.id).digest();
    const b = (i: number): number => h[i] ?? 0;
    this.mac = ['02', ...[1, 2, 3, 4, 5].map((i) => b(i).toString(16).padStart(2, '0'))].join(':');
    this.ip = this.kind === 'transmitter' ? `10.${b(6)}.${b(7)}.${(b(8) % 253) + 2}` : `192.168.${b(6) % 16}.${(b(7) % 253) + 2}`;
    this.ssid = this.kind === 'transmitter' ? 'Masjid-Net' : `Home-${h.toString('hex').slice(0, 4).toUpperCase()}`;
    this.hwRev = this.kind === 'transmitter' ? 'tx-rev-c' : 'sp-rev-b';
    this.rssi = -45 - (b(9) % 30);
    this.freeHeap = 150_000 + (b(10) << 6);
    this.tempC = 40 + (b(11) % 80) / 10;
  }

  // -------------------------------------------------------------------------------------------------
  // Public surface

  get status(): DeviceStatus {
    return this._status;
  }
  get configVersion(): number {
    return this._config?.config_version ?? 0;
  }
  get config(): DeviceConfig | null {
    return this._config ? structuredClone(this._config) : null;
  }
  get counters(): SimCounters {
    return { ...this._counters };
  }
  get connected(): boolean {
    return this.online;
  }
  get transitions(): Transition[] {
    return this.history.map((t) => ({ ...t }));
  }
  get uptimeS(): number {
    return Math.floor((Date.now() - this.bootAt) / 1000);
  }
  /** Effective heartbeat period in seconds (override, else the config's value clamped to the minimum, else the default). */
  get heartbeatSecs(): number {
    if (this.heartbeatOverride !== undefined) return this.heartbeatOverride;
    const fromConfig = this._config?.heartbeat_secs;
    if (fromConfig === undefined) return DEFAULT_HEARTBEAT_S[this.kind];
    return Math.max(MIN_HEARTBEAT_S[this.kind], fromConfig);
  }
  /** The stream of the broadcast being played for real (else the last one): address without query, bytes, attempts. */
  get audio(): AudioStats | null {
    return this.audioLink?.stats ?? this.lastAudio;
  }
  /** The level at which MQTT log lines are published now, or null when logging is off. */
  get logLevel(): LogLevel | null {
    if (this.kind === 'transmitter') return this._config?.log_enabled === true ? 'debug' : null;
    if (this.logOverride && this.logOverride.expiresAt > Date.now()) return this.logOverride.level;
    return null;
  }

  start(): Promise<void> {
    if (this.client) return Promise.reject(new Error('SimDevice already started'));
    this.stopped = false;
    this.bootAt = Date.now();
    this._counters.connectAttempts = 1;
    this._status = 'CONNECTING';
    this._prev = 'CONNECTING';
    this._reason = 'boot';
    this._detail = { attempt: 1 };

    const opts: mqtt.IClientOptions = {
      protocolVersion: 4,
      clientId: this.id,
      username: this.id,
      password: this.password,
      clean: true,
      keepalive: 60,
      reconnectPeriod: 1000,
      connectTimeout: 10_000,
      resubscribe: false, // subscriptions are made by hand on every connect
      queueQoSZero: false, // heartbeats and logs are dropped while offline, never queued
      will: this.buildWill(),
    };
    const client = mqtt.connect(this.mqttUrl, opts);
    this.client = client;

    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const settle = (err?: Error): void => {
        if (settled) return;
        settled = true;
        if (this.startTimer) clearTimeout(this.startTimer);
        this.startTimer = null;
        this.abortStart = null;
        if (err) reject(err);
        else resolve();
      };
      this.abortStart = () => settle(new SimConnectError('stopped before the first CONNACK', 'stopped'));
      if (this.startTimeoutMs > 0) {
        this.startTimer = setTimeout(() => {
          this.shutdownClient();
          settle(new SimConnectError(`no CONNACK from ${this.mqttUrl} within ${this.startTimeoutMs} ms`, 'timeout'));
        }, this.startTimeoutMs);
      }

      client.on('connect', () => {
        this.guard('connect', () => this.onConnect());
        settle();
      });
      client.on('reconnect', () => {
        this._counters.connectAttempts++;
        if (this._status === 'CONNECTING') this._detail = { attempt: this._counters.connectAttempts };
        // The will rides in each CONNECT: refresh it so its prev names the state the device is in now.
        client.options.will = this.buildWill();
      });
      client.on('close', () => {
        if (!this.online) return;
        this.online = false;
        this._counters.disconnects++;
        if (!this.stopped) this.say('broker connection lost; retrying');
      });
      client.on('error', (err: Error & { code?: unknown }) => {
        this._counters.errors++;
        this.lastError = err.message;
        if (typeof err.code === 'number') {
          // A refused CONNACK: mqtt.js does not retry after one (reconnectOnConnackError is off).
          this._counters.refusals++;
          if (settled) this.say(`connect refused (return code ${err.code}); not retrying`);
          else {
            this.shutdownClient();
            settle(new SimConnectError(`connect refused by broker: return code ${err.code} (${err.message})`, err.code));
          }
        }
      });
      client.on('message', (topic, payload) => {
        this.guard(`message on ${topic}`, () => this.onMessage(topic, payload));
      });
    });
  }

  /**
   * graceful: publish OFFLINE (reason 'shutdown', retained) and disconnect cleanly, so no will fires.
   * Not graceful: destroy the socket without DISCONNECT, so the broker publishes the will.
   */
  async stop(opts: { graceful: boolean } = { graceful: true }): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.clearTimers();
    this.stopAudio();
    this.abortStart?.();
    const client = this.client;
    if (!client) return;
    if (opts.graceful) {
      if (this.online) {
        const prev = this._status;
        this.setLocal('OFFLINE', 'shutdown', { reason: 'shutdown' });
        try {
          await withTimeout(this.publishStatusAsync(prev, 'shutdown'), 5000);
        } catch (err) {
          this.lastError = errText(err);
        }
        // A graceful end waits for messages in flight; with the broker gone they never complete, and nothing
        // else may be keeping the process alive: end it hard after a bound instead of waiting for ever.
        await withTimeout(new Promise<void>((resolve) => client.end(false, {}, () => resolve())), 5000).catch(() => {
          client.end(true);
        });
      } else {
        this.setLocal('OFFLINE', 'shutdown', { reason: 'shutdown' });
        await new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
      }
    } else {
      this.setLocal('OFFLINE', 'lwt', { reason: 'lwt' });
      await new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
    }
    this.online = false;
  }

  /** Power cut: the broker sees the socket die and publishes the will. */
  crash(): Promise<void> {
    return this.stop({ graceful: false });
  }

  /**
   * A transmitter going on air by itself, as broadcast_start does (the CLI's --on-air, --follow-schedule):
   * with a source, its audio goes to the config's stream_url.
   */
  goOnAir(broadcastId: string, kind = 'azaan'): { ok: boolean; error?: string } {
    if (this.kind !== 'transmitter') return { ok: false, error: 'unsupported_command' };
    const outcome = this.broadcastStart({ broadcast_id: broadcastId, kind });
    return outcome.ok ? { ok: true } : { ok: false, error: outcome.error };
  }

  /** Off air: what broadcast_stop does. */
  goOffAir(broadcastId?: string): void {
    if (this.kind === 'transmitter') this.broadcastStop(broadcastId === undefined ? {} : { broadcast_id: broadcastId });
  }

  get hasSource(): boolean {
    return this.source !== undefined;
  }

  /** Network blip: the socket dies, the will fires, and the client reconnects after reconnectPeriod. */
  dropConnection(): void {
    const stream = this.client?.stream;
    if (stream && this.online) stream.destroy();
  }

  // -------------------------------------------------------------------------------------------------
  // Connection

  private onConnect(): void {
    this.online = true;
    this._counters.connects++;
    if (this._counters.connects > 1) {
      this._counters.reconnects++;
      this.say(`broker connection restored (connect #${this._counters.connects})`);
    }
    const client = this.client!;
    // Own subscriptions first, so the retained config follows the status published below.
    const subs: Record<string, { qos: 1 }> = {
      [this.topic('config')]: { qos: 1 },
      [this.topic('cmd')]: { qos: 1 },
    };
    client.subscribe(subs, (err, granted) => {
      if (err) this.noteError(`subscribe failed: ${err.message}`);
      for (const g of granted ?? []) if (g.qos === 128) this.noteError(`subscription to ${g.topic} refused`);
    });

    // Exactly one status publish per connect, even when nothing changed: a transition if one is due
    // (boot, or a lease that ran out meanwhile), else the state as is.
    const published = this._counters.statusPublishes;
    this.checkLease();
    if (this._status === 'CONNECTING') {
      if (this.kind === 'transmitter') this.transition('ONLINE', 'connected', {});
      else if (this.entitled(this._config)) this.transition('ONLINE', 'connected', this.onlineDetail());
      else this.transition('UNBOUND', 'connected', { reason: this.unboundReason(this._config) });
    } else if (this._counters.statusPublishes === published) {
      // A transition made while offline goes out with its own prev and reason; otherwise prev = status.
      if (this.unpublished) this.publishStatus(this._prev, this._reason);
      else this.publishStatus(this._status, 'reconnect');
    }
    this.unpublished = false;
    client.options.will = this.buildWill();

    if (this.boundMosque) this.subscribeBroadcast(this.boundMosque, true);
    this.heartbeatTick();
    this.scheduleHeartbeat();
    this.log('info', `mqtt connected (connects=${this._counters.connects} attempts=${this._counters.connectAttempts})`);
  }

  private onMessage(topic: string, payload: Buffer): void {
    if (this.stopped) return;
    if (topic === this.topic('config')) return this.onConfig(payload);
    if (topic === this.topic('cmd')) return this.onCommand(payload);
    if (this.broadcastTopic !== null && topic === this.broadcastTopic) return this.onBroadcast(payload);
  }

  // -------------------------------------------------------------------------------------------------
  // Status

  private transition(to: DeviceStatus, reason: string, detail: Detail): void {
    const from = this._status;
    this.setLocal(to, reason, detail);
    if (this.online) {
      this.publishStatus(from, reason);
      this.unpublished = false;
    } else {
      this.unpublished = true;
    }
    if (this.client) this.client.options.will = this.buildWill();
  }

  /** Changes the state, records it, logs it and emits 'status'; publishing is the caller's business. */
  private setLocal(to: DeviceStatus, reason: string, detail: Detail): void {
    const from = this._status;
    this._prev = from;
    this._status = to;
    this._reason = reason;
    this._detail = detail;
    this.history.push({ ts: nowS(), from, to, reason, detail });
    if (this.history.length > TRANSITION_HISTORY) this.history.shift();
    this._counters.transitions++;
    this.say(`${from} -> ${to} (${reason})`);
    const level: LogLevel = to === 'STREAM_ERROR' || to === 'CONFIG_ERROR' || to === 'OFFLINE' ? 'warn' : 'info';
    this.log(level, `status ${from} -> ${to} reason=${reason}`);
    this.safeEmit('status', to, from, reason);
  }

  statusPayload(prev: DeviceStatus = this._prev, reason: string = this._reason): StatusPayload {
    const p: StatusPayload = {
      v: '1.0',
      status: this._status,
      prev,
      reason,
      fw: this.fw,
      mac: this.mac,
      ssid: this.ssid,
      ip: this.ip,
      rssi: this.rssi,
      uptime_s: this.uptimeS,
      config_version: this.configVersion,
      detail: { ...this._detail },
      ts: nowS(),
    };
    if (this.kind === 'transmitter') p.temp_c = this.tempC;
    return p;
  }

  private publishStatus(prev: DeviceStatus, reason: string): void {
    const client = this.client;
    if (!client || !this.online) return;
    this._counters.publishes++;
    this._counters.statusPublishes++;
    client.publish(this.topic('status'), JSON.stringify(this.statusPayload(prev, reason)), { qos: 1, retain: true }, (err) => {
      if (err) this.noteError(`status publish failed: ${err.message}`);
    });
  }

  private publishStatusAsync(prev: DeviceStatus, reason: string): Promise<void> {
    const client = this.client;
    if (!client) return Promise.resolve();
    this._counters.publishes++;
    this._counters.statusPublishes++;
    return new Promise((resolve, reject) => {
      client.publish(this.topic('status'), JSON.stringify(this.statusPayload(prev, reason)), { qos: 1, retain: true }, (err) =>
        err ? reject(err) : resolve(),
      );
    });
  }

  /**
   * The will is fixed at CONNECT time (MQTT 3.1.1 cannot change it on a live session). Its prev names
   * the state the device is in (before the first connect: the state it will enter on connecting).
   */
  private buildWill(): mqtt.IClientOptions['will'] {
    const prev: DeviceStatus =
      this._status === 'CONNECTING' ? (this.kind === 'transmitter' ? 'ONLINE' : 'UNBOUND') : this._status === 'OFFLINE' ? this._prev : this._status;
    const payload: StatusPayload = {
      ...this.statusPayload(prev, 'lwt'),
      status: 'OFFLINE',
      detail: { reason: 'lwt' },
    };
    return { topic: this.topic('status'), payload: Buffer.from(JSON.stringify(payload)), qos: 1, retain: true };
  }

  // -------------------------------------------------------------------------------------------------
  // Heartbeat

  private scheduleHeartbeat(delayMs = this.heartbeatSecs * 1000): void {
    if (this.hbTimer) clearTimeout(this.hbTimer);
    if (this.stopped) return;
    this.hbTimer = setTimeout(() => {
      this.hbTimer = null;
      this.guard('heartbeat', () => this.heartbeatTick());
      this.scheduleHeartbeat(); // heartbeat_secs is re-read every cycle
    }, Math.max(0, delayMs));
  }

  private heartbeatTick(): void {
    if (this.stopped) return;
    this.driftRadio();
    this.checkLease();
    this.checkLogTtl();
    this.lastHeartbeatAt = Date.now();
    if (!this.online || !this.client) return;
    const hb: HeartbeatPayload = {
      v: '1.0',
      status: this._status,
      rssi: this.rssi,
      ip: this.ip,
      uptime_s: this.uptimeS,
      free_heap: this.freeHeap,
      volume: this.volume(),
      config_version: this.configVersion,
      ts: nowS(),
    };
    this._counters.publishes++;
    this._counters.heartbeats++;
    this.client.publish(this.topic('heartbeat'), JSON.stringify(hb), { qos: 0, retain: false });
    this.log('debug', `heartbeat status=${this._status} rssi=${this.rssi} heap=${this.freeHeap} next_in=${this.heartbeatSecs}s`);
    if (this.rssi < -80) this.log('warn', `weak wifi signal rssi=${this.rssi} ssid=${this.ssid}`);
  }

  /**
   * A transmitter starting or stopping a broadcast on its own (a local recording at the azaan time): the
   * event on its mosque's broadcast topic, as firmware publishes it (docs/firmware.md, "4.3 Broadcast events"). Resolves once acknowledged.
   */
  announceBroadcast(mosqueId: string, broadcastId: string, action: 'start' | 'stop', kind = 'azaan'): Promise<void> {
    const client = this.client;
    if (!client || !client.connected) return Promise.reject(new Error('not connected'));
    const body = JSON.stringify({ v: '1.0', broadcast_id: broadcastId, kind, action, ts: nowS() });
    this._counters.publishes++;
    return new Promise((resolve, reject) => client.publish(`mosques/${mosqueId}/broadcast`, body, { qos: 1, retain: false }, (err) => (err ? reject(err) : resolve())));
  }

  private driftRadio(): void {
    const step = (): number => Math.floor(Math.random() * 5) - 2;
    this.rssi = Math.min(-38, Math.max(-88, this.rssi + step()));
    this.freeHeap = Math.min(190_000, Math.max(120_000, this.freeHeap + step() * 512));
    if (this.kind === 'transmitter') this.tempC = Math.round(Math.min(62, Math.max(35, this.tempC + step() / 10)) * 10) / 10;
  }

  private volume(): number {
    return this._config?.volume ?? (this.kind === 'transmitter' ? 100 : 70);
  }

  // -------------------------------------------------------------------------------------------------
  // Config

  private onConfig(raw: Buffer): void {
    if (raw.length === 0) return; // the retained config was cleared
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw.toString('utf8'));
    } catch {
      return this.rejectConfig([], 'invalid_json');
    }
    const problem = validateConfig(parsed);
    if (problem) return this.rejectConfig(problem.keys, problem.error);
    const cfg = parsed as DeviceConfig;
    const before = this._config;
    this._config = cfg;
    this._counters.configsApplied++;
    this.log('info', `config v${cfg.config_version} applied heartbeat_secs=${this.heartbeatSecs} log=${this.logLevel ?? 'off'}`);

    // A new heartbeat period applies from the last heartbeat, without waiting out the old period.
    if (before?.heartbeat_secs !== cfg.heartbeat_secs && this.online && this.hbTimer) {
      this.scheduleHeartbeat(this.lastHeartbeatAt + this.heartbeatSecs * 1000 - Date.now());
    }
    if (this.kind === 'transmitter') {
      if (this._status === 'CONFIG_ERROR') this.transition('ONLINE', 'config_applied', {});
    } else {
      this.evaluateEntitlement(this._status === 'CONFIG_ERROR' ? 'config_applied' : undefined);
    }
    this.safeEmit('config', this.config);
  }

  private rejectConfig(keys: string[], error: string): void {
    this._counters.malformedConfigs++;
    this.noteError(`config rejected: ${error}${keys.length ? ` (${keys.join(', ')})` : ''}`);
    this.log('warn', `config rejected error=${error} keys=${keys.join(',')}`);
    // docs/firmware.md, "4.1 Config": ONLINE -> CONFIG_ERROR when a config cannot be applied; elsewhere it is only counted.
    if (this._status === 'ONLINE') this.transition('CONFIG_ERROR', 'config_error', { keys, error });
  }

  // -------------------------------------------------------------------------------------------------
  // Entitlement (stream player)

  private entitled(cfg: DeviceConfig | null): boolean {
    if (!cfg || this.kind !== 'stream_player') return false;
    if (cfg.config_version <= this.unbindFloor) return false;
    if (typeof cfg.stream_url !== 'string' || cfg.stream_url === '') return false;
    const lease = cfg.lease;
    if (!lease || typeof lease.token !== 'string' || lease.token === '') return false;
    return leaseExpiresMs(lease) > Date.now();
  }

  private unboundReason(cfg: DeviceConfig | null): string {
    if (!cfg || cfg.config_version <= this.unbindFloor) return 'no_mosque';
    if (typeof cfg.unbound_reason === 'string' && cfg.unbound_reason !== '') return cfg.unbound_reason;
    if (typeof cfg.mosque_id !== 'string' || cfg.mosque_id === '') return 'no_mosque';
    if (typeof cfg.stream_url === 'string' && cfg.stream_url !== '' && cfg.lease && leaseExpiresMs(cfg.lease) <= Date.now()) return 'lease_expired';
    return 'awaiting_approval';
  }

  private mosqueOf(cfg: DeviceConfig): string | null {
    if (typeof cfg.mosque_id === 'string' && cfg.mosque_id !== '') return cfg.mosque_id;
    const claim = cfg.lease ? jwtClaims(cfg.lease.token)?.['mosque_id'] : undefined;
    return typeof claim === 'string' && claim !== '' ? claim : null;
  }

  private onlineDetail(): Detail {
    if (this.kind === 'transmitter') return {};
    const cfg = this._config;
    const detail: Detail = {};
    if (cfg) {
      const mosque = this.mosqueOf(cfg);
      if (mosque) detail['mosque_id'] = mosque;
      if (cfg.lease) detail['lease_expires_at'] = Math.floor(leaseExpiresMs(cfg.lease) / 1000);
    }
    return detail;
  }

  /** Re-decides bound/unbound from the current config and moves the state machine accordingly. */
  private evaluateEntitlement(reasonOverride?: string): void {
    if (this.kind !== 'stream_player') return;
    const cfg = this._config;
    if (cfg && this.entitled(cfg)) {
      const mosque = this.mosqueOf(cfg);
      this.boundMosque = mosque;
      if (mosque) this.subscribeBroadcast(mosque, false);
      else this.unsubscribeBroadcast();
      this.armLeaseTimer(cfg.lease!);
      if (!BOUND_STATES.has(this._status) && this._status !== 'OFFLINE' && this._status !== 'CONNECTING') {
        this.transition('ONLINE', reasonOverride ?? 'entitled', this.onlineDetail());
      }
      return;
    }
    this.loseEntitlement(this.unboundReason(cfg));
  }

  private loseEntitlement(reason: string): void {
    this.boundMosque = null;
    this.stopAudio();
    this.unsubscribeBroadcast();
    if (this.leaseTimer) clearTimeout(this.leaseTimer);
    this.leaseTimer = null;
    if (this._status === 'OFFLINE' || this._status === 'CONNECTING') return;
    if (this._status === 'UNBOUND' && this._detail['reason'] === reason) return;
    this.transition('UNBOUND', reason, { reason });
  }

  private checkLease(): void {
    if (this.kind !== 'stream_player' || !BOUND_STATES.has(this._status)) return;
    const lease = this._config?.lease;
    if (!lease || leaseExpiresMs(lease) <= Date.now()) {
      this.log('warn', 'entitlement lease expired');
      this.loseEntitlement('lease_expired');
    }
  }

  private armLeaseTimer(lease: DeviceLease): void {
    if (this.leaseTimer) clearTimeout(this.leaseTimer);
    const ms = leaseExpiresMs(lease) - Date.now() + 50;
    this.leaseTimer = setTimeout(() => {
      this.leaseTimer = null;
      this.guard('lease', () => this.checkLease());
    }, Math.min(Math.max(ms, 0), 2 ** 31 - 1));
  }

  private subscribeBroadcast(mosqueId: string, force: boolean): void {
    const topic = `mosques/${mosqueId}/broadcast`;
    if (this.broadcastTopic === topic && !force) return;
    if (this.broadcastTopic && this.broadcastTopic !== topic) this.unsubscribeBroadcast();
    this.broadcastTopic = topic;
    if (!this.client || !this.online) return; // made on the next connect
    this.client.subscribe(topic, { qos: 1 }, (err, granted) => {
      if (err) return this.noteError(`subscribe ${topic} failed: ${err.message}`);
      if (granted?.some((g) => g.qos === 128)) {
        this.noteError(`subscription to ${topic} refused by broker`);
        this.log('warn', `broadcast subscription refused topic=${topic}`);
      }
    });
  }

  private unsubscribeBroadcast(): void {
    const topic = this.broadcastTopic;
    if (!topic) return;
    this.broadcastTopic = null;
    if (this.client && this.online) {
      this.client.unsubscribe(topic, (err) => {
        if (err) this.noteError(`unsubscribe ${topic} failed: ${err.message}`);
      });
    }
  }

  private onBroadcast(raw: Buffer): void {
    let msg: unknown;
    try {
      msg = JSON.parse(raw.toString('utf8'));
    } catch {
      msg = null;
    }
    if (!isObject(msg) || (msg['action'] !== 'start' && msg['action'] !== 'stop')) {
      this._counters.malformedBroadcasts++;
      this.noteError('malformed broadcast message');
      return;
    }
    const bmsg = msg as BroadcastMessage;
    this._counters.broadcasts++;
    this.safeEmit('broadcast', bmsg);
    const broadcastId = typeof bmsg.broadcast_id === 'string' ? bmsg.broadcast_id : undefined;
    if (bmsg.action === 'start') {
      if (this._status !== 'ONLINE' && this._status !== 'PLAYING' && !(this.audioLink && this._status === 'STREAM_ERROR')) return;
      if (this._status === 'PLAYING' && this._detail['broadcast_id'] === broadcastId) return;
      if (this.audioBroadcast && this.audioBroadcast.id === (broadcastId ?? '')) return; // a redelivered start
      const streamUrl = this.addressToPlay(typeof bmsg.stream_url === 'string' ? bmsg.stream_url : undefined);
      // The address is reported without its query: a gated one carries the lease.
      const shown = typeof streamUrl === 'string' ? publicStreamUrl(streamUrl) : streamUrl;
      const detail: Detail = { source: 'stream', stream_url: shown, broadcast_id: broadcastId, position_s: 0 };
      if (typeof bmsg.kind === 'string') detail['kind'] = bmsg.kind;
      if (!this.listen) return this.transition('PLAYING', 'broadcast_start', detail);
      if (typeof streamUrl !== 'string' || streamUrl === '') return this.noteError('broadcast start without a stream address');
      this.startAudio(broadcastId ?? '', streamUrl, detail);
    } else if (this.audioBroadcast && (broadcastId === undefined || this.audioBroadcast.id === broadcastId)) {
      this.stopAudio();
      if (this._status === 'PLAYING' || this._status === 'STREAM_ERROR') this.transition('ONLINE', 'broadcast_stop', this.onlineDetail());
    } else if (this._status === 'PLAYING' && (broadcastId === undefined || this._detail['broadcast_id'] === broadcastId)) {
      this.transition('ONLINE', 'broadcast_stop', this.onlineDetail());
    }
  }

  // -------------------------------------------------------------------------------------------------
  /**
   * What a start event asks this device to play (docs/firmware.md, "4.3 Broadcast events"): a player plays its config's
   * stream_url, which carries its lease, when the event names that same address without it; an event naming
   * another address (a recorded azaan played because the live one was missed) is fetched with the lease added.
   */
  private addressToPlay(announced: string | undefined): string | undefined {
    const own = this._config?.stream_url ?? undefined;
    if (announced === undefined) return own;
    if (this.kind !== 'stream_player') return announced;
    if (own && publicStreamUrl(own) === publicStreamUrl(announced)) return own;
    const lease = this._config?.lease?.token;
    return lease ? `${announced}${announced.includes('?') ? '&' : '?'}lease=${encodeURIComponent(lease)}` : announced;
  }

  // Real audio (--source, --listen): PLAYING only while bytes flow

  private startAudio(broadcastId: string, url: string, detail: Detail): void {
    this.stopAudio();
    const open: Opener =
      this.kind === 'transmitter'
        ? (h) => openSource({ url, user: this.id, password: this.password, source: this.source!, userAgent: this.fw, ...(this.ffmpegPath !== undefined && { ffmpeg: this.ffmpegPath }) }, h)
        : (h) => openListener(url, this.fw, h);
    const link = new AudioLink(publicStreamUrl(url), open, this.audioTiming, {
      onFlowing: (restored) => this.guard('audio', () => this.onAudioFlowing(link, restored)),
      onLost: (error) => this.guard('audio', () => this.onAudioLost(link, error)),
      onUnreachable: (error, retries) => this.guard('audio', () => this.onAudioUnreachable(link, error, retries)),
    });
    this.audioLink = link;
    this.audioBroadcast = { id: broadcastId, detail };
    this.say(`${this.kind === 'transmitter' ? 'sending to' : 'opening'} ${link.streamUrl} for broadcast ${broadcastId}`);
    link.start();
  }

  private stopAudio(): void {
    const link = this.audioLink;
    if (!link) return;
    this.lastAudio = link.stats;
    link.close();
    this.audioLink = null;
    this.audioBroadcast = null;
    this.say(`closed ${link.streamUrl} after ${this.lastAudio.bytes} audio bytes`);
  }

  private onAudioFlowing(link: AudioLink, restored: boolean): void {
    if (link !== this.audioLink || !this.audioBroadcast) return;
    if (this._status !== 'ONLINE' && this._status !== 'PLAYING' && this._status !== 'STREAM_ERROR') return;
    if (this._status === 'PLAYING' && this._detail['broadcast_id'] === this.audioBroadcast.detail['broadcast_id']) return;
    this.transition('PLAYING', restored ? 'stream_restored' : 'broadcast_start', { ...this.audioBroadcast.detail });
  }

  private onAudioLost(link: AudioLink, error: string): void {
    if (link !== this.audioLink || this._status !== 'PLAYING') return;
    this.transition('ONLINE', 'stream_lost', { ...this.onlineDetail(), stream_url: link.streamUrl, error });
  }

  private onAudioUnreachable(link: AudioLink, error: string, retries: number): void {
    if (link !== this.audioLink || (this._status !== 'ONLINE' && this._status !== 'PLAYING')) return;
    this.transition('STREAM_ERROR', 'stream_unreachable', { stream_url: link.streamUrl, error, retries });
  }

  // -------------------------------------------------------------------------------------------------
  // Commands

  private onCommand(raw: Buffer): void {
    this._counters.commands++;
    let msg: unknown;
    try {
      msg = JSON.parse(raw.toString('utf8'));
    } catch {
      msg = null;
    }
    if (!isObject(msg) || typeof msg['id'] !== 'string' || msg['id'] === '') {
      this._counters.malformedCommands++;
      this.noteError('malformed command (no id)');
      this.log('warn', 'malformed command dropped');
      return;
    }
    const id = msg['id'];
    const name = typeof msg['name'] === 'string' ? msg['name'] : '';
    const expiresAt = msg['expires_at'];
    if (typeof expiresAt === 'number' && expiresAt < nowS()) {
      this._counters.commandsExpired++;
      this.say(`cmd ${name || '?'} ${id} ignored: expired`);
      this.log('warn', `command expired id=${id} name=${name}`);
      return;
    }
    const cached = this.seenCommands.get(id);
    if (cached) {
      this._counters.commandsDuplicate++;
      this.sendAck({ ...cached, ts: nowS() }); // a redelivered QoS 1 command is answered again, not re-run
      return;
    }
    const args = isObject(msg['args']) ? msg['args'] : {};
    const cmd: CommandMessage = { id, name, args };
    if (typeof msg['v'] === 'string') cmd.v = msg['v'];
    if (typeof msg['ts'] === 'number') cmd.ts = msg['ts'];
    if (typeof expiresAt === 'number') cmd.expires_at = expiresAt;

    let outcome: CommandOutcome;
    if (name === '') {
      this._counters.malformedCommands++;
      outcome = { ok: false, error: 'invalid_command' };
    } else {
      try {
        outcome = this.runCommand(name, args);
      } catch (err) {
        this.noteError(`command ${name} failed: ${errText(err)}`);
        outcome = { ok: false, error: 'internal_error' };
      }
    }
    const ack: AckPayload = { v: '1.0', id, name, ok: outcome.ok, ts: nowS() };
    if (outcome.ok) ack.result = outcome.result;
    else ack.error = outcome.error;
    this.seenCommands.set(id, ack);
    if (this.seenCommands.size > SEEN_COMMANDS) {
      const oldest = this.seenCommands.keys().next().value;
      if (oldest !== undefined) this.seenCommands.delete(oldest);
    }
    this.sendAck(ack);
    this.say(`cmd ${name} ${id} -> ${outcome.ok ? 'ok' : `error ${outcome.error}`}`);
    this.log('info', `command ${name} id=${id} ok=${outcome.ok}`);
    this.safeEmit('command', cmd, ack);
  }

  private sendAck(ack: AckPayload): void {
    if (!this.client || !this.online) return;
    this._counters.publishes++;
    this._counters.acks++;
    this.client.publish(this.topic('ack'), JSON.stringify(ack), { qos: 1, retain: false }, (err) => {
      if (err) this.noteError(`ack publish failed: ${err.message}`);
    });
  }

  private runCommand(name: string, args: Record<string, unknown>): CommandOutcome {
    const player = this.kind === 'stream_player';
    switch (name) {
      case 'ping':
        return { ok: true, result: { pong: true, uptime_s: this.uptimeS } };
      case 'get_state':
        return { ok: true, result: this.fullState() };
      case 'play_test': {
        const requested = args['duration_ms'];
        const duration = isInt(requested) ? Math.min(5000, Math.max(100, requested)) : 1500;
        return { ok: true, result: { played: 'tone', duration_ms: duration } };
      }
      case 'identify':
        return { ok: true, result: { method: 'led_blink' } };
      case 'diag_bundle':
        return { ok: true, result: this.diagBundle() };
      case 'set_log_level':
        return player ? this.setLogLevel(args) : { ok: false, error: 'unsupported_command' };
      case 'unbind_mosque':
        return player ? this.unbindMosque() : { ok: false, error: 'unsupported_command' };
      case 'broadcast_start':
        return player ? { ok: false, error: 'unsupported_command' } : this.broadcastStart(args);
      case 'broadcast_stop':
        return player ? { ok: false, error: 'unsupported_command' } : this.broadcastStop(args);
      default:
        return { ok: false, error: 'unsupported_command' };
    }
  }

  private fullState(): Record<string, unknown> {
    return {
      ...this.statusPayload(),
      capabilities: this.kind === 'transmitter' ? ['local', 'stream'] : ['stream', 'local', 'bluetooth'],
      config_schema: this.configSchema(),
      hw_rev: this.hwRev,
      heartbeat_secs: this.heartbeatSecs,
      log_level: this.logLevel,
      ...(this.audio && { audio: this.audio }),
    };
  }

  private configSchema(): Record<string, unknown> {
    return {
      heartbeat_secs: { type: 'integer', minimum: MIN_HEARTBEAT_S[this.kind], default: DEFAULT_HEARTBEAT_S[this.kind] },
      log_enabled: { type: 'boolean', default: false },
      volume: { type: 'integer', minimum: 0, maximum: 100 },
      quiet_hours: {
        type: ['object', 'null'],
        properties: { start: { type: 'string', pattern: '^\\d{2}:\\d{2}$' }, end: { type: 'string', pattern: '^\\d{2}:\\d{2}$' } },
      },
    };
  }

  private diagBundle(): Record<string, unknown> {
    return {
      transitions: this.history.slice(-DIAG_TRANSITIONS).map((t) => ({ ts: t.ts, from: t.from, to: t.to, reason: t.reason })),
      config_version: this.configVersion,
      uptime_s: this.uptimeS,
      reset_reason: 'power_on',
      free_heap: this.freeHeap,
      wifi: { ssid: this.ssid, rssi: this.rssi, reconnects: 0 },
      broker: { connects: this._counters.connects, disconnects: this._counters.disconnects, publishes: this._counters.publishes },
      last_error: this.lastError,
      ...(this.audio && { audio: this.audio }),
    };
  }

  private setLogLevel(args: Record<string, unknown>): CommandOutcome {
    const level = args['level'];
    // The levels the backend accepts for set_log_level and in log payloads (docs/firmware.md, "3.3 Log" and "4.2 Commands").
    if (level !== 'error' && level !== 'warn' && level !== 'info' && level !== 'debug') return { ok: false, error: 'invalid_args' };
    const ttlRaw = args['ttl_s'] ?? 600;
    if (typeof ttlRaw !== 'number' || !Number.isFinite(ttlRaw) || ttlRaw <= 0) return { ok: false, error: 'invalid_args' };
    const ttl = Math.min(MAX_LOG_TTL_S, ttlRaw);
    const expiresAt = Date.now() + ttl * 1000;
    this.logOverride = { level, expiresAt };
    if (this.logTtlTimer) clearTimeout(this.logTtlTimer);
    this.logTtlTimer = setTimeout(() => {
      this.logTtlTimer = null;
      this.guard('log ttl', () => this.checkLogTtl());
    }, ttl * 1000 + 10);
    return { ok: true, result: { level, expires_at: Math.floor(expiresAt / 1000) } };
  }

  private checkLogTtl(): void {
    if (this.logOverride && this.logOverride.expiresAt <= Date.now()) {
      this.logOverride = null;
      this.say('log level escalation ended');
    }
  }

  private unbindMosque(): CommandOutcome {
    if (this._config) {
      this.unbindFloor = this._config.config_version;
      const { mosque_id: _m, stream_url: _s, lease: _l, ...rest } = this._config;
      this._config = rest as DeviceConfig;
    }
    this.loseEntitlement('no_mosque');
    return { ok: true, result: { status: this._status, reason: 'no_mosque' } };
  }

  private broadcastStart(args: Record<string, unknown>): CommandOutcome {
    const broadcastId = args['broadcast_id'];
    if (typeof broadcastId !== 'string' || broadcastId === '') return { ok: false, error: 'invalid_args' };
    const onAir = this._status === 'ONLINE' || this._status === 'PLAYING' || (this.audioLink !== null && this._status === 'STREAM_ERROR');
    if (!onAir) return { ok: false, error: 'not_ready' };
    const detail: Detail = { source: 'local', broadcast_id: broadcastId, position_s: 0 };
    if (typeof args['kind'] === 'string') detail['kind'] = args['kind'];
    if (typeof args['prayer'] === 'string') detail['prayer'] = args['prayer'];
    if (this.source) {
      // docs/firmware.md#31-status-devicesidstatus-qos-1-retained: PLAYING once the audio reaches the mount, not on the command.
      const url = this._config?.stream_url;
      if (typeof url !== 'string' || url === '') return { ok: false, error: 'no_stream_url' };
      if (this.audioBroadcast?.id !== broadcastId) this.startAudio(broadcastId, url, { ...detail, stream_url: publicStreamUrl(url) });
      return { ok: true, result: { status: this._status, broadcast_id: broadcastId } };
    }
    if (!(this._status === 'PLAYING' && this._detail['broadcast_id'] === broadcastId)) this.transition('PLAYING', 'broadcast_start', detail);
    return { ok: true, result: { status: this._status, broadcast_id: broadcastId } };
  }

  private broadcastStop(args: Record<string, unknown>): CommandOutcome {
    const broadcastId = typeof args['broadcast_id'] === 'string' ? args['broadcast_id'] : undefined;
    if (this.audioBroadcast && (broadcastId === undefined || this.audioBroadcast.id === broadcastId)) {
      this.stopAudio();
      if (this._status === 'PLAYING' || this._status === 'STREAM_ERROR') this.transition('ONLINE', 'broadcast_stop', {});
      return { ok: true, result: { status: this._status, stopped: true } };
    }
    const matches = broadcastId === undefined || this._detail['broadcast_id'] === broadcastId;
    if (this._status === 'PLAYING' && matches) {
      this.transition('ONLINE', 'broadcast_stop', {});
      return { ok: true, result: { status: this._status, stopped: true } };
    }
    return { ok: true, result: { status: this._status, stopped: false } };
  }

  // -------------------------------------------------------------------------------------------------
  // MQTT log lines

  /** Publishes a log line when logging is on at that level: at most 1 per second, under 512 bytes, dropped while offline. */
  private log(level: LogLevel, msg: string): void {
    const active = this.logLevel;
    if (active === null || LOG_RANK[level] > LOG_RANK[active]) return;
    const now = Date.now();
    if (!this.online || !this.client || this.stopped || now - this.lastLogAt < LOG_MIN_INTERVAL_MS) {
      this._counters.logsDropped++;
      return;
    }
    let text = msg;
    let body = JSON.stringify({ v: '1.0', level, msg: text, ts: nowS() });
    while (Buffer.byteLength(body) >= LOG_MAX_BYTES && text.length > 0) {
      text = text.slice(0, Math.max(0, text.length - (Buffer.byteLength(body) - LOG_MAX_BYTES) - 4)) + '…';
      if (text === '…') break;
      body = JSON.stringify({ v: '1.0', level, msg: text, ts: nowS() });
    }
    this.lastLogAt = now;
    this._counters.logsSent++;
    this._counters.publishes++;
    this.client.publish(this.topic('log'), body, { qos: 0, retain: false });
  }

  // -------------------------------------------------------------------------------------------------
  // Plumbing

  private topic(leaf: 'status' | 'heartbeat' | 'log' | 'ack' | 'config' | 'cmd'): string {
    return `devices/${this.id}/${leaf}`;
  }

  private say(line: string): void {
    try {
      this.logger(line);
    } catch {
      // a broken logger never breaks the firmware
    }
  }

  private noteError(message: string): void {
    this._counters.errors++;
    this.lastError = message;
    this.say(message);
  }

  private guard(what: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.noteError(`${what}: ${errText(err)}`);
    }
  }

  private safeEmit(event: string, ...args: unknown[]): void {
    try {
      this.emit(event, ...args);
    } catch (err) {
      this.noteError(`'${event}' listener threw: ${errText(err)}`);
    }
  }

  private clearTimers(): void {
    for (const t of [this.hbTimer, this.leaseTimer, this.logTtlTimer, this.startTimer]) if (t) clearTimeout(t);
    this.hbTimer = this.leaseTimer = this.logTtlTimer = this.startTimer = null;
  }

  private shutdownClient(): void {
    this.stopped = true;
    this.clearTimers();
    this.stopAudio();
    this.client?.end(true);
  }
}

// ---------------------------------------------------------------------------------------------------
// Helpers

function validateConfig(v: unknown): { keys: string[]; error: string } | null {
  if (!isObject(v)) return { keys: [], error: 'not_an_object' };
  const bad: string[] = [];
  if (!isInt(v['config_version']) || v['config_version'] < 0) bad.push('config_version');
  const optional = (key: string, ok: (x: unknown) => boolean): void => {
    if (v[key] !== undefined && !ok(v[key])) bad.push(key);
  };
  optional('v', (x) => typeof x === 'string');
  optional('heartbeat_secs', (x) => isInt(x) && x > 0);
  optional('log_enabled', (x) => typeof x === 'boolean');
  optional('volume', (x) => isInt(x) && x >= 0 && x <= 100);
  optional('quiet_hours', (x) => x === null || isObject(x) || Array.isArray(x));
  optional('mosque_id', (x) => x === null || typeof x === 'string');
  optional('stream_url', (x) => x === null || typeof x === 'string');
  optional('unbound_reason', (x) => x === null || typeof x === 'string');
  optional('lease', (x) => x === null || (isObject(x) && typeof x['token'] === 'string' && Number.isFinite(leaseExpiresMs(x as unknown as DeviceLease))));
  return bad.length ? { keys: bad, error: 'invalid_value' } : null;
}

/** Lease expiry in ms. The contract says Unix seconds; an ISO string or a millisecond figure is tolerated. */
function leaseExpiresMs(lease: { expires_at: unknown }): number {
  const e = lease.expires_at;
  if (typeof e === 'number') return e > 1e12 ? e : e * 1000;
  if (typeof e === 'string') return Date.parse(e);
  return Number.NaN;
}

/** The claims of a JWT, unverified (the device only reads mosque_id from it as a fallback). */
function jwtClaims(token: string): Record<string, unknown> | null {
  const part = token.split('.')[1];
  if (!part) return null;
  try {
    const claims: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return isObject(claims) ? claims : null;
  } catch {
    return null;
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

export { UNBOUND_REASONS };
