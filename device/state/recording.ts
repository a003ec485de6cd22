/**
 * The recorded azaan kept in the state folder, for a slot the network does not carry (docs/firmware.md, "4.1
 * Config": `offline.recording`; docs/api.md, "Recorded azaan": `GET <url>?lease=<token>`), and the last config's
 * plan beside it, so a board restarted without the network still knows its slots.
 *
 * A download goes to a partial file and becomes DIR/azaan-<sha256>.<ext> (0600) only once its size and SHA-256
 * are the config's: nothing unverified is ever named like a recording, and the file is hashed again before it
 * plays. Only the newest good recording is kept. The lease rides in the query; it never reaches a log line.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import type { RecordingRef } from '../contract/slots.ts';

export interface CachedRecording {
  file: string;
  sha256: string;
  size: number;
}

export type DownloadOutcome = { ok: true; recording: CachedRecording } | { ok: false; error: string; mismatch: boolean };

const NAME = /^azaan-([0-9a-f]{64})\.([a-z0-9]{1,8})$/;
const PLAN_FILE = 'offline.json';
const IDLE_TIMEOUT_MS = 30_000;

/** docs/api.md, "Recorded azaan": the download answers with the file's content type. */
function extensionOf(contentType: string | undefined): string {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (type === 'audio/mpeg' || type === 'audio/mp3') return 'mp3';
  if (type === 'audio/ogg' || type === 'application/ogg') return 'ogg';
  if (type === 'audio/opus') return 'opus';
  return 'audio';
}

function sha256Of(file: string): string {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

/** Writes `data` whole (a rename) and 0600: a power cut never leaves half a file. */
function writePrivate(file: string, data: string | Buffer): void {
  const partial = `${file}.${process.pid}.partial`;
  fs.writeFileSync(partial, data, { mode: 0o600 });
  fs.chmodSync(partial, 0o600);
  fs.renameSync(partial, file);
}

export class RecordingStore {
  constructor(readonly dir: string) {}

  /** The newest good recording named in the folder (several only after a crash between a download and its clean-up). */
  current(): CachedRecording | null {
    let best: (CachedRecording & { mtime: number }) | null = null;
    for (const name of this.names()) {
      const m = NAME.exec(name)!;
      const file = path.join(this.dir, name);
      const st = fs.statSync(file, { throwIfNoEntry: false });
      if (st && (!best || st.mtimeMs > best.mtime)) best = { file, sha256: m[1]!, size: st.size, mtime: st.mtimeMs };
    }
    return best && { file: best.file, sha256: best.sha256, size: best.size };
  }

  /** The recording as it is on disk now hashes to its name (a card's bit rot, a hand edit): else it is not played. */
  verified(rec: CachedRecording): boolean {
    try {
      return sha256Of(rec.file) === rec.sha256;
    } catch {
      return false;
    }
  }

  /** Fetches `ref` with the lease into the folder; on a mismatch the partial file is deleted and the recording before stays. */
  download(ref: RecordingRef, lease: string): { done: Promise<DownloadOutcome>; abort(): void } {
    const url = new URL(`${ref.url}${ref.url.includes('?') ? '&' : '?'}lease=${encodeURIComponent(lease)}`);
    const partial = path.join(this.dir, `.azaan-${ref.sha256}.downloading`); // a dot name: never taken for a recording
    let req: http.ClientRequest | null = null;
    const done = new Promise<DownloadOutcome>((resolve) => {
      const finish = (outcome: DownloadOutcome): void => {
        if (!outcome.ok) fs.rmSync(partial, { force: true });
        resolve(outcome);
      };
      const get = url.protocol === 'https:' ? https.get : http.get;
      req = get(url, (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          return finish({ ok: false, error: `HTTP ${res.statusCode ?? 0}`, mismatch: false });
        }
        this.receive(res, partial, ref, extensionOf(res.headers['content-type'])).then(finish, (err: Error) => finish({ ok: false, error: err.message, mismatch: false }));
      });
      req.setTimeout(IDLE_TIMEOUT_MS, () => req?.destroy(new Error(`no data for ${IDLE_TIMEOUT_MS / 1000} s`)));
      req.on('error', (err) => finish({ ok: false, error: err.message || String((err as NodeJS.ErrnoException).code), mismatch: false }));
    });
    return { done, abort: () => (req as http.ClientRequest | null)?.destroy(new Error('aborted')) };
  }

  /** The body into the partial file, hashed as it comes; kept under its name only when size and hash are the config's. */
  private async receive(res: http.IncomingMessage, partial: string, ref: RecordingRef, ext: string): Promise<DownloadOutcome> {
    const fd = fs.openSync(partial, 'w', 0o600);
    const hash = crypto.createHash('sha256');
    let size = 0;
    try {
      for await (const chunk of res as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > ref.size) {
          res.destroy();
          return { ok: false, error: `size mismatch: more than the ${ref.size} bytes announced`, mismatch: true };
        }
        hash.update(chunk);
        fs.writeSync(fd, chunk);
      }
    } finally {
      fs.closeSync(fd);
    }
    if (!res.complete) return { ok: false, error: 'download cut short', mismatch: false };
    if (size !== ref.size) return { ok: false, error: `size mismatch: ${size} bytes, announced ${ref.size}`, mismatch: true };
    const got = hash.digest('hex');
    if (got !== ref.sha256) return { ok: false, error: `sha256 mismatch: got ${got}, announced ${ref.sha256}`, mismatch: true };
    const file = path.join(this.dir, `azaan-${ref.sha256}.${ext}`);
    fs.renameSync(partial, file);
    fs.chmodSync(file, 0o600);
    for (const name of this.names()) if (path.join(this.dir, name) !== file) fs.rmSync(path.join(this.dir, name), { force: true });
    return { ok: true, recording: { file, sha256: ref.sha256, size } };
  }

  private names(): string[] {
    try {
      return fs.readdirSync(this.dir).filter((n) => NAME.test(n));
    } catch {
      return [];
    }
  }

  /** The last config (its lease token left out: the slots need only its expiry) and the last slot handled. */
  savePlan(plan: { config: Record<string, unknown> | null; done_at: number }): void {
    writePrivate(path.join(this.dir, PLAN_FILE), `${JSON.stringify(plan)}\n`);
  }

  loadPlan(): { config: Record<string, unknown> | null; done_at: number } | null {
    try {
      const v = JSON.parse(fs.readFileSync(path.join(this.dir, PLAN_FILE), 'utf8')) as { config?: unknown; done_at?: unknown };
      const config = typeof v.config === 'object' && v.config !== null && !Array.isArray(v.config) ? (v.config as Record<string, unknown>) : null;
      return { config, done_at: typeof v.done_at === 'number' ? v.done_at : 0 };
    } catch {
      return null;
    }
  }
}
