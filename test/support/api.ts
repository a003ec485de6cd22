import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import type { OutgoingMessage, Purpose } from '../../src/platform/notify.ts';
import { hmacHex, sha256, TEST_JWT_SECRET, type HttpResult, type TestService } from './service.ts';

/** Small helpers shared by the HTTP tests of the authentication surface (not a test file itself). */

export const AUTH = '/api/v1/auth';
export const SEVEN_DAYS_SECONDS = 7 * 24 * 3600;

/** identifier_hash of an email the way a client computes it: trimmed, lower-cased, hex SHA-256. */
export const emailId = (email: string) => sha256(email.trim().toLowerCase());

/** Every message of one purpose handed to the transport so far (after in-flight deliveries settle). */
export async function sent(ts: TestService, purpose: Purpose): Promise<OutgoingMessage[]> {
  await ts.service.notifier.idle();
  return ts.messages.filter((m) => m.purpose === purpose);
}

/** The newest message of one purpose; fails the test when there is none. */
export async function lastSent(ts: TestService, purpose: Purpose): Promise<OutgoingMessage> {
  const all = await sent(ts, purpose);
  const last = all.at(-1);
  assert.ok(last, `expected a ${purpose} message`);
  return last;
}

/** A 6-digit code that is certainly not `code`. */
export const otherCode = (code: string) => String((Number(code) + 1) % 1_000_000).padStart(6, '0');

/** The service's current time in Unix seconds (follows a manual clock). */
export const nowSeconds = (ts: TestService) => Math.floor(ts.clock() / 1000);

/** The superadmin verify digest: HMAC-SHA256(key = session_token, "otp|timestamp"). */
export const digest = (sessionToken: string, otp: string, timestamp: number) => hmacHex(sessionToken, `${otp}|${timestamp}`);

/** Asserts the contract's error body and status, and returns the body. */
export function assertError(res: HttpResult, status: number, code: string) {
  assert.equal(res.status, status, `expected ${status} ${code}, got ${res.status} ${JSON.stringify(res.body)}`);
  assert.equal(res.body?.error?.code, code);
  assert.equal(typeof res.body.error.message, 'string');
  assert.ok(res.body.error.message.length > 0);
  return res.body;
}

/** Asserts the exact token response of docs/api.md, "Signing in", and returns it. */
export function assertTokenResponse(res: HttpResult, status: number, user: { email: string; role: 'member' | 'superadmin'; id?: string }) {
  assert.equal(res.status, status, `expected ${status}, got ${res.status} ${JSON.stringify(res.body)}`);
  assert.deepEqual(Object.keys(res.body).sort(), ['access_token', 'expires_in', 'token_type', 'user']);
  assert.equal(res.body.token_type, 'Bearer');
  assert.equal(res.body.expires_in, 604800);
  assert.match(res.body.access_token, /^[\w-]+\.[\w-]+\.[\w-]+$/);
  assert.deepEqual(Object.keys(res.body.user).sort(), ['email', 'id', 'role']);
  assert.equal(typeof res.body.user.id, 'string');
  assert.ok(res.body.user.id.length > 0);
  if (user.id !== undefined) assert.equal(res.body.user.id, user.id);
  assert.equal(res.body.user.email, user.email);
  assert.equal(res.body.user.role, user.role);
  return res.body as { access_token: string; token_type: 'Bearer'; expires_in: number; user: { id: string; email: string; role: string } };
}

/** A token signed with the test service's secret, with whatever header and claims a test wants to try. */
export async function forgeToken(claims: Record<string, unknown>, opts: { alg?: string; secret?: string; iat?: number; exp?: number } = {}) {
  const iat = opts.iat ?? Math.floor(Date.now() / 1000);
  return new SignJWT(claims)
    .setProtectedHeader({ alg: opts.alg ?? 'HS256', typ: 'JWT' })
    .setIssuedAt(iat)
    .setExpirationTime(opts.exp ?? iat + SEVEN_DAYS_SECONDS)
    .sign(new TextEncoder().encode(opts.secret ?? TEST_JWT_SECRET));
}
