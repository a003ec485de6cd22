import type crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import util from 'node:util';
import { fileURLToPath } from 'node:url';
import * as v from 'valibot';
import { parseTrustProxy, type TrustProxy } from './net/client-address.ts';
import { parseFirmwareKey } from './keys/signatures.ts';

/**
 * A file the code reads at run time (the console, the migrations, the bcrypt worker), found from the
 * repository root rather than the working directory: the nearest folder above this module that holds
 * package.json. This module runs as src/platform/config.ts under tsx, as dist/src/platform/config.js once built
 * (docs/architecture.md, "Running"), and from the test run's JavaScript under .tmp/; those files are not
 * compiled, so every layout reads the same ones.
 */
const ROOT = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, 'package.json')) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return dir;
})();

export function projectPath(relative: string): string {
  return path.join(ROOT, relative);
}

/** The console committed with the code. */
const DEFAULT_CONSOLE_DIR = projectPath('console');

/** Every setting of the service: one schema, its default, its bound and its error line. */
export interface Config {
  nodeEnv: 'development' | 'production' | 'test';
  httpPort: number;
  mqttPort: number;
  /** MQTT over TLS; undefined = off. */
  mqttsPort: number | undefined;
  tlsCertFile: string | undefined;
  tlsKeyFile: string | undefined;
  host: string;
  /** PUBLIC_URL's origin (no trailing slash), or null: device credentials then take the request's host. */
  publicUrl: string | null;
  databasePath: string;
  /** Caps the database file (SQLite max_page_count); undefined: no cap but the disk. */
  databaseMaxBytes: number | undefined;
  /**
   * DATABASE_URL: the store is this PostgreSQL instead of the SQLite file (docs/operator.md, "Several hosts"),
   * with a pool of `poolSize` connections and a bound on each statement.
   */
  postgres: { url: string; poolSize: number; statementTimeoutMs: number } | null;
  dataDir: string;
  /** The browser console's folder, served at `/`; null when CONSOLE_DIR is `off` (API only). */
  consoleDir: string | null;
  jwtSecret: string | undefined;
  accessTokenExpireDays: number;
  /** The console's session cookie (docs/api.md "Console sessions"): lifetimes, the tokens it mints, sessions per person. */
  consoleSessions: { idleSeconds: number; absoluteSeconds: number; tokenTtlSeconds: number; maxPerUser: number };
  passwordResetTtlHours: number;
  leaseTtlHours: number;
  /** OFFLINE_GRACE_S: how long a player waits for a broadcast start past a slot's time before it plays its copy (docs/firmware.md, "The azaan without the network"). */
  offlineGraceS: number;
  notifyTransport: 'console' | 'smtp' | 'webhook';
  notifyWebhookUrl: string | undefined;
  smtpUrl: string | undefined;
  smtpFrom: string | undefined;
  redisUrl: string | undefined;
  /** With REDIS_URL: how often every cache is read again, the safety net under the change feed. */
  sharedCacheReloadS: number;
  /** With REDIS_URL: how long the change log keeps an entry (docs/decisions.md, "The change log"). */
  changeLogKeepS: number;
  authRateLimit: number;
  authIdentifierRateLimit: number;
  authMaxWrongGuessesPerHour: number;
  invitesPerMosquePerHour: number;
  invitesPerAddressPerDay: number;
  /** Pairing a device by a short code (docs/api.md, "Pairing a device"): each limit over 10 minutes, and the pending bound. */
  pairing: { guessesPerPerson: number; guessesPerAddress: number; startsPerAddress: number; maxPending: number; pollHoldSeconds: number };
  bcryptCost: number;
  bcryptMaxQueue: number;
  trustProxy: TrustProxy;
  httpHeadersTimeoutS: number;
  httpRequestTimeoutS: number;
  httpKeepAliveTimeoutS: number;
  httpMaxConnections: number;
  vapidSubject: string;
  deviceEventsRetentionDays: number;
  deviceEventsMaxPerDevice: number;
  maxPushSubscriptionsPerUser: number;
  pushConcurrency: number;
  maxPlayersPerUser: number;
  /** RECORDING_MAX_BYTES: the largest recorded azaan a mosque may upload (docs/api.md, "Recorded azaan"). */
  recordingMaxBytes: number;
  /**
   * Firmware updates (docs/api.md, "Firmware updates"): on only with FIRMWARE_PUBLIC_KEY, the Ed25519 key every
   * image's signature is checked against; FIRMWARE_MAX_BYTES bounds an image, FIRMWARE_QUIET_MINUTES the span around
   * each azaan, iqamah and Jumu'ah in which no device is offered one.
   */
  firmware: { publicKey: crypto.KeyObject | null; maxBytes: number; quietMinutes: number };
  /** STREAM_HTTP_HOSTS: hosts a stream address may name over plain http. */
  streamHttpHosts: string[];
  mqtt: MqttLimits;
  /** Per-device publish budgets (SECURITY.md, "Per-device budgets"): token buckets per channel, per second with a burst. */
  deviceBudgets: Record<'status' | 'heartbeat' | 'ack', { perSecond: number; burst: number }>;
  /** A device this long 10x over a budget, every second of it, is disconnected and banned as flapping. */
  deviceFloodWindowS: number;
  /** Reconnect flapping: more than maxConnects CONNECTs of one device in windowS are refused for banS. */
  mqttFlap: { maxConnects: number; windowS: number; banS: number };
  scheduleReadyLeadMinutes: number;
  scheduleGraceMinutes: number;
  /** The audio server (docs/operator.md#audio-icecast); null: off, players get the mosque's own, ungated stream_url. */
  icecast: IcecastSettings | null;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** LOG_REQUESTS=1: a line per HTTP request at `info`; else at `debug` (docs/operator.md, "Reading the log"). */
  logRequests: boolean;
  /** The whole graceful stop (signal or fatal error) gets this long before the process exits anyway. */
  shutdownTimeoutS: number;
  /** Tests only (refused unless NODE_ENV=test): a fault main.ts raises on SIGUSR2, to test the fatal-error policy. */
  testFault: 'uncaught_exception' | 'unhandled_rejection' | undefined;
}

