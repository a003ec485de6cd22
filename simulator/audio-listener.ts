/**
 * A stream player's ear: one HTTP(S) GET of its stream address, read as it arrives (never buffered whole),
 * each chunk counted. Any answer but 200, an error, or the end of the body ends the attempt; AudioLink
 * (device/audio/link.ts) retries.
 */
import http from 'node:http';
import https from 'node:https';
import type { Attempt, AttemptHandlers } from '../device/audio/link.ts';

export function openListener(url: string, userAgent: string, h: AttemptHandlers): Attempt {
  const target = new URL(url);
  if (target.protocol !== 'http:' && target.protocol !== 'https:') throw new Error(`unsupported stream address scheme ${target.protocol}`);
  const get = target.protocol === 'https:' ? https.get : http.get;
  // Icecast sends in-band metadata only when asked (Icy-MetaData: 1); a player that counts audio bytes does not ask.
  const req = get(target, { headers: { 'user-agent': userAgent, 'icy-metadata': '0' } }, (res) => {
    if (res.statusCode !== 200) {
      res.resume();
      h.fail(`HTTP ${res.statusCode ?? 0}${res.statusMessage ? ` ${res.statusMessage}` : ''}`);
      return;
    }
    res.on('data', (chunk: Buffer) => h.bytes(chunk.length));
    res.on('end', () => h.fail('stream ended'));
    res.on('error', (err) => h.fail(err.message));
    res.on('aborted', () => h.fail('stream aborted'));
  });
  req.on('error', (err) => h.fail(err.message || String((err as NodeJS.ErrnoException).code)));
  return {
    close() {
      req.destroy();
    },
  };
}
