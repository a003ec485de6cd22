import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Reads a secret kept in the data folder, creating it (random, mode 0600) on first use.
 * Returns whether it was created so the caller can warn.
 */
export function loadOrCreateSecretFile(dataDir: string, name: string, bytes = 32): { value: string; created: boolean } {
  const file = path.join(dataDir, name);
  try {
    return { value: fs.readFileSync(file, 'utf8').trim(), created: false };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  fs.mkdirSync(dataDir, { recursive: true });
  const value = crypto.randomBytes(bytes).toString('base64url');
  // 'wx': two processes starting at once must not overwrite each other's secret.
  try {
    fs.writeFileSync(file, value + '\n', { mode: 0o600, flag: 'wx' });
    return { value, created: true };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return { value: fs.readFileSync(file, 'utf8').trim(), created: false };
  }
}

/** Derives an independent subkey from a master secret, so one setting can key several purposes. */
export function deriveKey(master: string | Buffer, purpose: string, length = 32): Buffer {
  return Buffer.from(crypto.hkdfSync('sha256', master, Buffer.alloc(0), `minaret/${purpose}`, length));
}
