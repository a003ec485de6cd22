import * as v from 'valibot';
import { HEARTBEAT, MAX_HEARTBEAT_SECS, OFFLINE_MAX_SLOTS, STATUSES, type DeviceKind } from '../src/devices/device-config.ts';
import type { HeartbeatReport, LogReport, StatusReport } from '../src/devices/telemetry/telemetry.ts';
import * as checks from '../generated/payload-checks.ts';

/** Device payload schemas: docs/firmware.md#3-device--backend (and the examples there, which a test checks against these). */
export const MAX_PAYLOAD_BYTES = 4096;

const version = v.literal('1.0');
const unixSeconds = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(2 ** 32));
const text = (max: number) => v.pipe(v.string(), v.maxLength(max));
const int = v.pipe(v.number(), v.integer(), v.safeInteger());
const rssi = v.pipe(v.number(), v.integer(), v.minValue(-150), v.maxValue(0));
const nonNegative = v.pipe(v.number(), v.integer(), v.minValue(0), v.safeInteger());
// A picklist rather than a check, so the generated AsyncAPI document lists the states.
const status = (kind: DeviceKind) => v.picklist(STATUSES[kind], `not a ${kind} status`);

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
    // temp_c is for transmitters only (docs/firmware.md#31-status-devicesidstatus-qos-1-retained).
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
export const logSchema = v.object({ v: version, level: v.picklist(['error', 'warn', 'info', 'debug']), msg: v.string(), ts: unixSeconds });

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

/** `{v, broadcast_id, kind, action, stream_url?, ts}` on mosques/{id}/broadcast (docs/firmware.md#43-broadcast-events-mosquesmosque_idbroadcast-qos-1-retained). */
export const broadcastSchema = v.object({
  v: version,
  broadcast_id: text(64),
  kind: v.picklist(['azaan', 'jummah', 'waaz', 'announcement']),
  action: v.picklist(['start', 'stop']),
  stream_url: v.optional(text(2048)),
  ts: unixSeconds,
});

// What the backend sends (docs/firmware.md#4-backend--device). It never parses these; they are here so the AsyncAPI document, the
// firmware guide's examples and the tests hold one shape.
const hhmm = v.pipe(v.string(), v.regex(/^([01]\d|2[0-3]):[0-5]\d$/));

/** The entitlement lease inside a player's config: a JWT (EdDSA) and its expiry in Unix seconds. */
export const leaseSchema = v.object({ token: v.pipe(v.string(), v.regex(/^[\w-]+\.[\w-]+\.[\w-]+$/)), expires_at: unixSeconds });

/** A player's offline plan (docs/firmware.md, "The azaan without the network"): its coming azaans, the recording and the grace. */
export const offlineSchema = v.object({
  slots: v.pipe(v.array(v.object({ prayer: v.picklist(['fajr', 'dhuhr', 'asr', 'maghrib', 'isha', 'jumuah']), at: unixSeconds })), v.maxLength(OFFLINE_MAX_SLOTS)),
  recording: v.nullable(v.object({ url: text(2048), sha256: v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/)), size: v.pipe(nonNegative, v.minValue(1)) })),
  grace_s: v.pipe(int, v.minValue(1), v.maxValue(600)),
});

/** devices/{id}/config, retained. Absent optional fields are left out (src/devices/device-config.ts). */
export const configSchema = v.object({
  v: version,
  config_version: nonNegative,
  heartbeat_secs: v.pipe(int, v.minValue(HEARTBEAT.transmitter.min), v.maxValue(MAX_HEARTBEAT_SECS)),
  log_enabled: v.boolean(),
  volume: v.optional(v.pipe(int, v.minValue(0), v.maxValue(100))),
  quiet_hours: v.optional(v.object({ start: hhmm, end: hhmm })),
  mosque_id: v.optional(text(64)),
  stream_url: v.optional(text(2048)),
  lease: v.optional(leaseSchema),
  unbound_reason: v.optional(v.picklist(['no_mosque', 'awaiting_approval', 'membership_lapsed', 'lease_expired'])),
  offline: v.optional(offlineSchema),
});

export const COMMAND_NAMES = ['get_state', 'ping', 'play_test', 'identify', 'diag_bundle', 'set_log_level', 'unbind_mosque', 'broadcast_start', 'broadcast_stop'] as const;

/** devices/{id}/cmd. A device acks with the same id and name; a command past expires_at may be ignored. */
export const commandSchema = v.object({
  v: version,
  id: text(64),
  name: v.picklist(COMMAND_NAMES),
  args: v.record(v.string(), v.unknown()),
  ts: unixSeconds,
  expires_at: unixSeconds,
});

