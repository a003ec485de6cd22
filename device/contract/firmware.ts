/**
 * Firmware: the device side of the Minaret contract (docs/firmware.md, docs/asyncapi.json) over a real MQTT
 * connection, for a mosque's transmitter or a member's stream player. It speaks only the wire: nothing of the
 * service's code. `minaret-device run` (device/run.ts) gives it a Linux board's hardware and ffmpeg's audio; the
 * simulator (simulator/device.ts) gives it made-up hardware and byte-counting audio, by fleets.
 *
 *   const fw = new Firmware({ kind: 'stream_player', id, password, mqttUrl, hardware, audio });
 *   fw.on('status', (now, prev, reason) => ...);
 *   await fw.start();              // resolves on the first CONNACK, rejects on a refusal (err.code 4/5)
 *   await fw.stop({ graceful: true });   // OFFLINE reason 'shutdown'; graceful: false lets the will fire
 *
 * Topics (own id only): publishes devices/{id}/status (QoS 1, retained), devices/{id}/heartbeat (QoS 0),
 * devices/{id}/log (QoS 0), devices/{id}/ack (QoS 1); subscribes devices/{id}/config and devices/{id}/cmd
 * (QoS 1) and, for a stream player holding a lease, mosques/{mosque_id}/broadcast.
 */
import { EventEmitter } from 'node:events';
import { AudioLink, DEFAULT_AUDIO_TIMING, publicStreamUrl, type AudioStats, type AudioTiming, type Opener } from '../audio/link.ts';
import { commandOutcome, type CommandHost } from './commands.ts';
import { DEFAULT_HEARTBEAT_S, MIN_HEARTBEAT_S, isEntitled, isObject, leaseExpiresMs, mosqueOf, msToNextQuietEdge, muteOf, unboundReason, validateConfig } from './config.ts';
import { MqttLink, type LinkOptions } from './link.ts';
import { offlineProblem } from './slots.ts';
import { isOwnServer, offerOf, runUpdate, sameVersion, type UpdateError, type UpdateOffer, type UpdatePort } from './update.ts';
import type { AckPayload, BroadcastMessage, CommandMessage, CommandOutcome, Detail, DeviceConfig, DeviceKind, DeviceLease, DeviceStatus, FirmwareCounters, Hardware, HeartbeatPayload, LogLevel, StatusPayload, Transition } from './types.ts';

/** The sound card and the streams, as this device has them. A part left out is played without audio. */
export interface AudioPort {
  /** Transmitter on air: send to the mount at `url` as its source (docs/firmware.md, "4.1 Config", with an audio server). */
  source?(url: string, user: string, password: string): Opener;
  /** Stream player: play the address (it may carry the lease: never log it). */
  player?(url: string): Opener;
  /** play_test and identify: a real sound now; an error string when it cannot be played. */
  sound?(what: 'tone' | 'chirp', durationMs: number): string | null;
  /** The config's volume (0 to 100), applied to what plays next and, where it can, to what plays now. */
  setVolume?(volume: number): void;
}

export interface FirmwareOptions extends LinkOptions {
  kind: DeviceKind;
  id: string;
  password: string;
  hardware: Hardware;
  fw: string;
  /** For tests and benches: use this heartbeat period (seconds, may be fractional) whatever the config says. */
  heartbeatSecsOverride?: number;
  /** Human-readable local output (transitions, commands, connection changes); not the MQTT log topic. */
  logger?: (line: string) => void;
  audio?: AudioPort;
  /** Retry and stall timing of streams (tests shorten it); defaults in device/audio/link.ts. */
  audioTiming?: Partial<AudioTiming>;
  /** Firmware updates (docs/firmware.md, "4.4"): the pinned key and what installing means here. Absent: refused. */
  update?: UpdatePort;
  /**
   * The server's addresses besides its broker (docs/firmware.md, "4.4"): the base the device paired with and its
   * api_url. An update is downloaded only from one of them or from the broker's host (else acked untrusted_url).
   */
  serverOrigins?: readonly string[];
  /** The reason of the first status after this start (a board that rolled an image back says rolled_back). */
  bootReason?: string;
}

const TRANSITION_HISTORY = 50;
const SEEN_COMMANDS = 200;
/** States in which a stream player holds (or acts on) an entitlement. */
const BOUND_STATES: ReadonlySet<DeviceStatus> = new Set(['ONLINE', 'PLAYING', 'MUTED', 'STREAM_ERROR']);

const nowS = (): number => Math.floor(Date.now() / 1000);
const errText = (err: unknown): string => (err instanceof Error ? err.message : String(err));

export class Firmware extends EventEmitter implements CommandHost {
  readonly kind: DeviceKind;
  readonly id: string;
  private _fw: string;
  readonly hardware: Hardware;
  protected readonly password: string;
  readonly audioPort: AudioPort;
  private readonly heartbeatOverride: number | undefined;
  private readonly logger: (line: string) => void;
  private readonly audioTiming: AudioTiming;
  private readonly link: MqttLink;
  private readonly updatePort: UpdatePort;
  private readonly ownServers: { origins: readonly string[]; brokerUrl: string };
  /** The update under way: downloading (abortable by a broadcast) until `installing`. */
  private updateRun: { offer: UpdateOffer; abort(): void; installing: boolean } | null = null;
  private bootReason: string;