/** What an MQTT connection may cost before and after it is trusted (SECURITY.md, "Connection limits"). */
export interface MqttLimits {
  maxConnectBytes: number;
  maxPacketBytes: number;
  connectTimeoutS: number;
  maxConnections: number;
  maxHandshakesPerAddress: number;
  maxQueuedMessages: number;
}

/** ICECAST_*: where listeners and Minaret reach Icecast, its admin account, and the secret its callbacks carry. */
export interface IcecastSettings {
  /** The base players and browsers reach, no trailing slash (https://audio.example.org). */
  url: string;
  /** How Minaret reaches Icecast's admin API, no trailing slash (defaults to url). */
  adminUrl: string;
  adminUser: string;
  adminPassword: string;
  /** Carried by every callback as HTTP basic (user `icecast`): Icecast 2.4 url auth's username/password options. */
  hookSecret: string;
}

export type ConfigResult =
  | { ok: true; config: Config; warnings: string[] }
  | { ok: false; error: string };

const wholeNumber = (min: number, max: number, fallback: number) =>
  v.optional(
    v.pipe(
      v.string(),
      v.trim(),
      v.regex(/^\d+$/, `must be a whole number from ${min} to ${max}`),
      v.transform(Number),
      v.minValue(min, `must be a whole number from ${min} to ${max}`),
      v.maxValue(max, `must be a whole number from ${min} to ${max}`),
    ),
    String(fallback),
  );

const optionalText = v.optional(v.pipe(v.string(), v.trim(), v.transform((s) => (s === '' ? undefined : s))));

const urlWithScheme = (schemes: string[]) =>
  v.optional(
    v.pipe(
      v.string(),
      v.trim(),
      v.check((s) => s === '' || hasScheme(s, schemes), `must be a URL starting with ${schemes.join(' or ')}`),
      v.transform((s) => (s === '' ? undefined : s)),
    ),
  );

const UNITS: Record<string, number> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 };
const toBytes = (s: string) => Number.parseInt(s, 10) * UNITS[(/[kmg]/i.exec(s)?.[0] ?? '').toLowerCase()]!;
const BYTES_MESSAGE = 'must be a number of bytes, optionally with K, M or G (65536, 512M, 2G), at least 64K';

/** `65536`, `512K`, `64M`, `2GiB`: powers of 1024, as disks and SD cards are sold to people who read `df -h`. */
const byteSize = v.optional(
  v.pipe(
    v.string(),
    v.trim(),
    v.regex(/^\d+\s*([kmg](i?b)?)?$/i, BYTES_MESSAGE),
    v.transform(toBytes),
    v.minValue(64 * 1024, BYTES_MESSAGE),
  ),
);

/**
 * A bounded upload size in K or M (RECORDING_MAX_BYTES, FIRMWARE_MAX_BYTES): such uploads are held whole in memory
 * while they are checked and stored, so each is bounded well below what one request may reasonably carry.
 */
