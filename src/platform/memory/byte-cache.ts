/**
 * Whole files kept in memory for downloads (firmware images, recorded azaan), bounded by their total bytes: a
 * file larger than the bound is never held, and storing one drops the least recently stored until it fits. The
 * files it holds never change under their key (an image id, a content digest), so nothing here expires.
 */
export function createByteCache(limitBytes: number) {
  const entries = new Map<string, Buffer>();
  let held = 0;
  const drop = (key: string) => {
    const old = entries.get(key);
    if (!old) return;
    entries.delete(key);
    held -= old.byteLength;
  };

  return {
    get: (key: string): Buffer | undefined => entries.get(key),
    drop,

    /** Keeps `data` under `key` if it fits the bound at all, dropping the least recently stored to make room. */
    remember(key: string, data: Buffer): void {
      drop(key);
      if (data.byteLength > limitBytes) return;
      for (const [oldest] of entries) {
        if (held + data.byteLength <= limitBytes) break;
        drop(oldest);
      }
      entries.set(key, data);
      held += data.byteLength;
    },

    /** The bytes held now, never above the bound. */
    heldBytes: (): number => held,
  };
}

export type ByteCache = ReturnType<typeof createByteCache>;
