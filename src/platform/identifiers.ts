import crypto from 'node:crypto';

/** Lowercase hex SHA-256, the shape of identifier_hash, password_hash and stored session hashes. */
export function sha256Hex(value: string | Buffer): string {
  return crypto.createHash('sha256').update(value).digest('hex');
}

/** contract 3: an email trimmed and lower-cased. */
export function normalizeEmail(raw: string): string | null {
  const email = raw.trim().toLowerCase();
  // Deliberately simple: one @, something on each side, a dot in the domain, no spaces.
  return /^[^\s@]{1,64}@[^\s@]+\.[^\s@]{2,}$/.test(email) && email.length <= 254 ? email : null;
}

/** contract 3: a phone in E.164, `+` and digits only. Spaces, dots, dashes and brackets are dropped first. */
export function normalizePhone(raw: string): string | null {
  const phone = raw.trim().replace(/[\s().-]/g, '');
  return /^\+[1-9]\d{6,14}$/.test(phone) ? phone : null;
}

export function identifierHash(normalized: string): string {
  return sha256Hex(normalized);
}

/** contract 3: a phone-only account's internal email. */
export function syntheticEmailForPhone(phoneHash: string): string {
  return `phone-${phoneHash.slice(0, 16)}@phone.invalid`;
}

/**
 * The email an account is left with when another account proved the address it claimed: in the `.invalid`
 * top-level domain (RFC 2606), so it can never be an address anyone proves or receives mail at.
 */
export function lostClaimEmail(userId: string): string {
  return `lost-${sha256Hex(userId).slice(0, 16)}@claim.invalid`;
}

/** A placeholder, not an address: a phone-only account's or one whose claim was lost. */
export function isSyntheticEmail(email: string): boolean {
  return email.endsWith('.invalid');
}