const uploadBytes = (examples: string, maxMiB: number, fallback: string) => {
  const message = `must be a number of bytes, optionally with K or M (${examples}), from 64K to ${maxMiB}M`;
  return v.optional(
    v.pipe(
      v.string(),
      v.trim(),
      v.regex(/^\d+\s*([km](i?b)?)?$/i, message),
      v.transform(toBytes),
      v.minValue(64 * 1024, message),
      v.maxValue(maxMiB * 1024 ** 2, message),
    ),
    fallback,
  );
};

/** The largest recorded azaan (docs/api.md, "Recorded azaan"). */
const recordingBytes = uploadBytes('5M, 2048K', 20, '5M');
/** The largest firmware image: held whole while its digest is checked, then served from memory. */
const firmwareBytes = uploadBytes('1536K, 32M', 256, '32M');

const picklist = <T extends string>(options: readonly T[], fallback: T) =>
  v.optional(v.picklist(options, `must be one of ${options.join(', ')}`), fallback);

const EnvSchema = v.object({
  NODE_ENV: picklist(['development', 'production', 'test'] as const, 'development'),
  HTTP_PORT: wholeNumber(0, 65535, 8080),
  MQTT_PORT: wholeNumber(0, 65535, 1883),
  MQTTS_PORT: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^\d+$/, 'must be a whole number from 0 to 65535'), v.transform(Number), v.maxValue(65535, 'must be a whole number from 0 to 65535'))),
  TLS_CERT_FILE: optionalText,
  TLS_KEY_FILE: optionalText,
  HOST: v.optional(v.pipe(v.string(), v.trim(), v.nonEmpty('must not be empty')), '0.0.0.0'),
  PUBLIC_URL: v.optional(
    v.pipe(
      v.string(),
      v.trim(),
      v.check((s) => hasScheme(s, ['http://', 'https://']) && /^https?:\/\/[^/?#]+\/?$/i.test(s), 'must be an http or https origin, like https://minaret.example.org'),
      v.transform((s) => new URL(s).origin),
    ),
  ),
  DATABASE_PATH: v.optional(v.pipe(v.string(), v.trim(), v.nonEmpty('must not be empty')), 'data/minaret.db'),
  DATABASE_MAX_BYTES: byteSize,
  DATABASE_URL: urlWithScheme(['postgres://', 'postgresql://']),
  DATABASE_POOL_SIZE: wholeNumber(1, 1000, 10),
  DATABASE_STATEMENT_TIMEOUT_MS: wholeNumber(100, 3_600_000, 10_000),
  CONSOLE_DIR: v.optional(
    v.pipe(v.string(), v.trim(), v.nonEmpty('must not be empty'), v.check((s) => s === 'off' || fs.existsSync(path.join(s, 'index.html')), 'must be "off" or a folder holding index.html')),
    DEFAULT_CONSOLE_DIR,
  ),
  DATA_DIR: optionalText,
  JWT_SECRET: v.optional(v.string()),
  ACCESS_TOKEN_EXPIRE_DAYS: wholeNumber(1, 365, 7),
  CONSOLE_SESSION_IDLE_HOURS: wholeNumber(1, 720, 168),
  CONSOLE_SESSION_MAX_DAYS: wholeNumber(1, 90, 30),
  // At least 2: the page asks for the next token a minute before this one ends.
  CONSOLE_TOKEN_TTL_MINUTES: wholeNumber(2, 60, 15),
  CONSOLE_SESSIONS_PER_USER: wholeNumber(1, 50, 10),
  // Clamped into 1..168 below (with a warning) rather than refused: the contract says so.
  PASSWORD_RESET_TTL_HOURS: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^\d+$/, 'must be a whole number of hours'), v.transform(Number)), '24'),
  LEASE_TTL_HOURS: wholeNumber(1, 720, 24),
  OFFLINE_GRACE_S: wholeNumber(1, 600, 10),
  NOTIFY_TRANSPORT: picklist(['console', 'smtp', 'webhook'] as const, 'console'),
  NOTIFY_WEBHOOK_URL: urlWithScheme(['http://', 'https://']),
  SMTP_URL: urlWithScheme(['smtp://', 'smtps://']),
  SMTP_FROM: optionalText,
  REDIS_URL: urlWithScheme(['redis://', 'rediss://']),
  SHARED_CACHE_RELOAD_S: wholeNumber(1, 3600, 10),
  CHANGE_LOG_KEEP_S: wholeNumber(60, 604800, 3600),
  AUTH_RATE_LIMIT: wholeNumber(1, 1_000_000, 30),
  AUTH_IDENTIFIER_RATE_LIMIT: wholeNumber(1, 1_000_000, 10),
  AUTH_MAX_WRONG_GUESSES_PER_HOUR: wholeNumber(1, 1000, 20),
  INVITES_PER_MOSQUE_PER_HOUR: wholeNumber(1, 10_000, 20),
  INVITES_PER_ADDRESS_PER_DAY: wholeNumber(1, 100, 3),
  PAIRING_GUESSES_PER_PERSON: wholeNumber(1, 1000, 10),
  PAIRING_GUESSES_PER_ADDRESS: wholeNumber(1, 10_000, 10),
  PAIRING_STARTS_PER_ADDRESS: wholeNumber(1, 100_000, 20),
  PAIRING_MAX_PENDING: wholeNumber(1, 1_000_000, 10_000),
  PAIRING_POLL_HOLD_S: wholeNumber(0, 5, 5),
  BCRYPT_MAX_QUEUE: wholeNumber(1, 100_000, 64),
  TRUST_PROXY: v.optional(v.pipe(v.string(), v.trim()), 'off'),
  HTTP_HEADERS_TIMEOUT_S: wholeNumber(1, 300, 10),
  HTTP_REQUEST_TIMEOUT_S: wholeNumber(1, 3600, 30),
  HTTP_KEEP_ALIVE_TIMEOUT_S: wholeNumber(1, 600, 5),
  HTTP_MAX_CONNECTIONS: wholeNumber(1, 1_000_000, 1000),
  BCRYPT_COST: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^\d+$/, 'must be a whole number'), v.transform(Number)), '11'),
  VAPID_SUBJECT: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^(mailto:[^\s@]+@[^\s@]+|https:\/\/\S+)$/, 'must be a mailto: address or an https URL')), 'mailto:minaret@localhost'),
  DEVICE_EVENTS_RETENTION_DAYS: wholeNumber(1, 3650, 30),
  DEVICE_EVENTS_MAX_PER_DEVICE: wholeNumber(10, 1_000_000, 1000),
  MAX_PUSH_SUBSCRIPTIONS_PER_USER: wholeNumber(1, 1000, 10),
  PUSH_CONCURRENCY: wholeNumber(1, 256, 8),
  MAX_PLAYERS_PER_USER: wholeNumber(1, 100_000, 20),
  RECORDING_MAX_BYTES: recordingBytes,
  FIRMWARE_PUBLIC_KEY: optionalText,
  FIRMWARE_MAX_BYTES: firmwareBytes,
  FIRMWARE_QUIET_MINUTES: wholeNumber(0, 180, 20),
  // Hosts a mosque's stream address may name over plain http (a LAN Icecast, say); every other must be https.
  STREAM_HTTP_HOSTS: v.optional(v.pipe(
    v.string(),
    v.transform((s) => s.split(',').map((h) => h.trim().toLowerCase()).filter((h) => h.length > 0)),
    v.check((hosts) => hosts.every((h) => /^[a-z0-9.-]+$|^\[[0-9a-f:.]+\]$/.test(h)), 'must be a comma-separated list of host names'),
  ), ''),
  // A CONNECT carries a client id, credentials and a will of at most a 4 KiB status payload.
  MQTT_MAX_CONNECT_BYTES: wholeNumber(1024, 1_048_576, 8192),
  // Below 4 KiB + topic a valid-size payload would cost the device its connection instead of being counted.
  MQTT_MAX_PACKET_BYTES: wholeNumber(5120, 268_435_455, 16_384),
  MQTT_CONNECT_TIMEOUT_S: wholeNumber(1, 300, 10),
  MQTT_MAX_CONNECTIONS: wholeNumber(1, 10_000_000, 20_000),
  MQTT_MAX_HANDSHAKES_PER_ADDRESS: wholeNumber(1, 1_000_000, 50),
  MQTT_MAX_QUEUED_MESSAGES: wholeNumber(1, 1_000_000, 100),
  DEVICE_STATUS_RATE: wholeNumber(1, 10_000, 2),
  DEVICE_STATUS_BURST: wholeNumber(1, 100_000, 10),
  DEVICE_HEARTBEAT_RATE: wholeNumber(1, 10_000, 1),
  DEVICE_HEARTBEAT_BURST: wholeNumber(1, 100_000, 5),
  DEVICE_ACK_RATE: wholeNumber(1, 10_000, 10),
  DEVICE_ACK_BURST: wholeNumber(1, 100_000, 20),
  DEVICE_FLOOD_WINDOW_S: wholeNumber(1, 3600, 30),
  MQTT_FLAP_MAX_CONNECTS: wholeNumber(1, 10_000, 15),
  MQTT_FLAP_WINDOW_S: wholeNumber(1, 86_400, 60),
  MQTT_FLAP_BAN_S: wholeNumber(1, 86_400, 60),
  SCHEDULE_READY_LEAD_MINUTES: wholeNumber(1, 120, 10),
  // At least 1: a missed check at the azaan's own minute would race the transmitter starting it.
  SCHEDULE_GRACE_MINUTES: wholeNumber(1, 120, 5),
  ICECAST_URL: urlWithScheme(['http://', 'https://']),
  ICECAST_ADMIN_URL: urlWithScheme(['http://', 'https://']),
  ICECAST_ADMIN_USER: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^[^:\s]{1,64}$/, 'must be 1 to 64 characters without spaces or colons')), 'admin'),
  ICECAST_ADMIN_PASSWORD: optionalText,
  ICECAST_HOOK_SECRET: optionalText,
  LOG_LEVEL: picklist(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
  LOG_REQUESTS: picklist(['0', '1'] as const, '0'),
  SHUTDOWN_TIMEOUT_S: wholeNumber(1, 600, 10),
  TEST_FAULT: v.optional(v.picklist(['uncaught_exception', 'unhandled_rejection'] as const, 'must be one of uncaught_exception, unhandled_rejection')),
});

