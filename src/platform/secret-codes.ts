import crypto from 'node:crypto';

/** 6 decimal digits from a CSPRNG, uniformly distributed. */
export function randomDigits(count = 6): string {
  return crypto.randomInt(0, 10 ** count).toString().padStart(count, '0');
}

/** 256 random bits, URL-safe. */
export function randomToken(bytes = 32): string {
  return crypto.randomBytes(bytes).toString('base64url');
}

/** Keyed hash for short codes and one-time tokens: a database dump alone cannot brute-force them offline. */
export function keyedHash(key: Buffer, value: string): string {
  return crypto.createHmac('sha256', key).update(value).digest('hex');
}

/** Constant-time comparison of two hex strings (false when either is not hex of the same length). */
export function hexEquals(a: string, b: string): boolean {
  if (a.length !== b.length || !/^[0-9a-f]*$/.test(a) || !/^[0-9a-f]*$/.test(b)) return false;
  return crypto.timingSafeEqual(Buffer.from(a, 'hex'), Buffer.from(b, 'hex'));
}
