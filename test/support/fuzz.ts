import mqttPacket from 'mqtt-packet';
import { varint } from './hostile.ts';

/**
 * The shared generator of the fuzzers in test/hostile/: a seeded PRNG (so a failure replays exactly),
 * hostile JSON, and valid MQTT packets from mqtt-packet's own generator, then mutated.
 *
 *   FUZZ_SEED=<n>        the run's seed (default: a fixed one, so `npm test` is repeatable)
 *   FUZZ_ITERATIONS=<n>  iterations per fuzzer (default: the file's own, sized for a loaded 2-core machine)
 *   FUZZ_ITERATION=<i>   replay only iteration i (or, for MQTT, the batch holding it)
 * Every iteration draws from its own generator derived from (seed, iteration), so one can be replayed alone.
 */

export const DEFAULT_FUZZ_SEED = 20261122;

export interface FuzzSettings {
  seed: number;
  iterations: number;
  /** Replay only this iteration (FUZZ_ITERATION); null: all of them. */
  only: number | null;
}

const wholeOr = (raw: string | undefined, name: string, fallback: number): number => {
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a whole number (got ${JSON.stringify(raw)})`);
  return Number(raw);
};

export function fuzzSettings(defaultIterations: number, env: NodeJS.ProcessEnv = process.env): FuzzSettings {
  const only = env['FUZZ_ITERATION'];
  return {
    seed: wholeOr(env['FUZZ_SEED'], 'FUZZ_SEED', DEFAULT_FUZZ_SEED),
    iterations: wholeOr(env['FUZZ_ITERATIONS'], 'FUZZ_ITERATIONS', defaultIterations),
    only: only === undefined || only === '' ? null : wholeOr(only, 'FUZZ_ITERATION', 0),
  };
}

/** The line to paste to replay a failure. */
export const replayHint = (file: string, seed: number, iteration: number) =>
  `replay: FUZZ_SEED=${seed} FUZZ_ITERATION=${iteration} node --import tsx --test ${file}`;

export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
  /** Whole number in [0, n). */
  int(n: number): number;
  /** Whole number in [lo, hi]. */
  range(lo: number, hi: number): number;
  chance(p: number): boolean;
  pick<T>(items: readonly T[]): T;
  bytes(n: number): Buffer;
}

/** mulberry32: small, fast, and good enough to pick test inputs (not for secrets). */
export function createRng(seed: number): Rng {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return {
    next,
    int,
    range: (lo, hi) => lo + int(hi - lo + 1),
    chance: (p) => next() < p,
    pick: (items) => items[int(items.length)]!,
    bytes: (n) => {
      const out = Buffer.alloc(n);
      for (let i = 0; i < n; i++) out[i] = int(256);
      return out;
    },
  };
}

/** The generator of one iteration: independent of every other iteration, so it replays alone. */
export const iterationRng = (seed: number, iteration: number) => createRng((Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(iteration + 1, 0xc2b2ae35)) >>> 0);

// ---------------------------------------------------------------------------------------------------
// Hostile JSON

const WEIRD_STRINGS = [
  '', ' ', '\u0000', 'null', 'undefined', 'true', '0', '-1', '1e309', 'NaN', '__proto__', 'constructor', 'prototype',
  "' OR 1=1 --", '"; DROP TABLE users; --', '<script>alert(1)</script>', '../../../../etc/passwd', '%00', '%2e%2e%2f',
  '\u202e\u0645\u0633\u062c\u062f', '\ud800', '\udfff', '😀'.repeat(20), 'ﷺ', 'a\r\nX-Injected: 1', '${jndi:ldap://x}',
  '{{7*7}}', 'devices/#', '$SYS/x', '+', 'Europe/Nowhere', 'https://127.0.0.1/x', 'http://10.1.2.3:8080/', 'javascript:alert(1)',
  '2026-02-30T25:61:00Z', '+0000000000000000000', 'a@b', 'x@example.com', 'AAAAAAAA', '00000000', 'azaan', 'fajr', 'approved', 'banned',
];

const WEIRD_NUMBERS = [0, -0, 1, -1, 0.5, -0.5, 2 ** 31, -(2 ** 31), 2 ** 53, -(2 ** 53), 2 ** 63, 1e21, 1e308, -1e308, 5e-324, Number.MAX_SAFE_INTEGER + 2, 123456, 999999];

export function hostileString(rng: Rng): string {
  switch (rng.int(6)) {
    case 0: return rng.pick(WEIRD_STRINGS);
    case 1: return 'x'.repeat(rng.pick([256, 1024, 4097, 20_000]));
    case 2: return String.fromCharCode(...Array.from({ length: rng.range(1, 40) }, () => rng.int(0xffff)));
    case 3: return rng.bytes(rng.range(1, 32)).toString('hex');
    case 4: return rng.bytes(rng.range(1, 24)).toString('latin1');
    default: return rng.pick(WEIRD_STRINGS) + rng.pick(WEIRD_STRINGS);
  }
}

export function hostileNumber(rng: Rng): number {
  return rng.chance(0.7) ? rng.pick(WEIRD_NUMBERS) : (rng.next() - 0.5) * 10 ** rng.int(25);
}

/** Any JSON value, weighted toward what breaks parsers and handlers. */
export function hostileValue(rng: Rng, depth = 0): unknown {
  const roll = rng.int(depth > 3 ? 6 : 10);
  switch (roll) {
    case 0: return null;
    case 1: return rng.chance(0.5);
    case 2: case 3: return hostileNumber(rng);
    case 4: case 5: return hostileString(rng);
    case 6: return Array.from({ length: rng.int(5) }, () => hostileValue(rng, depth + 1));
    case 7: return deepNesting(rng.pick([50, 500, 2000]), rng.chance(0.5));
    default: return hostileObject(rng, depth + 1);
  }
}

function hostileObject(rng: Rng, depth: number): Record<string, unknown> {
  const obj: Record<string, unknown> = {};
  const n = rng.int(5);
  for (let i = 0; i < n; i++) obj[rng.chance(0.3) ? rng.pick(PROTO_KEYS) : hostileString(rng).slice(0, 64)] = hostileValue(rng, depth + 1);
  return obj;
}

const PROTO_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'valueOf'];

/** `[[[...]]]` or `{"a":{"a":...}}`, `depth` levels. */
export function deepNesting(depth: number, asArray: boolean): unknown {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = asArray ? [v] : { a: v };
  return v;
}

/** A value meant for a field of JSON-schema type `schema`: usually plausible, often the wrong type. */
function valueFor(rng: Rng, schema: JsonSchema | undefined): unknown {
  if (!schema || rng.chance(0.35)) return hostileValue(rng);
  if (schema.enum && rng.chance(0.7)) return rng.pick(schema.enum);
  const type = Array.isArray(schema.type) ? rng.pick(schema.type) : schema.type;
  switch (type) {
    case 'boolean': return rng.chance(0.5);
    case 'integer': return rng.chance(0.6) ? rng.range(-5, 100_000) : hostileNumber(rng);
    case 'number': return hostileNumber(rng);
    case 'string': return rng.chance(0.3) ? rng.pick(['a', 'x@example.com', '+15551234567', 'a'.repeat(64), 'https://push.example.com/x']) : hostileString(rng);
    case 'array': return Array.from({ length: rng.int(4) }, () => valueFor(rng, schema.items));
    case 'object': return bodyFor(rng, schema);
    default: return hostileValue(rng);
  }
}

export interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  enum?: unknown[];
  required?: string[];
}

/**
 * A request body for an operation whose body schema is `schema` (from the OpenAPI document): the schema's
 * keys with plausible or hostile values, extra keys, prototype keys, arrays or scalars for the object,
 * or no schema at all.
 */
export function bodyFor(rng: Rng, schema: JsonSchema | undefined): unknown {
  const roll = rng.int(20);
  if (roll === 0) return hostileValue(rng);
  if (roll === 1) return [bodyFor(rng, schema)];
  if (roll === 2) return deepNesting(rng.pick([100, 1000, 3000]), rng.chance(0.5));
  const body: Record<string, unknown> = {};
  for (const [key, prop] of Object.entries(schema?.properties ?? {})) {
    if (rng.chance(0.85)) body[key] = valueFor(rng, prop);
  }
  if (rng.chance(0.3)) body[hostileString(rng).slice(0, 40) || 'extra'] = hostileValue(rng);
  return body;
}

/**
 * The body as text. JSON.stringify never writes an own `__proto__` key from an object literal, so
 * prototype keys are spliced into the text, where a careless `JSON.parse` + spread would meet them.
 */
export function bodyText(rng: Rng, body: unknown): string {
  const text = JSON.stringify(body) ?? 'null';
  if (!text.startsWith('{') || !rng.chance(0.3)) return rng.chance(0.03) ? text.slice(0, rng.int(text.length + 1)) : text;
  const key = rng.pick(PROTO_KEYS);
  const value = JSON.stringify(rng.chance(0.5) ? { role: 'superadmin', isSuperadmin: true, admin: true } : hostileValue(rng)) ?? 'null';
  return `{"${key}":${value}${text === '{}' ? '' : ','}${text.slice(1)}`;
}

// ---------------------------------------------------------------------------------------------------
// MQTT

export interface MqttTargets {
  /** The device this connection signs in as (null: anonymous). */
  deviceId: string | null;
  /** Other device ids and mosque ids, for foreign topics. */
  otherDeviceIds: string[];
  mosqueIds: string[];
}

/** A topic a device may or may not use: its own channels, other devices', wildcards, `$SYS`, junk. */
export function topicFor(rng: Rng, targets: MqttTargets): string {
  const own = targets.deviceId ?? 'd0000000000000000';
  const other = targets.otherDeviceIds.length ? rng.pick(targets.otherDeviceIds) : 'dAAAAAAAAAAAAAAAA';
  const mosque = targets.mosqueIds.length ? rng.pick(targets.mosqueIds) : 'm1';
  const channel = rng.pick(['status', 'heartbeat', 'log', 'ack', 'config', 'cmd', 'broadcast', '']);
  switch (rng.int(10)) {
    case 0: case 1: case 2: return `devices/${own}/${channel}`;
    case 3: return `devices/${other}/${channel}`;
    case 4: return `mosques/${mosque}/broadcast`;
    case 5: return rng.pick(['#', '+', '+/+/status', 'devices/#', `devices/${own}/#`, '$SYS/broker/uptime', '$dropped/x', '/', '//', 'devices//status']);
    case 6: return `devices/${own}/${channel}/${hostileString(rng).slice(0, 50)}`;
    case 7: return hostileString(rng).slice(0, 300);
    case 8: return 'a/'.repeat(rng.range(1, 300));
    default: return `devices/${own}/${rng.pick(['status', 'heartbeat', 'log', 'ack'])}`;
  }
}