function hasScheme(value: string, schemes: string[]): boolean {
  if (!schemes.some((s) => value.toLowerCase().startsWith(s))) return false;
  try {
    new URL(value);
    return true;
  } catch {
    return false;
  }
}

const SECRET_SETTINGS = new Set(['JWT_SECRET', 'SMTP_URL', 'REDIS_URL', 'DATABASE_URL', 'NOTIFY_WEBHOOK_URL', 'ICECAST_ADMIN_URL', 'ICECAST_ADMIN_PASSWORD', 'ICECAST_HOOK_SECRET']);

/** Every environment setting the service reads (docs/settings.md lists each). */
export const SETTING_NAMES: readonly string[] = Object.keys(EnvSchema.entries);

/** Reads every setting from the environment. A bad one yields one line naming it and what is wrong. */
export function loadConfig(env: Record<string, string | undefined>): ConfigResult {
  const parsed = v.safeParse(EnvSchema, pickKnown(env));
  if (!parsed.success) {
    const issue = parsed.issues[0];
    const key = issue.path?.[0]?.key;
    const name = typeof key === 'string' ? key : 'settings';
    const shown = SECRET_SETTINGS.has(name) || issue.input === undefined ? '' : ` (got ${JSON.stringify(issue.input)})`;
    return { ok: false, error: `${name}: ${issue.message}${shown}` };
  }
  return checkCombinations(parsed.output);
}

