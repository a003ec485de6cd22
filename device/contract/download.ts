/**
 * A firmware image's download (docs/firmware.md, "4.4 Firmware updates"): `GET <url>` with HTTP Basic
 * authentication (RFC 7617) by the device's own MQTT username and password, resumed after a dropped connection
 * with `Range: bytes=<have>-` and `If-Range: "<sha256>"` (RFC 9110 §14.2, §13.1.5): a `206` continues the bytes
 * already kept, a `200` restarts them. A connection that drops is retried with backoff; an answer that will not
 * change by asking again (401, 403, 404, 410) ends it at once. Nothing here decides whether the image is good:
 * device/contract/update.ts checks the length, the digest and the signature of what the sink holds.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';

/** Where the bytes go while they come: a file survives a restart of the process, memory serves a simulated fleet. */
export interface ImageSink {
  readonly size: number;
  restart(): void;
  append(chunk: Buffer): void;
  digest(): Promise<Buffer>;
  /** The file that holds the image (file sinks only). */
  readonly file: string | null;
  bytes(): Buffer;
  discard(): void;
}

export function memorySink(): ImageSink {
  let chunks: Buffer[] = [];
  let size = 0;
  return {
    get size() {
      return size;
    },
    file: null,
    restart: () => void ((chunks = []), (size = 0)),
    append: (chunk) => void (chunks.push(chunk), (size += chunk.length)),
    digest: async () => crypto.createHash('sha256').update(Buffer.concat(chunks)).digest(),
    bytes: () => Buffer.concat(chunks),
    discard: () => void ((chunks = []), (size = 0)),
  };
}

/** A partial file (0600) kept across attempts and restarts: a dropped connection continues where it stopped. */
export function fileSink(file: string): ImageSink {
  let size = fs.statSync(file, { throwIfNoEntry: false })?.size ?? 0;
  return {
    get size() {
      return size;
    },
    file,
    restart: () => {
      fs.writeFileSync(file, Buffer.alloc(0), { mode: 0o600 });
      size = 0;
    },
    append: (chunk) => {
      fs.appendFileSync(file, chunk, { mode: 0o600 });
      size += chunk.length;
    },
    digest: () =>
      new Promise<Buffer>((resolve, reject) => {
        const hash = crypto.createHash('sha256');
        fs.createReadStream(file).on('data', (c) => hash.update(c)).on('error', reject).on('end', () => resolve(hash.digest()));
      }),
    bytes: () => fs.readFileSync(file),
    discard: () => fs.rmSync(file, { force: true }),
  };
}

export interface DownloadRequest {
  url: string;
  size: number;
  sha256: string;
  user: string;
  password: string;
  userAgent: string;
}

export interface DownloadTiming {
  /** Consecutive attempts without a new byte before the download fails. */
  attempts: number;
  retryMs: number;
  retryMaxMs: number;
  idleMs: number;
}

export const DEFAULT_DOWNLOAD_TIMING: DownloadTiming = { attempts: 5, retryMs: 1000, retryMaxMs: 8000, idleMs: 30_000 };

export type DownloadOutcome = { ok: true } | { ok: false; error: 'download_failed' | 'hash_mismatch'; why: string };
type Attempt = { done: true; outcome: DownloadOutcome } | { done: false; why: string };

const FINAL_STATUSES = new Set([401, 403, 404, 410]);