const STATUSES = ['UNKNOWN', 'CONNECTING', 'ONLINE', 'PLAYING', 'UPDATING', 'STREAM_ERROR', 'CONFIG_ERROR', 'OFFLINE', 'UNBOUND', 'MUTED', 'online', ''];

/** A payload: a near-valid device message (status, heartbeat, log, ack, broadcast), hostile JSON or raw bytes. */
export function payloadFor(rng: Rng): Buffer {
  const ts = rng.chance(0.8) ? 1_767_225_600 + rng.int(10_000_000) : hostileValue(rng);
  const near: Record<string, unknown>[] = [
    { v: '1.0', status: rng.pick(STATUSES), prev: rng.pick(STATUSES), reason: hostileString(rng).slice(0, 80), ts, rssi: rng.range(-120, 10), detail: hostileValue(rng) },
    { v: '1.0', status: rng.pick(STATUSES), rssi: rng.range(-100, 0), uptime_s: hostileNumber(rng), free_heap: rng.int(1e6), volume: rng.range(-5, 120), config_version: rng.int(100), ts },
    { v: '1.0', level: rng.pick(['warn', 'info', 'debug', 'error', 'x']), msg: hostileString(rng), ts },
    { v: '1.0', id: hostileString(rng).slice(0, 40), name: rng.pick(['ping', 'get_state', 'unbind_mosque', 'x']), ok: rng.chance(0.5), result: hostileValue(rng), ts },
    { v: '1.0', broadcast_id: 'b1', kind: rng.pick(['azaan', 'waaz', 'x']), action: rng.pick(['start', 'stop']), stream_url: rng.pick(['https://evil.example/x', hostileString(rng)]), ts },
  ];
  switch (rng.int(6)) {
    case 0: case 1: {
      const msg = rng.pick(near);
      for (const key of Object.keys(msg)) if (rng.chance(0.15)) msg[key] = hostileValue(rng);
      if (rng.chance(0.2)) msg[rng.pick(PROTO_KEYS)] = hostileValue(rng);
      return Buffer.from(JSON.stringify(msg));
    }
    case 2: return Buffer.from(JSON.stringify(hostileValue(rng)) ?? 'null');
    case 3: return Buffer.from(bodyText(rng, { v: '1.0', status: 'ONLINE', ts }));
    case 4: return rng.bytes(rng.pick([0, 1, 16, 600, 4097, 9000]));
    default: return Buffer.from(`{"v":"1.0","status":"ONLINE","ts":${JSON.stringify(ts) ?? 0},"x":"${'y'.repeat(rng.pick([10, 5000]))}`);
  }
}

