/**
 * What each command does and answers (docs/firmware.md, "4.2 Commands"), over the firmware's own surface
 * (CommandHost). Commands work in every state, UNBOUND included; an unknown one answers unsupported_command
 * (docs/firmware.md, "7. Versions").
 */
import type { AudioStats } from '../audio/link.ts';
import { configSchema, isInt } from './config.ts';
import type { CommandOutcome, DeviceKind, DeviceStatus, FirmwareCounters, Hardware, LogLevel, StatusPayload, Transition } from './types.ts';
import type { AudioPort } from './firmware.ts';

export interface CommandHost {
  readonly kind: DeviceKind;
  readonly hardware: Hardware;
  readonly status: DeviceStatus;
  readonly uptimeS: number;
  readonly configVersion: number;
  readonly heartbeatSecs: number;
  readonly logLevel: LogLevel | null;
  readonly audio: AudioStats | null;
  readonly counters: FirmwareCounters;
  readonly transitions: Transition[];
  readonly playingBroadcast: string | null;
  lastError: string | null;
  logOverride: { level: LogLevel; expiresAt: number } | null;
  logTtlTimer: NodeJS.Timeout | null;
  statusPayload(): StatusPayload;
  unbind(): void;
  checkLogTtl(): void;
  guard(what: string, fn: () => void): void;
  broadcastStart(args: Record<string, unknown>): CommandOutcome;
  broadcastStop(args: Record<string, unknown>): CommandOutcome;
  startUpdate(args: Record<string, unknown>): CommandOutcome;
}

const MAX_LOG_TTL_S = 3600;
const DIAG_TRANSITIONS = 10;
const CHIRP_MS = 600;

export function commandOutcome(host: CommandHost & { audioPort: AudioPort }, name: string, args: Record<string, unknown>): CommandOutcome {
  const player = host.kind === 'stream_player';
  switch (name) {
    case 'ping':
      return { ok: true, result: { pong: true, uptime_s: host.uptimeS } };
    case 'get_state':
      return { ok: true, result: fullState(host) };
    case 'play_test':
      return playTest(host, args);
    case 'identify':
      return identify(host);
    case 'diag_bundle':
      return { ok: true, result: diagBundle(host) };
    case 'set_log_level':
      return player ? setLogLevel(host, args) : { ok: false, error: 'unsupported_command' };
    case 'unbind_mosque':
      if (!player) return { ok: false, error: 'unsupported_command' };
      host.unbind();
      return { ok: true, result: { status: host.status, reason: 'no_mosque' } };
    case 'broadcast_start':
      return player ? { ok: false, error: 'unsupported_command' } : host.broadcastStart(args);
    case 'broadcast_stop':
      return player ? { ok: false, error: 'unsupported_command' } : host.broadcastStop(args);
    case 'update':
      return host.startUpdate(args);
    default:
      return { ok: false, error: 'unsupported_command' };
  }
}

/** A short local tone (no stream, no azaan) through the real output when the device has one; not over a broadcast. */
function playTest(host: CommandHost & { audioPort: AudioPort }, args: Record<string, unknown>): CommandOutcome {
  const requested = args['duration_ms'];
  const duration = isInt(requested) ? Math.min(5000, Math.max(100, requested)) : 1500;
  const sound = host.audioPort.sound;
  if (sound) {
    if (host.playingBroadcast !== null) return { ok: false, error: 'busy' };
    const error = sound('tone', duration);
    if (error) return { ok: false, error };
  }
  return { ok: true, result: { played: 'tone', duration_ms: duration } };
}

function identify(host: CommandHost & { audioPort: AudioPort }): CommandOutcome {
  const sound = host.audioPort.sound;
  if (!sound || host.playingBroadcast !== null) return { ok: true, result: { method: 'led_blink' } };
  const error = sound('chirp', CHIRP_MS);
  return error ? { ok: false, error } : { ok: true, result: { method: 'chirp' } };
}

function fullState(host: CommandHost): Record<string, unknown> {
  return {
    ...host.statusPayload(),
    capabilities: host.kind === 'transmitter' ? ['local', 'stream'] : ['stream', 'local', 'bluetooth'],
    config_schema: configSchema(host.kind),
    hw_rev: host.hardware.hwRev,
    heartbeat_secs: host.heartbeatSecs,
    log_level: host.logLevel,
    ...(host.audio && { audio: host.audio }),
  };
}

function diagBundle(host: CommandHost): Record<string, unknown> {
  const counters = host.counters;
  const rssi = host.hardware.rssi();
  return {
    transitions: host.transitions.slice(-DIAG_TRANSITIONS).map((t) => ({ ts: t.ts, from: t.from, to: t.to, reason: t.reason })),
    config_version: host.configVersion,
    uptime_s: host.uptimeS,
    reset_reason: 'power_on',
    free_heap: host.hardware.freeHeap(),
    wifi: { ssid: host.hardware.ssid ?? null, rssi: rssi ?? null, reconnects: 0 },
    broker: { connects: counters.connects, disconnects: counters.disconnects, publishes: counters.publishes },
    last_error: host.lastError,
    ...(host.audio && { audio: host.audio }),
  };
}

function setLogLevel(host: CommandHost, args: Record<string, unknown>): CommandOutcome {
  const level = args['level'];
  // The levels the backend accepts for set_log_level and in log payloads (docs/firmware.md, "3.3 Log" and "4.2 Commands").
  if (level !== 'error' && level !== 'warn' && level !== 'info' && level !== 'debug') return { ok: false, error: 'invalid_args' };
  const ttlRaw = args['ttl_s'] ?? 600;
  if (typeof ttlRaw !== 'number' || !Number.isFinite(ttlRaw) || ttlRaw <= 0) return { ok: false, error: 'invalid_args' };
  const ttl = Math.min(MAX_LOG_TTL_S, ttlRaw);
  const expiresAt = Date.now() + ttl * 1000;
  host.logOverride = { level, expiresAt };
  if (host.logTtlTimer) clearTimeout(host.logTtlTimer);
  host.logTtlTimer = setTimeout(() => {
    host.logTtlTimer = null;
    host.guard('log ttl', () => host.checkLogTtl());
  }, ttl * 1000 + 10);
  return { ok: true, result: { level, expires_at: Math.floor(expiresAt / 1000) } };
}
