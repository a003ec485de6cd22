import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Entitlement leases (contract 8): JWTs signed with an Ed25519 key kept in the data folder, so firmware can
 * check a lease offline against the public JWKS (GET /api/v1/devices/lease-keys). Signing is synchronous
 * (node:crypto), so a config can be built and pushed in the same tick as the change that caused it.
 */
export interface LeaseSigner {
  kid: string;
  jwks(): { keys: Array<Record<string, unknown>> };
  issue(deviceId: string, mosqueId: string, expiresAt: number, issuedAt: number): string;
  /** Whether a stored token was signed with this key (its header names this kid): one from a replaced key is not reused. */
  isOwn(token: string): boolean;
}

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
  return {
    kid,
    jwks: () => ({ keys: [{ ...publicJwk, kid, alg: 'EdDSA', use: 'sig' }] }),
    isOwn: (token) => token.startsWith(header),
    issue(deviceId, mosqueId, expiresAt, issuedAt) {
      const signingInput = `${header}${b64({ sub: deviceId, mosque_id: mosqueId, iat: issuedAt, exp: expiresAt })}`;
      return `${signingInput}.${b64(crypto.sign(null, Buffer.from(signingInput), privateKey))}`;
    },
  };
}
