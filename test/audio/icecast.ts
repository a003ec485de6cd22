import { spawn, execFile, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { TestContext } from 'node:test';
import { ensureBuilt } from '../support/process.ts';
import { startTestService, type TestService } from '../support/service.ts';

/**
 * A real Icecast 2.4 (Debian's icecast2) for the audio tests, configured by `minaret icecast-config` exactly as an
 * operator prints it, and the real ffmpeg as a source client. Icecast refuses to run as root: started as root, the
 * printed config's <changeowner> makes it icecast2 after binding (its files sit in a temp folder icecast2 owns).
 */
const ROOT = projectPath('');
const run = promisify(execFile);
export const HOOK_SECRET = 'test-hook-secret-0123456789abcdefghijklmnop';
export const ICECAST_ADMIN_PASSWORD = 'test-admin-password-0123';

/** One free-port finder for every test (test/support/redis.ts). */
import { freePort } from '../support/redis.ts';
import { projectPath } from '../../src/platform/config.ts';

export { freePort };

export const icecastEnv = (port: number) => ({
  ICECAST_URL: `http://127.0.0.1:${port}`,
  ICECAST_ADMIN_PASSWORD,
  ICECAST_HOOK_SECRET: HOOK_SECRET,
});

/** icecast.xml as `npx minaret icecast-config` prints it for this service (its HTTP port as PUBLIC_URL). */
export async function printedConfig(env: Record<string, string>, args: string[]): Promise<string> {
  ensureBuilt(); // bin/minaret.mjs runs the compiled CLI
  const { stdout } = await run(process.execPath, [path.join(ROOT, 'bin/minaret.mjs'), 'icecast-config', ...args], { env: { ...process.env, ...env }, cwd: ROOT });
  return stdout;
}

export interface RunningIcecast {
  port: number;
  dir: string;
  /** Ends the process (SIGTERM, SIGKILL after 5 s). */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port and config. */
  start(): Promise<void>;
  log(): string;
}

/** Starts icecast2 on `port` with `xml`, waits until its admin API answers; stopped when the test ends. */
export async function startIcecast(t: TestContext, port: number, xml: string): Promise<RunningIcecast> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-icecast-'));
  fs.chmodSync(dir, 0o755);
  const file = path.join(dir, 'icecast.xml');
  fs.writeFileSync(file, xml.replace(/<logdir>[^<]*<\/logdir>/, `<logdir>${dir}</logdir>`));
  if (process.getuid?.() === 0) {
    const { stdout } = await run('id', ['-u', 'icecast2']);
    fs.chownSync(dir, Number(stdout.trim()), 0);
  }
  let child: ChildProcess | null = null;
  let output = '';
  const start = async () => {
    child = spawn('/usr/bin/icecast2', ['-c', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    await waitForAdmin(port, () => child?.exitCode === null, () => output);
  };
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    const c = child;
    child = null;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    c.kill(signal);
    const timer = setTimeout(() => c.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  t.after(async () => {
    await stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  await start();
  return { port, dir, stop, start, log: () => output + readIf(path.join(dir, 'error.log')) };
}

const readIf = (file: string) => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '');

async function waitForAdmin(port: number, alive: () => boolean, output: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (!alive()) throw new Error(`icecast2 exited: ${output()}`);
    const status = await adminStatus(port, '/admin/listmounts').catch(() => 0);
    if (status === 200) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`icecast2 did not answer on ${port}: ${output()}`);
}

export async function adminGet(port: number, p: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${p}`, { headers: { authorization: `Basic ${Buffer.from(`admin:${ICECAST_ADMIN_PASSWORD}`).toString('base64')}` } });
  return { status: res.status, text: await res.text() };
}
const adminStatus = async (port: number, p: string) => (await adminGet(port, p)).status;

/** The IDs /admin/listclients lists on a mount (none when it has no source). */
export async function listedClients(port: number, mount: string): Promise<number[]> {
  const { text } = await adminGet(port, `/admin/listclients?mount=${encodeURIComponent(mount)}`);
  return [...text.matchAll(/<ID>(\d+)<\/ID>/g)].map((m) => Number(m[1]));
}

/** A Minaret service with the audio gate on, and the real Icecast its printed config describes. */
export async function audioWorld(t: TestContext, opts: { env?: Record<string, string> } = {}): Promise<{ ts: TestService; icecast: RunningIcecast; icecastUrl: string }> {
  const port = await freePort();
  const ts = await startTestService(t, { logLevel: 'warn', env: { ...icecastEnv(port), ...opts.env } });
  const xml = await printedConfig({ ...icecastEnv(port), PUBLIC_URL: ts.url, LOG_LEVEL: 'warn' }, ['--port', String(port), '--log-dir', '/tmp']);
  const icecast = await startIcecast(t, port, xml);
  return { ts, icecast, icecastUrl: `http://127.0.0.1:${port}` };
}

export interface Source {
  /** Resolves with ffmpeg's exit code (a refused source exits on its own). */
  exited: Promise<number | null>;
  stop(): Promise<void>;
}

/** ffmpeg as an Icecast source client sending a 440 Hz tone: user = the transmitter's device id (ffmpeg's default would be `source`). */
export function startSource(t: TestContext, port: number, mount: string, user: string, password: string): Source {
  const url = `icecast://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}${mount}`;
  const child = spawn('ffmpeg', ['-nostdin', '-loglevel', 'error', '-re', '-f', 'lavfi', '-i', 'sine=frequency=440', '-c:a', 'libmp3lame', '-b:a', '64k', '-content_type', 'audio/mpeg', '-f', 'mp3', url], { stdio: 'ignore' });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    await exited;
  };
  t.after(stop);
  return { exited, stop };
}

export interface Listening {
  status: number;
  /** Bytes received so far. */
  bytes(): number;
  /** Resolves when the server ends or drops the stream. */
  ended: Promise<void>;
  close(): void;
}

/** Opens a stream address as a player would; resolves with the response status once headers arrive. */
export function listen(t: TestContext, url: string): Promise<Listening> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, (res) => {
      let bytes = 0;
      res.on('data', (d: Buffer) => (bytes += d.length));
      const ended = new Promise<void>((done) => {
        res.once('end', done);
        res.once('close', done);
        res.once('error', () => done());
      });
      const close = () => req.destroy();
      t.after(close);
      resolve({ status: res.statusCode ?? 0, bytes: () => bytes, ended, close });
    });
    req.on('error', reject);
  });
}

export const randomSuffix = () => crypto.randomBytes(3).toString('hex');

/**
 * Icecast's listener_add callback as Icecast sends it (a form POST with the hook secret as HTTP basic) for the
 * stream address a player was given: its status and what the gate answered (`icecast-auth-user` 1 admits,
 * `icecast-auth-message` names the refusal).
 */
export async function listenerAdd(ts: TestService, streamUrl: string, client: number): Promise<{ status: number; admitted: boolean; reason: string | null }> {
  const { pathname, search } = new URL(streamUrl);
  const res = await fetch(`${ts.url}/api/v1/audio/hooks/listener_add`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`icecast:${HOOK_SECRET}`).toString('base64')}` },
    body: new URLSearchParams({ action: 'listener_add', mount: pathname + search, client: String(client), ip: '10.0.0.7' }).toString(),
  });
  await res.arrayBuffer();
  return { status: res.status, admitted: res.headers.get('icecast-auth-user') === '1', reason: res.headers.get('icecast-auth-message') };
}
