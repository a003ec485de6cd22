import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';

/** Real audio made by ffmpeg (Debian's; .ci/run installs it), never bytes written by hand. */
export const ffmpegPath = () => process.env.FFMPEG_PATH ?? 'ffmpeg';

export type AudioKind = 'mp3' | 'ogg' | 'opus' | 'opus.ogg' | 'wav' | 'flac' | 'mp2';

const ENCODER: Record<AudioKind, string[]> = {
  mp3: ['-c:a', 'libmp3lame'],
  ogg: ['-c:a', 'libvorbis'],
  opus: ['-c:a', 'libopus'],
  // Opus in a file named .ogg: the same Ogg container.
  'opus.ogg': ['-c:a', 'libopus'],
  wav: ['-c:a', 'pcm_s16le'],
  flac: ['-c:a', 'flac'],
  mp2: ['-c:a', 'mp2'],
};

/**
 * A folder of its own (removed when the test ends) and a maker of tone files in it: `make('mp3', 3)` is a
 * 3-second 440 Hz sine encoded as MP3. Extra arguments go before the output (a bitrate, say).
 */
export function audioFiles(t: TestContext) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-audio-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  let n = 0;
  return {
    dir,
    make(kind: AudioKind, seconds = 3, extra: string[] = []): Buffer {
      const file = path.join(dir, `tone-${++n}.${kind}`);
      execFileSync(ffmpegPath(), ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', `sine=frequency=440:duration=${seconds}`, ...ENCODER[kind], ...extra, file]);
      return fs.readFileSync(file);
    },
    /** Writes bytes to a file of the folder (the console test hands the browser a path). */
    write(name: string, data: Buffer | string): string {
      const file = path.join(dir, name);
      fs.writeFileSync(file, data);
      return file;
    },
  };
}

/** One tone file made in a folder that is gone again before this returns (for tables built at module level). */
export function toneOnce(kind: AudioKind, seconds = 2): Buffer {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-audio-'));
  try {
    const file = path.join(dir, `tone.${kind}`);
    execFileSync(ffmpegPath(), ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', `sine=frequency=440:duration=${seconds}`, ...ENCODER[kind], file]);
    return fs.readFileSync(file);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
