import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { Clock } from '../../src/platform/clock.ts';
import { inspectRecording, mediaTypeOf, toRecording, UPLOAD_TYPES, type AdmitRecording, type Recordings } from '../../src/audio/recordings.ts';
import type { AppEnv } from '../context.ts';
import { requestHeader } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { actorOf, mosqueGate, type GateDeps } from '../guards.ts';

/**
 * The one route whose body is not JSON and may pass 64 KiB: api/index.ts leaves it out of the global body
 * limit, and it carries a limit of its own (RECORDING_MAX_BYTES).
 */
export const RECORDING_UPLOAD_PATH = /^\/api\/v1\/mosques\/[^/]+\/recording$/;
/** The download is opened with a player's lease in the query, never a bearer token (players have none). */
export const RECORDING_DOWNLOAD_PATH = /^\/api\/v1\/audio\/recordings\/[^/]+$/;

interface Deps extends GateDeps {
  clock: Clock;
  recordings: Recordings;
  admitRecording: AdmitRecording;
  recordingMaxBytes: number;
}

export type ByteRange = { start: number; end: number };

/**
 * RFC 9110 §14.2: one `bytes=` range of a `size`-byte file, the last byte inclusive. null: serve the whole
 * file (no header, another unit, several ranges, or a form this server ignores, as §14.2 allows);
 * 'unsatisfiable': every position lies past the end (§15.5.17, 416).
 */
export function parseRange(header: string | undefined, size: number): ByteRange | 'unsatisfiable' | null {
  const m = /^bytes=(\d*)-(\d*)$/.exec((header ?? '').trim());
  if (!m || (m[1] === '' && m[2] === '')) return null;
  if (m[1] === '') {
    // A suffix: the last N bytes (§14.1.2); a zero-length suffix selects nothing.
    const length = Number(m[2]);
    if (length === 0 || size === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - length), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? Infinity : Number(m[2]);
  if (end < start) return null; // invalid (§14.1.1): ignored
  if (start >= size) return 'unsatisfiable';
  return { start, end: Math.min(end, size - 1) };
}

/** docs/api.md, "Recorded azaan": upload, read and delete by the mosque's admins; download by entitled players. */
export function recordingRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const limit = bodyLimit({
    maxSize: deps.recordingMaxBytes,
    onError: () => { throw new ApiError('payload_too_large', `The recording is larger than ${deps.recordingMaxBytes} bytes (RECORDING_MAX_BYTES).`); },
  });
  // The gate, then the type, then the size, all before the body is read: a caller or a type refused never
  // makes the service take an upload in.
  app.put('/mosques/:id/recording', mosqueGate(deps, 'manager'), async (c, next) => {
    if (!UPLOAD_TYPES[mediaTypeOf(c.req.header('content-type'))]) {
      throw new ApiError('unsupported_media_type', 'A recording must be sent as audio/mpeg, audio/ogg or audio/opus (the raw file as the body).');
    }
    await next();
  }, limit, async (c) => {
    const data = new Uint8Array(await c.req.arrayBuffer());
    const file = unwrap(await inspectRecording(data, mediaTypeOf(c.req.header('content-type')), deps.recordingMaxBytes));
    const { created, row } = await deps.recordings.save(c.var.mosque.id, file, data, actorOf(c).id);
    return c.json(toRecording(row), created ? 201 : 200);
  });

  app.get('/mosques/:id/recording', mosqueGate(deps, 'admin'), async (c) => {
    const row = await deps.recordings.find(c.var.mosque.id);
    if (!row) throw new ApiError('not_found', 'This mosque has no recorded azaan.');
    return c.json(toRecording(row));
  });

  app.delete('/mosques/:id/recording', mosqueGate(deps, 'manager'), async (c) => {
    if (!(await deps.recordings.remove(c.var.mosque.id, actorOf(c).id))) throw new ApiError('not_found', 'This mosque has no recorded azaan.');
    return c.body(null, 204);
  });

  // The lease is checked on every request, Range requests included: a player banned mid-file gets no more.
  app.get('/audio/recordings/:mosque_id', async (c) => {
    const mosqueId = c.req.param('mosque_id');
    const admitted = await deps.admitRecording(c.req.query('lease') || null, c.req.query('ticket') || null, mosqueId);
    if (!admitted.ok) {
      throw new ApiError('forbidden', "A lease of a player entitled to this mosque's azaan is required (?lease=).", { details: [{ path: 'lease', message: admitted.reason }] });
    }
    const stored = await deps.recordings.read(mosqueId);
    if (!stored) throw new ApiError('not_found', 'This mosque has no recorded azaan.');
    const { row, data } = stored;
    const etag = `"${row.sha256}"`;
    const headers: Record<string, string> = {
      'Content-Type': row.content_type, 'Cache-Control': 'no-store', 'Accept-Ranges': 'bytes', ETag: etag, 'X-Content-Type-Options': 'nosniff',
    };
    // §13.1.5: a Range made for another version of the file (If-Range names an older ETag) gets the whole new one.
    const ifRange = requestHeader(c, 'if-range');
    const range = ifRange === undefined || ifRange === etag ? parseRange(requestHeader(c, 'range'), data.byteLength) : null;
    if (range === 'unsatisfiable') {
      throw new ApiError('range_not_satisfiable', `The recording has ${data.byteLength} bytes.`, { headers: { 'Content-Range': `bytes */${data.byteLength}` } });
    }
    // A view of the stored bytes, not a copy (a Buffer from the database never sits on a SharedArrayBuffer).
    const view = (start: number, end: number) => new Uint8Array(data.buffer as ArrayBuffer, data.byteOffset + start, end - start);
    // Named here, not left to the server: a HEAD (a player asking the length first) answers it too (RFC 9110 §9.3.2).
    if (range === null) return c.body(view(0, data.byteLength), 200, { ...headers, 'Content-Length': String(data.byteLength) });
    headers['Content-Range'] = `bytes ${range.start}-${range.end}/${data.byteLength}`;
    return c.body(view(range.start, range.end + 1), 206, { ...headers, 'Content-Length': String(range.end + 1 - range.start) });
  });

  return app;
}
