import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, type TestContext } from 'node:test';
import { pino } from 'pino';
import { createManualClock, systemClock, type Clock } from '../../src/platform/clock.ts';
import { loadConfig, type Config } from '../../src/platform/config.ts';
import type { OutgoingMessage, Transport } from '../../src/platform/notify.ts';
import { startService, type Service } from '../../src/service.ts';
import type { PushNetwork } from '../../notify/webpush.ts';
import { copyPostgresDatabase, freshPostgresUrl, onPostgres } from './database.ts';

export const TEST_JWT_SECRET = 'test-secret-0123456789-abcdefghijklmnopqrstuvwxyz';

export interface TestService {
  service: Service;
  config: Config;
  url: string;
  dir: string;
  clock: Clock;
  /** Every message the service handed to its transport, in order (empty with useConfiguredTransport). */
  messages: OutgoingMessage[];
  /** Every JSON log line the service wrote. */
  logs: string[];
  http: HttpClient;
}

/**
 * A database and data folder that outlive one service, for a test that restarts it on the same files (or
 * opens the file itself): removed when the test ends.
 */
export function durableFiles(t: TestContext, prefix: string): { dir: string; env: { DATABASE_PATH: string; DATA_DIR: string } } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `minaret-${prefix}-`));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return { dir, env: { DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir } };
}

/**
 * A service on durableFiles that can be stopped and started again on the same files, with the same clock and
 * settings (a restart): `stop` then `start` (something may change the file between them), or `restart`.
 */
export async function restartableService(t: TestContext, prefix: string, opts: { clock: Clock; env?: Record<string, string>; logLevel?: string }) {
  const env = { ...durableFiles(t, prefix).env, ...opts.env };
  const start = () => startTestService(t, { env, clock: opts.clock, logLevel: opts.logLevel ?? 'warn' });
  let ts = await start();
  return {
    env,
    current: () => ts,
    stop: () => ts.service.close(),
    async start(): Promise<TestService> {
      ts = await start();
      return ts;
    },
    async restart(): Promise<TestService> {
      await ts.service.close();
      ts = await start();
      return ts;
    },
  };
}

const worldDirs: string[] = [];
// Registered when a test file loads this module, so it runs at the root, once the file's last test is done.
after(() => {
  for (const dir of worldDirs) fs.rmSync(dir, { recursive: true, force: true });
});

/**
 * A world (people, a mosque, ...) made once per file and copied for each test, for a file whose tests each
 * begin from the same world: the first call runs `build` against a service of its own, closes it and keeps its
 * files (the database and DATA_DIR); every call then starts a service on a fresh copy of them, so each test has
 * the world to itself, as a world built per test gave it, without paying for the sign-ups again. The tokens in
 * the world stay valid in each copy (same JWT_SECRET, the sessions are rows). What the building service sent
 * (`messages`) and logged stays with it. The kept files go when the file's last test has ended.
 */
export function copiedWorld<W>(build: (ts: TestService) => Promise<W>, opts: { env?: Record<string, string>; logLevel?: string } = {}) {
  let made: Promise<{ dir: string; world: W }> | null = null;
  const make = async (t: TestContext) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-world-'));
    worldDirs.push(dir);
    const ts = await startTestService(t, { ...opts, env: { ...opts.env, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir } });
    const world = await build(ts);
    // Closed, so the files are whole (the WAL checkpointed) before they are copied.
    await ts.service.close();
    return { dir, world };
  };
  return async (t: TestContext): Promise<W & { ts: TestService }> => {
    const { dir, world } = await (made ??= make(t));
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-world-copy-'));
    t.after(() => fs.rmSync(copy, { recursive: true, force: true }));
    copyServiceFiles(dir, copy);
    const ts = await startTestService(t, { ...opts, env: { ...opts.env, DATABASE_PATH: path.join(copy, 'minaret.db'), DATA_DIR: copy } });
    return { ...world, ts };
  };
}

/**
 * A stopped service's folder (its minaret.db and DATA_DIR) copied to `to`, for another service to start on
 * from the same state. With MINARET_TEST_STORE=postgres the PostgreSQL database that stands for `from`'s file
 * is copied too, and stands for `to`'s (the service that made it closed, so no connection is left to it).
 */
export function copyServiceFiles(from: string, to: string): void {
  fs.cpSync(from, to, { recursive: true });
  const made = databaseOfFile.get(path.join(from, 'minaret.db'));
  if (onPostgres && made) databaseOfFile.set(path.join(to, 'minaret.db'), made.then(copyPostgresDatabase));
}

/**
 * With MINARET_TEST_STORE=postgres, the PostgreSQL database that stands for the SQLite file at `file`: the same
 * one each time a test names the same DATABASE_PATH (a restart on durableFiles finds its rows again), a fresh
 * one for a file not named before.
 */
