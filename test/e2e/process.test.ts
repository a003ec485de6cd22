import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { httpClient } from '../support/service.ts';
import { FROM_SOURCES, ROOT, baseEnv, listening, logLines, runToExit, startProcess, tempDir, withTimeout, type Run } from '../support/process.ts';

// The real process (src/main.ts, compiled to dist/ as npm start runs it) as an operator runs it: settings from the environment, one stderr line
// on a bad start, JSON logs on stdout, a graceful stop on SIGTERM and SIGINT.

function listenOnLoopback(server: net.Server, port = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
  });
}

/** A port of our own, held open for the test (so the process finds it in use). */
async function occupiedPort(t: TestContext): Promise<number> {
  const server = net.createServer((socket) => socket.destroy());
  const port = await listenOnLoopback(server);
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return port;
}

for (const [setting, value, says] of [
  ['HTTP_PORT', 'abc', /whole number/],
  ['MQTT_PORT', '70000', /whole number from 0 to 65535/],
  ['BCRYPT_COST', '99', /from 4 to 14/],
  ['NOTIFY_TRANSPORT', 'pigeon', /one of console, smtp, webhook/],
  ['LOG_LEVEL', 'loud', /one of/],
] as const) {
  test(`a bad setting ${setting}=${value} exits 1 with one stderr line naming it`, async (t) => {
    const dir = tempDir(t);
    const { code, stderrLines, stdout } = await runToExit(t, baseEnv(dir, { [setting]: value }));
    assert.equal(code, 1);
    assert.equal(stderrLines.length, 1, `one line, got: ${JSON.stringify(stderrLines)}`);
    assert.ok(stderrLines[0]!.includes(setting), stderrLines[0]);
    assert.match(stderrLines[0]!, says);
    assert.ok(!logLines(stdout).some((l) => l.msg === 'minaret is listening'));
    assert.ok(!fs.existsSync(path.join(dir, 'minaret.db')), 'nothing was opened');
  });
}

test('NOTIFY_TRANSPORT=webhook without NOTIFY_WEBHOOK_URL is refused naming the missing setting', async (t) => {
  const { code, stderrLines } = await runToExit(t, baseEnv(tempDir(t), { NOTIFY_TRANSPORT: 'webhook' }));
  assert.equal(code, 1);
  assert.equal(stderrLines.length, 1);
  assert.match(stderrLines[0]!, /NOTIFY_WEBHOOK_URL/);
});

for (const setting of ['HTTP_PORT', 'MQTT_PORT'] as const) {
  test(`${setting} in use: exits 1 with one line naming the setting and the port`, async (t) => {
    const port = await occupiedPort(t);
    const { code, stderrLines, stdout } = await runToExit(t, baseEnv(tempDir(t), { [setting]: String(port) }));
    assert.equal(code, 1);
    assert.equal(stderrLines.length, 1, `one line, got: ${JSON.stringify(stderrLines)}`);
    assert.ok(stderrLines[0]!.includes(setting), stderrLines[0]);
    assert.ok(stderrLines[0]!.includes(String(port)), stderrLines[0]);
    assert.match(stderrLines[0]!, /in use/);
    assert.ok(!logLines(stdout).some((l) => l.msg === 'minaret is listening'));
  });
}

test('production without JWT_SECRET refuses to start, naming JWT_SECRET', async (t) => {
  const env = baseEnv(tempDir(t), { NODE_ENV: 'production', BCRYPT_COST: '10', NOTIFY_TRANSPORT: 'webhook', NOTIFY_WEBHOOK_URL: 'http://127.0.0.1:9/hook' });
  delete (env as Record<string, string | undefined>).JWT_SECRET;
  const { code, stderrLines } = await runToExit(t, env);
  assert.equal(code, 1);
  assert.equal(stderrLines.length, 1);
  assert.match(stderrLines[0]!, /JWT_SECRET/);
});

test('production with a JWT_SECRET under 32 bytes refuses, naming JWT_SECRET and not printing it', async (t) => {
  const short = 'only-31-bytes-of-secret-xxxxxxx';
  assert.equal(Buffer.byteLength(short), 31);
  const env = baseEnv(tempDir(t), {
    NODE_ENV: 'production', BCRYPT_COST: '10', JWT_SECRET: short, NOTIFY_TRANSPORT: 'webhook', NOTIFY_WEBHOOK_URL: 'http://127.0.0.1:9/hook',
  });
  const { code, stderrLines } = await runToExit(t, env);
  assert.equal(code, 1);
  assert.equal(stderrLines.length, 1);
  assert.match(stderrLines[0]!, /JWT_SECRET/);
  assert.match(stderrLines[0]!, /32 bytes/);
  assert.ok(!stderrLines[0]!.includes(short), 'the secret itself is never echoed');
});

test('production with NOTIFY_TRANSPORT=console refuses to start', async (t) => {
  const env = baseEnv(tempDir(t), { NODE_ENV: 'production', BCRYPT_COST: '10', NOTIFY_TRANSPORT: 'console' });
  const { code, stderrLines } = await runToExit(t, env);
  assert.equal(code, 1);
  assert.equal(stderrLines.length, 1);
  assert.match(stderrLines[0]!, /NOTIFY_TRANSPORT/);
  assert.match(stderrLines[0]!, /console/);
});

