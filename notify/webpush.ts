import crypto from 'node:crypto';
import dns from 'node:dns';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import type WebPush from 'web-push';
import { checkPushEndpoint, isPublicAddress } from '../src/broadcasts/push-endpoint.ts';
import type { PushSender } from '../src/broadcasts/push-outbox.ts';

/** VAPID keys, generated once into the data folder. */
export function loadOrCreateVapidKeys(dataDir: string): { publicKey: string; privateKey: string } {
  const file = path.join(dataDir, 'vapid.json');
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as { publicKey: string; privateKey: string };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  fs.mkdirSync(dataDir, { recursive: true });
  const keys = generateVapidKeys();
  try {
    fs.writeFileSync(file, JSON.stringify(keys), { mode: 0o600, flag: 'wx' });
    return keys;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return JSON.parse(fs.readFileSync(file, 'utf8')) as { publicKey: string; privateKey: string };
  }
}

/**
 * A P-256 key pair as web-push's generateVAPIDKeys makes it (the raw uncompressed public point and the raw
 * private scalar, padded to 65 and 32 bytes, base64url), without loading web-push at start.
 */
export function generateVapidKeys(): { publicKey: string; privateKey: string } {
  const curve = crypto.createECDH('prime256v1');
  curve.generateKeys();
  const pad = (b: Buffer, size: number) => (b.length < size ? Buffer.concat([Buffer.alloc(size - b.length), b]) : b);
  return { publicKey: pad(curve.getPublicKey(), 65).toString('base64url'), privateKey: pad(curve.getPrivateKey(), 32).toString('base64url') };
}

/**
 * web-push (with its JWT and HTTP dependencies, ~4 MiB of RSS) loads with the first push, not at start
 * (many services never send one).
 */
let webPushModule: Promise<typeof WebPush> | null = null;
const loadWebPush = () => (webPushModule ??= import('web-push').then((m) => m.default));

/**
 * How the sender reaches push services. Every field defaults to the production behaviour; tests point a
 * name at a local https server with `resolve`, `port` and `ca`, and only a test that proves the harness
 * itself may widen `addressAllowed`.
 */
export interface PushNetwork {
  /** Resolves a push host (default: the system resolver). */
  resolve?: (hostname: string) => Promise<Array<{ address: string; family: number }>>;
  /** Which resolved addresses may be dialled (default: public unicast only). */
  addressAllowed?: (address: string) => boolean;
  /** The port dialled for the endpoint's 443. */
  port?: number;
  /** An extra trusted certificate authority (PEM). */
  ca?: string;
  /** Each send, from connect to the last byte of the answer (10 s: docs/decisions.md, "Push sending order"). */
  timeoutMs?: number;
}

export const PUSH_SEND_TIMEOUT_MS = 10_000;

/**
 * Web Push with VAPID (the `web-push` package encrypts the payload and signs the VAPID header), sent with
 * node:https so the address a push host resolves to is checked at connect time: a subscription that passed
 * the URL rule cannot reach this machine's network by DNS rebinding. No redirects are followed.
 */
export function webPushSender(keys: { publicKey: string; privateKey: string }, subject: string, network: PushNetwork = {}): PushSender & { close(): void } {
  const allowed = network.addressAllowed ?? isPublicAddress;
  const resolve = network.resolve ?? ((host: string) => dns.promises.lookup(host, { all: true, verbatim: true }));
  const agent = new https.Agent({ keepAlive: true, timeout: network.timeoutMs ?? PUSH_SEND_TIMEOUT_MS });
  const lookup = guardedLookup(resolve, allowed);
  return {
    async send(sub, payload) {
      const target = checkPushEndpoint(sub.endpoint);
      // Stored before the URL rule existed, or by hand: it can never be sent, so it goes like a 410.
      if (!target.ok) return { ok: false, gone: true, error: `endpoint refused: ${target.reason}` };
      if (net.isIP(target.host) !== 0 && !allowed(target.host)) return { ok: false, gone: true, error: 'endpoint refused: not a public address' };
      const webpush = await loadWebPush();
      const request = webpush.generateRequestDetails({ endpoint: sub.endpoint, keys: { p256dh: sub.p256dh, auth: sub.auth } }, payload, {
        vapidDetails: { subject, publicKey: keys.publicKey, privateKey: keys.privateKey },
        TTL: 300,
        urgency: 'high',
      });
      try {
        const status = await post(target.url, target.host, request.headers as Record<string, string | number>, request.body ?? null, { agent, lookup, network });
        if (status >= 200 && status < 300) return { ok: true };
        return { ok: false, gone: status === 404 || status === 410, error: `push service answered ${status}` };
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        // A host that resolves into a private range is refused for this delivery, never retried.
        if (e.code === REFUSED_ADDRESS) return { ok: false, gone: false, final: true, error: e.message };
        return { ok: false, gone: false, error: e.name === 'TimeoutError' || e.name === 'AbortError' ? 'push service timed out' : e.message };
      }
    },
    close: () => agent.destroy(),
  };
}

const REFUSED_ADDRESS = 'EPUSHADDRESS';

/** A `lookup` for net.connect that refuses the whole host when any address it resolves to is not allowed. */
function guardedLookup(resolve: NonNullable<PushNetwork['resolve']>, allowed: (address: string) => boolean) {
  return (hostname: string, options: dns.LookupOptions, callback: (...args: unknown[]) => void): void => {
    resolve(hostname).then(
      (addresses) => {
        const refused = addresses.find((a) => !allowed(a.address));
        if (refused || addresses.length === 0) {
          const err = Object.assign(new Error(`push host ${hostname} resolves to ${refused?.address ?? 'nothing'}, which is not a public address`), { code: REFUSED_ADDRESS });
          return callback(err);
        }
        if (options.all) return callback(null, addresses);
        callback(null, addresses[0]!.address, addresses[0]!.family);
      },
      (err: Error) => callback(err),
    );
  };
}

function post(
  url: URL, host: string, headers: Record<string, string | number>, body: Buffer | null,
  via: { agent: https.Agent; lookup: ReturnType<typeof guardedLookup>; network: PushNetwork },
): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host, port: via.network.port ?? 443, path: `${url.pathname}${url.search}`, method: 'POST', headers,
        agent: via.agent, lookup: via.lookup as unknown as net.LookupFunction, ...(via.network.ca && { ca: via.network.ca }),
        signal: AbortSignal.timeout(via.network.timeoutMs ?? PUSH_SEND_TIMEOUT_MS),
      },
      (res) => {
        res.on('error', reject);
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.resume(); // the answer's body is not needed; reading it frees the socket for the next push
      },
    );
    req.on('error', reject);
    req.end(body ?? undefined);
  });
}
