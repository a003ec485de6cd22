import path from 'node:path';
import * as v from 'valibot';

/** Every setting of the service: one schema, its default, its bound and its error line. */
export interface Config {
  nodeEnv: 'development' | 'production' | 'test';
  httpPort: number;
  mqttPort: number;
  host: string;
  databasePath: string;
  dataDir: string;
  jwtSecret: string | undefined;
  accessTokenExpireDays: number;
  passwordResetTtlHours: number;
  leaseTtlHours: number;
  notifyTransport: 'console' | 'smtp' | 'webhook';
  notifyWebhookUrl: string | undefined;
  smtpUrl: string | undefined;
  smtpFrom: string | undefined;
  redisUrl: string | undefined;
  authRateLimit: number;
  authIdentifierRateLimit: number;
  bcryptCost: number;
  vapidSubject: string;
  deviceEventsRetentionDays: number;
  deviceEventsMaxPerDevice: number;
  scheduleReadyLeadMinutes: number;
  scheduleGraceMinutes: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
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

const picklist = <T extends string>(options: readonly T[], fallback: T) =>
  v.optional(v.picklist(options, `must be one of ${options.join(', ')}`), fallback);

const EnvSchema = v.object({
  NODE_ENV: picklist(['development', 'production', 'test'] as const, 'development'),
  HTTP_PORT: wholeNumber(0, 65535, 8080),
  MQTT_PORT: wholeNumber(0, 65535, 1883),
  HOST: v.optional(v.pipe(v.string(), v.trim(), v.nonEmpty('must not be empty')), '0.0.0.0'),
  DATABASE_PATH: v.optional(v.pipe(v.string(), v.trim(), v.nonEmpty('must not be empty')), 'data/minaret.db'),
  DATA_DIR: optionalText,
  JWT_SECRET: v.optional(v.string()),
  ACCESS_TOKEN_EXPIRE_DAYS: wholeNumber(1, 365, 7),
  // Clamped into 1..168 below (with a warning) rather than refused: the contract says so.
  PASSWORD_RESET_TTL_HOURS: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^\d+$/, 'must be a whole number of hours'), v.transform(Number)), '24'),
  LEASE_TTL_HOURS: wholeNumber(1, 720, 24),
  NOTIFY_TRANSPORT: picklist(['console', 'smtp', 'webhook'] as const, 'console'),
  NOTIFY_WEBHOOK_URL: urlWithScheme(['http://', 'https://']),
  SMTP_URL: urlWithScheme(['smtp://', 'smtps://']),
  SMTP_FROM: optionalText,
  REDIS_URL: urlWithScheme(['redis://', 'rediss://']),
  AUTH_RATE_LIMIT: wholeNumber(1, 1_000_000, 30),
  AUTH_IDENTIFIER_RATE_LIMIT: wholeNumber(1, 1_000_000, 10),
  BCRYPT_COST: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^\d+$/, 'must be a whole number'), v.transform(Number)), '11'),
  VAPID_SUBJECT: v.optional(v.pipe(v.string(), v.trim(), v.regex(/^(mailto:[^\s@]+@[^\s@]+|https:\/\/\S+)$/, 'must be a mailto: address or an https URL')), 'mailto:minaret@localhost'),
  DEVICE_EVENTS_RETENTION_DAYS: wholeNumber(1, 3650, 30),
  DEVICE_EVENTS_MAX_PER_DEVICE: wholeNumber(10, 1_000_000, 1000),
  SCHEDULE_READY_LEAD_MINUTES: wholeNumber(1, 120, 10),
  // At least 1: a missed check at the azaan's own minute would race the transmitter starting it.
  SCHEDULE_GRACE_MINUTES: wholeNumber(1, 120, 5),
  LOG_LEVEL: picklist(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
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

const SECRET_SETTINGS = new Set(['JWT_SECRET', 'SMTP_URL', 'REDIS_URL', 'NOTIFY_WEBHOOK_URL']);

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
  const resetHours = Math.min(168, Math.max(1, e.PASSWORD_RESET_TTL_HOURS));
  if (resetHours !== e.PASSWORD_RESET_TTL_HOURS) {
    warnings.push(`PASSWORD_RESET_TTL_HOURS: ${e.PASSWORD_RESET_TTL_HOURS} is outside 1..168; using ${resetHours}`);
  }
  const memory = e.DATABASE_PATH === ':memory:';
  return {
    ok: true,
    warnings,
    config: {
      nodeEnv: e.NODE_ENV,
      httpPort: e.HTTP_PORT,
      mqttPort: e.MQTT_PORT,
      host: e.HOST,
      databasePath: e.DATABASE_PATH,
      dataDir: e.DATA_DIR ?? (memory ? 'data' : path.dirname(e.DATABASE_PATH)),
      jwtSecret: e.JWT_SECRET,
      accessTokenExpireDays: e.ACCESS_TOKEN_EXPIRE_DAYS,
      passwordResetTtlHours: resetHours,
      leaseTtlHours: e.LEASE_TTL_HOURS,
      notifyTransport: e.NOTIFY_TRANSPORT,
      notifyWebhookUrl: e.NOTIFY_WEBHOOK_URL,
      smtpUrl: e.SMTP_URL,
      smtpFrom: e.SMTP_FROM,
      redisUrl: e.REDIS_URL,
      authRateLimit: e.AUTH_RATE_LIMIT,
      authIdentifierRateLimit: e.AUTH_IDENTIFIER_RATE_LIMIT,
      bcryptCost: e.BCRYPT_COST,
      vapidSubject: e.VAPID_SUBJECT,
      deviceEventsRetentionDays: e.DEVICE_EVENTS_RETENTION_DAYS,
      deviceEventsMaxPerDevice: e.DEVICE_EVENTS_MAX_PER_DEVICE,
      scheduleReadyLeadMinutes: e.SCHEDULE_READY_LEAD_MINUTES,
      scheduleGraceMinutes: e.SCHEDULE_GRACE_MINUTES,
      logLevel: e.LOG_LEVEL,
    },
  };
}
