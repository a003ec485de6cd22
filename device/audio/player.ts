/**
 * A stream player's ear and mouth: one HTTP(S) GET of its stream address (which carries the lease: it stays in
 * this process, never in an argv that `ps` shows), each chunk counted for the firmware's PLAYING rule
 * (device/audio/link.ts) and piped into ffmpeg, which decodes it to the sound card (device/audio/output.ts).
 * An answer but 200, an error, the end of the body or ffmpeg's exit ends the attempt; the link retries.
 */
import http from 'node:http';
import https from 'node:https';
import type { Attempt, AttemptHandlers } from './link.ts';
import type { Playback, SoundCard } from './output.ts';

/** ffmpeg's input format named from the stream's content type, so it need not probe (seconds of buffering). */
function formatOf(contentType: string | undefined): string[] {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (type === 'audio/mpeg' || type === 'audio/mp3') return ['-f', 'mp3'];
  if (type === 'application/ogg' || type === 'audio/ogg') return ['-f', 'ogg'];
  if (type === 'audio/aac' || type === 'audio/aacp') return ['-f', 'aac'];
  return [];
}

export function openPlayer(url: string, card: SoundCard, userAgent: string, h: AttemptHandlers): Attempt {
  const target = new URL(url);
  if (target.protocol !== 'http:' && target.protocol !== 'https:') throw new Error(`unsupported stream address scheme ${target.protocol}`);
  const get = target.protocol === 'https:' ? https.get : http.get;
  let playback: Playback | null = null;
  let closed = false;
  const req = get(target, { headers: { 'user-agent': userAgent, 'icy-metadata': '0' } }, (res) => {
    if (res.statusCode !== 200) {
      res.resume();
      h.fail(`HTTP ${res.statusCode ?? 0}${res.statusMessage ? ` ${res.statusMessage}` : ''}`);
      return;
    }
    // A named format needs only a frame to start from: with 32 KB to probe, ffmpeg held a fresh 64 kbit/s source's
    // first sound back about half a second more (test/device/console-audio.test.ts: 2.0-2.4 s from the click to the
    // first sample, 1.6-1.9 s with 2 KB). A format it must guess keeps the larger probe.
    const format = formatOf(res.headers['content-type']);
    const play = card.play([...format, '-probesize', format.length ? '2048' : '32768', '-analyzeduration', '0', '-fflags', 'nobuffer', '-i', 'pipe:0']);
    playback = play;
    void play.ended.then((error) => {
      if (!closed) h.fail(error || 'player ffmpeg ended');
    });
    res.on('data', (chunk: Buffer) => {
      h.bytes(chunk.length);
      play.stdin?.write(chunk);
    });
    res.on('end', () => h.fail('stream ended'));
    res.on('error', (err) => h.fail(err.message));
    res.on('aborted', () => h.fail('stream aborted'));
  });
  req.on('error', (err) => h.fail(err.message || String((err as NodeJS.ErrnoException).code)));
  return {
    close() {
      closed = true;
      req.destroy();
      playback?.stop();
    },
  };
}

/**
 * A local file played once through the sound card (the recorded azaan at a slot without the network:
 * docs/firmware.md, "3.1 Status", PLAYING `source: local`). ffmpeg reads the file itself; the audio counts as flowing
 * once ffmpeg runs, and its exit ends the play for good (no retry: a file does not come back by asking again).
 */
export function openFile(file: string, bytes: number, card: SoundCard, h: AttemptHandlers): Attempt {
  let closed = false;
  // -re: read at the audio's own pace, so the play ends when its sound does (a WAV output would take it at once).
  const play = card.play(['-re', '-i', file]);
  void play.ended.then((error) => {
    if (!closed) h.end(error || undefined);
  });
  h.bytes(bytes);
  return {
    close() {
      closed = true;
      play.stop();
    },
  };
}
