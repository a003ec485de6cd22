import type { Logger } from './log.ts';

export type Channel = 'email' | 'sms' | 'whatsapp';
export type Purpose =
  | 'login_code' | 'confirm_address' | 'signup_attempt' | 'address_changed' | 'password_reset' | 'superadmin_otp' | 'superadmin_reset' | 'invite'
  | 'azaan_not_ready' | 'azaan_missed';

/** The body a webhook receives (docs/settings.md, `NOTIFY_WEBHOOK_URL`), and what the console transport prints. */
export interface OutgoingMessage {
  channel: Channel;
  to: string;
  purpose: Purpose;
  text: string;
  code?: string;
  token?: string;
  /** The page of the console the message leads to, absolute (PUBLIC_URL's origin, else the service's own); the text names it too. */
  link: string;
}

/**
 * The absolute address of a console page, from its path ('/signin', '/join/ABCD2345'): PUBLIC_URL's origin when set,
 * else the service's own (docs/settings.md, `PUBLIC_URL`). Every message hands its reader the page to open.
 */
export type PageUrl = (path: string) => string;

/**
 * What an edge (notify/) implements: one attempt at one delivery; throws when it failed.
 * `signal` aborts when the notifier closes: an attempt must stop then, or a hanging peer holds the stop.
 */
export interface Transport {
  readonly name: string;
  deliver(message: OutgoingMessage, signal?: AbortSignal): Promise<void>;
  close?(): Promise<void>;
}

/** The port the core calls. Fire and forget: a failed delivery never changes the HTTP answer. */
export interface Notifier {
  send(message: OutgoingMessage): void;
  /** Resolves when nothing is in flight or waiting for a retry (tests, shutdown). */
  idle(): Promise<void>;
  close(): Promise<void>;
}

/** A delivery that can never succeed (a channel the transport does not carry): not retried. */
export class UndeliverableError extends Error {}

interface RetryOptions {
  logger: Logger;
  attempts?: number;
  baseDelayMs?: number;
  /** How long close() lets attempts in flight finish before it aborts them. */
  closeGraceMs?: number;
}

/** Wraps a transport with retries and exponential backoff (1 s, 2 s, 4 s, ... by default). */
export function createNotifier(transport: Transport, opts: RetryOptions): Notifier {
  const attempts = opts.attempts ?? 5;
  const baseDelayMs = opts.baseDelayMs ?? 1000;
  const closeGraceMs = opts.closeGraceMs ?? 2000;
  const aborter = new AbortController();
  const timers = new Set<NodeJS.Timeout>();
  const inFlight = new Set<Promise<void>>();
  let waiters: Array<() => void> = [];
  let closed = false;

  const settleIfIdle = () => {
    if (timers.size > 0 || inFlight.size > 0) return;
    for (const wake of waiters.splice(0)) wake();
  };

  const attempt = (message: OutgoingMessage, n: number) => {
    const run = transport.deliver(message, aborter.signal).then(
      () => opts.logger.debug({ purpose: message.purpose, channel: message.channel, attempt: n }, 'message delivered'),
      (err: Error) => {
        const meta = { purpose: message.purpose, channel: message.channel, transport: transport.name, attempt: n, err: err.message };
        if (err instanceof UndeliverableError) return opts.logger.error(meta, 'message cannot be delivered by this transport; dropped');
        if (n >= attempts || closed) return opts.logger.error(meta, 'message not delivered; giving up');
        opts.logger.warn(meta, 'message not delivered; will retry');
        const timer = setTimeout(() => {
          timers.delete(timer);
          attempt(message, n + 1);
        }, baseDelayMs * 2 ** (n - 1));
        timers.add(timer);
      },
    );
    inFlight.add(run);
    void run.finally(() => {
      inFlight.delete(run);
      settleIfIdle();
    });
  };

  return {
    send(message) {
      if (closed) return;
      attempt(message, 1);
    },
    idle: () =>
      new Promise<void>((resolve) => {
        waiters.push(resolve);
        settleIfIdle();
      }),
    async close() {
      closed = true;
      if (timers.size > 0) opts.logger.warn({ waiting: timers.size }, 'notifier closed with messages waiting for a retry; they are dropped');
      for (const t of timers) clearTimeout(t);
      timers.clear();
      // A peer that accepts and never answers held the stop for the webhook timeout (10 s) or nodemailer's
      // (30 s and more): attempts in flight get a short grace, then they are aborted (and logged as given up).
      const settled = Promise.allSettled([...inFlight]);
      let grace: NodeJS.Timeout | undefined;
      await Promise.race([settled, new Promise<void>((resolve) => (grace = setTimeout(resolve, closeGraceMs)))]);
      clearTimeout(grace);
      aborter.abort(new Error('notifier closed'));
      await settled;
      settleIfIdle();
      waiters = [];
      await transport.close?.();
    },
  };
}
