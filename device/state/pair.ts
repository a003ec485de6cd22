/**
 * Pairing (the OAuth 2.0 device authorization grant, RFC 8628, as Minaret answers it): ask the server for a code,
 * show it (and a QR code of the link that carries it) for a person to approve on their phone, then poll until
 * the server hands over this device's credentials, and store them (device/state/store.ts).
 *
 *   POST <server>/api/v1/devices/pairing        {kind, name?, fw, hw_rev} -> {device_code, user_code, verification_uri,
 *                                                verification_uri_complete, expires_in, interval}
 *   POST <server>/api/v1/devices/pairing/token  {device_code} -> 200 {device, credentials}, or 400 {error: {code}}
 *                                                with authorization_pending, slow_down, expired_token or access_denied
 *
 * A server that is not Minaret (HTML, another JSON, a 404, nothing listening) is a one-line error and nothing stored.
 */
import { credentialsOf, writeState, type DeviceState } from './store.ts';
import { qrLines } from './qr.ts';

export interface PairOptions {
  server: string;
  kind: 'stream_player' | 'transmitter';
  name?: string;
  fw: string;
  hwRev: string;
  stateDir: string;
  print: (line: string) => void;
  /** Waits between polls (tests may shorten nothing: the server's interval is the rule). */
  sleep?: (ms: number) => Promise<void>;
}

export type PairOutcome = { ok: true; file: string; state: DeviceState } | { ok: false; error: string };

interface Grant {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
}

const REQUEST_TIMEOUT_MS = 15_000;
/** RFC 8628 §3.5: slow_down adds 5 seconds to the polling interval, for this and every later request. */
const SLOW_DOWN_S = 5;

type Answer = { ok: true; status: number; body: unknown } | { ok: false; error: string };

async function postJson(url: string, body: unknown, server: string): Promise<Answer> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    return { ok: false, error: `cannot reach ${server}: ${cause?.code ?? cause?.message ?? (err as Error).message}` };
  }
  const text = await res.text().catch(() => '');
  if (res.status === 404) return { ok: false, error: `${server} is not a Minaret server (404 at ${new URL(url).pathname})` };
  try {
    return { ok: true, status: res.status, body: JSON.parse(text) as unknown };
  } catch {
    return { ok: false, error: `${server} is not a Minaret server (HTTP ${res.status}, ${res.headers.get('content-type') ?? 'no content type'}, not JSON)` };
  }
}

const isText = (v: unknown): v is string => typeof v === 'string' && v !== '';
const isPositive = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v > 0;

function grantOf(v: unknown): Grant | null {
  if (typeof v !== 'object' || v === null) return null;
  const g = v as Record<string, unknown>;
  if (!isText(g['device_code']) || !isText(g['user_code']) || !isText(g['verification_uri']) || !isText(g['verification_uri_complete'])) return null;
  if (!isPositive(g['expires_in']) || !isPositive(g['interval'])) return null;
  return g as unknown as Grant;
}

function errorCodeOf(v: unknown): string | null {
  const error = typeof v === 'object' && v !== null ? (v as Record<string, unknown>)['error'] : undefined;
  const code = typeof error === 'object' && error !== null ? (error as Record<string, unknown>)['code'] : undefined;
  return typeof code === 'string' ? code : null;
}

/** The server's base address: http(s) only, without a trailing slash. */
export function serverBase(raw: string): string | null {
  try {
    const u = new URL(raw);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
    return u.toString().replace(/\/+$/, '');
  } catch {
    return null;
  }
}

export async function pair(o: PairOptions): Promise<PairOutcome> {
  const base = serverBase(o.server);
  if (!base) return { ok: false, error: `--server must be an http(s) address, not ${JSON.stringify(o.server)}` };
  const sleep = o.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const asked = await postJson(`${base}/api/v1/devices/pairing`, { kind: o.kind, ...(o.name && { name: o.name }), fw: o.fw, hw_rev: o.hwRev }, base);
  if (!asked.ok) return asked;
  const grant = asked.status === 200 || asked.status === 201 ? grantOf(asked.body) : null;
  if (!grant) return { ok: false, error: `${base} is not a Minaret server (its answer to a pairing request is HTTP ${asked.status} without a pairing code)` };

  o.print(`To pair this ${o.kind === 'transmitter' ? 'transmitter' : 'player'}, open ${grant.verification_uri} and enter the code  ${grant.user_code}`);
  o.print(`or scan this link: ${grant.verification_uri_complete}`);
  for (const line of qrLines(grant.verification_uri_complete)) o.print(line);
  o.print('Waiting for approval...');

  const deadline = Date.now() + grant.expires_in * 1000;
  let intervalS = grant.interval;
  // RFC 8628 §3.5: at least `interval` between two polls, counted from when each was sent. Minaret holds a pending
  // poll open up to the interval and answers it the moment a person approves (docs/api.md, "Pairing a device"),
  // so the next poll follows a held answer at once; a server that answers at once is polled every interval.
  let sentAt = Date.now() - intervalS * 1000;
  while (Date.now() < deadline) {
    await sleep(Math.max(0, sentAt + intervalS * 1000 - Date.now()));
    sentAt = Date.now();
    const polled = await postJson(`${base}/api/v1/devices/pairing/token`, { device_code: grant.device_code }, base);
    if (!polled.ok) return polled;
    if (polled.status === 200) return store(o, base, polled.body);
    const code = polled.status === 400 ? errorCodeOf(polled.body) : null;
    if (code === 'authorization_pending') continue;
    if (code === 'slow_down') {
      intervalS += SLOW_DOWN_S;
      continue;
    }
    if (code === 'expired_token') return { ok: false, error: 'the pairing code expired before it was approved: run pair again' };
    if (code === 'access_denied') return { ok: false, error: 'pairing was refused on the server' };
    return { ok: false, error: `unexpected answer while waiting for approval: HTTP ${polled.status}${code ? ` ${code}` : ''}` };
  }
  return { ok: false, error: 'the pairing code expired before it was approved: run pair again' };
}

function store(o: PairOptions, base: string, body: unknown): PairOutcome {
  const b = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  const device = b['device'];
  const credentials = credentialsOf(b['credentials']);
  if (typeof device !== 'object' || device === null || !isText((device as Record<string, unknown>)['id']) || !credentials) {
    return { ok: false, error: `${base} approved the pairing but its answer holds no device id and credentials` };
  }
  const state: DeviceState = { server: base, device: device as DeviceState['device'], credentials };
  return { ok: true, file: writeState(o.stateDir, state), state };
}