/** The args of the commands that take any; the others are sent with `{}`. */
export const commandArgsSchemas = {
  set_log_level: v.object({ level: v.picklist(['error', 'warn', 'info', 'debug']), ttl_s: v.pipe(int, v.minValue(1), v.maxValue(3600)) }),
  broadcast_start: v.object({ broadcast_id: text(64), kind: v.picklist(['azaan', 'jummah', 'waaz', 'announcement']), prayer: v.optional(text(40)) }),
  broadcast_stop: v.object({ broadcast_id: text(64), kind: v.picklist(['azaan', 'jummah', 'waaz', 'announcement']), prayer: v.optional(text(40)) }),
} satisfies Partial<Record<(typeof COMMAND_NAMES)[number], v.GenericSchema>>;

/** Every payload on the wire, by message name: the AsyncAPI document's messages. */
export const PAYLOAD_SCHEMAS = {
  transmitterStatus: statusSchemas.transmitter,
  playerStatus: statusSchemas.stream_player,
  transmitterHeartbeat: heartbeatSchemas.transmitter,
  playerHeartbeat: heartbeatSchemas.stream_player,
  log: logSchema,
  ack: ackSchema,
  config: configSchema,
  command: commandSchema,
  broadcast: broadcastSchema,
} satisfies Record<string, v.GenericSchema>;
export type PayloadName = keyof typeof PAYLOAD_SCHEMAS;
export type BroadcastEvent = v.InferOutput<typeof broadcastSchema>;

/**
 * The payloads checked by generated code (generated/payload-checks.ts, written by `npm run docs` from the schemas
 * above with ajv: valibot's check was a large share of the broker's time per heartbeat; bench/RESULTS.md,
 * "Devices"). A broadcast event
 * keeps valibot: its checked value is re-serialized for the players, where valibot's field order shows.
 */
export const COMPILED_PAYLOADS = ['transmitterStatus', 'playerStatus', 'transmitterHeartbeat', 'playerHeartbeat', 'log', 'ack'] as const satisfies readonly PayloadName[];
type Check = (data: unknown) => boolean;
const compiled: Record<(typeof COMPILED_PAYLOADS)[number], Check> = checks;

type Parsed<T> = { ok: true; value: T } | { ok: false; reason: string };

/**
 * `check` is the schema compiled: what it accepts, valibot accepts with the same value (it removes the keys
 * valibot leaves out, in place). Everything else goes to valibot, which decides and names the reason: the
 * rejects, and the few shapes the check leaves to it (test/broker/payload-checks.test.ts holds both).
 */
function parse<T>(schema: v.GenericSchema<unknown, T>, check: Check | null, payload: Buffer): Parsed<T> {
  let json: unknown;
  try {
    // toString() without an encoding is Buffer's UTF-8 fast path: no encoding name looked up per packet.
    json = JSON.parse(payload.toString());
  } catch {
    return { ok: false, reason: 'not_json' };
  }
  if (check?.(json)) return { ok: true, value: json as T };
  const result = v.safeParse(schema, json);
  if (result.success) return { ok: true, value: result.output };
  const issue = result.issues[0];
  const path = (issue.path ?? []).map((p) => String(p.key)).join('.');
  return { ok: false, reason: `invalid ${path || 'payload'}` };
}

/** One payload checked by valibot alone (`compiledCheck` false) or as the broker checks it: the differential test's two sides. */
export function parsePayload(name: PayloadName, payload: Buffer, compiledCheck = true): Parsed<unknown> {
  const check = compiledCheck && name in compiled ? compiled[name as keyof typeof compiled] : null;
  return parse(PAYLOAD_SCHEMAS[name] as v.GenericSchema, check, payload);
}

/** Schema and compiled check bound once per device kind, not looked up by name on every packet. */
function byKind<T>(schemas: Record<DeviceKind, v.GenericSchema>, names: Record<DeviceKind, keyof typeof compiled>) {
  const bind = (kind: DeviceKind) => {
    const schema = schemas[kind] as v.GenericSchema<unknown, T>;
    const check = compiled[names[kind]];
    return (p: Buffer) => parse<T>(schema, check, p);
  };
  const parsers = { transmitter: bind('transmitter'), stream_player: bind('stream_player') };
  return (kind: DeviceKind, p: Buffer) => parsers[kind](p);
}

export const parseStatus = byKind<StatusReport>(statusSchemas, { transmitter: 'transmitterStatus', stream_player: 'playerStatus' });
export const parseHeartbeat = byKind<HeartbeatReport>(heartbeatSchemas, { transmitter: 'transmitterHeartbeat', stream_player: 'playerHeartbeat' });
export const parseLog = (p: Buffer) => parse<LogReport>(logSchema as v.GenericSchema<unknown, LogReport>, compiled.log, p);
export const parseAck = (p: Buffer) => parse<AckReport>(ackSchema, compiled.ack, p);
export const parseBroadcast = (p: Buffer) => parse<BroadcastEvent>(broadcastSchema, null, p);