/** Downloads into `sink` until it holds `size` bytes; `progress` is called with the byte count as they come. */
export function download(req: DownloadRequest, sink: ImageSink, timing: DownloadTiming, progress: (have: number) => void) {
  let current: http.ClientRequest | null = null;
  let timer: NodeJS.Timeout | null = null;
  let aborted = false;
  const done = (async (): Promise<DownloadOutcome> => {
    let failures = 0;
    if (sink.size > req.size) sink.restart();
    for (;;) {
      if (sink.size === req.size) return { ok: true };
      const before = sink.size;
      const attempt = await new Promise<Attempt>((resolve) => (current = once(req, sink, timing, progress, resolve)));
      if (aborted) return { ok: false, error: 'download_failed', why: 'aborted' };
      if (attempt.done) return attempt.outcome;
      failures = sink.size > before ? 1 : failures + 1;
      if (failures >= timing.attempts) return { ok: false, error: 'download_failed', why: attempt.why };
      const delay = Math.min(timing.retryMaxMs, timing.retryMs * 2 ** (failures - 1));
      await new Promise<void>((resolve) => (timer = setTimeout(resolve, delay)));
      if (aborted) return { ok: false, error: 'download_failed', why: 'aborted' };
    }
  })();
  return {
    done,
    abort(): void {
      aborted = true;
      if (timer) clearTimeout(timer);
      (current as http.ClientRequest | null)?.destroy(new Error('aborted'));
    },
  };
}

/** One GET: from the first byte, or from `have` when the sink holds some. */
function once(req: DownloadRequest, sink: ImageSink, timing: DownloadTiming, progress: (have: number) => void, resolve: (a: Attempt) => void): http.ClientRequest {
  const url = new URL(req.url);
  const headers: Record<string, string> = {
    authorization: `Basic ${Buffer.from(`${req.user}:${req.password}`).toString('base64')}`,
    'user-agent': req.userAgent,
  };
  if (sink.size > 0) {
    headers['range'] = `bytes=${sink.size}-`;
    headers['if-range'] = `"${req.sha256}"`;
  }
  const get = url.protocol === 'https:' ? https.get : http.get;
  let settled = false;
  const settle = (a: Attempt): void => {
    if (!settled) (settled = true), resolve(a);
  };
  const r = get(url, { headers }, (res) => {
    const status = res.statusCode ?? 0;
    if (FINAL_STATUSES.has(status)) {
      res.resume();
      return settle({ done: true, outcome: { ok: false, error: 'download_failed', why: `HTTP ${status}` } });
    }
    if (status === 416) sink.restart(); // what we hold is not a prefix of the image: start over
    if (status === 206 && rangeStart(res.headers['content-range']) !== sink.size) sink.restart();
    if (status === 200) sink.restart(); // docs/firmware.md, "4.4": a 200 answer to If-Range restarts the file
    if ((status !== 200 && status !== 206) || sink.size !== (status === 206 ? rangeStart(res.headers['content-range']) : 0)) {
      res.resume();
      return settle({ done: false, why: `HTTP ${status}` });
    }
    res.on('data', (chunk: Buffer) => {
      if (sink.size + chunk.length > req.size) {
        r.destroy();
        return settle({ done: true, outcome: { ok: false, error: 'hash_mismatch', why: `more than the ${req.size} bytes announced` } });
      }
      sink.append(chunk);
      progress(sink.size);
    });
    res.on('end', () => settle(res.complete && sink.size === req.size ? { done: true, outcome: { ok: true } } : sizeOrCut(req, sink, res)));
    res.on('aborted', () => settle({ done: false, why: 'connection dropped' }));
    res.on('error', (err) => settle({ done: false, why: err.message }));
  });
  r.setTimeout(timing.idleMs, () => r.destroy(new Error(`no data for ${timing.idleMs / 1000} s`)));
  r.on('error', (err) => settle({ done: false, why: err.message || String((err as NodeJS.ErrnoException).code) }));
  r.on('close', () => settle({ done: false, why: 'connection closed' }));
  return r;
}

/** A body that ended short: cut (retry) when the connection broke, a smaller image than announced when it did not. */
function sizeOrCut(req: DownloadRequest, sink: ImageSink, res: http.IncomingMessage): Attempt {
  if (!res.complete) return { done: false, why: 'connection dropped' };
  return { done: true, outcome: { ok: false, error: 'hash_mismatch', why: `${sink.size} bytes, announced ${req.size}` } };
}

/** The first byte of `Content-Range: bytes <first>-<last>/<length>` (RFC 9110 §14.4), or -1. */
function rangeStart(header: string | undefined): number {
  const m = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(header?.trim() ?? '');
  return m ? Number(m[1]) : -1;
}
