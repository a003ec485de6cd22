/**
 * SimDevice: one simulated Minaret device (a mosque's transmitter or a member's stream player) for fleets, tests
 * and benches. Its firmware is device/'s own (device/contract/firmware.ts, the contract of docs/firmware.md over a
 * real MQTT connection); what is simulated is the hardware (a MAC, an address, a drifting radio, made up from the
 * id) and, optionally, the audio: a transmitter's ffmpeg tone or file as an Icecast source, a player that counts
 * the bytes of its stream instead of playing them.
 *
 *   const dev = new SimDevice({ kind: 'stream_player', id, password, mqttUrl: 'mqtt://127.0.0.1:1883' });
 *   dev.on('status', (now, prev, reason) => ...);
 *   await dev.start();              // resolves on the first CONNACK, rejects on a refusal (err.code 4/5)
 *   await dev.stop({ graceful: true });   // OFFLINE reason 'shutdown'; graceful: false lets the will fire
 */
import crypto from 'node:crypto';
import { Firmware, type AudioPort } from '../device/contract/firmware.ts';
import { ConnectError } from '../device/contract/link.ts';
import { openSource, type AudioSource } from '../device/audio/source.ts';
import type { AudioTiming } from '../device/audio/link.ts';
import type { DeviceKind, FirmwareCounters, Hardware } from '../device/contract/types.ts';
import { openListener } from './audio-listener.ts';
import { parsePinnedKey, type UpdatePort } from '../device/contract/update.ts';

export type {
  AckPayload, BroadcastMessage, CommandMessage, Detail, DeviceConfig, DeviceKind, DeviceLease, DeviceStatus, HeartbeatPayload, LogLevel, StatusPayload, Transition,
} from '../device/contract/types.ts';
export { UNBOUND_REASONS } from '../device/contract/config.ts';
export type SimCounters = FirmwareCounters;
/** Error from start(): `code` is the CONNACK return code (4 bad credentials, 5 not authorized) or 'timeout'. */
export const SimConnectError = ConnectError;
export type SimConnectError = ConnectError;

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
   * Transmitter: on air, send this audio to the config's stream_url as an Icecast source (device/audio/source.ts)
   * and be PLAYING only while it flows. Without it, broadcast_start declares PLAYING at once (no audio).
   */
  source?: AudioSource;
  /** Stream player: on a broadcast start, open the stream address and be PLAYING only while bytes arrive. */
  listen?: boolean;
  /** Retry and stall timing of those streams (tests shorten it); defaults in device/audio/link.ts. */
  audioTiming?: Partial<AudioTiming>;
  /** The ffmpeg binary for a source (default: `ffmpeg` on PATH). */
  ffmpegPath?: string;
  /** The pinned firmware key (base64 or PEM): updates are downloaded and checked (docs/firmware.md, "4.4"). */
  firmwareKey?: string;
  /** Every update rolls back after its reboot: the device comes back on its old fw, reason rolled_back. */
  failUpdate?: boolean;
  /** Least time between two UPDATING progress statuses (default a few seconds). */
  progressEveryMs?: number;
  /** The server's api_url or base: updates are downloaded from there or the broker's host only (docs/firmware.md, "4.4"). */
  serverOrigins?: readonly string[];
}

/** Stable per-device hardware derived from the id, with a radio and a heap that drift a little each heartbeat. */
class SimHardware implements Hardware {
  readonly mac: string;
  readonly ip: string;
  readonly ssid: string;
  readonly hwRev: string;
  private _rssi: number;
  private heap: number;
  private temp: number;

  constructor(private readonly kind: DeviceKind, id: string) {
    const h = crypto.createHash('sha256').update(id).digest();
    const b = (i: number): number => h[i] ?? 0;
    this.mac = ['02', ...[1, 2, 3, 4, 5].map((i) => b(i).toString(16).padStart(2, '0'))].join(':');
    this.ip = kind === 'transmitter' ? `10.${b(6)}.${b(7)}.${(b(8) % 253) + 2}` : `192.168.${b(6) % 16}.${(b(7) % 253) + 2}`;
    this.ssid = kind === 'transmitter' ? 'Masjid-Net' : `Home-${h.toString('hex').slice(0, 4).toUpperCase()}`;
    this.hwRev = kind === 'transmitter' ? 'tx-rev-c' : 'sp-rev-b';
    this._rssi = -45 - (b(9) % 30);
    this.heap = 150_000 + (b(10) << 6);
    this.temp = 40 + (b(11) % 80) / 10;
  }

  rssi(): number {
    return this._rssi;
  }
  freeHeap(): number {
    return this.heap;
  }
  tempC(): number | undefined {
    return this.kind === 'transmitter' ? this.temp : undefined;
  }
  sample(): void {
    const step = (): number => Math.floor(Math.random() * 5) - 2;
    this._rssi = Math.min(-38, Math.max(-88, this._rssi + step()));
    this.heap = Math.min(190_000, Math.max(120_000, this.heap + step() * 512));
    if (this.kind === 'transmitter') this.temp = Math.round(Math.min(62, Math.max(35, this.temp + step() / 10)) * 10) / 10;
  }
}

/** Updates in memory: the image is checked like a board's, and "installing" it only changes the fw reported. */
function simUpdates(opts: SimDeviceOptions): UpdatePort {
  const key = parsePinnedKey(opts.firmwareKey ?? '');
  if (typeof key === 'string') throw new Error(`firmwareKey: ${key}`);
  return {
    key,
    install: async (image, currentFw) => (opts.failUpdate ? { ok: true, fw: currentFw, rolledBack: true } : { ok: true, fw: image.offer.target_fw, rolledBack: false }),
    ...(opts.progressEveryMs !== undefined && { progressEveryMs: opts.progressEveryMs }),
  };
}

function simAudio(opts: SimDeviceOptions, fw: string): AudioPort {
  const port: AudioPort = {};
  const source = opts.source;
  if (opts.kind === 'transmitter' && source) {
    port.source = (url, user, password) => (h) =>
      openSource({ url, user, password, source, userAgent: fw, ...(opts.ffmpegPath !== undefined && { ffmpeg: opts.ffmpegPath }) }, h);
  }
  if (opts.kind === 'stream_player' && opts.listen) port.player = (url) => (h) => openListener(url, fw, h);
  return port;
}

export class SimDevice extends Firmware {
  readonly mac: string;
  readonly ssid: string;
  readonly ip: string;
  readonly hwRev: string;

  constructor(opts: SimDeviceOptions) {
    const fw = opts.fw ?? (opts.kind === 'transmitter' ? 'minaret-tx-sim/1.0.0' : 'minaret-sp-sim/1.0.0');
    const hardware = new SimHardware(opts.kind, opts.id);
    super({
      kind: opts.kind, id: opts.id, password: opts.password, mqttUrl: opts.mqttUrl, fw, hardware, audio: simAudio(opts, fw),
      ...(opts.heartbeatSecsOverride !== undefined && { heartbeatSecsOverride: opts.heartbeatSecsOverride }),
      ...(opts.logger && { logger: opts.logger }),
      ...(opts.startTimeoutMs !== undefined && { startTimeoutMs: opts.startTimeoutMs }),
      ...(opts.audioTiming && { audioTiming: opts.audioTiming }),
      ...(opts.firmwareKey !== undefined && { update: simUpdates(opts) }),
      ...(opts.serverOrigins && { serverOrigins: opts.serverOrigins }),
    });
    this.mac = hardware.mac;
    this.ssid = hardware.ssid;
    this.ip = hardware.ip;
    this.hwRev = hardware.hwRev;
  }
}
