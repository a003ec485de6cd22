import crypto from 'node:crypto';

/**
 * Console listen tickets (docs/api.md, "Listening in the console"): a member's browser cannot hold a device lease,
 * so the API signs a short-lived ticket bound to the user and the mosque, which listener_add accepts in its place.
 * HMAC-SHA-256 with a key derived for this purpose only: checked in microseconds on the admission path, never stored.
 */
export const LISTEN_TICKET_TTL_S = 600;
const MAX_TICKET_CHARS = 512;

export interface ListenTicket {
  userId: string;
  mosqueId: string;
  expiresAt: number;
}

export function createListenTickets(key: Buffer, ttlSeconds = LISTEN_TICKET_TTL_S) {
  const mac = (body: string) => crypto.createHmac('sha256', key).update(body).digest();
  return {
    issue(userId: string, mosqueId: string, nowSeconds: number): { token: string; expiresAt: number } {
      const expiresAt = nowSeconds + ttlSeconds;
      const body = Buffer.from(JSON.stringify({ u: userId, m: mosqueId, exp: expiresAt })).toString('base64url');
      return { token: `${body}.${mac(body).toString('base64url')}`, expiresAt };
    },
    /** The ticket's claims when the signature holds and it has not expired; null otherwise. */
    verify(token: string, nowSeconds: number): ListenTicket | null {
      if (token.length > MAX_TICKET_CHARS) return null;
      const [body, signature, extra] = token.split('.');
      if (!body || !signature || extra !== undefined) return null;
      const presented = Buffer.from(signature, 'base64url');
      const expected = mac(body);
      if (presented.length !== expected.length || !crypto.timingSafeEqual(presented, expected)) return null;
      let claims: { u?: unknown; m?: unknown; exp?: unknown };
      try {
        claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as typeof claims;
      } catch {
        return null;
      }
      if (typeof claims.u !== 'string' || typeof claims.m !== 'string' || typeof claims.exp !== 'number' || claims.exp <= nowSeconds) return null;
      return { userId: claims.u, mosqueId: claims.m, expiresAt: claims.exp };
    },
  };
}

export type ListenTickets = ReturnType<typeof createListenTickets>;
