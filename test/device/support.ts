import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { nodeArgsFor, startProcess, tempDir, type Run } from '../support/process.ts';
import { waitFor, type Registered } from '../support/devices.ts';
import { ffmpegPath } from '../audio/audio-files.ts';

/** The real `minaret-device` process (device/index.ts), its state folder holding `reg`'s credentials as pairing stores them. */
export function startDevice(t: TestContext, reg: Registered, server: string, args: string[] = [], env: Record<string, string> = {}): { run: Run; dir: string } {
  const dir = tempDir(t, 'minaret-device-');
  fs.writeFileSync(path.join(dir, 'device.json'), JSON.stringify({ server, device: reg.device, credentials: reg.credentials }), { mode: 0o600 });
  return { run: runDeviceOn(t, dir, args, env), dir };
}

/**
 * `minaret-device run` on a state folder that already holds its device.json (a device started again, as after a
 * power cut). `nodeArgs` go before the program (a preload).
 */
export function runDeviceOn(t: TestContext, dir: string, args: string[] = [], env: Record<string, string> = {}, nodeArgs: string[] = []): Run {
  return startProcess(t, { PATH: process.env.PATH ?? '', HOME: dir, ...env }, process.execPath, [...nodeArgs, ...nodeArgsFor('device/index.ts'), 'run', '--state', dir, ...args]);
}

/** A real `hz` sine of `seconds` encoded as MP3 by ffmpeg (64 kb/s), in a folder removed when the test ends. */
export function tone(t: TestContext, hz: number, seconds: number): Buffer {
  const file = path.join(tempDir(t, 'minaret-offline-audio-'), 'tone.mp3');
  execFileSync(ffmpegPath(), ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', `sine=frequency=${hz}:duration=${seconds}`, '-c:a', 'libmp3lame', '-b:a', '64k', file]);
  return fs.readFileSync(file);
}

/** Waits for a line of the device's output matching `re` (after `from` characters); returns the match. */
export async function deviceLine(run: Run, re: RegExp, timeoutMs: number, from = 0): Promise<RegExpMatchArray> {
  return waitFor(`device output ${re}`, () => {
    if (run.child.exitCode !== null) throw new Error(`minaret-device exited ${run.child.exitCode}: ${run.stdout()}\n${run.stderr()}`);
    return run.stdout().slice(from).match(re);
  }, timeoutMs).catch((err: Error) => {
    throw new Error(`${err.message}\n--- stdout\n${run.stdout().slice(-3000)}\n--- stderr\n${run.stderr().slice(-2000)}`);
  });
}

/** The PCM samples (s16le mono) of a WAV file as minaret-device writes it (device/audio/wav.ts), with its rate. */
export function readWav(file: string): { rate: number; samples: Int16Array } {
  const buf = fs.readFileSync(file);
  const rate = buf.readUInt32LE(24);
  const data = buf.subarray(44, 44 + buf.readUInt32LE(40));
  const samples = new Int16Array(data.length >> 1);
  for (let i = 0; i < samples.length; i++) samples[i] = data.readInt16LE(i * 2);
  return { rate, samples };
}

/** Loudness (RMS, of 32767) and frequency (from zero crossings) of samples [from, to) seconds. */
export function measure(wav: { rate: number; samples: Int16Array }, fromS: number, toS: number): { rms: number; hz: number } {
  const a = Math.max(0, Math.floor(fromS * wav.rate));
  const b = Math.min(wav.samples.length, Math.floor(toS * wav.rate));
  let sum = 0;
  let crossings = 0;
  for (let i = a; i < b; i++) {
    const s = wav.samples[i]!;
    sum += s * s;
    if (i > a && (wav.samples[i - 1]! < 0) !== (s < 0)) crossings++;
  }
  const n = Math.max(1, b - a);
  return { rms: Math.sqrt(sum / n), hz: crossings / 2 / (n / wav.rate) };
}

/** Seconds of the WAV timeline (which starts when the device printed its first line) at this output line's timestamp. */
export function secondsAt(stdout: string, line: RegExp): number {
  const first = /^(\S+) minaret-device /m.exec(stdout)?.[1];
  const at = new RegExp(`^(\\S+) .*${line.source}`, 'm').exec(stdout)?.[1];
  if (!first || !at) throw new Error(`no timestamp for ${line} in\n${stdout}`);
  return (Date.parse(at) - Date.parse(first)) / 1000;
}

/** Wall-clock ms of the device's first output line: where its WAV's timeline starts. */
export function wavStartMs(run: Run): number {
  return Date.parse(/^(\S+) minaret-device /m.exec(run.stdout())![1]!);
}

/** Wall-clock ms of the first loud sample (|s| > 1000) of the device's WAV, or null when it stayed silent. */
export function firstLoudMs(run: Run, wav: string): number | null {
  const audio = readWav(wav);
  const i = audio.samples.findIndex((s) => Math.abs(s) > 1000);
  return i < 0 ? null : wavStartMs(run) + (i / audio.rate) * 1000;
}

/**
 * The loudest 0.5 s window between `fromS` and `toS` (steps of 0.1 s), measured: on a loaded machine the WAV may
 * hold a gap where ffmpeg fell behind, and a fixed window can fall on it.
 */
export function loudestHalfSecond(audio: { rate: number; samples: Int16Array }, fromS: number, toS: number): { rms: number; hz: number } {
  let best = measure(audio, fromS, fromS + 0.5);
  for (let at = fromS + 0.1; at + 0.5 <= toS; at += 0.1) {
    const m = measure(audio, at, at + 0.5);
    if (m.rms > best.rms) best = m;
  }
  return best;
}
