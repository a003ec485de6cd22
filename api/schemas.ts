import * as v from 'valibot';
import { isSyntheticEmail, normalizeEmail, normalizePhone } from '../src/platform/identifiers.ts';

/** Request shapes shared by several route files. Messages never quote the input. */
export const hex64 = v.pipe(v.string(), v.regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hexadecimal characters'), v.toLowerCase());

// The phone.invalid domain is reserved for phone-only accounts: anyone who could take
// phone-<hex>@phone.invalid would block that phone's own signup for good.
export const email = v.pipe(
  v.string(),
  v.transform(normalizeEmail),
  v.check((e) => e !== null, 'must be an email address'),
  v.transform((e) => e as string),
  v.check((e) => !isSyntheticEmail(e), 'must not be in the reserved .invalid domain (RFC 2606)'),
);

export const phone = v.pipe(
  v.string(),
  v.transform(normalizePhone),
  v.check((p) => p !== null, 'must be a phone number in E.164 form, like +4712345678'),
  v.transform((p) => p as string),
);

export const id = v.pipe(v.string(), v.minLength(1, 'must not be empty'), v.maxLength(64, 'is too long'));

export const httpUrl = v.pipe(
  v.string(),
  v.maxLength(2048, 'is too long'),
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

export const name = v.pipe(v.string(), v.trim(), v.minLength(1, 'must not be empty'), v.maxLength(200, 'is too long'));

/** ?limit= as a whole number within bounds, with a default. */
export const limit = (fallback: number, max: number) =>
  v.optional(
    v.pipe(v.string(), v.regex(/^\d+$/, 'must be a whole number'), v.transform(Number), v.minValue(1, 'must be at least 1'), v.maxValue(max, `must be at most ${max}`)),
    String(fallback),
  );