/** The settings file `npm start` and `minaret` read from the working folder when it is there (docs/operator.md, "A first trial"). */
export const LOCAL_ENV_FILE = 'minaret.env';

/**
 * The environment with a settings file under it: MINARET_ENV_FILE (which must exist), else ./minaret.env when the
 * working folder holds one. A variable already in the environment wins over the file, as systemd's Environment=
 * lines and `docker run -e` do; the file is read as a shell would source it (Node's util.parseEnv).
 */
export function withEnvFile(env: Record<string, string | undefined>, cwd: string):
  | { ok: true; env: Record<string, string | undefined>; file: string | null }
  | { ok: false; error: string } {
  const named = env.MINARET_ENV_FILE?.trim();
  const file = named ? path.resolve(cwd, named) : path.join(cwd, LOCAL_ENV_FILE);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    if (!named && (err as NodeJS.ErrnoException).code === 'ENOENT') return { ok: true, env, file: null };
    return { ok: false, error: `${named ? 'MINARET_ENV_FILE' : LOCAL_ENV_FILE}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})` };
  }
  return { ok: true, env: { ...util.parseEnv(text), ...env }, file };
}

function pickKnown(env: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of Object.keys(EnvSchema.entries)) {
    const value = env[key];
    if (value !== undefined && !(value === '' && key !== 'JWT_SECRET')) out[key] = value;
  }
  return out;
}

