// The console talks to the public HTTP API only. The access token lives in this module's memory and
// nowhere else (no localStorage, no cookie): injected script cannot read it from storage, the API stays
// bearer-only with no CSRF surface, and a reload asks to sign in again (docs/console.md).
import { t } from './i18n.js';

let session = null; // { token, user: {id, email, role} }
const listeners = new Set();

export const currentUser = () => session?.user ?? null;
export const onSessionChange = (fn) => listeners.add(fn);
export function signIn(tokenResponse) {
  session = { token: tokenResponse.access_token, user: tokenResponse.user };
  listeners.forEach((fn) => fn());
}
export function signOut() {
  session = null;
  listeners.forEach((fn) => fn());
}

/** An API answer that is not 2xx: `code` is the contract's error code, `message` already translated. */
export class ApiFailure extends Error {
  constructor(status, code, serverMessage, details) {
    const key = `error.${code}`;
    const text = t(key);
    super(text === key ? serverMessage || t('error.unknown') : text);
    this.status = status;
    this.code = code;
    /** The service's own words (English), for a view that shows why a file was refused. */
    this.serverMessage = serverMessage ?? '';
    /** The API's {path, message} list for a 400 validation_failed (which field, and why). */
    this.details = Array.isArray(details) ? details : [];
  }
}

export function api(method, path, body) {
  return send(method, path, body === undefined ? undefined : JSON.stringify(body), body === undefined ? undefined : 'application/json');
}

/** A body that is not JSON (a File: the recorded azaan), sent as it is with its own media type. */
export function apiUpload(method, path, blob, contentType) {
  return send(method, path, blob, contentType);
}

async function send(method, path, body, contentType) {
  const headers = { Accept: 'application/json' };
  if (contentType) headers['Content-Type'] = contentType;
  if (session) headers.Authorization = `Bearer ${session.token}`;
  let res;
  try {
    res = await fetch(`/api/v1${path}`, { method, headers, body });
  } catch {
    throw new ApiFailure(0, 'network', '');
  }
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (res.ok) return data;
  const code = data?.error?.code ?? 'unknown';
  // A revoked or expired token: back to sign-in rather than a page of failures.
  if (res.status === 401 && code === 'unauthorized' && session) signOut();
  throw new ApiFailure(res.status, code, data?.error?.message, data?.error?.details);
}

const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const bytes = (s) => new TextEncoder().encode(s);

/** Contract 3: lowercase hex SHA-256. */
export async function sha256Hex(text) {
  return hex(await crypto.subtle.digest('SHA-256', bytes(text)));
}

/**
 * identifier_hash of an email, normalised as docs/api.md#identifiers says (NFKC, trimmed, lower-cased), or of a
 * phone. The console's forms take emails; a phone here must already be E.164 apart from spaces and dashes
 * (the full phone rule needs libphonenumber-js, which the console does not ship).
 */
export function identifierHash(identifier) {
  const s = identifier.normalize('NFKC').trim();
  return sha256Hex(s.includes('@') ? s.toLowerCase() : s.replace(/[^+\d]/g, ''));
}

/** Contract 4: HMAC-SHA256 keyed with the session token string; computed here so the OTP never leaves the page. */
export async function hmacHex(key, message) {
  const k = await crypto.subtle.importKey('raw', bytes(key), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return hex(await crypto.subtle.sign('HMAC', k, bytes(message)));
}