test('production with no NOTIFY_TRANSPORT (console by default) refuses too', async (t) => {
  const env = baseEnv(tempDir(t), { NODE_ENV: 'production', BCRYPT_COST: '10' });
  const { code, stderrLines } = await runToExit(t, env);
  assert.equal(code, 1);
  assert.equal(stderrLines.length, 1);
  assert.match(stderrLines[0]!, /NOTIFY_TRANSPORT/);
});

/** Starts the process and stops it with `signal`; resolves to the exit and the output. */
async function stopWith(run: Run, signal: NodeJS.Signals) {
  run.child.kill(signal);
  return withTimeout(run.exited, 5_000, `exit after ${signal}`);
}

test('development without JWT_SECRET writes <DATA_DIR>/jwt-secret once and reuses it after a restart', async (t) => {
  const dir = tempDir(t);
  const dataDir = path.join(dir, 'data-folder');
  const env = baseEnv(dir, { NODE_ENV: 'development', BCRYPT_COST: '10', DATA_DIR: dataDir });
  delete (env as Record<string, string | undefined>).JWT_SECRET;
  const secretFile = path.join(dataDir, 'jwt-secret');
  assert.ok(!fs.existsSync(secretFile));

  const first = startProcess(t, env);
  const { http_port } = await listening(first);
  assert.ok(fs.existsSync(secretFile), 'the secret was written to the data folder');
  const secret = fs.readFileSync(secretFile, 'utf8');
  assert.ok(secret.trim().length >= 32);
  assert.equal(fs.statSync(secretFile).mode & 0o777, 0o600, 'only the owner may read it');
  const warned = logLines(first.stdout()).find((l) => String(l.msg).startsWith('JWT_SECRET is not set'));
  assert.equal(warned?.created, true);
  assert.ok(!first.stdout().includes(secret.trim()), 'the secret itself is never logged');

  const api = httpClient(`http://127.0.0.1:${http_port}`);
  const signup = await api.post('/api/v1/auth/signup', { email: 'restart@example.com' });
  assert.equal(signup.status, 201);
  const token = signup.body.access_token as string;
  assert.equal((await api.get('/api/v1/me', token)).status, 200);
  assert.equal((await stopWith(first, 'SIGTERM')).code, 0);

  const second = startProcess(t, env);
  const ports2 = await listening(second);
  assert.equal(fs.readFileSync(secretFile, 'utf8'), secret, 'the same secret, not a new one');
  assert.equal(logLines(second.stdout()).find((l) => String(l.msg).startsWith('JWT_SECRET is not set'))?.created, false);
  const api2 = httpClient(`http://127.0.0.1:${ports2.http_port}`);
  const me = await api2.get('/api/v1/me', token);
  assert.equal(me.status, 200, 'a token from the first run still works');
  assert.equal(me.body.user.email, 'restart@example.com');
  assert.equal((await stopWith(second, 'SIGTERM')).code, 0);
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal}: the process stops gracefully with exit code 0`, async (t) => {
    const run = startProcess(t, baseEnv(tempDir(t)));
    const { http_port, mqtt_port } = await listening(run);
    const api = httpClient(`http://127.0.0.1:${http_port}`);
    assert.equal((await api.get('/healthz')).status, 200);
    // A connection left open (keep-alive) must not hold the stop up.
    const socket = net.connect(mqtt_port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    t.after(() => void socket.destroy());

    const { code, signal: killedBy } = await stopWith(run, signal);
    assert.equal(code, 0);
    assert.equal(killedBy, null);
    const lines = logLines(run.stdout());
    assert.equal(lines.find((l) => l.msg === 'shutting down')?.signal, signal);
    assert.ok(lines.some((l) => l.msg === 'minaret stopped'));
    assert.equal(run.stderr(), '', 'nothing on stderr');
  });
}

test('DATABASE_PATH=:memory: runs a throwaway service: it signs people up and writes no database file', async (t) => {
  const dir = tempDir(t);
  const run = startProcess(t, baseEnv(dir, { DATABASE_PATH: ':memory:' }));
  const { http_port } = await listening(run);
  const api = httpClient(`http://127.0.0.1:${http_port}`);
  assert.deepEqual((await api.get('/healthz')).body, { status: 'ok', db: 'ok', broker: 'ok' });
  const signup = await api.post('/api/v1/auth/signup', { email: 'passing@example.com' });
  assert.equal(signup.status, 201);
  assert.equal((await api.get('/api/v1/me', signup.body.access_token)).status, 200);
  assert.equal((await stopWith(run, 'SIGTERM')).code, 0);
  assert.deepEqual(fs.readdirSync(dir).filter((f) => /\.db|memory/.test(f)), [], 'nothing in the data folder');
  assert.equal(fs.existsSync(path.join(ROOT, ':memory:')), false, 'no file named :memory: where the process ran');
});

test('GET /healthz over the real process: 200 with db and broker ok', async (t) => {
  // From the sources through tsx (npm run dev), where every other test here runs the compiled service (npm start).
  const run = startProcess(t, baseEnv(tempDir(t)), process.execPath, FROM_SOURCES);
  const { http_port } = await listening(run);
  const res = await fetch(`http://127.0.0.1:${http_port}/healthz`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /application\/json/);
  assert.ok(res.headers.get('x-request-id'));
  assert.deepEqual(await res.json(), { status: 'ok', db: 'ok', broker: 'ok' });
  assert.equal((await stopWith(run, 'SIGTERM')).code, 0);
});
