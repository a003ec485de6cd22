import type { Logger } from '../log.ts';

/**
 * Work that runs after the HTTP answer went out (docs/api.md "Signing in": a route that must not reveal whether an
 * address has an account answers before any write or message that depends on it, so a held address and a free one
 * cost the same time on the response path).
 */
export interface AfterAnswer {
  /** Runs `work` once the current turn is over; a failure is logged under `what`, never thrown to anyone. */
  defer(what: string, work: () => Promise<unknown>): void;
  /** Resolves once nothing deferred waits or runs (tests read what the work sent or wrote after it; shutdown). */
  idle(): Promise<void>;
  /** Whether any deferred work waits or runs now. */
  isBusy(): boolean;
}

/**
 * Each piece of work starts in a setImmediate: the route's answer is written by then (hono's node adapter writes it
 * in the promise chain of the handler, before the event loop's check phase), and a failure stays inside the queue.
 */
export function createAfterAnswer(logger: Pick<Logger, 'error'>): AfterAnswer {
  let running = 0;
  let waiters: Array<() => void> = [];
  const settle = () => {
    if (running > 0) return;
    const woken = waiters;
    waiters = [];
    for (const wake of woken) wake();
  };

  return {
    defer(what, work) {
      running++;
      setImmediate(() => {
        void Promise.resolve()
          .then(work)
          .catch((err: unknown) => logger.error({ what, err: err instanceof Error ? err.message : String(err) }, 'work after the answer failed'))
          .finally(() => {
            running--;
            settle();
          });
      });
    },
    idle: () =>
      new Promise<void>((resolve) => {
        waiters.push(resolve);
        settle();
      }),
    isBusy: () => running > 0,
  };
}

/**
 * The notifier a service hands out: its idle() waits for work after the answer first, since that work may send
 * (a login code, a reset link), then for the sends, as often as one round left more of either.
 */
export function idleAfterAnswer<N extends { idle(): Promise<void> }>(notifier: N, after: AfterAnswer): N {
  return {
    ...notifier,
    async idle() {
      do {
        await after.idle();
        await notifier.idle();
      } while (after.isBusy());
    },
  };
}
