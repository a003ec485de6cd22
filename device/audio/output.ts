/**
 * The sound card: where whatever the device plays goes, through one ffmpeg at a time (a stream, a test tone, a
 * chirp), and only while something plays: no process and no timer when idle. ffmpeg writes to ALSA
 * (`--audio-device alsa:hw:1`, `alsa:default` by default), to PulseAudio (`pulse`, `pulse:<sink>`), or, with
 * `--output FILE.wav`, raw PCM on its stdout into a WavWriter (device/audio/wav.ts) that keeps the wall clock's
 * timeline, so a test can measure what played and when.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Writable } from 'node:stream';
import { WAV_RATE, WavWriter } from './wav.ts';

export type OutputTarget = { kind: 'alsa'; device: string } | { kind: 'pulse'; sink: string | null } | { kind: 'wav'; path: string };

/** `--output` and `--audio-device` as one target, or the reason they cannot be one. */
export function parseOutput(output: string | undefined, audioDevice: string | undefined): OutputTarget | { error: string } {
  if (output !== undefined && audioDevice !== undefined) return { error: '--output and --audio-device exclude each other' };
  if (output !== undefined) return output.endsWith('.wav') ? { kind: 'wav', path: output } : { error: `--output must name a .wav file, not ${JSON.stringify(output)}` };
  const dev = audioDevice ?? 'alsa:default';
  if (dev === 'alsa') return { kind: 'alsa', device: 'default' };
  if (dev.startsWith('alsa:') && dev.length > 5) return { kind: 'alsa', device: dev.slice(5) };
  if (dev === 'pulse') return { kind: 'pulse', sink: null };
  if (dev.startsWith('pulse:') && dev.length > 6) return { kind: 'pulse', sink: dev.slice(6) };
  return { error: `--audio-device must be alsa:<device> (alsa:hw:1, alsa:default) or pulse[:<sink>], not ${JSON.stringify(dev)}` };
}

export interface Playback {
  /** ffmpeg's input when the play reads from a pipe ('pipe:0'), else null. */
  readonly stdin: Writable | null;
  /** Resolves when ffmpeg ended, with its last error line ('' after a clean end or a stop). */
  readonly ended: Promise<string>;
  stop(): void;
}

const KILL_GRACE_MS = 2000;
/** Every ffmpeg of this process still running: killed when the process exits, whatever the path out. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

export class SoundCard {
  private current: Playback | null = null;
  private readonly wav: WavWriter | null;
  private level = 100;

  constructor(readonly target: OutputTarget, private readonly ffmpeg = 'ffmpeg') {
    this.wav = target.kind === 'wav' ? new WavWriter(target.path) : null;
  }

  /** The config's volume (docs/firmware.md, "4.1 Config"), 0 to 100: applied from the next play on. */
  setVolume(volume: number): void {
    this.level = Math.min(100, Math.max(0, volume));
  }

  /** Plays ffmpeg's `input` arguments (one play at a time: a new one ends the one before). */
  play(input: string[]): Playback {
    this.current?.stop();
    const fromPipe = input.includes('pipe:0');
    const args = ['-hide_banner', ...(fromPipe ? [] : ['-nostdin']), '-loglevel', 'error', ...input, '-vn', '-af', `volume=${(this.level / 100).toFixed(2)}`, '-ac', '1', ...this.outputArgs()];
    const child = spawn(this.ffmpeg, args, { stdio: [fromPipe ? 'pipe' : 'ignore', this.wav ? 'pipe' : 'ignore', 'pipe'] });
    live.add(child);
    let lastError = '';
    let stopped = false;
    child.stderr!.on('data', (d: Buffer) => (lastError = (d.toString('utf8').trim().split('\n').at(-1) ?? '').slice(0, 200)));
    if (this.wav) child.stdout!.on('data', (pcm: Buffer) => this.wav!.write(pcm));
    child.stdin?.on('error', () => {}); // ffmpeg gone: its exit reports why
    const ended = new Promise<string>((resolve) => {
      child.once('error', (err) => resolve(`ffmpeg: ${err.message}`));
      child.once('exit', (code, signal) => {
        live.delete(child);
        if (this.current === playback) this.current = null;
        resolve(stopped || code === 0 ? '' : `ffmpeg exited (${signal ?? `code ${code}`})${lastError ? `: ${lastError}` : ''}`);
      });
    });
    const playback: Playback = {
      stdin: child.stdin,
      ended,
      stop: () => {
        if (stopped) return;
        stopped = true;
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const hard = setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS);
        hard.unref();
        child.once('exit', () => clearTimeout(hard));
      },
    };
    this.current = playback;
    return playback;
  }

  /** A short sound of its own (play_test's tone, identify's rising chirp), played now. */
  sound(what: 'tone' | 'chirp', durationMs: number): Playback {
    const s = (durationMs / 1000).toFixed(3);
    const source = what === 'tone' ? `sine=frequency=1000:sample_rate=${WAV_RATE}:duration=${s}` : `aevalsrc=sin(2*PI*(500*t+1500*t*t)):s=${WAV_RATE}:d=${s}`;
    return this.play(['-f', 'lavfi', '-i', source]);
  }

  close(): void {
    this.current?.stop();
    this.wav?.close();
  }

  private outputArgs(): string[] {
    const t = this.target;
    if (t.kind === 'wav') return ['-ar', String(WAV_RATE), '-f', 's16le', 'pipe:1'];
    if (t.kind === 'alsa') return ['-f', 'alsa', t.device];
    return ['-f', 'pulse', ...(t.sink ? ['-device', t.sink] : []), 'minaret-device'];
  }
}
