import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';

/**
 * A real, ungated Icecast 2.4 (Debian's icecast2) for tests: one temp dir, one free port on 127.0.0.1, and
 * the mounts asked for, each with its own source user and password (Icecast 2.4's per-mount `<username>` and
 * `<password>`), so a transmitter authenticates as it will against the gated server. No URL authentication:
 * listeners are not checked. Icecast refuses to run as root: as root it runs as the `icecast2` user.
 */

export const ICECAST_BIN = '/usr/bin/icecast2';
export const FFMPEG_BIN = '/usr/bin/ffmpeg';
const ICECAST_USER = 'icecast2';

/** Why the audio tests cannot run here, or null when icecast2 and ffmpeg are installed. */
export function audioToolsMissing(): string | null {
  const missing = [ICECAST_BIN, FFMPEG_BIN].filter((bin) => !fs.existsSync(bin));
  if (missing.length) return `needs ${missing.join(' and ')} (Debian packages icecast2 and ffmpeg), not installed here`;
  return null;
}

export interface PlainMount {
  name: string;
  username: string;
  password: string;
}

export interface PlainIcecast {
  url: string;
  port: number;
  /** Mount names with a live source, from /status-json.xsl. */
  liveMounts(): Promise<string[]>;
  stop(): Promise<void>;
  start(): Promise<void>;
}

/** One free-port finder for every test (test/support/redis.ts). */
import { freePort } from '../support/redis.ts';

export { freePort };

const xmlText = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function icecastXml(dir: string, port: number, mounts: PlainMount[]): string {
  const mountXml = mounts
    .map((m) => `  <mount type="normal"><mount-name>${xmlText(m.name)}</mount-name><username>${xmlText(m.username)}</username><password>${xmlText(m.password)}</password></mount>`)
    .join('\n');
  return `<icecast>
  <limits><clients>50</clients><sources>${mounts.length + 1}</sources><source-timeout>5</source-timeout><burst-size>16384</burst-size></limits>
  <authentication>
    <source-password>${Math.random().toString(36).slice(2)}-unused-global</source-password>
    <admin-user>admin</admin-user><admin-password>${Math.random().toString(36).slice(2)}-admin</admin-password>
  </authentication>
  <hostname>127.0.0.1</hostname>
  <listen-socket><port>${port}</port><bind-address>127.0.0.1</bind-address></listen-socket>
${mountXml}
  <fileserve>1</fileserve>
  <paths>
    <basedir>/usr/share/icecast2</basedir><logdir>${dir}</logdir><pidfile>${dir}/icecast.pid</pidfile>
    <webroot>/usr/share/icecast2/web</webroot><adminroot>/usr/share/icecast2/admin</adminroot>
  </paths>
  <logging><accesslog>access.log</accesslog><errorlog>error.log</errorlog><loglevel>3</loglevel></logging>
</icecast>
`;
}

export async function startPlainIcecast(t: TestContext, mounts: PlainMount[]): Promise<PlainIcecast> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-icecast-'));
  const port = await freePort();
  const file = path.join(dir, 'icecast.xml');
  fs.writeFileSync(file, icecastXml(dir, port, mounts), { mode: 0o600 });
  const asRoot = process.getuid?.() === 0;
  if (asRoot) spawnSync('chown', ['-R', ICECAST_USER, dir]);
  const url = `http://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  let output = '';

  // Debian's icecast2 2.4 has been seen to crash with SIGSEGV while it starts (exit 139 through runuser), once in
  // many clean-clone runs, before it reads a request: a fault of the audio server's start, not of what the tests
  // check. Such a start is tried once more; a second crash, or any other exit, fails as before.
  const start = async (): Promise<void> => {
    try {
      await startOnce();
    } catch (err) {
      if (!(err instanceof Error && /^icecast2 exited \(139\)/.test(err.message))) throw err;
      output = '';
      await startOnce();
    }
  };
  const startOnce = async (): Promise<void> => {
    const [cmd, args] = asRoot ? ['runuser', ['-u', ICECAST_USER, '--', ICECAST_BIN, '-c', file]] : [ICECAST_BIN, ['-c', file]];
    // Its own process group: stop() ends runuser and icecast2 together.
    const proc = spawn(cmd as string, args as string[], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    child = proc;
    proc.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`icecast2 exited (${proc.exitCode}): ${output}${readLog(dir)}`);
      if (await statusJson(url, 1).then(() => true, () => false)) return;
      if (Date.now() > deadline) throw new Error(`icecast2 did not answer on ${url} within 10 s: ${output}${readLog(dir)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  const stop = async (): Promise<void> => {
    const proc = child;
    child = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null || proc.pid === undefined) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    try {
      process.kill(-proc.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    await exited;
    // The listening socket is the kernel's to close: wait until the port refuses.
    for (let i = 0; i < 50 && (await fetch(`${url}/status-json.xsl`).then(() => true, () => false)); i++) await new Promise((r) => setTimeout(r, 50));
  };

  const liveMounts = async (): Promise<string[]> => {
    const body = await statusJson(url);
    const source = body.icestats?.source;
    const list = Array.isArray(source) ? source : source ? [source] : [];
    return list.map((s) => new URL(String((s as { listenurl?: unknown }).listenurl)).pathname);
  };

  t.after(async () => {
    await stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  await start();
  return { url, port, liveMounts, stop, start };
}

/**
 * /status-json.xsl as an object. Icecast 2.4 renders it with an XSLT that leaves the first members out while
 * its own stats are still being filled in (just after start: `{"icestats":"server_start":...}`), so an
 * answer that does not parse is asked again.
 */
async function statusJson(url: string, tries = 20): Promise<{ icestats?: { source?: unknown } }> {
  let text = '';
  for (let i = 0; i < tries; i++) {
    if (i > 0) await new Promise((r) => setTimeout(r, 100));
    text = await (await fetch(`${url}/status-json.xsl`)).text();
    try {
      return JSON.parse(text) as { icestats?: { source?: unknown } };
    } catch {
      // asked again
    }
  }
  throw new Error(`/status-json.xsl is not JSON: ${text.slice(0, 500)}`);
}

function readLog(dir: string): string {
  try {
    return `\n${fs.readFileSync(path.join(dir, 'error.log'), 'utf8').slice(-2000)}`;
  } catch {
    return '';
  }
}
