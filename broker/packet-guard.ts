/**
 * Reads MQTT fixed headers as bytes arrive, before any parser buffers a packet: the type byte and the
 * remaining-length varint ([MQTT-2.2.3]), which may be split across chunks. Pure; broker/socket-guard.ts
 * feeds it every chunk of a connection and closes the connection on a verdict other than 'ok'.
 */

export type HeaderVerdict = 'ok' | 'too_large' | 'malformed' | 'not_connect';

export interface HeaderScanner {
  stage: 'type' | 'length' | 'body';
  /** No packet has been seen yet: the first must be a CONNECT ([MQTT-3.1.0-1]). */
  first: boolean;
  length: number;
  lengthBytes: number;
  /** Body bytes of the current packet still to come. */
  left: number;
}

const CONNECT = 1;
// [MQTT-2.2.3] the remaining length takes at most four bytes (up to 268,435,455).
const MAX_LENGTH_BYTES = 4;

export function createHeaderScanner(): HeaderScanner {
  return { stage: 'type', first: true, length: 0, lengthBytes: 0, left: 0 };
}

/**
 * Advances the scanner over one chunk. `limit` caps the remaining length of every packet whose header
 * completes in this chunk; the first verdict other than 'ok' is final (the caller closes the connection).
 */
export function scanChunk(s: HeaderScanner, chunk: Uint8Array, limit: number): HeaderVerdict {
  let i = 0;
  while (i < chunk.length) {
    if (s.stage === 'body') {
      const skip = Math.min(s.left, chunk.length - i);
      s.left -= skip;
      i += skip;
      if (s.left === 0) s.stage = 'type';
      continue;
    }
    const byte = chunk[i++]!;
    if (s.stage === 'type') {
      if (s.first && byte >> 4 !== CONNECT) return 'not_connect';
      s.first = false;
      s.stage = 'length';
      s.length = 0;
      s.lengthBytes = 0;
      continue;
    }
    s.length += (byte & 0x7f) * 128 ** s.lengthBytes;
    s.lengthBytes++;
    if (byte & 0x80) {
      if (s.lengthBytes === MAX_LENGTH_BYTES) return 'malformed';
      // Refuse as soon as the bytes read so far already promise more than the cap.
      if (s.length > limit) return 'too_large';
      continue;
    }
    if (s.length > limit) return 'too_large';
    s.left = s.length;
    s.stage = s.left === 0 ? 'type' : 'body';
  }
  return 'ok';
}
