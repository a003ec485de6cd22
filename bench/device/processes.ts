/**
 * The real processes bench/device/real.ts times: the service (bench/device-server.ts, the compiled service as
 * `npm start` runs it), `minaret-device` as bin/minaret-device.mjs runs it from dist/, and ffmpeg as a bare
 * listener; and the two clocks every figure is read from: the moment a process's output line arrived, and the
 * moment the first loud sample reached a WAV file (the device's stand-in for a sound card, device/audio/wav.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import bcrypt from 'bcryptjs';
import { createManualClock } from '../../src/platform/clock.ts';
import { openDatabase } from '../../src/platform/db.ts';
import { identifierHash } from '../../src/platform/identifiers.ts';
import { createUserStore } from '../../src/people/users.ts';
import { sqliteStore } from '../../src/platform/store/store.ts';
import { Child } from '../cluster/processes.ts';
import { ROOT } from '../support.ts';

export const FFMPEG = '/usr/bin/ffmpeg';
const DEVICE_BIN = path.join(ROOT, 'bin/minaret-device.mjs');
/** A sample louder than this is sound, not silence or dither (the tones are near full scale). */
const LOUD = 1000;

const started = new Set<ChildProcess>();
/** Kills every process these helpers started that is still running (the bench's exit, a failure). */
export function killStarted(): void {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
}
function track(c: ChildProcess): ChildProcess {
  started.add(c);
  c.once('exit', () => started.delete(c));
  return c;
}

export const sha = (s: string): string => crypto.createHash('sha256').update(s).digest('hex');
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A process whose stdout lines are kept with the wall-clock ms each arrived at. */
export class Proc {
  readonly lines: Array<{ at: number; text: string }> = [];
  readonly startedAt = Date.now();
  private partial = '';
  private stderr = '';
  private readonly wake = new Set<() => void>();
  readonly exited: Promise<number | null>;

  constructor(readonly name: string, readonly child: ChildProcess) {
    track(child);
    child.stdout!.on('data', (d: Buffer) => {
      const at = Date.now();
      const parts = (this.partial + d.toString('utf8')).split('\n');
      this.partial = parts.pop()!;
      for (const text of parts) this.lines.push({ at, text });
      for (const w of this.wake) w();
    });
    child.stderr!.on('data', (d: Buffer) => void (this.stderr = (this.stderr + d.toString('utf8')).slice(-4000)));
    this.exited = new Promise((r) => child.once('exit', (code) => {
      for (const w of this.wake) w();
      r(code);
    }));
  }

  /** The first line at index >= `from` matching `re`: its match, the ms it arrived and its index. */
  async line(re: RegExp, timeoutMs: number, from = 0): Promise<{ match: RegExpMatchArray; at: number; index: number }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (let i = from; i < this.lines.length; i++) {
        const match = this.lines[i]!.text.match(re);
        if (match) return { match, at: this.lines[i]!.at, index: i };
      }
      if (this.child.exitCode !== null) throw new Error(`${this.name} exited ${this.child.exitCode} before ${re}: ${this.tail()}`);
      if (Date.now() > deadline) throw new Error(`${this.name}: no ${re} within ${timeoutMs} ms: ${this.tail()}`);
      await new Promise<void>((r) => {
        const done = () => (this.wake.delete(done), clearTimeout(timer), r());
        const timer = setTimeout(done, Math.max(1, deadline - Date.now()));
        this.wake.add(done);
      });
    }
  }

  tail(): string {
    return `\n--- stdout\n${this.lines.slice(-15).map((l) => l.text).join('\n')}\n--- stderr\n${this.stderr}`;
  }

  /** SIGTERM (a device goes OFFLINE gracefully), SIGKILL after 5 s; resolves once it is gone. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    const killer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(killer);
  }
}

/** `minaret-device <args>` from dist/, with only PATH and HOME (the state folder) from the environment. */
export function device(name: string, home: string, args: string[], env: Record<string, string> = {}): Proc {
  return new Proc(name, spawn(process.execPath, [DEVICE_BIN, ...args], { cwd: home, env: { PATH: process.env.PATH ?? '', HOME: home, ...env }, stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** Writes the state a pairing stores (device/state/store.ts) for a device registered over the API. */
export function writeState(dir: string, server: string, reg: { device: unknown; credentials: unknown }): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  fs.writeFileSync(path.join(dir, 'device.json'), JSON.stringify({ server, device: reg.device, credentials: reg.credentials }), { mode: 0o600 });
}

/**
 * Wall-clock ms at which a sample louder than LOUD first appeared in `file` beyond byte `from` of its data,
 * read every 10 ms as it grows (the writer rewrites its header after each write, so it is whole at any moment).
 */
export async function firstLoud(file: string, from: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let at = 44 + from;
  while (Date.now() < deadline) {
    const now = Date.now();
    const size = fs.existsSync(file) ? fs.statSync(file).size : 0;
    if (size > at + 1) {
      const fd = fs.openSync(file, 'r');
      const buf = Buffer.alloc((size - at) & ~1);
      fs.readSync(fd, buf, 0, buf.length, at);
      fs.closeSync(fd);
      for (let i = 0; i < buf.length; i += 2) if (Math.abs(buf.readInt16LE(i)) > LOUD) return now;
      at += buf.length;
    }
    await sleep(10);
  }
  throw new Error(`no sound in ${file} within ${timeoutMs} ms`);
}

/** Bytes of audio data in a device's WAV so far (where the next round's sound will be looked for). */
export const wavDataBytes = (file: string): number => (fs.existsSync(file) ? Math.max(0, fs.statSync(file).size - 44) : 0);

/**
 * The baseline listener: ffmpeg decoding `input` (a URL or a file) to PCM with the input options the device's
 * player gives it (device/audio/player.ts); ms from its spawn to its first loud sample.
 */
export async function ffmpegFirstSample(inputArgs: string[], input: string, timeoutMs = 15_000): Promise<number> {
  const t0 = Date.now();
  const child = track(spawn(FFMPEG, ['-nostdin', '-loglevel', 'error', ...inputArgs, '-i', input, '-f', 's16le', '-ac', '1', '-ar', '22050', '-'], { stdio: ['ignore', 'pipe', 'ignore'] }));
  try {
    return await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`ffmpeg: no sound from ${input} within ${timeoutMs} ms`)), timeoutMs);
      let odd: Buffer = Buffer.alloc(0);
      child.stdout!.on('data', (d: Buffer) => {
        const buf = Buffer.concat([odd, d]);
        const whole = buf.length & ~1;
        for (let i = 0; i < whole; i += 2) {
          if (Math.abs(buf.readInt16LE(i)) > LOUD) {
            clearTimeout(timer);
            return resolve(Date.now() - t0);
          }
        }
        odd = buf.subarray(whole);
      });
      child.once('exit', () => reject(new Error(`ffmpeg exited before any sound from ${input}`)));
    });
  } finally {
    child.kill('SIGKILL');
  }
}

