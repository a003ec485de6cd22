import fs from 'node:fs';
import path from 'node:path';
import webpush from 'web-push';
import type { PushSender } from '../src/broadcasts/push-outbox.ts';

/**
 * Web Push with VAPID (the `web-push` package encrypts the payload and signs the VAPID header). The request
 * is sent with fetch rather than web-push's own https-only client, so a push service on plain http (a
 * loopback stand-in in tests) works the same way. Keys are generated once into the data folder.
 */
export function loadOrCreateVapidKeys(dataDir: string): { publicKey: string; privateKey: string } {
  const file = path.join(dataDir, 'vapid.json');
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as { publicKey: string; privateKey: string };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  fs.mkdirSync(dataDir, { recursive: true });
  const keys = webpush.generateVAPIDKeys();
  try {
    fs.writeFileSync(file, JSON.stringify(keys), { mode: 0o600, flag: 'wx' });
    return keys;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return JSON.parse(fs.readFileSync(file, 'utf8')) as { publicKey: string; privateKey: string };
  }
}

export function webPushSender(keys: { publicKey: string; privateKey: string }, subject: string, timeoutMs = 10_000): PushSender {
  return {
    async send(sub, payload) {
      const request = webpush.generateRequestDetails({ endpoint: sub.endpoint, keys: { p256dh: sub.p256dh, auth: sub.auth } }, payload, {
        vapidDetails: { subject, publicKey: keys.publicKey, privateKey: keys.privateKey },
        TTL: 300,
        urgency: 'high',
      });
      const res = await fetch(request.endpoint, {
        method: request.method,
        headers: request.headers as Record<string, string>,
        body: request.body ?? null,
        redirect: 'error',
        signal: AbortSignal.timeout(timeoutMs),
      });
      await res.body?.cancel();
      if (res.ok) return { ok: true };
      return { ok: false, gone: res.status === 404 || res.status === 410, error: `push service answered ${res.status}` };
    },
  };
}
