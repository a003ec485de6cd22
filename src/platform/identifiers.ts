import crypto from 'node:crypto';
import { parsePhoneNumberFromString } from 'libphonenumber-js';

/** Lowercase hex SHA-256, the shape of identifier_hash, password_hash and stored session hashes. */
export function sha256Hex(value: string | Buffer): string {
  return crypto.createHash('sha256').update(value).digest('hex');
}

/** An identifier in the one form that is stored and hashed, or why it cannot be one (said without quoting it). */
export type Normalized = { ok: true; value: string } | { ok: false; reason: string };

const refuse = (reason: string): Normalized => ({ ok: false, reason });

/**
 * Characters that change nothing a reader sees, or that control the terminal or the text's direction:
 * controls (C0, DEL, C1), format characters (zero-width space and joiners, soft hyphen, bidi marks, embeddings,
 * overrides and isolates, BOM), the rest of Unicode's default-ignorables, and lone surrogates. In an email they
 * would make two addresses that read the same, so they are refused rather than stripped (docs/api.md#identifiers).
 */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Default_Ignorable_Code_Point}]/u;

/**
 * Scripts whose letters pass for each other (Latin o, Cyrillic о, Greek ο, Armenian օ; Cherokee's capitals).
 * A part of an address holding letters of two of them is the mixed-script confusable of Unicode TS #39 §5.1:
 * it is refused. Letters of one script alone, or of other scripts, are addresses like any other.
 */
const LOOKALIKE_SCRIPTS = [/\p{Script=Latin}/u, /\p{Script=Greek}/u, /\p{Script=Cyrillic}/u, /\p{Script=Armenian}/u, /\p{Script=Cherokee}/u];

function mixesLookalikeScripts(part: string): boolean {
  return LOOKALIKE_SCRIPTS.filter((script) => script.test(part)).length > 1;
}

/**
 * An email as it is stored and hashed: Unicode NFKC, trimmed, lower-cased (docs/api.md#identifiers gives the
 * same function for clients). NFKC folds fullwidth and other compatibility forms (`ｏａ@` is `oa@`), so they
 * are one account. Refused: invisible or control characters anywhere, a local part or domain label mixing
 * look-alike scripts, and what is not an address (one @, no spaces, a dotted domain without empty labels).
 * Lengths are RFC 5321 §4.5.3.1's, in UTF-8 octets (RFC 6531 §3.3).
 */
export function normalizeEmail(raw: string): Normalized {
  if (INVISIBLE.test(raw)) return refuse('must not contain control, zero-width or text-direction characters');
  const email = raw.normalize('NFKC').trim().toLowerCase();
  const at = email.lastIndexOf('@');
  const local = email.slice(0, at);
  const labels = email.slice(at + 1).split('.');
  const shaped = at > 0 && !/[\s@]/.test(local) && labels.length > 1 && labels.every((l) => l !== '' && !/[\s@]/.test(l)) && labels.at(-1)!.length >= 2;
  if (!shaped || octets(local) > 64 || octets(email) > 254) return refuse('must be an email address');
  if ([local, ...labels].some(mixesLookalikeScripts)) return refuse('must not mix Latin, Greek, Cyrillic or other look-alike letters in one part of the address');
  return { ok: true, value: email };
}

const octets = (s: string) => Buffer.byteLength(s, 'utf8');

/** Digits after a `+`, with the spaces, dots, dashes, slashes and brackets people write between them. */
const INTERNATIONAL = /^\+[\d ().\-/]+$/;

/**
 * A phone as it is stored and hashed: E.164 (`+` and digits) as libphonenumber-js gives it, so `+44 (0)20 7946 0123`
 * and `+442079460123` are one number. Only international form is taken: without a country code the same digits
 * are different numbers in different countries. The number must be possible for its country (its length), not
 * in a range known to be assigned: ranges change faster than a deployed copy of the metadata, and a code sent to
 * the number proves it anyway. Letters (vanity numbers, "ext.") are refused, not dropped.
 */
export function normalizePhone(raw: string): Normalized {
  const text = raw.normalize('NFKC').trim();
  if (text.length > 40 || !INTERNATIONAL.test(text)) return refuse('must be a phone number in international form: + and the country code, like +44 20 7946 0123');
  const parsed = parsePhoneNumberFromString(text);
  if (!parsed || !parsed.isPossible()) return refuse('is not a possible phone number for its country code');
  return { ok: true, value: parsed.number };
}

export function identifierHash(normalized: string): string {
  return sha256Hex(normalized);
}

/** A phone-only account's internal email. */
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
