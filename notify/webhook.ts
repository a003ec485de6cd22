import type { Transport } from '../src/notify.ts';

/** POSTs the message as JSON (contract 6). Anything but a 2xx answer is a failed attempt, retried by the notifier. */
export function webhookTransport(url: string, timeoutMs = 10_000): Transport {
  return {
    name: 'webhook',
    async deliver(message) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(message),
        signal: AbortSignal.timeout(timeoutMs),
      });
      await res.body?.cancel();
      if (!res.ok) throw new Error(`webhook answered ${res.status}`);
    },
  };
}
