/**
 * Expected outcomes that are not success. Each edge maps every member in one table
 * (`satisfies Record<Failure, ...>`), so adding a member breaks the build until it is mapped.
 */
export type Failure =
  | 'validation_failed'
  | 'invalid_token'
  | 'authorization_pending'
  | 'slow_down'
  | 'expired_token'
  | 'access_denied'
  | 'unauthorized'
  | 'invalid_credentials'
  | 'invalid_code'
  | 'invalid_otp'
  | 'stale_timestamp'
  | 'forbidden'
  | 'address_unproven'
  | 'membership_banned'
  | 'not_found'
  | 'conflict'
  | 'device_offline'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'range_not_satisfiable'
  | 'rate_limited'
  | 'service_busy'
  | 'storage_unavailable'
  | 'device_timeout'
  | 'internal_error';

/** Which field of a request a `validation_failed` is about, and what is wrong with it. */
export interface FailureDetail {
  path: string;
  message: string;
}

/**
 * `retryAfterSeconds`: when trying again may succeed (rate limits, busy workers); edges pass it on.
 * `details`: the fields a rule refused (a value valid in shape but not for this record); edges pass them on.
 */
export type Result<T> =
  | { ok: true; value: T }
  | { ok: false; failure: Failure; message?: string; retryAfterSeconds?: number; details?: FailureDetail[] };

export function ok<T>(value: T): Result<T> {
  return { ok: true, value };
}

export function fail<T = never>(failure: Failure, message?: string): Result<T> {
  return message === undefined ? { ok: false, failure } : { ok: false, failure, message };
}

/** A failure that goes away with time: the edge tells the client when to try again. */
export function failUntil<T = never>(failure: Failure, retryAfterSeconds: number): Result<T> {
  return { ok: false, failure, retryAfterSeconds: Math.max(1, Math.ceil(retryAfterSeconds)) };
}

/** A value the request's shape allowed but a rule refuses, named by its field (docs/api.md, "Errors"). */
export function invalid<T = never>(path: string, message: string): Result<T> {
  return { ok: false, failure: 'validation_failed', details: [{ path, message }] };
}