function checkCombinations(e: v.InferOutput<typeof EnvSchema>): ConfigResult {
  const warnings: string[] = [];
  const production = e.NODE_ENV === 'production';
  const minCost = e.NODE_ENV === 'test' ? 4 : 10;
  if (e.BCRYPT_COST < minCost || e.BCRYPT_COST > 14) {
    return { ok: false, error: `BCRYPT_COST: must be a whole number from ${minCost} to 14 (got ${e.BCRYPT_COST})` };
  }
  if (e.JWT_SECRET !== undefined && Buffer.byteLength(e.JWT_SECRET) < 32) {
    return { ok: false, error: 'JWT_SECRET: must be at least 32 bytes long' };
  }
  if (production && e.JWT_SECRET === undefined) {
    return { ok: false, error: 'JWT_SECRET: required when NODE_ENV=production (at least 32 bytes)' };
  }
  if (production && e.NOTIFY_TRANSPORT === 'console') {
    return { ok: false, error: 'NOTIFY_TRANSPORT: console prints codes to the log and is refused when NODE_ENV=production; use smtp or webhook' };
  }
  if (e.NOTIFY_TRANSPORT === 'webhook' && !e.NOTIFY_WEBHOOK_URL) {
    return { ok: false, error: 'NOTIFY_WEBHOOK_URL: required when NOTIFY_TRANSPORT=webhook' };
  }
  if (e.NOTIFY_TRANSPORT === 'smtp' && (!e.SMTP_URL || !e.SMTP_FROM)) {
    return { ok: false, error: `${e.SMTP_URL ? 'SMTP_FROM' : 'SMTP_URL'}: required when NOTIFY_TRANSPORT=smtp` };
  }
  const trustProxy = parseTrustProxy(e.TRUST_PROXY);
  if (!trustProxy.ok) return { ok: false, error: `TRUST_PROXY: ${trustProxy.error} (got ${JSON.stringify(e.TRUST_PROXY)})` };
  // Node refuses a headers timeout longer than the request timeout: the headers are part of the request.
  if (e.HTTP_HEADERS_TIMEOUT_S > e.HTTP_REQUEST_TIMEOUT_S) {
    return { ok: false, error: `HTTP_HEADERS_TIMEOUT_S: must not exceed HTTP_REQUEST_TIMEOUT_S (${e.HTTP_REQUEST_TIMEOUT_S})` };
  }
  const tlsProblem = checkTls(e, warnings);
  if (tlsProblem) return { ok: false, error: tlsProblem };
  const icecast = checkIcecast(e);
  if (!icecast.ok) return { ok: false, error: icecast.error };
  if (e.TEST_FAULT !== undefined && e.NODE_ENV !== 'test') {
    return { ok: false, error: 'TEST_FAULT: honoured only when NODE_ENV=test; unset it' };
  }
  const resetHours = Math.min(168, Math.max(1, e.PASSWORD_RESET_TTL_HOURS));
  if (resetHours !== e.PASSWORD_RESET_TTL_HOURS) {
    warnings.push(`PASSWORD_RESET_TTL_HOURS: ${e.PASSWORD_RESET_TTL_HOURS} is outside 1..168; using ${resetHours}`);
  }
  if (e.CONSOLE_SESSION_IDLE_HOURS > e.CONSOLE_SESSION_MAX_DAYS * 24) {
    return { ok: false, error: `CONSOLE_SESSION_IDLE_HOURS: must not exceed CONSOLE_SESSION_MAX_DAYS (${e.CONSOLE_SESSION_MAX_DAYS}) x 24` };
  }
  const firmwareKey = e.FIRMWARE_PUBLIC_KEY === undefined ? null : parseFirmwareKey(e.FIRMWARE_PUBLIC_KEY);
  if (firmwareKey && !firmwareKey.ok) return { ok: false, error: `FIRMWARE_PUBLIC_KEY: ${firmwareKey.message ?? 'not an Ed25519 public key'}` };
  const memory = e.DATABASE_PATH === ':memory:';
  return {
    ok: true,
    warnings,
    config: {
      nodeEnv: e.NODE_ENV,
      httpPort: e.HTTP_PORT,
      mqttPort: e.MQTT_PORT,
      mqttsPort: e.MQTTS_PORT,
      tlsCertFile: e.TLS_CERT_FILE,
      tlsKeyFile: e.TLS_KEY_FILE,
      host: e.HOST,
      publicUrl: e.PUBLIC_URL ?? null,
      databasePath: e.DATABASE_PATH,
      databaseMaxBytes: e.DATABASE_MAX_BYTES,
      postgres: e.DATABASE_URL ? { url: e.DATABASE_URL, poolSize: e.DATABASE_POOL_SIZE, statementTimeoutMs: e.DATABASE_STATEMENT_TIMEOUT_MS } : null,
      dataDir: e.DATA_DIR ?? (memory ? 'data' : path.dirname(e.DATABASE_PATH)),
      consoleDir: e.CONSOLE_DIR === 'off' ? null : path.resolve(e.CONSOLE_DIR),
      jwtSecret: e.JWT_SECRET,
      accessTokenExpireDays: e.ACCESS_TOKEN_EXPIRE_DAYS,
      consoleSessions: {
        idleSeconds: e.CONSOLE_SESSION_IDLE_HOURS * 3600,
        absoluteSeconds: e.CONSOLE_SESSION_MAX_DAYS * 86_400,
        tokenTtlSeconds: e.CONSOLE_TOKEN_TTL_MINUTES * 60,
        maxPerUser: e.CONSOLE_SESSIONS_PER_USER,
      },
      passwordResetTtlHours: resetHours,
      leaseTtlHours: e.LEASE_TTL_HOURS,
      offlineGraceS: e.OFFLINE_GRACE_S,
      notifyTransport: e.NOTIFY_TRANSPORT,
      notifyWebhookUrl: e.NOTIFY_WEBHOOK_URL,
      smtpUrl: e.SMTP_URL,
      smtpFrom: e.SMTP_FROM,
      redisUrl: e.REDIS_URL,
      sharedCacheReloadS: e.SHARED_CACHE_RELOAD_S,
      changeLogKeepS: e.CHANGE_LOG_KEEP_S,
      authRateLimit: e.AUTH_RATE_LIMIT,
      authIdentifierRateLimit: e.AUTH_IDENTIFIER_RATE_LIMIT,
      authMaxWrongGuessesPerHour: e.AUTH_MAX_WRONG_GUESSES_PER_HOUR,
      invitesPerMosquePerHour: e.INVITES_PER_MOSQUE_PER_HOUR,
      invitesPerAddressPerDay: e.INVITES_PER_ADDRESS_PER_DAY,
      pairing: {
        guessesPerPerson: e.PAIRING_GUESSES_PER_PERSON, guessesPerAddress: e.PAIRING_GUESSES_PER_ADDRESS,
        startsPerAddress: e.PAIRING_STARTS_PER_ADDRESS, maxPending: e.PAIRING_MAX_PENDING, pollHoldSeconds: e.PAIRING_POLL_HOLD_S,
      },
      bcryptCost: e.BCRYPT_COST,
      bcryptMaxQueue: e.BCRYPT_MAX_QUEUE,
      trustProxy: trustProxy.value,
      httpHeadersTimeoutS: e.HTTP_HEADERS_TIMEOUT_S,
      httpRequestTimeoutS: e.HTTP_REQUEST_TIMEOUT_S,
      httpKeepAliveTimeoutS: e.HTTP_KEEP_ALIVE_TIMEOUT_S,
      httpMaxConnections: e.HTTP_MAX_CONNECTIONS,
      vapidSubject: e.VAPID_SUBJECT,
      deviceEventsRetentionDays: e.DEVICE_EVENTS_RETENTION_DAYS,
      deviceEventsMaxPerDevice: e.DEVICE_EVENTS_MAX_PER_DEVICE,
      maxPushSubscriptionsPerUser: e.MAX_PUSH_SUBSCRIPTIONS_PER_USER,
      pushConcurrency: e.PUSH_CONCURRENCY,
      maxPlayersPerUser: e.MAX_PLAYERS_PER_USER,
      recordingMaxBytes: e.RECORDING_MAX_BYTES,
      firmware: { publicKey: firmwareKey?.ok ? firmwareKey.value : null, maxBytes: e.FIRMWARE_MAX_BYTES, quietMinutes: e.FIRMWARE_QUIET_MINUTES },
      streamHttpHosts: e.STREAM_HTTP_HOSTS,
      mqtt: {
        maxConnectBytes: e.MQTT_MAX_CONNECT_BYTES,
        maxPacketBytes: e.MQTT_MAX_PACKET_BYTES,
        connectTimeoutS: e.MQTT_CONNECT_TIMEOUT_S,
        maxConnections: e.MQTT_MAX_CONNECTIONS,
        maxHandshakesPerAddress: e.MQTT_MAX_HANDSHAKES_PER_ADDRESS,
        maxQueuedMessages: e.MQTT_MAX_QUEUED_MESSAGES,
      },
      deviceBudgets: {
        status: { perSecond: e.DEVICE_STATUS_RATE, burst: e.DEVICE_STATUS_BURST },
        heartbeat: { perSecond: e.DEVICE_HEARTBEAT_RATE, burst: e.DEVICE_HEARTBEAT_BURST },
        ack: { perSecond: e.DEVICE_ACK_RATE, burst: e.DEVICE_ACK_BURST },
      },
      deviceFloodWindowS: e.DEVICE_FLOOD_WINDOW_S,
      mqttFlap: { maxConnects: e.MQTT_FLAP_MAX_CONNECTS, windowS: e.MQTT_FLAP_WINDOW_S, banS: e.MQTT_FLAP_BAN_S },
      scheduleReadyLeadMinutes: e.SCHEDULE_READY_LEAD_MINUTES,
      scheduleGraceMinutes: e.SCHEDULE_GRACE_MINUTES,
      icecast: icecast.value,
      logLevel: e.LOG_LEVEL,
      logRequests: e.LOG_REQUESTS === '1',
      shutdownTimeoutS: e.SHUTDOWN_TIMEOUT_S,
      testFault: e.TEST_FAULT,
    },
  };
}

