import type { Duplex } from 'node:stream';
import type { Failure, Result } from '../src/platform/failure.ts';

/** Failure -> HTTP status, in one table (docs/api.md, "Errors"). A new Failure does not compile until it is mapped here. */
export const httpStatus = {
  validation_failed: 400,
  invalid_token: 400,
  // RFC 8628 §3.5: a device's poll before it has credentials; the device reads the code, never the status alone.
  authorization_pending: 400,
  slow_down: 400,
  expired_token: 400,
  access_denied: 400,
  unauthorized: 401,
  invalid_credentials: 401,
  invalid_code: 401,
  invalid_otp: 401,
  stale_timestamp: 401,
  forbidden: 403,
  address_unproven: 403,
  membership_banned: 403,
  not_found: 404,
  conflict: 409,
  device_offline: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  rate_limited: 429,
  service_busy: 503,
  storage_unavailable: 503,
  device_timeout: 504,
  internal_error: 500,
} as const satisfies Record<Failure, number>;

const defaultMessage = {
  validation_failed: 'The request does not match the schema.',
  invalid_token: 'The token is unknown, used or expired.',
  authorization_pending: 'Nobody has approved this pairing yet; poll again after the interval.',
  slow_down: 'Polled faster than the interval; wait 5 seconds longer between polls from now on.',
  expired_token: 'This pairing is unknown, expired or already used; start a new one.',
  access_denied: 'This pairing was denied or is void; start a new one if it was a mistake.',
  unauthorized: 'A valid bearer token is required.',
  invalid_credentials: 'The credentials are not valid.',
  invalid_code: 'The code is wrong, expired or used up.',
  invalid_otp: 'The verification failed.',
  stale_timestamp: 'The timestamp is more than 300 seconds from server time.',
  forbidden: 'You are not allowed to do this.',
  address_unproven: 'Confirm your email or phone first: an account holds nothing until one of its addresses is confirmed (POST /me/addresses/confirm).',
  membership_banned: 'You are banned from this mosque.',
  not_found: 'Not found.',
  conflict: 'That value is already taken.',
  device_offline: 'The device is not connected.',
  payload_too_large: 'The body is larger than 64 KiB.',
  unsupported_media_type: 'The body must be JSON, sent with Content-Type: application/json.',
  range_not_satisfiable: 'The requested range lies past the end of the file.',
  rate_limited: 'Too many requests; try again later.',
  service_busy: 'The service is busy; try again shortly.',
  storage_unavailable: 'The database cannot take writes right now (full or busy); reading still works. Try again later.',
  device_timeout: 'The device did not acknowledge the command in time.',
  internal_error: 'Internal error.',
} satisfies Record<Failure, string>;

export interface ErrorDetail {
  path: string;
  message: string;
}

/** An expected failure raised from a handler; onError turns it into the contract's error body. */
export class ApiError extends Error {
  readonly failure: Failure;
  readonly details: ErrorDetail[] | undefined;
  readonly headers: Record<string, string> | undefined;

  constructor(failure: Failure, message?: string, opts: { details?: ErrorDetail[]; headers?: Record<string, string> } = {}) {
    super(message ?? defaultMessage[failure]);
    this.failure = failure;
    this.details = opts.details;
    this.headers = opts.headers;
  }
}

export function errorBody(failure: Failure, message?: string, details?: ErrorDetail[]) {
  const error: { code: Failure; message: string; details?: ErrorDetail[] } = { code: failure, message: message ?? defaultMessage[failure] };
  if (details) error.details = details;
  return { error };
}

/** The value of a successful Result; a failure becomes the contract's error answer. */
export function unwrap<T>(result: Result<T>): T {
  if (result.ok) return result.value;
  const headers = result.retryAfterSeconds === undefined ? undefined : { 'Retry-After': String(result.retryAfterSeconds) };
  throw new ApiError(result.failure, result.message, { ...(headers && { headers }), ...(result.details && { details: result.details }) });
}

const CLIENT_ERRORS: Record<string, { status: number; reason: string; code: string; message: string }> = {
  HPE_HEADER_OVERFLOW: { status: 431, reason: 'Request Header Fields Too Large', code: 'payload_too_large', message: 'The request line and headers are larger than 16 KiB.' },
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, reason: 'Request Timeout', code: 'request_timeout', message: 'The request was not received in time.' },
};
const BAD_REQUEST = { status: 400, reason: 'Bad Request', code: 'bad_request', message: 'The request is not valid HTTP.' };

/**
 * Node's HTTP parser answers a request it cannot parse (a URL or headers over 16 KiB, bad framing) by
 * itself, before any route, with an empty body; docs/api.md, "Errors" wants every error in the error shape, so the
 * server's 'clientError' listener answers here instead.
 */
export function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  // A reset peer cannot read an answer; a response already under way cannot take a second one.
  if (err.code === 'ECONNRESET' || !socket.writable || (socket as { _httpMessage?: unknown })._httpMessage) return void socket.destroy();
  const e = CLIENT_ERRORS[err.code ?? ''] ?? BAD_REQUEST;
  const body = JSON.stringify({ error: { code: e.code, message: e.message } });
  socket.end(`HTTP/1.1 ${e.status} ${e.reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}
