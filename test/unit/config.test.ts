import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig, projectPath, SETTING_NAMES, withEnvFile } from '../../src/platform/config.ts';
import { shownStore, startupSummary, type StartupFacts } from '../../src/platform/log.ts';

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

test('push and player limits default to 10 subscriptions, 8 sends at once and 20 players per user', () => {
  const r = loadConfig({});
  assert.ok(r.ok);
  assert.deepEqual([r.config.maxPushSubscriptionsPerUser, r.config.pushConcurrency, r.config.maxPlayersPerUser], [10, 8, 20]);
});

test('console sessions default to 7 days idle, 30 days in all, 15-minute tokens and 10 per person', () => {
  const r = loadConfig({});
  assert.ok(r.ok);
  assert.deepEqual(r.config.consoleSessions, { idleSeconds: 7 * 86_400, absoluteSeconds: 30 * 86_400, tokenTtlSeconds: 15 * 60, maxPerUser: 10 });
});

const refused: Array<[string, Record<string, string>, RegExp]> = [
  ['a console session idle longer than its whole life', { CONSOLE_SESSION_IDLE_HOURS: '25', CONSOLE_SESSION_MAX_DAYS: '1' }, /^CONSOLE_SESSION_IDLE_HOURS: must not exceed CONSOLE_SESSION_MAX_DAYS/],
  ['console tokens of one minute (the page refreshes a minute early)', { CONSOLE_TOKEN_TTL_MINUTES: '1' }, /^CONSOLE_TOKEN_TTL_MINUTES: must be a whole number from 2 to 60/],
  ['no console sessions per person', { CONSOLE_SESSIONS_PER_USER: '0' }, /^CONSOLE_SESSIONS_PER_USER: /],
  ['a port that is not a number', { HTTP_PORT: 'abc' }, /^HTTP_PORT: .*whole number.*"abc"/],
  ['a port above 65535', { MQTT_PORT: '70000' }, /^MQTT_PORT: /],
  ['zero token days', { ACCESS_TOKEN_EXPIRE_DAYS: '0' }, /^ACCESS_TOKEN_EXPIRE_DAYS: /],
  ['zero push subscriptions per user', { MAX_PUSH_SUBSCRIPTIONS_PER_USER: '0' }, /^MAX_PUSH_SUBSCRIPTIONS_PER_USER: .*1 to 1000/],
  ['a push concurrency that is not a number', { PUSH_CONCURRENCY: 'many' }, /^PUSH_CONCURRENCY: .*whole number/],
  ['zero players per user', { MAX_PLAYERS_PER_USER: '0' }, /^MAX_PLAYERS_PER_USER: /],
  ['a grace of zero minutes (at least 1)', { SCHEDULE_GRACE_MINUTES: '0' }, /^SCHEDULE_GRACE_MINUTES: must be a whole number from 1 to 120/],
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
  ['a database cap that is not a size', { DATABASE_MAX_BYTES: 'lots' }, /^DATABASE_MAX_BYTES: must be a number of bytes.*"lots"/],
  ['a database cap under 64K', { DATABASE_MAX_BYTES: '4096' }, /^DATABASE_MAX_BYTES: .*at least 64K/],
  ['a database cap in an unknown unit', { DATABASE_MAX_BYTES: '5T' }, /^DATABASE_MAX_BYTES: /],
  ['a recording cap above 20M', { RECORDING_MAX_BYTES: '21M' }, /^RECORDING_MAX_BYTES: must be a number of bytes, optionally with K or M \(5M, 2048K\), from 64K to 20M/],
  ['a recording cap in G', { RECORDING_MAX_BYTES: '1G' }, /^RECORDING_MAX_BYTES: /],
  ['a firmware cap above 256M', { FIRMWARE_MAX_BYTES: '257M' }, /^FIRMWARE_MAX_BYTES: must be a number of bytes, optionally with K or M \(1536K, 32M\), from 64K to 256M/],
  ['a firmware cap under 64K', { FIRMWARE_MAX_BYTES: '65535' }, /^FIRMWARE_MAX_BYTES: .*from 64K/],
  ['a shutdown timeout of zero', { SHUTDOWN_TIMEOUT_S: '0' }, /^SHUTDOWN_TIMEOUT_S: .*1 to 600/],
  ['TEST_FAULT outside tests', { TEST_FAULT: 'uncaught_exception' }, /^TEST_FAULT: honoured only when NODE_ENV=test/],
  ['an unknown TEST_FAULT', { NODE_ENV: 'test', TEST_FAULT: 'meteor' }, /^TEST_FAULT: must be one of/],
  ['an unknown NODE_ENV', { NODE_ENV: 'staging' }, /^NODE_ENV: /],
  ['a PUBLIC_URL that is not http(s)', { PUBLIC_URL: 'ftp://minaret.example.org' }, /^PUBLIC_URL: must be an http or https origin/],
  ['a PUBLIC_URL with a path', { PUBLIC_URL: 'https://minaret.example.org/api/v1' }, /^PUBLIC_URL: must be an http or https origin/],
  ['a CONNECT cap below 1024 bytes', { MQTT_MAX_CONNECT_BYTES: '100' }, /^MQTT_MAX_CONNECT_BYTES: .*1024 to 1048576/],
  ['a packet cap too small for a 4 KiB payload', { MQTT_MAX_PACKET_BYTES: '4096' }, /^MQTT_MAX_PACKET_BYTES: .*5120/],
  ['a packet cap above the MQTT maximum', { MQTT_MAX_PACKET_BYTES: '268435456' }, /^MQTT_MAX_PACKET_BYTES: /],
  ['a zero connect timeout', { MQTT_CONNECT_TIMEOUT_S: '0' }, /^MQTT_CONNECT_TIMEOUT_S: /],
  ['a connection cap that is not a number', { MQTT_MAX_CONNECTIONS: 'lots' }, /^MQTT_MAX_CONNECTIONS: .*"lots"/],
  ['a zero handshake cap', { MQTT_MAX_HANDSHAKES_PER_ADDRESS: '0' }, /^MQTT_MAX_HANDSHAKES_PER_ADDRESS: /],
  ['a zero queue cap', { MQTT_MAX_QUEUED_MESSAGES: '0' }, /^MQTT_MAX_QUEUED_MESSAGES: /],
  ['a status rate of zero', { DEVICE_STATUS_RATE: '0' }, /^DEVICE_STATUS_RATE: .*whole number from 1/],
  ['a fractional heartbeat burst', { DEVICE_HEARTBEAT_BURST: '2.5' }, /^DEVICE_HEARTBEAT_BURST: /],
  ['a flood window of zero', { DEVICE_FLOOD_WINDOW_S: '0' }, /^DEVICE_FLOOD_WINDOW_S: /],
  ['a flap limit that is not a number', { MQTT_FLAP_MAX_CONNECTS: 'many' }, /^MQTT_FLAP_MAX_CONNECTS: .*"many"/],
  ['a negative flap ban', { MQTT_FLAP_BAN_S: '-1' }, /^MQTT_FLAP_BAN_S: /],
];