  /** The stream open for the broadcast being played (real audio only), and what PLAYING will say about it. */
  private audioLink: AudioLink | null = null;
  private audioBroadcast: { id: string; detail: Detail; local: boolean } | null = null;
  private lastAudio: AudioStats | null = null;
  /** The broadcast on air as the last start event told (a player muted meanwhile resumes it when unmuted). */
  private onAir: BroadcastMessage | null = null;

  private stopped = false;
  private bootAt = Date.now();
  private _status: DeviceStatus = 'CONNECTING';
  private _prev: DeviceStatus = 'CONNECTING';
  private _reason = 'boot';
  private _detail: Detail = { attempt: 0 };
  /** A transition happened while the broker was unreachable: the next connect publishes it as is. */
  private unpublished = false;
  /**
   * Statuses made while the broker was unreachable that must reach it anyway, each with the ts it was made at (a
   * local azaan played offline: the backend counts the home as covered from it). `owedIsCurrent`: the last of
   * them is still the device's state, so it is the one status that connect publishes.
   */
  private owed: StatusPayload[] = [];
  private owedIsCurrent = false;
  private readonly history: Transition[] = [];

  private _config: DeviceConfig | null = null;
  /** After unbind_mosque: configs up to this version no longer entitle (the retained one is redelivered on reconnect). */
  unbindFloor = -1;
  private broadcastTopic: string | null = null;
  private boundMosque: string | null = null;
  logOverride: { level: LogLevel; expiresAt: number } | null = null;
  private lastLogAt = 0;
  private lastHeartbeatAt = 0;
  lastError: string | null = null;

  private hbTimer: NodeJS.Timeout | null = null;
  private leaseTimer: NodeJS.Timeout | null = null;
  private quietTimer: NodeJS.Timeout | null = null;
  logTtlTimer: NodeJS.Timeout | null = null;

  private readonly seenCommands = new Map<string, AckPayload>();
  protected readonly _counters: FirmwareCounters = {
    connects: 0, disconnects: 0, reconnects: 0, connectAttempts: 0, refusals: 0, publishes: 0, statusPublishes: 0, heartbeats: 0,
    logsSent: 0, logsDropped: 0, acks: 0, commands: 0, commandsExpired: 0, commandsDuplicate: 0, configsApplied: 0,
    malformedConfigs: 0, malformedCommands: 0, malformedBroadcasts: 0, broadcasts: 0, transitions: 0, errors: 0,
  };

  constructor(opts: FirmwareOptions) {
    super();
    this.kind = opts.kind;
    this.id = opts.id;
    this.password = opts.password;
    this._fw = opts.fw;
    this.updatePort = opts.update ?? { key: null, install: async () => ({ ok: false, error: 'install_failed', why: 'no installer' }) };
    this.ownServers = { origins: opts.serverOrigins ?? [], brokerUrl: opts.mqttUrl };
    this.bootReason = opts.bootReason ?? 'connected';
    this.hardware = opts.hardware;
    this.audioPort = opts.audio ?? {};
    this.heartbeatOverride = opts.heartbeatSecsOverride !== undefined && opts.heartbeatSecsOverride > 0 ? opts.heartbeatSecsOverride : undefined;
    this.logger = opts.logger ?? (() => {});
    this.audioTiming = { ...DEFAULT_AUDIO_TIMING, ...opts.audioTiming };
    this.link = new MqttLink(opts, this.id, this.password, this._counters, {
      will: () => this.buildWill(),
      connected: () => this.guard('connect', () => this.onConnect()),
      lost: () => {
        if (!this.stopped) this.say('broker connection lost; retrying');
      },
      attempt: (n) => {
        if (this._status === 'CONNECTING') this._detail = { attempt: n };
      },
      message: (topic, payload) => this.guard(`message on ${topic}`, () => this.onMessage(topic, payload)),
      error: (message) => this.noteError(message),
      say: (line) => this.say(line),
    });
  }

  // -------------------------------------------------------------------------------------------------
  // Public surface

  /** The version this device runs (docs/firmware.md, "3.1 Status": fw); an update changes it at the reboot. */
  get fw(): string {
    return this._fw;
  }
  get status(): DeviceStatus {
    return this._status;
  }
  get statusDetail(): Detail {
    return { ...this._detail };
  }
  get configVersion(): number {
    return this._config?.config_version ?? 0;
  }
  get config(): DeviceConfig | null {
    return this._config ? structuredClone(this._config) : null;
  }
  get counters(): FirmwareCounters {
    return { ...this._counters };
  }
  get connected(): boolean {
    return this.link.online;
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
  /** The level at which MQTT log lines are published now, or null when logging is off (docs/firmware.md, "3.3 Log"). */
  get logLevel(): LogLevel | null {
    if (this.kind === 'transmitter') return this._config?.log_enabled === true ? 'debug' : null;
    if (this.logOverride && this.logOverride.expiresAt > Date.now()) return this.logOverride.level;
    return null;
  }
  get hasSource(): boolean {
    return this.audioPort.source !== undefined;
  }

  start(): Promise<void> {
    this.stopped = false;
    this.bootAt = Date.now();
    this._status = 'CONNECTING';
    this._prev = 'CONNECTING';
    this._reason = 'boot';
    this._detail = { attempt: 1 };
    return this.link.start();
  }

  /**
   * graceful: publish OFFLINE (reason 'shutdown', retained) and disconnect cleanly, so no will fires.
   * Not graceful: destroy the socket without DISCONNECT, so the broker publishes the will.
   */
  async stop(opts: { graceful: boolean; reason?: string } = { graceful: true }): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.clearTimers();
    this.stopAudio();
    this.updateRun?.abort();
    this.updateRun = null;
    if (!opts.graceful) {
      this.setLocal('OFFLINE', 'lwt', { reason: 'lwt' });
      return this.link.end(null);
    }
    const prev = this._status;
    const reason = opts.reason ?? 'shutdown';
    this.setLocal('OFFLINE', reason, { reason });
    await this.link.end(JSON.stringify(this.statusPayload(prev, reason)));
  }