/** A valid MQTT 3.1.1 packet of a random kind, from mqtt-packet's own generator. */
export function randomPacket(rng: Rng, targets: MqttTargets, connect?: { clientId: string; username?: string; password?: Buffer }): Buffer {
  const messageId = rng.range(1, 65535);
  const kind = connect ? 'connect' : rng.pick(['publish', 'publish', 'publish', 'publish', 'subscribe', 'subscribe', 'unsubscribe', 'pingreq', 'puback', 'pubrec', 'pubrel', 'pubcomp', 'connect', 'disconnect']);
  let packet: mqttPacket.Packet;
  switch (kind) {
    case 'connect':
      packet = {
        cmd: 'connect', protocolId: rng.chance(0.9) ? 'MQTT' : 'MQIsdp', protocolVersion: rng.chance(0.9) ? 4 : rng.pick([3, 5, 6]) as 4,
        clean: rng.chance(0.5), keepalive: rng.pick([0, 1, 60, 65535]),
        clientId: connect?.clientId ?? rng.pick([targets.deviceId ?? '', ...targets.otherDeviceIds, hostileString(rng).slice(0, 30)]),
        ...(connect?.username !== undefined ? { username: connect.username } : rng.chance(0.5) ? { username: hostileString(rng).slice(0, 40) } : {}),
        ...(connect?.password !== undefined ? { password: connect.password } : rng.chance(0.5) ? { password: rng.bytes(rng.int(64)) } : {}),
        ...(!connect && rng.chance(0.3) ? { will: { topic: topicFor(rng, targets), payload: payloadFor(rng), qos: rng.pick([0, 1, 2] as const), retain: rng.chance(0.5) } } : {}),
      } as mqttPacket.IConnectPacket;
      break;
    case 'publish': {
      const qos = rng.pick([0, 1, 1, 2] as const);
      packet = { cmd: 'publish', topic: topicFor(rng, targets), payload: payloadFor(rng), qos, retain: rng.chance(0.5), dup: rng.chance(0.1), ...(qos > 0 ? { messageId } : {}) };
      break;
    }
    case 'subscribe':
      packet = { cmd: 'subscribe', messageId, subscriptions: Array.from({ length: rng.range(1, 4) }, () => ({ topic: topicFor(rng, targets), qos: rng.pick([0, 1, 2] as const) })) };
      break;
    case 'unsubscribe':
      packet = { cmd: 'unsubscribe', messageId, unsubscriptions: Array.from({ length: rng.range(1, 3) }, () => topicFor(rng, targets)) };
      break;
    case 'pingreq': packet = { cmd: 'pingreq' }; break;
    case 'disconnect': packet = { cmd: 'disconnect' }; break;
    default: packet = { cmd: kind as 'puback', messageId };
  }
  try {
    return mqttPacket.generate(packet);
  } catch {
    // The generator refuses some of its own combinations (a topic too long, say): raw bytes instead.
    return rng.bytes(rng.range(2, 64));
  }
}


