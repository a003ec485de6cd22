import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/platform/config.ts';

const SECRET = 'x'.repeat(32);

test('with no settings every default of the contract applies', () => {
  const r = loadConfig({});
  assert.ok(r.ok);
  assert.deepEqual(
    {
      httpPort: r.config.httpPort, mqttPort: r.config.mqttPort, host: r.config.host, databasePath: r.config.databasePath,
      dataDir: r.config.dataDir, days: r.config.accessTokenExpireDays, reset: r.config.passwordResetTtlHours,
      lease: r.config.leaseTtlHours, transport: r.config.notifyTransport, redis: r.config.redisUrl,
      rate: r.config.authRateLimit, cost: r.config.bcryptCost, level: r.config.logLevel, jwt: r.config.jwtSecret,
    },
    {
      httpPort: 8080, mqttPort: 1883, host: '0.0.0.0', databasePath: 'data/minaret.db', dataDir: 'data', days: 7, reset: 24,
      lease: 24, transport: 'console', redis: undefined, rate: 30, cost: 11, level: 'info', jwt: undefined,
    },
  );
  assert.deepEqual(r.warnings, []);
  assert.deepEqual([r.config.scheduleReadyLeadMinutes, r.config.scheduleGraceMinutes], [10, 5]);
});

const refused: Array<[string, Record<string, string>, RegExp]> = [
  ['a port that is not a number', { HTTP_PORT: 'abc' }, /^HTTP_PORT: .*whole number.*"abc"/],
  ['a port above 65535', { MQTT_PORT: '70000' }, /^MQTT_PORT: /],
  ['zero token days', { ACCESS_TOKEN_EXPIRE_DAYS: '0' }, /^ACCESS_TOKEN_EXPIRE_DAYS: /],
  ['a grace of zero minutes (issue 11: at least 1)', { SCHEDULE_GRACE_MINUTES: '0' }, /^SCHEDULE_GRACE_MINUTES: must be a whole number from 1 to 120/],
  ['a lead that is not a number', { SCHEDULE_READY_LEAD_MINUTES: 'ten' }, /^SCHEDULE_READY_LEAD_MINUTES: /],
  ['an unknown transport', { NOTIFY_TRANSPORT: 'pigeon' }, /^NOTIFY_TRANSPORT: must be one of console, smtp, webhook/],
  ['webhook without its URL', { NOTIFY_TRANSPORT: 'webhook' }, /^NOTIFY_WEBHOOK_URL: required/],
  ['smtp without its URL', { NOTIFY_TRANSPORT: 'smtp', SMTP_FROM: 'a@b.cd' }, /^SMTP_URL: required/],
  ['smtp without a sender', { NOTIFY_TRANSPORT: 'smtp', SMTP_URL: 'smtp://127.0.0.1:25' }, /^SMTP_FROM: required/],
  ['a webhook URL that is not http', { NOTIFY_TRANSPORT: 'webhook', NOTIFY_WEBHOOK_URL: 'ftp://x' }, /^NOTIFY_WEBHOOK_URL: must be a URL/],
  ['a REDIS_URL that is not redis://', { REDIS_URL: 'http://127.0.0.1' }, /^REDIS_URL: must be a URL/],
  ['a bcrypt cost below 10 outside tests', { BCRYPT_COST: '4' }, /^BCRYPT_COST: .*10 to 14/],
  ['a bcrypt cost above 14', { BCRYPT_COST: '15', NODE_ENV: 'test' }, /^BCRYPT_COST: .*4 to 14/],
  ['a short JWT secret', { JWT_SECRET: 'short' }, /^JWT_SECRET: must be at least 32 bytes/],
  ['production without a JWT secret', { NODE_ENV: 'production', NOTIFY_TRANSPORT: 'webhook', NOTIFY_WEBHOOK_URL: 'https://h/x' }, /^JWT_SECRET: required when NODE_ENV=production/],
  ['the console transport in production', { NODE_ENV: 'production', JWT_SECRET: SECRET }, /^NOTIFY_TRANSPORT: console .*refused/],
  ['an unknown log level', { LOG_LEVEL: 'loud' }, /^LOG_LEVEL: /],
  ['an unknown NODE_ENV', { NODE_ENV: 'staging' }, /^NODE_ENV: /],
];

for (const [what, env, line] of refused) {
  test(`${what} stops the start with one line naming the setting`, () => {
    const r = loadConfig(env);
    assert.equal(r.ok, false);
    if (r.ok) return;
    assert.match(r.error, line);
    assert.ok(!r.error.includes('\n'));
  });
}

test('the error line never shows a secret value', () => {
  const r = loadConfig({ JWT_SECRET: 'tiny-secret' });
  assert.ok(!r.ok && !r.error.includes('tiny-secret'));
  const redis = loadConfig({ REDIS_URL: 'http://user:hunter2@host' });
  assert.ok(!redis.ok && !redis.error.includes('hunter2'));
});

const clamps: Array<[string, number, boolean]> = [
  ['0', 1, true],
  ['1', 1, false],
  ['24', 24, false],
  ['168', 168, false],
  ['500', 168, true],
];
for (const [given, used, warned] of clamps) {
  test(`PASSWORD_RESET_TTL_HOURS=${given} is used as ${used}${warned ? ' with a warning' : ''}`, () => {
    const r = loadConfig({ PASSWORD_RESET_TTL_HOURS: given });
    assert.ok(r.ok);
    assert.equal(r.config.passwordResetTtlHours, used);
    assert.equal(r.warnings.length, warned ? 1 : 0);
    if (warned) assert.match(r.warnings[0]!, /^PASSWORD_RESET_TTL_HOURS: /);
  });
}

test('the data folder follows DATABASE_PATH unless DATA_DIR is set', () => {
  const a = loadConfig({ DATABASE_PATH: '/var/lib/minaret/db.sqlite' });
  assert.ok(a.ok && a.config.dataDir === '/var/lib/minaret');
  const b = loadConfig({ DATABASE_PATH: '/var/lib/minaret/db.sqlite', DATA_DIR: '/etc/minaret' });
  assert.ok(b.ok && b.config.dataDir === '/etc/minaret');
});

test('a production setup with a strong secret and a webhook starts', () => {
  const r = loadConfig({ NODE_ENV: 'production', JWT_SECRET: SECRET, NOTIFY_TRANSPORT: 'webhook', NOTIFY_WEBHOOK_URL: 'https://hooks.example/x', BCRYPT_COST: '12' });
  assert.ok(r.ok);
  assert.equal(r.config.bcryptCost, 12);
});