  /** Power cut: the broker sees the socket die and publishes the will. */
  crash(): Promise<void> {
    return this.stop({ graceful: false });
  }

  /** Network blip: the socket dies, the will fires, and the client reconnects after its backoff. */
  dropConnection(): void {
    this.link.drop();
  }

  /** A transmitter going on air by itself, as broadcast_start does: with a source, its audio goes to the config's stream_url. */
  goOnAir(broadcastId: string, kind = 'azaan'): { ok: boolean; error?: string } {
    if (this.kind !== 'transmitter') return { ok: false, error: 'unsupported_command' };
    const outcome = this.broadcastStart({ broadcast_id: broadcastId, kind });
    return outcome.ok ? { ok: true } : { ok: false, error: outcome.error };
  }

  /** Off air: what broadcast_stop does. */
  goOffAir(broadcastId?: string): void {
    if (this.kind === 'transmitter') this.broadcastStop(broadcastId === undefined ? {} : { broadcast_id: broadcastId });
  }

  /**
   * A transmitter starting or stopping a broadcast on its own (a local recording at the azaan time): the event on
   * its mosque's broadcast topic (docs/firmware.md, "4.3 Broadcast events"). Resolves once acknowledged.
   */
  announceBroadcast(mosqueId: string, broadcastId: string, action: 'start' | 'stop', kind = 'azaan'): Promise<void> {
    const body = JSON.stringify({ v: '1.0', broadcast_id: broadcastId, kind, action, ts: nowS() });
    return this.link.publishAsync(`mosques/${mosqueId}/broadcast`, body, false);
  }

  // -------------------------------------------------------------------------------------------------
  // Connection

