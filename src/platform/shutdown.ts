import type { Logger } from './log.ts';

export interface Closer {
  name: string;
  close: () => unknown;
}

/**
 * The graceful stop: runs `closers` in order, each until it settles or the deadline passes; one that throws
 * or hangs is logged and the next one runs all the same. `finals` (the last telemetry flush, db.close) run
 * after them whatever happened, even past the deadline, each awaited before the next (the last telemetry flush
 * goes through the store port, whose SQLite dialect answers without leaving the turn, so it cannot hang it).
 * The deadline is wall time on purpose: an injected test clock that never moves must not hold a stop forever.
 */
export async function closeInOrder(closers: Closer[], finals: Closer[], opts: { deadlineMs: number; logger: Logger }): Promise<{ failed: string[]; late: string[] }> {
  const failed: string[] = [];
  const late: string[] = [];
  const endsAt = performance.now() + opts.deadlineMs;
  for (const closer of closers) {
    const left = endsAt - performance.now();
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      Promise.resolve().then(closer.close).then(() => 'closed' as const, (err: unknown) => err),
      new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), Math.max(0, left)))),
    ]);
    clearTimeout(timer);
    if (outcome === 'late') {
      late.push(closer.name);
      opts.logger.error({ closer: closer.name, deadline_ms: opts.deadlineMs }, 'shutdown: a part did not stop before the deadline; going on without it');
    } else if (outcome !== 'closed') {
      failed.push(closer.name);
      opts.logger.error({ closer: closer.name, err: errorFields(outcome) }, 'shutdown: a part failed to stop; going on');
    }
  }
  for (const closer of finals) {
    try {
      await closer.close();
    } catch (err) {
      failed.push(closer.name);
      opts.logger.error({ closer: closer.name, err: errorFields(err) }, 'shutdown: a final step failed');
    }
  }
  return { failed, late };
}

const errorFields = (err: unknown) => ({ message: (err as Error)?.message ?? String(err), stack: (err as Error)?.stack });
