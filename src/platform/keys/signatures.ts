import crypto from 'node:crypto';
import { fail, ok, type Result } from '../failure.ts';

/**
 * Firmware signatures (docs/api.md, "Firmware updates"): Ed25519 (RFC 8032) over the image's SHA-256 digest, the
 * 32 raw bytes, so a signer hashes a large image once and signs 32 bytes, and a device checks the digest it
 * computed while downloading. The key is the operator's, made and kept offline; Minaret holds only the public half.
 */

/** The SPKI DER prefix of an Ed25519 public key (RFC 8410 §4): what turns 32 raw bytes into a key object. */
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** FIRMWARE_PUBLIC_KEY: a PEM public key, or the base64 of its 32 raw bytes; an Ed25519 key or an error. */
export function parseFirmwareKey(text: string): Result<crypto.KeyObject> {
  const trimmed = text.trim();
  try {
    const key = trimmed.includes('-----BEGIN')
      ? crypto.createPublicKey(trimmed.replace(/\\n/g, '\n'))
      : rawKey(Buffer.from(trimmed, 'base64'));
    if (!key) return fail('validation_failed', 'not the base64 of 32 bytes, nor a PEM public key');
    if (key.asymmetricKeyType !== 'ed25519') return fail('validation_failed', `an ${key.asymmetricKeyType ?? 'unknown'} key, not Ed25519`);
    return ok(key);
  } catch (err) {
    return fail('validation_failed', `not a public key: ${(err as Error).message}`);
  }
}

function rawKey(raw: Buffer): crypto.KeyObject | null {
  if (raw.length !== 32) return null;
  return crypto.createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
}

/** The hex SHA-256 of an image and the raw digest its signature covers. */
export function digestOf(image: Uint8Array): { hex: string; raw: Buffer } {
  const raw = crypto.createHash('sha256').update(image).digest();
  return { hex: raw.toString('hex'), raw };
}

/** Whether `signature` (base64, 64 bytes) is the key's Ed25519 signature of `digest`. */
export function verifyDigest(key: crypto.KeyObject, digest: Buffer, signature: string): boolean {
  const sig = Buffer.from(signature.trim(), 'base64');
  if (sig.length !== 64) return false;
  return crypto.verify(null, digest, key, sig);
}

/** The signer's side (`minaret firmware sign`): the base64 signature of an image's digest by a PEM private key. */
export function signDigest(privateKeyPem: string, digest: Buffer): string {
  const key = crypto.createPrivateKey(privateKeyPem);
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`an ${key.asymmetricKeyType ?? 'unknown'} key, not Ed25519`);
  return crypto.sign(null, digest, key).toString('base64');
}

/** A new key pair: the private key as PKCS #8 PEM, the public one as SPKI PEM and as the base64 of its 32 bytes. */
export function newKeyPair(): { privatePem: string; publicPem: string; publicRaw: string } {
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ed25519');
  const der = publicKey.export({ format: 'der', type: 'spki' });
  return {
    privatePem: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    publicPem: publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    publicRaw: der.subarray(ED25519_SPKI_PREFIX.length).toString('base64'),
  };
}
