import type { Transport } from '../src/platform/notify.ts';

/** POSTs the message as JSON (docs/settings.md, `NOTIFY_WEBHOOK_URL`). Anything but a 2xx answer is a failed attempt, retried by the notifier. */
export function webhookTransport(url: string, timeoutMs = 10_000): Transport {
  return {
    name: 'webhook',
    async deliver(message, signal) {
      const timeout = AbortSignal.timeout(timeoutMs);
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(message),
        // A redirect would turn the POST into a GET without the body and still "succeed": refuse it.
        redirect: 'error',
        // The notifier aborts `signal` when it closes; the timeout bounds one attempt.
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      await res.body?.cancel();
      if (!res.ok) throw new Error(`webhook answered ${res.status}`);
    },
  };
}
