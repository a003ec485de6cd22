import crypto from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Store } from '../platform/store/store.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, invalid, ok, type Result } from '../platform/failure.ts';
import type { DeviceKind } from '../devices/device-config.ts';
import type { FirmwareImagesTable } from '../../generated/tables.ts';
import { digestOf, verifyDigest } from '../platform/keys/signatures.ts';
import { createByteCache } from '../platform/memory/byte-cache.ts';

/**
 * Firmware images (docs/api.md, "Firmware updates"): uploaded by a superadmin, each with an Ed25519 signature of its
 * SHA-256 digest made offline, checked here against FIRMWARE_PUBLIC_KEY before anything is stored. Images never
 * change, so their bytes are kept in memory once read (1,000 devices downloading one image read it once).
 */
export type ImageRow = Omit<Selectable<FirmwareImagesTable>, 'data'>;

/** What the API shows of an image: its row, without who uploaded it, with its kind typed and its time in ISO 8601. */
export type FirmwareImage = Omit<ImageRow, 'kind' | 'uploaded_by' | 'created_at'> & { kind: DeviceKind; created_at: string };

export const toImage = (row: ImageRow): FirmwareImage => ({
  id: row.id, kind: row.kind as DeviceKind, hw_rev: row.hw_rev, version: row.version, sha256: row.sha256, size: row.size,
  signature: row.signature, notes: row.notes, created_at: toIsoString(row.created_at),
});

/** Semantic Versioning 2.0.0 §2, §9, §10: MAJOR.MINOR.PATCH, an optional pre-release and build metadata. */
export const SEMVER = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;
export { HW_REV } from '../devices/device-config.ts';
/** Bytes of images kept in memory for downloads, the least recently stored first to go. */
export const IMAGE_CACHE_BYTES = 64 * 1024 * 1024;
const COLUMNS = ['id', 'kind', 'hw_rev', 'version', 'sha256', 'size', 'signature', 'notes', 'uploaded_by', 'created_at'] as const;

export interface NewImage {
  kind: DeviceKind;
  hwRev: string;
  version: string;
  data: Uint8Array;
  signature: string;
  notes: string | null;
  by: string;
}

export function createFirmwareImages(deps: { store: Store; clock: Clock; key: crypto.KeyObject; cacheBytes?: number }) {
  const { store } = deps;
  const cache = createByteCache(deps.cacheBytes ?? IMAGE_CACHE_BYTES);
  const find = async (id: string): Promise<ImageRow | null> =>
    (await store.selectFrom('firmware_images').select(COLUMNS).where('id', '=', id).executeTakeFirst()) ?? null;
  const named = async (kind: string, hwRev: string, version: string): Promise<ImageRow | null> =>
    (await store.selectFrom('firmware_images').select(COLUMNS).where('kind', '=', kind).where('hw_rev', '=', hwRev).where('version', '=', version).executeTakeFirst()) ?? null;

  /**
     * Checks the signature and stores the image. The same kind, revision and version again: the same bytes answer
     * the stored image (`created` false), other bytes a conflict: an image a device may hold never changes.
     */
  const save = async (input: NewImage): Promise<Result<{ created: boolean; row: ImageRow }>> => {
      const digest = digestOf(input.data);
      if (!verifyDigest(deps.key, digest.raw, input.signature)) {
        return invalid('signature', 'does not verify against FIRMWARE_PUBLIC_KEY: sign the image with `minaret firmware sign` and the matching private key');
      }
      const existing = await named(input.kind, input.hwRev, input.version);
      if (existing) return existing.sha256 === digest.hex ? ok({ created: false, row: existing }) : fail('conflict', `${input.kind} ${input.hwRev} ${input.version} is stored already with other bytes: an image never changes, give it a new version`);
      const row: ImageRow = {
        id: crypto.randomUUID(), kind: input.kind, hw_rev: input.hwRev, version: input.version, sha256: digest.hex, size: input.data.byteLength,
        signature: input.signature.trim(), notes: input.notes, uploaded_by: input.by, created_at: toUnixSeconds(deps.clock()),
      };
      const inserted = await store.insertInto('firmware_images').values({ ...row, data: Buffer.from(input.data.buffer, input.data.byteOffset, input.data.byteLength) })
        .onConflict((oc) => oc.columns(['kind', 'hw_rev', 'version']).doNothing()).executeTakeFirst();
      // Two uploads of one version at once: the first stored wins, the second is answered as a repeat or a conflict.
      if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) === 0) return save(input);
      return ok({ created: true, row });
  };

  return {
    find,
    save,

    /** Every image, newest first, without its bytes. */
    list: async (): Promise<ImageRow[]> => store.selectFrom('firmware_images').select(COLUMNS).orderBy('created_at', 'desc').orderBy('id').execute(),

    /** Removes an image; `inUse` (an unfinished rollout names it) refuses. */
    async remove(id: string, inUse: (id: string) => Promise<boolean>): Promise<Result<void>> {
      if (!(await find(id))) return fail('not_found', 'No firmware image has that id.');
      if (await inUse(id)) return fail('conflict', 'An unfinished rollout offers this image: cancel it first.');
      await store.deleteFrom('firmware_images').where('id', '=', id).execute();
      cache.drop(id);
      return ok(undefined);
    },

    /** The image and its bytes, for a download; null when there is none. */
    async read(id: string): Promise<{ row: ImageRow; data: Buffer } | null> {
      const row = await find(id);
      if (!row) return null;
      const hit = cache.get(id);
      if (hit) return { row, data: hit };
      const stored = await store.selectFrom('firmware_images').select('data').where('id', '=', id).executeTakeFirst();
      if (!stored) return null;
      cache.remember(id, stored.data);
      return { row, data: stored.data };
    },
  };
}

export type FirmwareImages = ReturnType<typeof createFirmwareImages>;
