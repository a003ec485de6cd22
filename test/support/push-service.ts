import crypto from 'node:crypto';
import type http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import type { TestContext } from 'node:test';
import type { PushNetwork } from '../../notify/webpush.ts';

// A self-signed certificate for the local stand-in push service (P-256, valid to 2126), for
// push.example.test, rebind.example.com and 127.0.0.1. Trusted only through PushNetwork.ca.
export const PUSH_TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQggt1nE6mHs6n2U2Up
9eAGxxJ1ODRt6rcHIWrL9UX+JS+hRANCAAQDT9rYd+b+bkwaSiTN4/qrDDzzGP4I
8hKmgdhKTgZp2npFQqeDllPXbCWz0cfFRCNG+7xXyybKXhVD5HJybBPp
-----END PRIVATE KEY-----
`;
export const PUSH_TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIB2DCCAX6gAwIBAgITMT1H4zpW7L1HU+DKRP7khfWF4jAKBggqhkjOPQQDAjAk
MSIwIAYDVQQDDBlNaW5hcmV0IHRlc3QgcHVzaCBzZXJ2aWNlMCAXDTI2MTEyMjE1
NDEzMVoYDzIxMjYxMDI5MTU0MTMxWjAkMSIwIAYDVQQDDBlNaW5hcmV0IHRlc3Qg
cHVzaCBzZXJ2aWNlMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEA0/a2Hfm/m5M
GkokzeP6qww88xj+CPISpoHYSk4Gadp6RUKng5ZT12wls9HHxUQjRvu8V8smyl4V
Q+RycmwT6aOBjDCBiTAdBgNVHQ4EFgQUIYGFNPBbRkMDIClDJVBHwdODKKswHwYD
VR0jBBgwFoAUIYGFNPBbRkMDIClDJVBHwdODKKswDwYDVR0TAQH/BAUwAwEB/zA2
BgNVHREELzAtghFwdXNoLmV4YW1wbGUudGVzdIIScmViaW5kLmV4YW1wbGUuY29t
hwR/AAABMAoGCCqGSM49BAMCA0gAMEUCIQCT2fOnkaipK9eCyJKZq11ogJzT3gk3
FEMyUEvcQ0+wDgIgGRtr8g2h6skzuka2S8vMiUU/RJpMXZtjI/kF588c7EQ=
-----END CERTIFICATE-----
`;

export interface PushRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** What the stand-in answers: a status, or 'hold' to keep the request open until `release()` (or the test ends). */
export type PushAnswer = (path: string, nth: number) => number | 'hold';

/**
 * A push service on https://127.0.0.1:<port>: records every request that reaches it (and counts every
 * connection, even one that never sends a request), answers as told.
 */
export async function startPushService(t: TestContext, answer: PushAnswer = () => 201) {
  const received: PushRequest[] = [];
  const held: Array<() => void> = [];
  let connections = 0;
  let open = 0;
  let maxOpen = 0;
  const server = https.createServer({ key: PUSH_TEST_KEY, cert: PUSH_TEST_CERT }, (req, res) => {
    const chunks: Buffer[] = [];
    open++;
    maxOpen = Math.max(maxOpen, open);
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '';
      received.push({ path, headers: req.headers, body: Buffer.concat(chunks) });
      const finish = (status: number) => {
        open--;
        res.statusCode = status;
        res.end();
      };
      const a = req.method === 'POST' ? answer(path, received.filter((r) => r.path === path).length) : 405;
      if (a === 'hold') held.push(() => finish(201));
      else finish(a);
    });
    res.on('close', () => {
      if (!res.writableEnded) open--;
    });
  });
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as net.AddressInfo).port;
  t.after(() => new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  }));
  return {
    port,
    /** The origin endpoints name; `network()` makes the service dial this server for it. */
    origin: 'https://push.example.test',
    received,
    to: (path: string) => received.filter((r) => r.path === path),
    /** TCP connections accepted, whether or not a request followed. */
    connections: () => connections,
    maxOpen: () => maxOpen,
    held: () => held.length,
    release: () => held.splice(0).forEach((f) => f()),
  };
}
export type PushService = Awaited<ReturnType<typeof startPushService>>;

/** Every name resolves to 127.0.0.1 (what a rebinding attacker's DNS would answer). */
export const resolveToLoopback: NonNullable<PushNetwork['resolve']> = async () => [{ address: '127.0.0.1', family: 4 }];

/**
 * The service reaches `push` for every push host: names resolve to 127.0.0.1, port 443 is the server's
 * port, its certificate is trusted, and 127.0.0.1 (only) is let through the address rule.
 */
export function deliveringTo(push: PushService, extra: Partial<PushNetwork> = {}): PushNetwork {
  return { resolve: resolveToLoopback, port: push.port, ca: PUSH_TEST_CERT, addressAllowed: (a) => a === '127.0.0.1', ...extra };
}

/** A browser's push subscription: a real P-256 key pair and auth secret, so the payload can be decrypted. */
export function browserKeys() {
  const ecdh = crypto.createECDH('prime256v1');
  const publicKey = ecdh.generateKeys();
  const auth = crypto.randomBytes(16);
  return { ecdh, publicKey, auth, keys: { p256dh: publicKey.toString('base64url'), auth: auth.toString('base64url') } };
}
export type PushBrowser = ReturnType<typeof browserKeys>;

/** RFC 8291 / RFC 8188 aes128gcm: one record, keyid = the application server's public key. */
export function decryptPush(body: Buffer, browser: PushBrowser): unknown {
  const salt = body.subarray(0, 16);
  const idLength = body.readUInt8(20);
  const serverKey = body.subarray(21, 21 + idLength);
  const record = body.subarray(21 + idLength);
  const secret = browser.ecdh.computeSecret(serverKey);
  const keyInfo = Buffer.concat([Buffer.from('WebPush: info\0'), browser.publicKey, serverKey]);
  const ikm = Buffer.from(crypto.hkdfSync('sha256', secret, browser.auth, keyInfo, 32));
  const cek = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));
  const decipher = crypto.createDecipheriv('aes-128-gcm', cek, nonce);
  decipher.setAuthTag(record.subarray(record.length - 16));
  const padded = Buffer.concat([decipher.update(record.subarray(0, record.length - 16)), decipher.final()]);
  const end = padded.lastIndexOf(2); // the last record's delimiter, then zero padding
  return JSON.parse(padded.subarray(0, end).toString('utf8'));
}

