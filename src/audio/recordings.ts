import crypto from 'node:crypto';
import type { IAudioMetadata } from 'music-metadata';
import type { Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import type { ActivityLog } from '../mosques/activity.ts';
import { admitLease, type LeaseFacts, type LeaseRefusal } from './lease-admission.ts';
import type { RecordingsTable } from '../../generated/tables.ts';
import { createByteCache } from '../platform/memory/byte-cache.ts';

/**
 * A mosque's recorded azaan (docs/api.md, "Recorded azaan"): one file per mosque, kept in the database (table
 * `recordings`, migration 017) so every process sharing the store serves it, played to the mosque's entitled
 * players when the live azaan is missed. Players fetch it like the stream, with their lease on each request.
 */

export type RecordingFormat = 'mp3' | 'vorbis' | 'opus';

/** What a download answers with: RFC 3003 for MP3, RFC 5334 (and RFC 7845 §9 for Opus) for Ogg. */
const CONTENT_TYPE: Record<RecordingFormat, string> = { mp3: 'audio/mpeg', vorbis: 'audio/ogg; codecs=vorbis', opus: 'audio/ogg; codecs=opus' };
const FORMAT_NAME: Record<RecordingFormat, string> = { mp3: 'MP3', vorbis: 'Ogg Vorbis', opus: 'Ogg Opus' };

/** The media types an upload may be sent as, and the formats each may hold. */
export const UPLOAD_TYPES: Readonly<Record<string, readonly RecordingFormat[]>> = { 'audio/mpeg': ['mp3'], 'audio/ogg': ['vorbis', 'opus'], 'audio/opus': ['opus'] };
export const MAX_RECORDING_SECONDS = 600;

/**
 * The lowest bitrate an MPEG layer III frame can have (ISO/IEC 11172-3 and 13818-3 bitrate tables): a file
 * whose bytes fall short of it for the length its header states was cut short.
 */
const MIN_MP3_BITRATE: Record<string, number> = { '1': 32_000, '2': 8_000, '2.5': 8_000 };
/** How far the bytes may fall short of the stated length (a last partial frame, a rounded header). */
const CUT_TOLERANCE_S = 0.25;

export interface InspectedRecording {
  format: RecordingFormat;
  contentType: string;
  durationS: number;
  bytes: number;
  sha256: string;
}

/** The essence of a Content-Type header (`audio/ogg; codecs=opus` -> `audio/ogg`), lower-cased. */
export const mediaTypeOf = (header: string | undefined) => (header ?? '').split(';', 1)[0]!.trim().toLowerCase();

function formatOf(container: string | undefined, codec: string | undefined): RecordingFormat | null {
  if (container === 'MPEG' && /^MPEG (1|2|2\.5) Layer 3$/.test(codec ?? '')) return 'mp3';
  if (container === 'Ogg' && codec === 'Vorbis I') return 'vorbis';
  if (container === 'Ogg' && codec === 'Opus') return 'opus';
  return null;
}

/**
 * Whether the file ends before the length its headers state: the Ogg reader reaches the end before the last
 * page; an MPEG stream holds fewer bytes than its bitrate needs for the length its Info header counts (constant
 * bitrate), or fewer than even the lowest bitrate needs (variable bitrate, whose average is known only from
 * the bytes themselves, so a VBR file cut at its middle is not caught here: players stop where it ends).
 */
function looksCut(meta: IAudioMetadata, bytes: number): boolean {
  if (meta.quality.warnings.some((w) => /end-of-stream|exceeds file size|truncat/i.test(w.message))) return true;
  const { codec, codecProfile, bitrate, duration } = meta.format;
  if (meta.format.container !== 'MPEG' || !duration) return false;
  if (codecProfile === 'CBR' && bitrate && bytes * 8 < bitrate * (duration - CUT_TOLERANCE_S)) return true;
  const version = /^MPEG ([\d.]+) /.exec(codec ?? '')?.[1] ?? '1';
  return (bytes * 8) / duration < (MIN_MP3_BITRATE[version] ?? 8_000) * 0.95;
}

let parser: Promise<typeof import('music-metadata')> | null = null;

/**
 * Reads an uploaded file with music-metadata (the maintained parser, not frame parsing of our own) and keeps
 * it only if it is a whole MP3, Ogg Vorbis or Ogg Opus file of readable length within the limits, and of the
 * kind its media type says. Every refusal says what is wrong, in words the uploader can act on.
 */
export async function inspectRecording(data: Uint8Array, mediaType: string, maxBytes: number): Promise<Result<InspectedRecording>> {
  const declared = UPLOAD_TYPES[mediaType];
  if (!declared) return fail('unsupported_media_type', 'A recording must be sent as audio/mpeg, audio/ogg or audio/opus.');
  if (data.byteLength > maxBytes) return fail('payload_too_large', `The recording is larger than ${maxBytes} bytes (RECORDING_MAX_BYTES).`);
  if (data.byteLength === 0) return fail('validation_failed', 'The file is empty.');
  // Loaded on the first upload, not at start: most services never take one (idle memory).
  const { parseBuffer } = await (parser ??= import('music-metadata'));
  let meta: IAudioMetadata;
  try {
    meta = await parseBuffer(data, { size: data.byteLength }, { duration: true, skipCovers: true });
  } catch {
    return fail('validation_failed', 'The file is not audio Minaret can read: upload an MP3, Ogg Vorbis or Ogg Opus file.');
  }
  const format = formatOf(meta.format.container, meta.format.codec);
  const found = [meta.format.container, meta.format.codec].filter(Boolean).join(' ') || 'of an unknown kind';
  if (!format) return fail('validation_failed', `The file is ${found} audio; a recorded azaan must be MP3, Ogg Vorbis or Ogg Opus.`);
  if (!declared.includes(format)) return fail('validation_failed', `The file is ${FORMAT_NAME[format]} but was sent as ${mediaType}.`);
  if (looksCut(meta, data.byteLength)) return fail('validation_failed', 'The file ends before its stated length: it looks cut short. Upload the whole file.');
  const durationS = meta.format.duration;
  if (durationS === undefined || !Number.isFinite(durationS) || durationS <= 0) return fail('validation_failed', 'The length of the recording cannot be read from the file.');
  if (durationS > MAX_RECORDING_SECONDS) return fail('validation_failed', `The recording lasts ${Math.round(durationS)} s; at most ${MAX_RECORDING_SECONDS} s (10 minutes) is accepted.`);
  const sha256 = crypto.createHash('sha256').update(data).digest('hex');
  return ok({ format, contentType: CONTENT_TYPE[format], durationS, bytes: data.byteLength, sha256 });
}

// ---- the table ----

/** A row of `recordings` (generated/tables.ts) without its bytes, which are read only for a download. */
export type RecordingRow = Omit<Selectable<RecordingsTable>, 'data'>;

/** What the API shows of a recording (never its bytes). */
export function toRecording(row: RecordingRow) {
  return { content_type: row.content_type, bytes: row.bytes, duration_s: Math.round(row.duration_s * 1000) / 1000, sha256: row.sha256, uploaded_at: toIsoString(row.uploaded_at) };
}

/** Where a player fetches a mosque's recording, relative to the service's origin; it adds `?lease=<its lease>`. */
export const recordingPath = (mosqueId: string) => `/api/v1/audio/recordings/${encodeURIComponent(mosqueId)}`;

/**
 * The address a player is sent to play the recording (a fallback broadcast): `origin` is PUBLIC_URL (or the origin
 * the player's credentials name), `lease` the player's own lease token, carried as the stream address carries it.
 */
export function recordingUrl(origin: string, mosqueId: string, lease: string | null = null): string {
  return `${origin.replace(/\/+$/, '')}${recordingPath(mosqueId)}${lease ? `?lease=${encodeURIComponent(lease)}` : ''}`;
}

/** Bytes of recordings kept in memory for downloads, whole files, the least recently stored first to go. */
export const RECORDING_CACHE_BYTES = 32 * 1024 * 1024;

/** Each mosque's recorded azaan. An upload and a removal write their activity entry in the same transaction. */
export function createRecordings(deps: { store: Store; clock: Clock; activity: Pick<ActivityLog, 'record'>; cacheBytes?: number }) {
  const { store } = deps;
  // Keyed by content (SHA-256), not by mosque: the metadata row is read on every download, so a file replaced
  // by another process is never served stale; the same file under two mosques is held once.
  const cache = createByteCache(deps.cacheBytes ?? RECORDING_CACHE_BYTES);

  /** Told once an upload or a removal committed (src/schedule/build.ts: the players' offline plans carry the recording). */
  const listeners: Array<(mosqueId: string) => void> = [];
  const changed = (mosqueId: string) => {
    for (const l of listeners) l(mosqueId);
  };
  const find = async (mosqueId: string, q: Queries = store): Promise<RecordingRow | null> =>
    (await q.selectFrom('recordings').select(['mosque_id', 'content_type', 'bytes', 'duration_s', 'sha256', 'uploaded_by', 'uploaded_at'])
      .where('mosque_id', '=', mosqueId).executeTakeFirst()) ?? null;

  return {
    find,
    listen: (listener: (mosqueId: string) => void) => void listeners.push(listener),

    /** Stores (or replaces) the mosque's recording; `created` tells which. */
    async save(mosqueId: string, file: InspectedRecording, data: Uint8Array, actorId: string | null): Promise<{ created: boolean; row: RecordingRow }> {
      const row: RecordingRow = {
        mosque_id: mosqueId, content_type: file.contentType, bytes: file.bytes, duration_s: file.durationS, sha256: file.sha256,
        uploaded_by: actorId, uploaded_at: toUnixSeconds(deps.clock()),
      };
      // Whether it existed is read in the transaction that writes, so two uploads at once answer 201 once.
      const created = await store.transaction().execute(async (trx) => {
        const existed = await trx.selectFrom('recordings').select('mosque_id').where('mosque_id', '=', mosqueId).executeTakeFirst();
        await trx.insertInto('recordings').values({ ...row, data: Buffer.from(data.buffer, data.byteOffset, data.byteLength) })
          .onConflict((oc) => oc.column('mosque_id').doUpdateSet((eb) => ({
            content_type: eb.ref('excluded.content_type'), bytes: eb.ref('excluded.bytes'), duration_s: eb.ref('excluded.duration_s'),
            sha256: eb.ref('excluded.sha256'), uploaded_by: eb.ref('excluded.uploaded_by'), uploaded_at: eb.ref('excluded.uploaded_at'), data: eb.ref('excluded.data'),
          })))
          .execute();
        await deps.activity.record(trx, { mosqueId, actorUserId: actorId, kind: 'recording.uploaded', subjectId: null, data: { bytes: file.bytes, duration_s: toRecording(row).duration_s, content_type: file.contentType } });
        return existed === undefined;
      });
      changed(mosqueId);
      return { created, row };
    },

    /** Removes the mosque's recording; false when it had none. */
    async remove(mosqueId: string, actorId: string | null): Promise<boolean> {
      const removed = await store.transaction().execute(async (trx) => {
        const r = await trx.deleteFrom('recordings').where('mosque_id', '=', mosqueId).executeTakeFirst();
        if (r.numDeletedRows === 0n) return false;
        await deps.activity.record(trx, { mosqueId, actorUserId: actorId, kind: 'recording.deleted', subjectId: null });
        return true;
      });
      if (removed) changed(mosqueId);
      return removed;
    },

    /** The recording and its bytes, for a download (or a fallback broadcast); null when the mosque has none. */
    async read(mosqueId: string): Promise<{ row: RecordingRow; data: Buffer } | null> {
      const row = await find(mosqueId);
      if (!row) return null;
      const hit = cache.get(row.sha256);
      if (hit) return { row, data: hit };
      const stored = await store.selectFrom('recordings').select('data').where('mosque_id', '=', mosqueId).where('sha256', '=', row.sha256).executeTakeFirst();
      if (!stored) return null; // replaced or removed between the two reads
      cache.remember(row.sha256, stored.data);
      return { row, data: stored.data };
    },
  };
}

export type Recordings = ReturnType<typeof createRecordings>;

// ---- who may fetch it ----

/** `no_lease` is this door's own; the rest are the one lease rule's (src/audio/lease-admission.ts), as listener_add names them. */
export type RecordingRefusal = 'no_lease' | LeaseRefusal;
export type RecordingAdmission = { ok: true } | { ok: false; reason: RecordingRefusal };

/**
 * The gate of a download: `lease` is a player's entitlement lease, `ticket` a member's listener ticket (from
 * the console), as the `?lease=` and `?ticket=` of the request carry them. The composition root may hand in
 * another, as long as a lease is decided by `admitLease`, so every door admits the same players.
 */
export type AdmitRecording = (lease: string | null, ticket: string | null, mosqueId: string) => RecordingAdmission | Promise<RecordingAdmission>;

/**
 * The default gate: the lease must admit its player by the rule Icecast's listener gate applies (src/audio/lease-admission.ts:
 * signed with the lease key, for this mosque, unexpired, its player enabled and bound there with its owner's membership
 * approved now, and the very lease the player holds, not one a rotated password superseded), on every request.
 * This default admits no member ticket (leases only). `facts` is asked anew for each request (the time, memory).
 */
export function leaseAdmission(facts: () => LeaseFacts): AdmitRecording {
  return async (lease, _ticket, mosqueId) => {
    if (!lease) return { ok: false, reason: 'no_lease' };
    const admitted = await admitLease(lease, mosqueId, facts());
    return admitted.ok ? { ok: true } : { ok: false, reason: admitted.reason };
  };
}