test('PUBLIC_URL is optional and kept as an origin without a trailing slash', () => {
  const unset = loadConfig({});
  assert.ok(unset.ok && unset.config.publicUrl === null);
  const set = loadConfig({ PUBLIC_URL: 'https://Minaret.Example.org:8443/' });
  assert.ok(set.ok);
  assert.equal(set.config.publicUrl, 'https://minaret.example.org:8443');
});

for (const [what, env, line] of refused) {
  test(`${what} stops the start with one line naming the setting`, () => {
    const r = loadConfig(env);
    assert.equal(r.ok, false);
    if (r.ok) return;
    assert.match(r.error, line);
    assert.ok(!r.error.includes('\n'));
  });
}

test('the upload caps default to 5M and 32M and read K and M as powers of 1024, up to their bounds', () => {
  const defaults = loadConfig({});
  assert.ok(defaults.ok);
  assert.equal(defaults.config.recordingMaxBytes, 5 * 1024 ** 2);
  assert.equal(defaults.config.firmware.maxBytes, 32 * 1024 ** 2);
  const set = loadConfig({ RECORDING_MAX_BYTES: '20M', FIRMWARE_MAX_BYTES: '1536K' });
  assert.ok(set.ok);
  assert.equal(set.config.recordingMaxBytes, 20 * 1024 ** 2);
  assert.equal(set.config.firmware.maxBytes, 1536 * 1024);
  const top = loadConfig({ FIRMWARE_MAX_BYTES: '256MiB', RECORDING_MAX_BYTES: '65536' });
  assert.ok(top.ok);
  assert.equal(top.config.firmware.maxBytes, 256 * 1024 ** 2);
  assert.equal(top.config.recordingMaxBytes, 64 * 1024);
});

