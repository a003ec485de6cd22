// The console talks to the public HTTP API only, with bearer tokens like any app. Its tokens are short-lived
// (CONSOLE_TOKEN_TTL_MINUTES) and live in this module's memory only (no localStorage): right after a sign-in the
// page trades its fresh token for the console session cookie, which is HttpOnly (script never sees it),
// SameSite=Strict, and sent to /api/v1/auth/session only; from then on the page asks that route for the next
// token a minute before this one ends, after a 401, and once on load, so a reload stays signed in. Every cookie
// request carries X-Minaret-Console: 1 (the CSRF rule: docs/api.md "Console sessions", docs/console.md "Token storage").
import { t } from './i18n.js';

let session = null; // { token, user: {id, email, role}, fromCookie }
const listeners = new Set();
let refreshTimer = null;
let minting = null; // one request for a token at a time, however many callers wait on it

const SESSION_HEADERS = { Accept: 'application/json', 'X-Minaret-Console': '1' };
/** Ask for the next token this long before the current one ends. */
const REFRESH_MARGIN_S = 60;
const RETRY_AFTER_FAILURE_MS = 30_000;

export const currentUser = () => session?.user ?? null;
export const onSessionChange = (fn) => listeners.add(fn);
const announce = () => listeners.forEach((fn) => fn());

function adopt(tokenResponse, fromCookie) {
  session = { token: tokenResponse.access_token, user: tokenResponse.user, fromCookie };
  clearTimeout(refreshTimer);
  if (fromCookie) refreshTimer = setTimeout(() => void refresh(), Math.max(10, tokenResponse.expires_in - REFRESH_MARGIN_S) * 1000);
}

/**
 * A sign-in's token response: the page trades the token for the session cookie (the token stops working in the
 * trade) and goes on with the short-lived one it gets back. Where the service opens no session (plain http on a
 * LAN address, where the browser would drop the Secure cookie) the page keeps the token it has, as before.
 */
export async function signIn(tokenResponse) {
  adopt(tokenResponse, false);
  const res = await fetch('/api/v1/auth/session', {
    method: 'POST', headers: { ...SESSION_HEADERS, Authorization: `Bearer ${tokenResponse.access_token}` },
  }).catch(() => null);
  if (res?.status === 201) adopt(await res.json(), true);
  announce();
}

export function signOut() {
  session = null;
  clearTimeout(refreshTimer);
  announce();
}

/** A new token from the session cookie: 'ok', 'ended' (no live session: sign in again) or 'failed' (try later). */
function mint() {
  minting ??= (async () => {
    // docs/api.md "Console sessions": 204 when the browser holds no cookie (a signed-out visit: nothing to restore).
    const res = await fetch('/api/v1/auth/session/token', { method: 'POST', headers: SESSION_HEADERS, credentials: 'same-origin' }).catch(() => null);
    if (res?.status === 200) {
      adopt(await res.json(), true);
      return 'ok';
    }
    await res?.text().catch(() => {}); // read to its end, so the request finishes (a page then reaches network idle)
    return res?.status === 204 || res?.status === 401 ? 'ended' : 'failed';
  })().finally(() => { minting = null; });
  return minting;
}

async function refresh() {
  const outcome = await mint();
  if (outcome === 'ended' && session?.fromCookie) signOut();
  else if (outcome === 'failed' && session?.fromCookie) refreshTimer = setTimeout(() => void refresh(), RETRY_AFTER_FAILURE_MS);
}

/** On load, before the first page: a live session cookie signs the page back in (true), else it stays signed out. */
export async function restoreSession() {
  return (await mint()) === 'ok';
}

/**
 * A field the API named (its `path`, docs/api.md "Errors"), in the page's words where the console has them: the
 * settings page's names ("stream address"), else the path as the API spells it.
 */
function fieldName(path) {
  const [top, ...rest] = path.split('.');
  const known = t(`settings.what_${top}`);
  if (known === `settings.what_${top}`) return path;
  return `${known}${rest.length > 0 ? ` (${rest.join('.')})` : ''}`;
}

/** Each field a 400 validation_failed named, with the API's reason: "stream address: must be https". */
export function fieldProblems(details) {
  return (Array.isArray(details) ? details : []).filter((d) => d?.path).map((d) => `${fieldName(d.path)}: ${d.message}`);
}

/**
 * The one text every form shows for a refusal: the catalogue's sentence for the code, and for a validation failure
 * the fields the API named and why (a form that only said "something is missing" left people guessing).
 */
const SCHEMA_MISMATCH = 'The request does not match the schema.';
function refusalText(code, serverMessage, details) {
  const problems = code === 'validation_failed' ? fieldProblems(details) : [];
  if (problems.length > 0) return t('error.check_fields', { why: problems.join('; ') });
  // A domain rule's own sentence ("The account has no email to confirm."), not the schema's generic one.
  if (code === 'validation_failed' && serverMessage && serverMessage !== SCHEMA_MISMATCH) return t('error.check_fields', { why: serverMessage });
  const key = `error.${code}`;
  const text = t(key);
  return text === key ? serverMessage || t('error.unknown') : text;
}

/** An API answer that is not 2xx: `code` is the contract's error code, `message` already translated. */
export class ApiFailure extends Error {
  constructor(status, code, serverMessage, details) {
    super(refusalText(code, serverMessage, details));
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

/**
 * A body that is not JSON (a File: the recorded azaan, a firmware image), sent as it is with its own media type and
 * any headers of its own (a firmware image's X-Firmware-Signature: docs/api.md, "Firmware updates").
 */
export function apiUpload(method, path, blob, contentType, extra = {}) {
  return send(method, path, blob, contentType, false, extra);
}

async function send(method, path, body, contentType, retried = false, extra = {}) {
  const headers = { Accept: 'application/json', ...extra };
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
  if (res.status === 401 && code === 'unauthorized' && session) {
    // An expired short-lived token (a tab asleep past its refresh): one new token from the cookie, one more try.
    if (session.fromCookie && !retried && (await mint()) === 'ok') return send(method, path, body, contentType, true, extra);
    // A revoked session or token: back to sign-in rather than a page of failures.
    signOut();
  }
  throw new ApiFailure(res.status, code, data?.error?.message, data?.error?.details);
}

const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const bytes = (s) => new TextEncoder().encode(s);

/** Lowercase hex SHA-256 (docs/api.md, "Signing in"). */
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

/** docs/api.md, "Signing in", step 5: HMAC-SHA256 keyed with the session token string; computed here so the OTP never leaves the page. */
export async function hmacHex(key, message) {
  const k = await crypto.subtle.importKey('raw', bytes(key), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return hex(await crypto.subtle.sign('HMAC', k, bytes(message)));
}
