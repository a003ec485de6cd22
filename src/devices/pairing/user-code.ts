import crypto from 'node:crypto';

/**
 * RFC 8628 §6.1's alphabet: 20 consonants, no vowels (no word can be spelled by chance) and no look-alikes
 * (no 0/O, 1/I/L confusion: only letters, and none that read as digits). 8 of them are 20^8 ≈ 2.6 × 10^10 codes
 * (34.5 bits), enough while wrong guesses are limited (RFC 8628 §5.1) and a code lives 10 minutes.
 */
export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
export const USER_CODE_LENGTH = 8;

/** 8 letters from a CSPRNG, uniformly from the alphabet (crypto.randomInt has no modulo bias). */
export function randomUserCode(): string {
  let code = '';
  for (let i = 0; i < USER_CODE_LENGTH; i++) code += USER_CODE_ALPHABET[crypto.randomInt(0, USER_CODE_ALPHABET.length)];
  return code;
}

/** As a person reads and types it: `XXXX-XXXX` (RFC 8628 §6.1: a separator makes it easier to read). */
export function formatUserCode(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/**
 * What a person typed, as the code is hashed: case, spaces and dashes do not matter (RFC 8628 §6.1 advises
 * ignoring the separator and case); null when what is left cannot be a code, so it matches nothing.
 */
export function normalizeUserCode(typed: string): string | null {
  const letters = typed.toUpperCase().replace(/[\s-]/g, '');
  if (letters.length !== USER_CODE_LENGTH) return null;
  for (const ch of letters) if (!USER_CODE_ALPHABET.includes(ch)) return null;
  return letters;
}