/** The service as a child process (bench/device-server.ts), its one-time codes, and a JSON client for its API. */
export async function startServiceChild(dir: string) {
  const env = {
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir,
    JWT_SECRET: 'bench-devices-real-secret-0123456789-abcdefghijklmnop', BCRYPT_COST: '4', LOG_LEVEL: 'warn',
    // The Icecast of this bench listens on 127.0.0.1 over plain http; rounds pair many players for one member.
    STREAM_HTTP_HOSTS: '127.0.0.1', MAX_PLAYERS_PER_USER: '1000', PAIRING_STARTS_PER_ADDRESS: '10000', AUTH_RATE_LIMIT: '1000000',
  };
  const child = new Child('service', 'device-server.ts', env);
  const otps: Array<{ purpose: string; code: string }> = [];
  child.proc.on('message', (m: { type?: string; purpose?: string; code?: string }) => {
    if (m?.type === 'otp') otps.push({ purpose: String(m.purpose), code: String(m.code) });
  });
  const ready = await child.next('ready');
  const base = String(ready['httpUrl']);
  const api = async (method: string, route: string, body?: unknown, token?: string): Promise<any> => {
    const res = await fetch(`${base}/api/v1${route}`, {
      method, headers: { 'content-type': 'application/json', ...(token && { authorization: `Bearer ${token}` }) },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${method} ${route}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  const otp = async (purpose: string): Promise<string> => {
    for (let i = 0; i < 200; i++) {
      const found = otps.filter((o) => o.purpose === purpose).at(-1);
      if (found) return otps.splice(otps.indexOf(found), 1)[0]!.code;
      await sleep(25);
    }
    throw new Error(`no ${purpose} code from the service`);
  };
  return { child, base, api, otp, pid: child.pid, databasePath: env.DATABASE_PATH };
}
export type ServiceChild = Awaited<ReturnType<typeof startServiceChild>>;

/**
 * A superadmin (made in the store, as the operator's CLI does: no route makes one), a mosque that takes members
 * at once and has a stream address, and a member with a proven address (an unproven account holds no device), signed in.
 */
export async function mosqueAndMember(s: ServiceChild): Promise<{ root: string; member: string; mosqueId: string }> {
  const db = openDatabase(s.databasePath);
  try {
    const users = await createUserStore(sqliteStore(db), createManualClock(Date.now()));
    await users.create({ email: 'root@bench.test', emailHash: identifierHash('root@bench.test'), phone: null, phoneHash: null, passwordBcrypt: bcrypt.hashSync(sha('root password'), 4), role: 'superadmin', proven: { email: true } });
  } finally {
    db.close();
  }
  const step1 = await s.api('POST', '/auth/superadmin-2fa', { identifier_hash: sha('root@bench.test'), password_hash: sha('root password') });
  const code = await s.otp('superadmin_otp');
  const ts = Math.floor(Date.now() / 1000);
  const hmac = crypto.createHmac('sha256', step1.session_token).update(`${code}|${ts}`).digest('hex');
  const root = (await s.api('POST', '/auth/superadmin-2fa/verify', { session_token: step1.session_token, timestamp: ts, hmac })).access_token as string;
  // A player comes ONLINE only once its mosque has a stream to play (else it waits UNBOUND): an address until
  // the broadcast part points it at its Icecast.
  const mosque = await s.api('POST', '/mosques', { name: 'Bench Masjid', auto_approve_members: true, stream_url: 'https://radio.example/bench' }, root);
  const member = (await s.api('POST', '/auth/signup', { email: 'member@bench.test', password_hash: sha('member password') })).access_token as string;
  await s.api('POST', '/me/addresses/confirm', { channel: 'email' }, member);
  await s.api('POST', '/me/addresses/verify', { code: await s.otp('confirm_address') }, member);
  await s.api('POST', `/mosques/${mosque.id}/join`, {}, member);
  return { root, member, mosqueId: mosque.id as string };
}
