import * as v from 'valibot';
import { isStatusOf, type DeviceKind } from '../src/devices/device-config.ts';
import type { HeartbeatReport, LogReport, StatusReport } from '../src/devices/telemetry.ts';

/** Device payload schemas (seed "Device status payload", "Heartbeat payload", "Log payload"; contract 8). */
export const MAX_PAYLOAD_BYTES = 4096;

const version = v.literal('1.0');
const unixSeconds = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(2 ** 32));
const text = (max: number) => v.pipe(v.string(), v.maxLength(max));
const int = v.pipe(v.number(), v.integer(), v.safeInteger());
const rssi = v.pipe(v.number(), v.integer(), v.minValue(-150), v.maxValue(0));
const nonNegative = v.pipe(v.number(), v.integer(), v.minValue(0), v.safeInteger());
const status = (kind: DeviceKind) => v.pipe(v.string(), v.check((s) => isStatusOf(kind, s), `not a ${kind} status`));

const statusSchemas = {
  transmitter: statusSchema('transmitter'),
  stream_player: statusSchema('stream_player'),
};
const heartbeatSchemas = {
  transmitter: heartbeatSchema('transmitter'),
  stream_player: heartbeatSchema('stream_player'),
};

function statusSchema(kind: DeviceKind) {
  return v.object({
    v: version,
    status: status(kind),
    prev: v.optional(text(32)),
    reason: v.optional(text(64)),
    fw: v.optional(text(64)),
    mac: v.optional(text(32)),
    ssid: v.optional(text(64)),
    ip: v.optional(text(64)),
    rssi: v.optional(rssi),
    // Seed: temp_c is for transmitters only.
    temp_c: kind === 'transmitter' ? v.optional(v.pipe(v.number(), v.minValue(-60), v.maxValue(150))) : v.optional(v.undefined()),
    uptime_s: v.optional(nonNegative),
    config_version: v.optional(nonNegative),
    detail: v.optional(v.record(v.string(), v.unknown())),
    ts: unixSeconds,
  });
}

function heartbeatSchema(kind: DeviceKind) {
  return v.object({
    v: version,
    status: status(kind),
    rssi: v.optional(rssi),
    ip: v.optional(text(64)),
    uptime_s: v.optional(nonNegative),
    free_heap: v.optional(nonNegative),
    volume: v.optional(v.pipe(int, v.minValue(0), v.maxValue(100))),
    config_version: v.optional(nonNegative),
    ts: unixSeconds,
  });
}

// No length on msg here: a log over 512 bytes is the log limit's case (dropped and counted as a log, in
// telemetry), not a malformed payload; the 4 KiB payload cap still bounds it.
const logSchema = v.object({ v: version, level: v.picklist(['error', 'warn', 'info', 'debug']), msg: v.string(), ts: unixSeconds });

export const ackSchema = v.object({
  v: version,
  id: text(64),
  name: text(64),
  ok: v.boolean(),
  result: v.optional(v.unknown()),
  error: v.optional(v.unknown()),
  ts: unixSeconds,
});
export type AckReport = v.InferOutput<typeof ackSchema>;

/** contract 8: `{v, broadcast_id, kind, action, stream_url?, ts}` on mosques/{id}/broadcast. */
const broadcastSchema = v.object({
  v: version,
  broadcast_id: text(64),
  kind: v.picklist(['azaan', 'jummah', 'waaz', 'announcement']),
  action: v.picklist(['start', 'stop']),
  stream_url: v.optional(text(2048)),
  ts: unixSeconds,
});

export type BroadcastEvent = v.InferOutput<typeof broadcastSchema>;

type Parsed<T> = { ok: true; value: T } | { ok: false; reason: string };

function parse<T>(schema: v.GenericSchema<unknown, T>, payload: Buffer): Parsed<T> {
  let json: unknown;
  try {
    json = JSON.parse(payload.toString('utf8'));
  } catch {
    return { ok: false, reason: 'not_json' };
  }
  const result = v.safeParse(schema, json);
  if (result.success) return { ok: true, value: result.output };
  const issue = result.issues[0];
  const path = (issue.path ?? []).map((p) => String(p.key)).join('.');
  return { ok: false, reason: `invalid ${path || 'payload'}` };
}

export const parseStatus = (kind: DeviceKind, p: Buffer) => parse<StatusReport>(statusSchemas[kind] as v.GenericSchema<unknown, StatusReport>, p);
export const parseHeartbeat = (kind: DeviceKind, p: Buffer) => parse<HeartbeatReport>(heartbeatSchemas[kind] as v.GenericSchema<unknown, HeartbeatReport>, p);
export const parseLog = (p: Buffer) => parse<LogReport>(logSchema as v.GenericSchema<unknown, LogReport>, p);
export const parseAck = (p: Buffer) => parse<AckReport>(ackSchema, p);
export const parseBroadcast = (p: Buffer) => parse<BroadcastEvent>(broadcastSchema, p);
