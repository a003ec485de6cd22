import type { Logger } from './log.ts';

export type Channel = 'email' | 'sms' | 'whatsapp';
export type Purpose = 'login_code' | 'password_reset' | 'superadmin_otp' | 'superadmin_reset' | 'invite';

/** contract 6: the body a webhook receives, and what the console transport prints. */
export interface OutgoingMessage {
  channel: Channel;
  to: string;
  purpose: Purpose;
  text: string;
  code?: string;
  token?: string;
}

/** What an edge (notify/) implements: one attempt at one delivery; throws when it failed. */
export interface Transport {
  readonly name: string;
  deliver(message: OutgoingMessage): Promise<void>;
  close?(): Promise<void>;
}

/** The port the core calls. Fire and forget: a failed delivery never changes the HTTP answer. */
export interface Notifier {
  send(message: OutgoingMessage): void;
  /** Resolves when nothing is in flight or waiting for a retry (tests, shutdown). */
  idle(): Promise<void>;
  close(): Promise<void>;
}

interface RetryOptions {
  logger: Logger;
  attempts?: number;
  baseDelayMs?: number;
}

/** Wraps a transport with retries and exponential backoff (1 s, 2 s, 4 s, ... by default). */
export function createNotifier(transport: Transport, opts: RetryOptions): Notifier {
  const attempts = opts.attempts ?? 5;
  const baseDelayMs = opts.baseDelayMs ?? 1000;
  const timers = new Set<NodeJS.Timeout>();
  const inFlight = new Set<Promise<void>>();
  let waiters: Array<() => void> = [];
  let closed = false;

  const settleIfIdle = () => {
    if (timers.size > 0 || inFlight.size > 0) return;
    for (const wake of waiters.splice(0)) wake();
  };

  const attempt = (message: OutgoingMessage, n: number) => {
    const run = transport.deliver(message).then(
      () => opts.logger.debug({ purpose: message.purpose, channel: message.channel, attempt: n }, 'message delivered'),
      (err: Error) => {
        const meta = { purpose: message.purpose, channel: message.channel, transport: transport.name, attempt: n, err: err.message };
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
      for (const t of timers) clearTimeout(t);
      timers.clear();
      await Promise.allSettled([...inFlight]);
      settleIfIdle();
      waiters = [];
      await transport.close?.();
    },
  };
}