const databaseOfFile = new Map<string, Promise<string>>();

/**
 * A whole service on ports 0 with a real SQLite file in a temp folder; closed when the test ends. With
 * MINARET_TEST_STORE=postgres (test/support/database.ts) it runs on a fresh PostgreSQL database instead
 * (DATABASE_URL), unless the test names its own DATABASE_URL; its DATABASE_PATH (named by the test, or the
 * one in `dir`) maps to that database for the whole test file, as a SQLite file outlives its service.
 */
export async function startTestService(
  t: TestContext,
  opts: {
    env?: Record<string, string>;
    clock?: Clock;
    transport?: Transport;
    logLevel?: string;
    /** Use the transport NOTIFY_TRANSPORT names (a real webhook or SMTP peer) instead of the recording one. */
    useConfiguredTransport?: boolean;
    /** How the Web Push sender reaches push services (test/support/push-service.ts). */
    pushNetwork?: PushNetwork;
    /** The broker's liveness heartbeat to other processes (REDIS_URL), short where a test waits on a dead one's wills. */
    brokerHeartbeatMs?: number;
  } = {},
): Promise<TestService> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-test-'));
  const file = opts.env?.DATABASE_PATH ?? path.join(dir, 'minaret.db');
  const postgres = onPostgres && opts.env?.DATABASE_URL === undefined
    ? { DATABASE_URL: await (databaseOfFile.get(file) ?? databaseOfFile.set(file, freshPostgresUrl()).get(file)!) }
    : {};
  const loaded = loadConfig({
    NODE_ENV: 'test',
    HOST: '127.0.0.1',
    HTTP_PORT: '0',
    MQTT_PORT: '0',
    DATABASE_PATH: path.join(dir, 'minaret.db'),
    DATA_DIR: dir,
    JWT_SECRET: TEST_JWT_SECRET,
    BCRYPT_COST: '4',
    AUTH_RATE_LIMIT: '100000',
    AUTH_IDENTIFIER_RATE_LIMIT: '100000',
    LOG_LEVEL: opts.logLevel ?? 'debug',
    ...postgres,
    ...opts.env,
  });
  if (!loaded.ok) throw new Error(loaded.error);
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  const logger = pino({ level: loaded.config.logLevel }, sink);
  const messages: OutgoingMessage[] = [];
  // undefined lets startService build the transport from the config, as the real process does.
  const transport = opts.transport ?? (opts.useConfiguredTransport ? undefined : recordingTransport(messages));
  const clock = opts.clock ?? systemClock;
  const service = await startService(loaded.config, {
    logger, clock, ...(transport ? { transport } : {}), notifyRetryBaseMs: 20,
    ...(opts.pushNetwork && { pushNetwork: opts.pushNetwork }), ...(opts.brokerHeartbeatMs && { brokerHeartbeatMs: opts.brokerHeartbeatMs }),
  });
  t.after(async () => {
    await service.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { service, config: loaded.config, url: service.httpUrl, dir, clock, messages, logs, http: httpClient(service.httpUrl) };
}

export function recordingTransport(into: OutgoingMessage[]): Transport {
  return { name: 'recording', deliver: async (m) => void into.push(m) };
}

export { createManualClock };

export interface HttpResult {
  status: number;
  body: any;
  headers: Headers;
}

export interface HttpClient {
  request(method: string, path: string, opts?: { body?: unknown; token?: string; headers?: Record<string, string>; raw?: string | Uint8Array }): Promise<HttpResult>;
  get(path: string, token?: string): Promise<HttpResult>;
  post(path: string, body?: unknown, token?: string): Promise<HttpResult>;
  patch(path: string, body?: unknown, token?: string): Promise<HttpResult>;
  delete(path: string, token?: string): Promise<HttpResult>;
}

export function httpClient(base: string): HttpClient {
  const request: HttpClient['request'] = async (method, p, opts = {}) => {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    let body: string | Uint8Array | undefined = opts.raw;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(base + p, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      /* not JSON: keep the text */
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };
  return {
    request,
    get: (p, token) => request('GET', p, { token }),
    post: (p, body, token) => request('POST', p, { body: body ?? {}, token }),
    patch: (p, body, token) => request('PATCH', p, { body: body ?? {}, token }),
    delete: (p, token) => request('DELETE', p, { token }),
  };
}

export const sha256 = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
export const hmacHex = (key: string, text: string) => crypto.createHmac('sha256', key).update(text).digest('hex');

/** Signs up a member by email with a password; returns the token response body. */
export async function signupMember(http: HttpClient, email: string, password = 'correct horse battery staple') {
  const res = await http.post('/api/v1/auth/signup', { email, password_hash: sha256(password) });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { access_token: string; user: { id: string; email: string; role: string } };
}
