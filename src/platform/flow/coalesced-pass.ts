/**
 * A pass that runs one at a time (a scheduler's pass over due events, the push outbox's fill, a change-log
 * catch-up, a reload of the device caches): asked for while it runs, it runs once more right after, however many
 * asked, and every asker waits for that last run. Two runs at once would both act on what neither had marked
 * done yet; a request dropped while one runs would miss what changed after that run read it.
 *
 * Resolves to the last run's result; a run that rejects ends the loop and rejects every waiting asker (a pass
 * that must go on after a failure catches its own). `run` is an async function: it never throws before its
 * first await, so the pass is marked idle only once its loop has ended, in the same turn.
 */
export function coalescedPass<T>(run: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | null = null;
  let again = false;
  const loop = async (): Promise<T> => {
    try {
      let result: T;
      do {
        again = false;
        result = await run();
      } while (again);
      return result;
    } finally {
      running = null;
    }
  };
  return () => {
    if (running) {
      again = true;
      return running;
    }
    running = loop();
    return running;
  };
}
