import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Entitlement leases (docs/firmware.md, "5. The lease, and checking it offline"): JWTs signed with an Ed25519 key kept in the data folder, so firmware can
 * check a lease offline against the public JWKS (GET /api/v1/devices/lease-keys). Signing is synchronous
 * (node:crypto), so a config can be built and pushed in the same tick as the change that caused it.
 */
export interface LeaseSigner {
  kid: string;
  jwks(): { keys: Array<Record<string, unknown>> };
  issue(deviceId: string, mosqueId: string, expiresAt: number, issuedAt: number): string;
  /** Whether a stored token was signed with this key (its header names this kid): one from a replaced key is not reused. */
  isOwn(token: string): boolean;
  /** The claims of a lease this key signed (expired or not: the caller says which it refuses); null for anything else. */
  verify(token: string): LeaseClaims | null;
}

/** What a lease says (docs/firmware.md, "5. The lease, and checking it offline"): the player, its mosque, and until when. */
export interface LeaseClaims {
  sub: string;
  mosqueId: string;
  exp: number;
}

/** A lease is three base64url parts; anything longer than this is not one of ours. */
const MAX_LEASE_CHARS = 1024;

const b64 = (value: object | Buffer) => (Buffer.isBuffer(value) ? value : Buffer.from(JSON.stringify(value))).toString('base64url');

export function loadOrCreateLeaseKey(dataDir: string): crypto.KeyObject {
  const file = path.join(dataDir, 'lease-key.pem');
  try {
    return crypto.createPrivateKey(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  fs.mkdirSync(dataDir, { recursive: true });
  const { privateKey } = crypto.generateKeyPairSync('ed25519');
  try {
    fs.writeFileSync(file, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600, flag: 'wx' });
    return privateKey;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return crypto.createPrivateKey(fs.readFileSync(file, 'utf8'));
  }
}

export function createLeaseSigner(privateKey: crypto.KeyObject): LeaseSigner {
  const publicJwk = crypto.createPublicKey(privateKey).export({ format: 'jwk' }) as Record<string, unknown>;
  // RFC 7638 thumbprint of the public key: stable across restarts, changes with the key.
  const kid = crypto.createHash('sha256').update(JSON.stringify({ crv: publicJwk.crv, kty: publicJwk.kty, x: publicJwk.x })).digest('base64url');
  const header = `${b64({ alg: 'EdDSA', typ: 'JWT', kid })}.`;
  const publicKey = crypto.createPublicKey(privateKey);
  return {
    kid,
    jwks: () => ({ keys: [{ ...publicJwk, kid, alg: 'EdDSA', use: 'sig' }] }),
    isOwn: (token) => token.startsWith(header),
    verify(token) {
      // Only our own header (alg EdDSA, this kid): RFC 8725 section 3.1, the algorithm is never taken from the token.
      if (token.length > MAX_LEASE_CHARS || !token.startsWith(header)) return null;
      const dot = token.lastIndexOf('.');
      if (dot <= header.length) return null;
      const signingInput = token.slice(0, dot);
      if (!crypto.verify(null, Buffer.from(signingInput), publicKey, Buffer.from(token.slice(dot + 1), 'base64url'))) return null;
      let claims: { sub?: unknown; mosque_id?: unknown; exp?: unknown };
      try {
        claims = JSON.parse(Buffer.from(signingInput.slice(header.length), 'base64url').toString('utf8')) as typeof claims;
      } catch {
        return null;
      }
      const { sub, mosque_id: mosqueId, exp } = claims;
      if (typeof sub !== 'string' || typeof mosqueId !== 'string' || typeof exp !== 'number') return null;
      return { sub, mosqueId, exp };
    },
    issue(deviceId, mosqueId, expiresAt, issuedAt) {
      // A random jti (RFC 7519 §4.1.7) makes every lease its own token: Ed25519 signs deterministically (RFC 8032
      // §5.1.6), so without it a lease issued in the same second as one a rotated password superseded would be that
      // very token, and the gates, which admit only the token a player holds now, would take the old one back.
      const jti = crypto.randomBytes(16).toString('base64url');
      const signingInput = `${header}${b64({ sub: deviceId, mosque_id: mosqueId, iat: issuedAt, exp: expiresAt, jti })}`;
      return `${signingInput}.${b64(crypto.sign(null, Buffer.from(signingInput), privateKey))}`;
    },
  };
}