/** Breaks a valid packet: bytes flipped, length lied about, truncated, junk appended, or pure noise. */
export function mutatePacket(rng: Rng, packet: Buffer): Buffer {
  switch (rng.int(8)) {
    case 0: return packet;
    case 1: {
      const out = Buffer.from(packet);
      for (let i = rng.range(1, 4); i > 0 && out.length > 0; i--) {
        const at = rng.int(out.length);
        out[at] = out[at]! ^ (1 << rng.int(8));
      }
      return out;
    }
    case 2: {
      // The remaining length lies: smaller or larger than what follows, up to the 256 MB maximum.
      let i = 1;
      while (i < packet.length && packet[i]! & 0x80) i++;
      const body = packet.subarray(i + 1);
      const lie = rng.pick([0, 1, body.length - 1, body.length + 1, body.length + 1000, 268_435_455, rng.int(70_000)]);
      return Buffer.concat([packet.subarray(0, 1), varint(Math.max(0, lie), 5), body]);
    }
    case 3: return packet.subarray(0, rng.int(packet.length));
    case 4: return Buffer.concat([packet, rng.bytes(rng.range(1, 64))]);
    case 5: return rng.bytes(rng.range(1, 128));
    case 6: return Buffer.concat([Buffer.from([rng.int(256)]), packet.subarray(1)]); // a reserved or wrong packet type/flags
    default: return Buffer.concat([packet, packet]); // twice in one write
  }
}
