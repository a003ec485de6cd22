/**
 * A transmitter's source client (the device's and the simulator's): ffmpeg encodes a tone (lavfi `sine`) or a file, in real time (`-re`), to MP3
 * on its stdout, and this process sends those bytes to the mount as an Icecast 2.4 source (HTTP PUT with
 * `Expect: 100-continue`, basic auth = the device's id and password).
 *
 * Why not ffmpeg's own icecast:// output: the password would sit in ffmpeg's argv (world-readable in `ps` and
 * /proc/<pid>/cmdline), and an ffmpeg that outlives a killed simulator would keep the mosque on air. Fed
 * through a pipe, ffmpeg's next write after the simulator dies fails (EPIPE) and it exits, even after
 * kill -9; https is node:tls, whatever TLS ffmpeg was built with; and the server's refusal (401, 403 mount
 * in use) is read here and reported as the error.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import tls from 'node:tls';
import type { Attempt, AttemptHandlers } from './link.ts';

/** What a transmitter sends: ffmpeg's sine, a file looped, or an ALSA capture device (a microphone, a line in). */
export type AudioSource = { kind: 'tone'; frequency: number } | { kind: 'file'; path: string } | { kind: 'alsa'; device: string };

export interface SourceTarget {
  /** The transmitter's stream_url (http or https), the mount the source feeds. */
  url: string;
  user: string;
  password: string;
  source: AudioSource;
  ffmpeg?: string;
  userAgent: string;
}

const HEAD_LIMIT = 8192;
const KILL_GRACE_MS = 2000;

/** Every ffmpeg this process started and has not seen exit: killed when the process exits, whatever the path out. */
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const c of live) c.kill('SIGKILL');
  });
}

/** ffmpeg's arguments: MP3 at 64 kb/s mono on stdout, paced in real time (a capture paces itself), a file looped for ever. */
export function ffmpegArgs(source: AudioSource): string[] {
  const input =
    source.kind === 'tone'
      ? ['-re', '-f', 'lavfi', '-i', `sine=frequency=${source.frequency}:sample_rate=44100`]
      : source.kind === 'file'
        ? ['-re', '-stream_loop', '-1', '-i', source.path]
        : ['-f', 'alsa', '-i', source.device];
  return ['-hide_banner', '-nostdin', '-loglevel', 'error', ...input, '-vn', '-ac', '1', '-c:a', 'libmp3lame', '-b:a', '64k', '-f', 'mp3', 'pipe:1'];
}

export function openSource(o: SourceTarget, h: AttemptHandlers): Attempt {
  const target = new URL(o.url);
  if (target.protocol !== 'http:' && target.protocol !== 'https:') throw new Error(`unsupported stream address scheme ${target.protocol}`);
  const secure = target.protocol === 'https:';
  const port = Number(target.port || (secure ? 443 : 80));
  const socket = secure ? tls.connect({ host: target.hostname, port, servername: target.hostname }) : net.connect({ host: target.hostname, port });
  let ffmpeg: ChildProcess | null = null;
  let head = '';
  let closed = false;

  const fail = (error: string): void => {
    close();
    h.fail(error);
  };
  const close = (): void => {
    if (closed) return;
    closed = true;
    socket.destroy();
    stopFfmpeg(ffmpeg);
  };

  socket.setNoDelay(true);
  socket.once(secure ? 'secureConnect' : 'connect', () => {
    const auth = Buffer.from(`${o.user}:${o.password}`).toString('base64');
    socket.write(
      `PUT ${target.pathname} HTTP/1.1\r\nHost: ${target.host}\r\nAuthorization: Basic ${auth}\r\nUser-Agent: ${o.userAgent}\r\n` +
        'Content-Type: audio/mpeg\r\nIce-Public: 0\r\nIce-Name: Minaret\r\nExpect: 100-continue\r\n\r\n',
    );
  });
  const onHead = (chunk: Buffer): void => {
    head += chunk.toString('latin1');
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) {
      if (head.length > HEAD_LIMIT) fail('source refused: answer head too long');
      return;
    }
    const statusLine = head.slice(0, head.indexOf('\r\n'));
    const code = Number(/^HTTP\/\d\.\d (\d{3})/.exec(statusLine)?.[1] ?? 0);
    // Icecast 2.4 answers 100 Continue, then 200 OK; either means the mount is ours.
    if (code !== 100 && code !== 200) return fail(`source refused: ${statusLine || 'no HTTP answer'}`);
    socket.off('data', onHead);
    socket.on('data', () => {}); // later answers (none expected) are drained, not buffered
    ffmpeg = startFfmpeg(o, socket, h, fail);
  };
  socket.on('data', onHead);
  socket.on('error', (err) => fail(err.message || String((err as NodeJS.ErrnoException).code)));
  socket.on('close', () => fail('source connection closed by the server'));
  return { close };
}

function startFfmpeg(o: SourceTarget, socket: net.Socket, h: AttemptHandlers, fail: (error: string) => void): ChildProcess {
  const child = spawn(o.ffmpeg ?? 'ffmpeg', ffmpegArgs(o.source), { stdio: ['ignore', 'pipe', 'pipe'] });
  track(child);
  let lastStderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    const lines = d.toString('utf8').trim().split('\n');
    lastStderr = (lines.at(-1) ?? '').slice(0, 200);
  });
  child.stdout!.on('data', (chunk: Buffer) => h.bytes(chunk.length));
  child.stdout!.pipe(socket, { end: false });
  child.once('error', (err) => fail(`ffmpeg: ${err.message}`));
  child.once('exit', (code, signal) => fail(`ffmpeg exited (${signal ?? `code ${code}`})${lastStderr ? `: ${lastStderr}` : ''}`));
  return child;
}

function stopFfmpeg(child: ChildProcess | null): void {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  child.stdout?.unpipe();
  child.kill('SIGTERM');
  const hard = setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS);
  hard.unref();
  child.once('exit', () => clearTimeout(hard));
}