/** MQTTS_PORT needs both files; whether they hold a usable certificate and key is checked at start. */
function checkTls(e: v.InferOutput<typeof EnvSchema>, warnings: string[]): string | null {
  if (e.MQTTS_PORT === undefined) {
    if (e.TLS_CERT_FILE || e.TLS_KEY_FILE) warnings.push('TLS_CERT_FILE/TLS_KEY_FILE are set but MQTTS_PORT is not: MQTT over TLS is off');
    return null;
  }
  if (!e.TLS_CERT_FILE) return 'TLS_CERT_FILE: required when MQTTS_PORT is set';
  if (!e.TLS_KEY_FILE) return 'TLS_KEY_FILE: required when MQTTS_PORT is set';
  if (e.MQTTS_PORT !== 0 && e.MQTTS_PORT === e.MQTT_PORT) return `MQTTS_PORT: must differ from MQTT_PORT (both ${e.MQTT_PORT})`;
  return null;
}

const withoutSlash = (url: string) => url.replace(/\/+$/, '');

/**
 * ICECAST_URL switches the gate on; then the admin password (to cut a revoked listener, docs/operator.md#audio-icecast)
 * and a hook secret of at least 32 bytes (every callback carries it) are required. Without it the ICECAST_* rest is unused.
 */
function checkIcecast(e: v.InferOutput<typeof EnvSchema>): { ok: true; value: IcecastSettings | null } | { ok: false; error: string } {
  if (!e.ICECAST_URL) return { ok: true, value: null };
  if (!/^https?:\/\/[^/?#]+(\/[^?#]*)?$/i.test(e.ICECAST_URL)) return { ok: false, error: `ICECAST_URL: must be an http or https URL without query, like https://audio.example.org (got ${JSON.stringify(e.ICECAST_URL)})` };
  if (!e.ICECAST_ADMIN_PASSWORD) return { ok: false, error: 'ICECAST_ADMIN_PASSWORD: required when ICECAST_URL is set (Minaret removes revoked listeners through the admin API)' };
  if (!e.ICECAST_HOOK_SECRET) return { ok: false, error: 'ICECAST_HOOK_SECRET: required when ICECAST_URL is set (at least 32 bytes; every callback must carry it)' };
  if (Buffer.byteLength(e.ICECAST_HOOK_SECRET) < 32) return { ok: false, error: 'ICECAST_HOOK_SECRET: must be at least 32 bytes long' };
  // Icecast's url auth options are XML attribute values and an HTTP basic password: no quotes, angle brackets or spaces.
  if (!/^[A-Za-z0-9._~+\/=-]+$/.test(e.ICECAST_HOOK_SECRET)) return { ok: false, error: 'ICECAST_HOOK_SECRET: use letters, digits and . _ ~ + / = - only (e.g. openssl rand -base64 48)' };
  const url = withoutSlash(e.ICECAST_URL);
  return {
    ok: true,
    value: { url, adminUrl: withoutSlash(e.ICECAST_ADMIN_URL ?? url), adminUser: e.ICECAST_ADMIN_USER, adminPassword: e.ICECAST_ADMIN_PASSWORD, hookSecret: e.ICECAST_HOOK_SECRET },
  };
}