  private onConnect(): void {
    if (this._counters.connects > 1) this.say(`broker connection restored (connect #${this._counters.connects})`);
    // Own subscriptions first, so the retained config follows the status published below.
    this.link.subscribe([this.topic('config'), this.topic('cmd')]);
    // Exactly one status publish per connect, even when nothing changed: a transition if one is due
    // (boot, or a lease that ran out meanwhile), else the state as is.
    const owed = this.owed.splice(0);
    for (const p of owed) this.sendStatus(p);
    const published = owed.length > 0 && this.owedIsCurrent ? this._counters.statusPublishes - 1 : this._counters.statusPublishes;
    this.checkLease();
    if (this._status === 'CONNECTING') {
      const reason = this.bootReason;
      this.bootReason = 'connected';
      if (this.kind === 'transmitter') this.transition('ONLINE', reason, {});
      else if (this.entitled()) this.transition('ONLINE', reason, this.onlineDetail());
      else this.transition('UNBOUND', reason, { reason: unboundReason(this._config, this.unbindFloor, Date.now()) });
    } else if (this._counters.statusPublishes === published) {
      // A transition made while offline goes out with its own prev and reason; otherwise prev = status.
      if (this.unpublished) this.publishStatus(this._prev, this._reason);
      else this.publishStatus(this._status, 'reconnect');
    }
    this.unpublished = false;
    this.link.refreshWill();
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

  /** `owed`: made offline, it is published with its own ts on the next connect, whatever follows it meanwhile. */
  transition(to: DeviceStatus, reason: string, detail: Detail, owed = false): void {
    const from = this._status;
    this.setLocal(to, reason, detail);
    if (this.link.online) {
      this.publishStatus(from, reason);
      this.unpublished = false;
    } else {
      this.unpublished = true;
      if (owed) {
        this.owed.push(this.statusPayload(from, reason));
        this.owedIsCurrent = true;
      }
    }
    this.link.refreshWill();
  }

  /** Changes the state, records it, logs it and emits 'status'; publishing is the caller's business. */
  private setLocal(to: DeviceStatus, reason: string, detail: Detail): void {
    const from = this._status;
    this._prev = from;
    this._status = to;
    this._reason = reason;
    this._detail = detail;
    this.owedIsCurrent = false;
    this.history.push({ ts: nowS(), from, to, reason, detail });
    if (this.history.length > TRANSITION_HISTORY) this.history.shift();
    this._counters.transitions++;
    this.say(`${from} -> ${to} (${reason})`);
    const level: LogLevel = to === 'STREAM_ERROR' || to === 'CONFIG_ERROR' || to === 'OFFLINE' ? 'warn' : 'info';
    this.log(level, `status ${from} -> ${to} reason=${reason}`);
    this.safeEmit('status', to, from, reason);
  }

  statusPayload(prev: DeviceStatus = this._prev, reason: string = this._reason): StatusPayload {
    const hw = this.hardware;
    const rssi = hw.rssi();
    const temp = this.kind === 'transmitter' ? hw.tempC() : undefined;
    return {
      v: '1.0', status: this._status, prev, reason, fw: this.fw,
      ...(hw.mac !== undefined && { mac: hw.mac }),
      ...(hw.ssid !== undefined && { ssid: hw.ssid }),
      ...(hw.ip !== undefined && { ip: hw.ip }),
      ...(rssi !== undefined && { rssi }),
      ...(temp !== undefined && { temp_c: temp }),
      uptime_s: this.uptimeS, config_version: this.configVersion, detail: { ...this._detail }, ts: nowS(),
    };
  }

  private publishStatus(prev: DeviceStatus, reason: string): void {
    if (this.link.online) this.sendStatus(this.statusPayload(prev, reason));
  }

  private sendStatus(payload: StatusPayload): void {
    this._counters.statusPublishes++;
    this.link.publish(this.topic('status'), JSON.stringify(payload), 1, true, 'status');
  }

  /**
   * The will is fixed at CONNECT time (MQTT 3.1.1 cannot change it on a live session). Its prev names
   * the state the device is in (before the first connect: the state it will enter on connecting).
   */
  private buildWill(): string {
    const prev: DeviceStatus =
      this._status === 'CONNECTING' ? (this.kind === 'transmitter' ? 'ONLINE' : 'UNBOUND') : this._status === 'OFFLINE' ? this._prev : this._status;
    return JSON.stringify({ ...this.statusPayload(prev, 'lwt'), status: 'OFFLINE', detail: { reason: 'lwt' } });
  }

  // -------------------------------------------------------------------------------------------------
  // Heartbeat (docs/firmware.md, "3.2 Heartbeat"): one timer, re-armed each cycle with heartbeat_secs read again

  private scheduleHeartbeat(delayMs = this.heartbeatSecs * 1000): void {
    if (this.hbTimer) clearTimeout(this.hbTimer);
    if (this.stopped) return;
    this.hbTimer = setTimeout(() => {
      this.hbTimer = null;
      this.guard('heartbeat', () => this.heartbeatTick());
      this.scheduleHeartbeat();
    }, Math.max(0, delayMs));
  }

  private heartbeatTick(): void {
    if (this.stopped) return;
    this.hardware.sample();
    this.checkLease();
    this.checkLogTtl();
    this.lastHeartbeatAt = Date.now();
    if (!this.link.online) return;
    const rssi = this.hardware.rssi();
    const hb: HeartbeatPayload = {
      v: '1.0', status: this._status,
      ...(rssi !== undefined && { rssi }),
      ...(this.hardware.ip !== undefined && { ip: this.hardware.ip }),
      uptime_s: this.uptimeS, free_heap: this.hardware.freeHeap(), volume: this.volume(), config_version: this.configVersion, ts: nowS(),
    };
    this._counters.heartbeats++;
    this.link.publish(this.topic('heartbeat'), JSON.stringify(hb), 0, false, 'heartbeat');
    this.log('debug', `heartbeat status=${this._status} rssi=${rssi ?? '-'} next_in=${this.heartbeatSecs}s`);
    if (rssi !== undefined && rssi < -80) this.log('warn', `weak wifi signal rssi=${rssi} ssid=${this.hardware.ssid ?? '-'}`);
  }

  volume(): number {
    return this._config?.volume ?? (this.kind === 'transmitter' ? 100 : 70);
  }

  // -------------------------------------------------------------------------------------------------
  // Config (docs/firmware.md, "4.1 Config")

  private onConfig(raw: Buffer): void {
    if (raw.length === 0) return; // the retained config was cleared
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw.toString('utf8'));
    } catch {
      return this.rejectConfig([], 'invalid_json');
    }
    const problem = validateConfig(parsed) ?? offlineProblem(parsed);
    if (problem) return this.rejectConfig(problem.keys, problem.error);
    const cfg = parsed as DeviceConfig;
    const before = this._config;
    this._config = cfg;
    this._counters.configsApplied++;
    this.log('info', `config v${cfg.config_version} applied heartbeat_secs=${this.heartbeatSecs} log=${this.logLevel ?? 'off'}`);
    if (before?.volume !== cfg.volume) this.audioPort.setVolume?.(this.volume());
    // A new heartbeat period applies from the last heartbeat, without waiting out the old period.
    if (before?.heartbeat_secs !== cfg.heartbeat_secs && this.link.online && this.hbTimer) {
      this.scheduleHeartbeat(this.lastHeartbeatAt + this.heartbeatSecs * 1000 - Date.now());
    }
    if (this.kind === 'transmitter') {
      if (this._status === 'CONFIG_ERROR') this.transition('ONLINE', 'config_applied', {});
    } else {
      this.evaluateEntitlement(this._status === 'CONFIG_ERROR' ? 'config_applied' : undefined);
      // A renewed lease or a rotated password changes the address: a stream open on the old one moves to the new.
      if (this.audioLink && before?.stream_url !== cfg.stream_url && this.onAir) this.playBroadcast(this.onAir, true);
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
  // Entitlement and mute (stream player)

  private entitled(): boolean {
    return isEntitled(this.kind, this._config, this.unbindFloor, Date.now());
  }

  onlineDetail(): Detail {
    if (this.kind === 'transmitter') return {};
    const cfg = this._config;
    const detail: Detail = {};
    if (cfg) {
      const mosque = mosqueOf(cfg);
      if (mosque) detail['mosque_id'] = mosque;
      if (cfg.lease) detail['lease_expires_at'] = Math.floor(leaseExpiresMs(cfg.lease) / 1000);
    }
    return detail;
  }

  /** Re-decides bound/unbound from the current config and moves the state machine accordingly. */
  private evaluateEntitlement(reasonOverride?: string): void {
    if (this.kind !== 'stream_player') return;
    const cfg = this._config;
    if (!cfg || !this.entitled()) return this.loseEntitlement(unboundReason(cfg, this.unbindFloor, Date.now()));
    const mosque = mosqueOf(cfg);
    if (mosque !== this.boundMosque) this.onAir = null;
    this.boundMosque = mosque;
    if (mosque) this.subscribeBroadcast(mosque, false);
    else this.unsubscribeBroadcast();
    this.armLeaseTimer(cfg.lease!);
    if (!BOUND_STATES.has(this._status) && this._status !== 'OFFLINE' && this._status !== 'CONNECTING' && this._status !== 'UPDATING') {
      this.transition('ONLINE', reasonOverride ?? 'entitled', this.onlineDetail());
    }
    this.applyMute();
  }

  loseEntitlement(reason: string): void {
    this.boundMosque = null;
    this.onAir = null;
    this.stopAudio();
    this.unsubscribeBroadcast();
    for (const t of [this.leaseTimer, this.quietTimer]) if (t) clearTimeout(t);
    this.leaseTimer = this.quietTimer = null;
    // An update under way reports where it ends (settleUpdate): that is when the device says it is unbound.
    if (this._status === 'OFFLINE' || this._status === 'CONNECTING' || this._status === 'UPDATING') return;
    if (this._status === 'UNBOUND' && this._detail['reason'] === reason) return;
    this.transition('UNBOUND', reason, { reason });
  }

  /**
   * docs/firmware.md, "3.1 Status": MUTED while the config's quiet hours hold or its volume is 0; the broadcast on
   * air (if any) plays again when the mute ends. One timer, armed for the next quiet-hours edge, re-decides.
   */
  private applyMute(): void {
    if (this.quietTimer) clearTimeout(this.quietTimer);
    this.quietTimer = null;
    if (this.kind !== 'stream_player' || !BOUND_STATES.has(this._status)) return;
    const mute = muteOf(this._config, new Date());
    if (mute && this._status !== 'MUTED') {
      this.stopAudio();
      this.transition('MUTED', mute.reason, { ...mute });
    } else if (!mute && this._status === 'MUTED') {
      this.transition('ONLINE', 'unmuted', this.onlineDetail());
      if (this.onAir) this.playBroadcast(this.onAir, false);
    }
    const next = msToNextQuietEdge(this._config, new Date());
    if (next !== null && !this.stopped) {
      this.quietTimer = setTimeout(() => this.guard('quiet hours', () => this.applyMute()), Math.min(next + 500, 2 ** 31 - 1));
    }
  }

  private checkLease(): void {
    if (this.kind !== 'stream_player' || !BOUND_STATES.has(this._status)) return;
    // A local azaan begun before any config came (a restart without the network) holds no lease to check: the config that follows decides.
    if (this._config === null && this.audioBroadcast?.local) return;
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
    if (this.link.online) this.link.subscribe([topic]); // otherwise made on the next connect
  }

  private unsubscribeBroadcast(): void {
    const topic = this.broadcastTopic;
    if (!topic) return;
    this.broadcastTopic = null;
    this.link.unsubscribe(topic);
  }

  // -------------------------------------------------------------------------------------------------
  // Broadcast events (docs/firmware.md, "4.3 Broadcast events")

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
      this.onAir = bmsg;
      this.interruptUpdate();
      return this.playBroadcast(bmsg, false);
    }
    if (this.onAir && (broadcastId === undefined || this.onAir.broadcast_id === broadcastId)) this.onAir = null;
    if (this.audioBroadcast && (broadcastId === undefined || this.audioBroadcast.id === broadcastId)) {
      this.stopAudio();
      if (this._status === 'PLAYING' || this._status === 'STREAM_ERROR') this.transition('ONLINE', 'broadcast_stop', this.onlineDetail());
    } else if (this._status === 'PLAYING' && (broadcastId === undefined || this._detail['broadcast_id'] === broadcastId)) {
      this.transition('ONLINE', 'broadcast_stop', this.onlineDetail());
    }
  }

  /** A player plays a start event: at once, or again on a new address (`reopen`: a renewed lease). */
  private playBroadcast(bmsg: BroadcastMessage, reopen: boolean): void {
    const broadcastId = typeof bmsg.broadcast_id === 'string' ? bmsg.broadcast_id : undefined;
    if (this._status !== 'ONLINE' && this._status !== 'PLAYING' && !(this.audioLink && this._status === 'STREAM_ERROR')) return;
    if (!reopen && this._status === 'PLAYING' && this._detail['broadcast_id'] === broadcastId) return;
    if (!reopen && this.audioBroadcast && this.audioBroadcast.id === (broadcastId ?? '')) return; // a redelivered start
    const streamUrl = this.addressToPlay(typeof bmsg.stream_url === 'string' ? bmsg.stream_url : undefined);
    // The address is reported without its query: a gated one carries the lease.
    const shown = typeof streamUrl === 'string' ? publicStreamUrl(streamUrl) : streamUrl;
    const detail: Detail = { source: 'stream', stream_url: shown, broadcast_id: broadcastId, position_s: 0 };
    if (typeof bmsg.kind === 'string') detail['kind'] = bmsg.kind;
    const player = this.audioPort.player;
    if (!player) return this.transition('PLAYING', 'broadcast_start', detail);
    if (typeof streamUrl !== 'string' || streamUrl === '') return this.noteError('broadcast start without a stream address');
    this.startAudio(broadcastId ?? '', publicStreamUrl(streamUrl), (h) => player(streamUrl)(h), detail);
  }

  /**
   * What a start event asks this device to play (docs/firmware.md, "4.1 Config", with an audio server): a player
   * plays its config's stream_url, which carries its lease, when the event names that same address without it; an
   * event naming another address (a recorded azaan played because the live one was missed) gets the lease added.
   */
  private addressToPlay(announced: string | undefined): string | undefined {
    const own = this._config?.stream_url ?? undefined;
    if (announced === undefined) return own;
    if (this.kind !== 'stream_player') return announced;
    if (own && publicStreamUrl(own) === publicStreamUrl(announced)) return own;
    const lease = this._config?.lease?.token;
    return lease ? `${announced}${announced.includes('?') ? '&' : '?'}lease=${encodeURIComponent(lease)}` : announced;
  }

  // -------------------------------------------------------------------------------------------------
  // Audio: PLAYING only while bytes flow (docs/firmware.md, "3.1 Status")

  /**
   * Plays `open` for broadcast `broadcastId` until stopped, with the retry rule of device/audio/link.ts. Any sound
   * the device plays for a broadcast goes through here: a stream now, and a local file at a given time as well
   * (an opener over the file, started from a timer).
   */
  startAudio(broadcastId: string, shownUrl: string, open: Opener, detail: Detail, local = false): void {
    this.stopAudio();
    const link = new AudioLink(shownUrl, open, local ? { ...this.audioTiming, stallMs: 0 } : this.audioTiming, {
      onFlowing: (restored) => this.guard('audio', () => this.onAudioFlowing(link, restored)),
      onLost: (error) => this.guard('audio', () => this.onAudioLost(link, error)),
      onUnreachable: (error, retries) => this.guard('audio', () => this.onAudioUnreachable(link, error, retries)),
      onEnded: (error) => this.guard('audio', () => this.onAudioEnded(link, error)),
    });
    this.audioLink = link;
    this.audioBroadcast = { id: broadcastId, detail, local };
    this.say(`${this.kind === 'transmitter' ? 'sending to' : 'opening'} ${link.streamUrl} for broadcast ${broadcastId}`);
    link.start();
  }

  stopAudio(): void {
    const link = this.audioLink;
    if (!link) return;
    this.lastAudio = link.stats;
    link.close();
    this.audioLink = null;
    this.audioBroadcast = null;
    this.say(`closed ${link.streamUrl} after ${this.lastAudio.bytes} audio bytes`);
  }

  get playingBroadcast(): string | null {
    return this.audioBroadcast?.id ?? null;
  }

  /** True while a local file (not a stream) is what plays. */
  get playingLocal(): boolean {
    return this.audioBroadcast?.local === true;
  }

  /**
   * A stream player plays a local file now (docs/firmware.md, "3.1 Status": PLAYING with `source: local`), as it
   * plays a stream: through startAudio, stopped by a mute, an unbinding or a broadcast start like one. Its PLAYING
   * is owed to the backend even when the broker is unreachable; ONLINE follows when the file ends.
   */
  playLocal(shownUrl: string, open: Opener, detail: Detail): void {
    if (this.kind !== 'stream_player') return;
    this.interruptUpdate();
    this.startAudio(`local:${shownUrl}`, shownUrl, open, { source: 'local', ...detail }, true);
  }

  private onAudioFlowing(link: AudioLink, restored: boolean): void {
    if (link !== this.audioLink || !this.audioBroadcast) return;
    if (this.audioBroadcast.local) {
      // Before any connect (CONNECTING) too: a restart without the network plays its slot all the same.
      if (this._status === 'ONLINE' || this._status === 'STREAM_ERROR' || this._status === 'CONNECTING') {
        this.transition('PLAYING', String(this.audioBroadcast.detail['reason'] ?? 'local'), { ...this.audioBroadcast.detail }, true);
      }
      return;
    }
    if (this._status !== 'ONLINE' && this._status !== 'PLAYING' && this._status !== 'STREAM_ERROR') return;
    if (this._status === 'PLAYING' && this._detail['broadcast_id'] === this.audioBroadcast.detail['broadcast_id']) return;
    this.transition('PLAYING', restored ? 'stream_restored' : 'broadcast_start', { ...this.audioBroadcast.detail });
  }

  /** A local file ended: back to what the device is without it (CONNECTING while it has neither config nor broker). */
  private onAudioEnded(link: AudioLink, error: string | undefined): void {
    if (link !== this.audioLink) return;
    if (error) this.noteError(`local audio ${link.streamUrl} failed: ${error}`);
    this.stopAudio();
    if (this._status !== 'PLAYING') return;
    const reason = error ? 'local_failed' : 'local_done';
    if (this._config === null) {
      if (this.link.online) this.transition('UNBOUND', reason, { reason: unboundReason(null, this.unbindFloor, Date.now()) });
      else this.transition('CONNECTING', reason, { attempt: this._counters.connectAttempts });
    } else if (this.entitled()) this.transition('ONLINE', reason, this.onlineDetail());
    else this.loseEntitlement(unboundReason(this._config, this.unbindFloor, Date.now()));
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
  // Commands (docs/firmware.md, "4.2 Commands"; what each does is device/contract/commands.ts)

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
      this.sendAck({ ...cached, ts: nowS() }); // docs/firmware.md, "3.4 Ack": a redelivered command is answered again, not re-run
      return;
    }
    const args = isObject(msg['args']) ? msg['args'] : {};
    const cmd: CommandMessage = { id, name, args };
    if (typeof msg['v'] === 'string') cmd.v = msg['v'];
    if (typeof msg['ts'] === 'number') cmd.ts = msg['ts'];
    if (typeof expiresAt === 'number') cmd.expires_at = expiresAt;
    if (name === '') this._counters.malformedCommands++;
    let outcome;
    try {
      outcome = name === '' ? { ok: false as const, error: 'invalid_command' } : commandOutcome(this, name, args);
    } catch (err) {
      this.noteError(`command ${name} failed: ${errText(err)}`);
      outcome = { ok: false as const, error: 'internal_error' };
    }
    const ack: AckPayload = { v: '1.0', id, name, ok: outcome.ok, ts: nowS(), ...(outcome.ok ? { result: outcome.result } : { error: outcome.error }) };
    this.seenCommands.set(id, ack);
    if (this.seenCommands.size > SEEN_COMMANDS) this.seenCommands.delete(this.seenCommands.keys().next().value!);
    this.sendAck(ack);
    this.say(`cmd ${name} ${id} -> ${outcome.ok ? 'ok' : `error ${outcome.error}`}`);
    this.log('info', `command ${name} id=${id} ok=${outcome.ok}`);
    this.safeEmit('command', cmd, ack);
  }

  private sendAck(ack: AckPayload): void {
    this._counters.acks++;
    this.link.publish(this.topic('ack'), JSON.stringify(ack), 1, false, 'ack');
  }

  checkLogTtl(): void {
    if (this.logOverride && this.logOverride.expiresAt <= Date.now()) {
      this.logOverride = null;
      this.say('log level escalation ended');
    }
  }

  /** unbind_mosque: forget the mosque and lease (the retained config is redelivered on reconnect: ignore it). */
  unbind(): void {
    if (this._config) {
      this.unbindFloor = this._config.config_version;
      const { mosque_id: _m, stream_url: _s, lease: _l, ...rest } = this._config;
      this._config = rest as DeviceConfig;
    }
    this.loseEntitlement('no_mosque');
  }

  broadcastStart(args: Record<string, unknown>): { ok: true; result: unknown } | { ok: false; error: string } {
    const broadcastId = args['broadcast_id'];
    if (typeof broadcastId !== 'string' || broadcastId === '') return { ok: false, error: 'invalid_args' };
    this.interruptUpdate();
    const onAir = this._status === 'ONLINE' || this._status === 'PLAYING' || (this.audioLink !== null && this._status === 'STREAM_ERROR');
    if (!onAir) return { ok: false, error: 'not_ready' };
    const detail: Detail = { source: 'local', broadcast_id: broadcastId, position_s: 0 };
    if (typeof args['kind'] === 'string') detail['kind'] = args['kind'];
    if (typeof args['prayer'] === 'string') detail['prayer'] = args['prayer'];
    const source = this.audioPort.source;
    if (source) {
      // docs/firmware.md, "3.1 Status": PLAYING once the audio reaches the mount, not on the command.
      const url = this._config?.stream_url;
      if (typeof url !== 'string' || url === '') return { ok: false, error: 'no_stream_url' };
      const shown = publicStreamUrl(url);
      if (this.audioBroadcast?.id !== broadcastId) this.startAudio(broadcastId, shown, (h) => source(url, this.id, this.password)(h), { ...detail, stream_url: shown });
      return { ok: true, result: { status: this._status, broadcast_id: broadcastId } };
    }
    if (!(this._status === 'PLAYING' && this._detail['broadcast_id'] === broadcastId)) this.transition('PLAYING', 'broadcast_start', detail);
    return { ok: true, result: { status: this._status, broadcast_id: broadcastId } };
  }

  broadcastStop(args: Record<string, unknown>): { ok: true; result: unknown } {
    const broadcastId = typeof args['broadcast_id'] === 'string' ? args['broadcast_id'] : undefined;
    if (this.audioBroadcast && (broadcastId === undefined || this.audioBroadcast.id === broadcastId)) {
      this.stopAudio();
      if (this._status === 'PLAYING' || this._status === 'STREAM_ERROR') this.transition('ONLINE', 'broadcast_stop', {});
      return { ok: true, result: { status: this._status, stopped: true } };
    }
    if (this._status === 'PLAYING' && (broadcastId === undefined || this._detail['broadcast_id'] === broadcastId)) {
      this.transition('ONLINE', 'broadcast_stop', {});
      return { ok: true, result: { status: this._status, stopped: true } };
    }
    return { ok: true, result: { status: this._status, stopped: false } };
  }

  // -------------------------------------------------------------------------------------------------
  // Firmware updates (docs/firmware.md, "4.4 Firmware updates"; the download and its checks: ./update.ts)

  /** The update command: answered at once; the download, the checks, the install and the reboot follow. */
  startUpdate(args: Record<string, unknown>): CommandOutcome {
    const offer = offerOf(args);
    if (!offer) return { ok: false, error: 'invalid_args' };
    if (sameVersion(offer.target_fw, this._fw)) return { ok: false, error: 'already_installed' };
    if (!this.updatePort.key) return { ok: false, error: 'no_firmware_key' };
    if (!isOwnServer(offer.url, this.ownServers)) {
      this.noteError(`update ${offer.target_fw} refused: ${new URL(offer.url).origin} is not this device's server`);
      return { ok: false, error: 'untrusted_url' };
    }
    // Never while a sound plays for a broadcast, nor over an update under way (the backend offers it again later).
    if (this._status === 'PLAYING' || this.audioBroadcast !== null || this.updateRun || this.stopped) return { ok: false, error: 'busy' };
    const run = runUpdate(offer, this.updatePort, { user: this.id, password: this.password, userAgent: this._fw }, (pct) =>
      this.guard('update', () => this.reportProgress(offer, pct)),
    );
    this.updateRun = { offer, abort: () => run.abort(), installing: false };
    // The ack goes out first (the caller publishes it when this returns), then UPDATING.
    setImmediate(() => this.guard('update', () => this.reportProgress(offer, 0)));
    void run.done.then((outcome) => this.guard('update', () => void this.afterDownload(offer, outcome)));
    return { ok: true, result: { accepted: true, target_fw: offer.target_fw } };
  }

  private reportProgress(offer: UpdateOffer, pct: number): void {
    if (this.updateRun?.offer !== offer || this.updateRun.installing || this.stopped) return;
    this.transition('UPDATING', 'ota', { progress_pct: pct, target_fw: offer.target_fw });
  }

  private async afterDownload(offer: UpdateOffer, outcome: Awaited<ReturnType<typeof runUpdate>['done']>): Promise<void> {
    if (this.updateRun?.offer !== offer || this.stopped) return;
    if (!outcome.ok) return this.settleUpdate(offer, outcome.error, outcome.why);
    this.updateRun.installing = true;
    this.say(`update ${offer.target_fw}: verified (${offer.size} bytes, sha256 ${offer.sha256}); installing`);
    const installed = await this.updatePort.install(outcome.image, this._fw).catch((err: Error) => ({ ok: false as const, error: 'install_failed', why: err.message }));
    if (this.stopped) return;
    if (!installed.ok) return this.settleUpdate(offer, 'install_failed', installed.why);
    this.updateRun = null;
    this.say(`update ${offer.target_fw}: installed; rebooting`);
    await this.reboot(installed.fw, installed.rolledBack ? 'rolled_back' : 'connected');
  }

  /** Nothing was installed: back to what the device is now, with why (docs/firmware.md, "4.4": reason update_failed). */
  private settleUpdate(offer: UpdateOffer, error: UpdateError | string, why: string): void {
    this.updateRun = null;
    this.noteError(`update ${offer.target_fw} failed: ${error} (${why})`);
    const extra: Detail = { error, target_fw: offer.target_fw };
    if (this._status !== 'UPDATING') return;
    if (this.kind === 'transmitter') return this.transition('ONLINE', 'update_failed', extra);
    if (!this.entitled()) return this.transition('UNBOUND', 'update_failed', { reason: unboundReason(this._config, this.unbindFloor, Date.now()), ...extra });
    this.transition('ONLINE', 'update_failed', { ...this.onlineDetail(), ...extra });
    this.evaluateEntitlement();
  }

  /** A broadcast comes before an update still downloading: the download stops and the azaan plays. */
  private interruptUpdate(): void {
    const run = this.updateRun;
    if (!run || run.installing) return;
    run.abort();
    this.settleUpdate(run.offer, 'interrupted', 'a broadcast started');
  }

  /**
   * A reboot in the process: a clean goodbye (OFFLINE reason reboot, so no will fires), then a new connection
   * through CONNECTING, running `fw`; the first status after it carries `bootReason` (rolled_back when the image
   * did not hold). The retained config comes again on subscribing, as after a real power cycle.
   */
  async reboot(fw: string, bootReason: string): Promise<void> {
    await this.stop({ graceful: true, reason: 'reboot' });
    if (this.updatePort.reboot) return this.updatePort.reboot(fw, bootReason);
    this._fw = fw;
    this.bootReason = bootReason;
    this.boundMosque = null;
    this.unsubscribeBroadcast();
    this.safeEmit('reboot', fw, bootReason);
    await this.start().catch((err: Error) => this.noteError(`reconnect after reboot: ${err.message}`));
  }

  // -------------------------------------------------------------------------------------------------
  // MQTT log lines (docs/firmware.md, "3.3 Log")

  /** Publishes a log line when logging is on at that level: at most 1 per second, under 512 bytes, dropped while offline. */
  log(level: LogLevel, msg: string): void {
    const active = this.logLevel;
    if (active === null || LOG_RANK[level] > LOG_RANK[active]) return;
    const now = Date.now();
    if (!this.link.online || this.stopped || now - this.lastLogAt < LOG_MIN_INTERVAL_MS) {
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
    this.link.publish(this.topic('log'), body, 0, false, 'log');
  }

  // -------------------------------------------------------------------------------------------------
  // Plumbing

  private topic(leaf: 'status' | 'heartbeat' | 'log' | 'ack' | 'config' | 'cmd'): string {
    return `devices/${this.id}/${leaf}`;
  }

  say(line: string): void {
    try {
      this.logger(line);
    } catch {
      // a broken logger never breaks the firmware
    }
  }

  noteError(message: string): void {
    this._counters.errors++;
    this.lastError = message;
    this.say(message);
  }

  guard(what: string, fn: () => void): void {
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
    for (const t of [this.hbTimer, this.leaseTimer, this.logTtlTimer, this.quietTimer]) if (t) clearTimeout(t);
    this.hbTimer = this.leaseTimer = this.logTtlTimer = this.quietTimer = null;
  }
}

const LOG_RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };
const LOG_MAX_BYTES = 512;
const LOG_MIN_INTERVAL_MS = 1000;