test('the MQTT limits default to the values docs/settings.md lists', () => {
  const r = loadConfig({});
  assert.ok(r.ok);
  assert.deepEqual(r.config.mqtt, {
    maxConnectBytes: 8192, maxPacketBytes: 16_384, connectTimeoutS: 10, maxConnections: 20_000, maxHandshakesPerAddress: 50, maxQueuedMessages: 100,
  });
});

test('the error line never shows a secret value', () => {
  const r = loadConfig({ JWT_SECRET: 'tiny-secret' });
  assert.ok(!r.ok && !r.error.includes('tiny-secret'));
  const redis = loadConfig({ REDIS_URL: 'http://user:hunter2@host' });
  assert.ok(!redis.ok && !redis.error.includes('hunter2'));
  const database = loadConfig({ DATABASE_URL: 'mysql://minaret:hunter3@db.example:3306/minaret' });
  assert.ok(!database.ok && database.error.startsWith('DATABASE_URL: ') && !database.error.includes('hunter3'), database.ok ? '' : database.error);
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

test('device budgets and flapping default to the issue\'s figures and take their settings', () => {
  const d = loadConfig({});
  assert.ok(d.ok);
  assert.deepEqual(d.config.deviceBudgets, { status: { perSecond: 2, burst: 10 }, heartbeat: { perSecond: 1, burst: 5 }, ack: { perSecond: 10, burst: 20 } });
  assert.equal(d.config.deviceFloodWindowS, 30);
  assert.deepEqual(d.config.mqttFlap, { maxConnects: 15, windowS: 60, banS: 60 });
  const r = loadConfig({ DEVICE_STATUS_RATE: '4', DEVICE_ACK_BURST: '50', DEVICE_FLOOD_WINDOW_S: '10', MQTT_FLAP_MAX_CONNECTS: '5', MQTT_FLAP_WINDOW_S: '30', MQTT_FLAP_BAN_S: '300' });
  assert.ok(r.ok);
  assert.deepEqual([r.config.deviceBudgets.status, r.config.deviceBudgets.ack], [{ perSecond: 4, burst: 10 }, { perSecond: 10, burst: 50 }]);
  assert.equal(r.config.deviceFloodWindowS, 10);
  assert.deepEqual(r.config.mqttFlap, { maxConnects: 5, windowS: 30, banS: 300 });
});

test('DATABASE_MAX_BYTES takes bytes or K, M, G (powers of 1024); unset means no cap; SHUTDOWN_TIMEOUT_S defaults to 10', () => {
  const size = (value: string | undefined) => {
    const r = loadConfig(value === undefined ? {} : { DATABASE_MAX_BYTES: value });
    assert.ok(r.ok, value);
    return r.config.databaseMaxBytes;
  };
  assert.equal(size(undefined), undefined);
  assert.equal(size('65536'), 65536);
  assert.equal(size('512K'), 512 * 1024);
  assert.equal(size('64m'), 64 * 1024 ** 2);
  assert.equal(size('2GiB'), 2 * 1024 ** 3);
  assert.equal(size(' 8 MB '), 8 * 1024 ** 2);
  const r = loadConfig({});
  assert.ok(r.ok);
  assert.equal(r.config.shutdownTimeoutS, 10);
  assert.equal(r.config.testFault, undefined);
});

test('docs/settings.md documents every setting the service reads', () => {
  const doc = fs.readFileSync(projectPath('docs/settings.md'), 'utf8');
  // A row's first cell names one setting or several (`TLS_CERT_FILE`, `TLS_KEY_FILE`).
  const firstCells = [...doc.matchAll(/^\|([^|]+)\|/gm)].map((m) => m[1]!);
  const rows = new Set(firstCells.flatMap((cell) => [...cell.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1])));
  assert.ok(SETTING_NAMES.length > 50, 'the settings are read from the schema');
  assert.deepEqual(SETTING_NAMES.filter((name) => !rows.has(name)), []);
});

test('LOG_REQUESTS is off unless 1, and refuses anything but 0 or 1', () => {
  const off = loadConfig({});
  const on = loadConfig({ LOG_REQUESTS: '1' });
  assert.ok(off.ok && on.ok);
  assert.deepEqual([off.config.logRequests, on.config.logRequests], [false, true]);
  const bad = loadConfig({ LOG_REQUESTS: 'yes' });
  assert.ok(!bad.ok && bad.error.startsWith('LOG_REQUESTS:'));
});

/** docs/operator.md, "Reading the log": the block a person at a terminal reads first. */
const FIRST_START: StartupFacts = {
  consoleUrl: 'http://127.0.0.1:8080', setupUrl: 'http://127.0.0.1:8080/setup#token=abc', httpPort: 8080, mqttPort: 1883,
  mqttsPort: null, store: 'SQLite data/minaret.db', audioUrl: null, notifyTransport: 'console',
};

test('the first start names the console, the setup link, the ports, the store, the audio and where codes go', () => {
  const block = startupSummary(FIRST_START);
  for (const part of ['http://127.0.0.1:8080/', 'http://127.0.0.1:8080/setup#token=abc', 'port 8080', 'port 1883', 'SQLite data/minaret.db', 'Audio', 'off', 'NOTIFY_TRANSPORT=console']) {
    assert.ok(block.includes(part), `${part} in\n${block}`);
  }
});

test('once a superadmin exists there is no setup line; MQTTS, Icecast and smtp are named when on', () => {
  const block = startupSummary({ ...FIRST_START, setupUrl: null, mqttsPort: 8883, audioUrl: 'https://audio.example.org', notifyTransport: 'smtp' });
  assert.ok(!block.includes('Set up'));
  assert.ok(block.includes('MQTT over TLS on port 8883'));
  assert.ok(block.includes('Icecast at https://audio.example.org'));
  assert.ok(block.includes('sent by smtp'));
});

test('a PostgreSQL store is shown without its password', () => {
  assert.equal(shownStore('data/minaret.db', null), 'SQLite data/minaret.db');
  const shown = shownStore('ignored', 'postgres://minaret:s3cret@db.example.org:5432/minaret');
  assert.ok(!shown.includes('s3cret'), shown);
  assert.ok(shown.includes('db.example.org:5432/minaret'));
});

test('./minaret.env fills what the environment does not set; the environment wins; none there is no error', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-env-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  assert.deepEqual(withEnvFile({ HTTP_PORT: '1' }, dir), { ok: true, env: { HTTP_PORT: '1' }, file: null });
  fs.writeFileSync(path.join(dir, 'minaret.env'), '# a trial\nHTTP_PORT=9090\nMQTT_PORT=2883\nSMTP_FROM="Minaret <m@example.org>"\n');
  const read = withEnvFile({ MQTT_PORT: '1884' }, dir);
  assert.ok(read.ok);
  assert.equal(read.file, path.join(dir, 'minaret.env'));
  assert.deepEqual([read.env.HTTP_PORT, read.env.MQTT_PORT, read.env.SMTP_FROM], ['9090', '1884', 'Minaret <m@example.org>']);
  const loaded = loadConfig(read.env);
  assert.ok(loaded.ok && loaded.config.httpPort === 9090 && loaded.config.mqttPort === 1884);
});

test('MINARET_ENV_FILE names the file instead, relative to the working folder, and must exist', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-env-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.writeFileSync(path.join(dir, 'minaret.env'), 'HTTP_PORT=9090\n');
  fs.writeFileSync(path.join(dir, 'other.env'), 'HTTP_PORT=7070\n');
  const named = withEnvFile({ MINARET_ENV_FILE: 'other.env' }, dir);
  assert.ok(named.ok && named.env.HTTP_PORT === '7070');
  const missing = withEnvFile({ MINARET_ENV_FILE: 'nowhere.env' }, dir);
  assert.ok(!missing.ok && missing.error.startsWith('MINARET_ENV_FILE: cannot read'));
});
