import * as v from 'valibot';
import { isSyntheticEmail, normalizeEmail, normalizePhone, type Normalized } from '../src/platform/identifiers.ts';

/** Request shapes shared by several route files. Messages never quote the input. */
export const hex64 = v.pipe(v.string(), v.regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hexadecimal characters'), v.toLowerCase());

/** An identifier through its one normaliser (src/platform/identifiers.ts); a refusal becomes the issue's message. */
const normalizedBy = (normalize: (raw: string) => Normalized) =>
  v.rawTransform<string, string>(({ dataset, addIssue, NEVER }) => {
    const result = normalize(dataset.value);
    if (result.ok) return result.value;
    addIssue({ message: result.reason });
    return NEVER;
  });

// The phone.invalid domain is reserved for phone-only accounts: anyone who could take
// phone-<hex>@phone.invalid would block that phone's own signup for good.
export const email = v.pipe(
  v.string(),
  v.maxLength(1024, 'is too long'),
  v.description('Kept Unicode NFKC-normalised, trimmed and lower-cased; invisible and control characters, and letters of look-alike scripts mixed in one part, are refused (docs/api.md#identifiers)'),
  normalizedBy(normalizeEmail),
  v.check((e) => !isSyntheticEmail(e), 'must not be in the reserved .invalid domain (RFC 2606)'),
);

export const phone = v.pipe(
  v.string(),
  v.description('International form (+ and the country code), kept as E.164: +44 (0)20 7946 0123 is +442079460123 (docs/api.md#identifiers)'),
  normalizedBy(normalizePhone),
);

export const id = v.pipe(v.string(), v.minLength(1, 'must not be empty'), v.maxLength(64, 'is too long'));

export const httpUrl = v.pipe(
  v.string(),
  v.maxLength(2048, 'is too long'),
  // The URL parser drops tabs and line breaks (WHATWG URL), but the string as sent is what is kept.
  v.check((s) => !UNSAFE_TEXT.test(s), 'must not contain control or text-direction characters'),
  v.check((s) => {
    try {
      const u = new URL(s);
      return u.protocol === 'http:' || u.protocol === 'https:';
    } catch {
      return false;
    }
  }, 'must be an http or https URL'),
);

export const timezone = v.pipe(
  v.string(),
  v.check((tz) => {
    try {
      new Intl.DateTimeFormat('en', { timeZone: tz });
      return true;
    } catch {
      return false;
    }
  }, 'must be an IANA time zone, like Europe/Oslo'),
);

/**
 * Characters refused in names and other free text: controls (C0 with tab, CR and LF; DEL; C1), which end a
 * line in a log, a header or a calendar feed, and the bidi embeddings, overrides and isolates (U+202A-202E,
 * U+2066-2069), which make text read in another order than it is stored (the "Trojan Source" trick), and the
 * line and paragraph separators. Joiners and direction marks (U+200C-200F) stay: Persian and Urdu names use them.
 */
const UNSAFE_TEXT = /[\p{Cc}\p{Cs}\u2028\u2029\u202A-\u202E\u2066-\u2069]/u;

/** One line of free text a person typed (a name, a title), trimmed, at most `max` characters. */
export const freeText = (max: number) =>
  v.pipe(v.string(), v.check((s) => !UNSAFE_TEXT.test(s), 'must not contain control or text-direction characters'), v.trim(), v.maxLength(max, 'is too long'));

export const name = v.pipe(freeText(200), v.minLength(1, 'must not be empty'));

/**
 * A whole number from a query string, at most `max`: a number past 2^53 would lose digits on the way to the
 * database (and one past 2^63 overflows SQLite's integer), so every paging parameter is bounded here.
 */
const wholeNumber = (max: number, what: string) =>
  v.pipe(v.string(), v.regex(/^\d{1,16}$/, `must be ${what}`), v.description(`A whole number, at most ${max}`), v.transform(Number), v.maxValue(max, `must be at most ${max}`));

/** ?limit= as a whole number within bounds, with a default. */
export const limit = (fallback: number, max: number) =>
  v.optional(
    v.pipe(wholeNumber(max, 'a whole number'), v.minValue(1, 'must be at least 1')),
    String(fallback),
  );

/** ?offset= of a list paged by position, 0 by default. Past a million rows, page with a narrower filter. */
export const MAX_OFFSET = 1_000_000;
export const offset = v.optional(wholeNumber(MAX_OFFSET, 'a whole number'), '0');

/** ?before=<id> of a list paged by id, newest first: a row id, never past Number.MAX_SAFE_INTEGER. */
export const before = (what: string) => v.optional(wholeNumber(Number.MAX_SAFE_INTEGER, what));

/** A query's point in time (RFC 3339, e.g. 2026-01-01T10:00:00Z), as Unix seconds for the store. */
export const isoInstant = v.pipe(
  v.string(), v.isoTimestamp('must be a time such as 2026-01-01T10:00:00Z'), v.description('An RFC 3339 time'),
  v.transform((s) => Math.floor(Date.parse(s) / 1000)),
);
