import crypto from 'node:crypto';
import type { Clock } from '../clock.ts';
import type { Store } from './store.ts';

/**
 * Periodic duties of the whole deployment (docs/operator.md, "Several hosts"): a pass that must run once per
 * period however many nodes share the store (pruning a table, say), and run again by another node when the one
 * doing it dies. Each run (the duty's name and the period's number) is claimed by one conditional write on its
 * row in `duty_runs`, held while the pass runs (renewed every HOLD_MS / 3) and marked done at its end; a claim
 * that lapses (its node died, or lost the store) is taken over at another node's next check. Row claims, not
 * PostgreSQL's advisory locks: the same statement works on the SQLite file, and a claim outlives a connection,
 * so a node cut off mid-pass is not mistaken for one that finished.
 */

/** How long a claim holds without renewal. A dead node's run is taken over within HOLD_MS + CHECK_MS. */
const HOLD_MS = 10_000;
/** How often each node looks for a run to claim. */
const CHECK_MS = 5000;
/** Rows of finished runs older than this many periods are deleted when the duty is next claimed. */
const KEEP_PERIODS = 2;

interface Duty {
  name: string;
  periodMs: number;
  pass: () => Promise<unknown>;
  running: boolean;
  /** The last period this node saw done: nothing to ask the store until the next one. */
  doneThrough: number;
}

export interface Duties {
  /** Runs `pass` once per `periodMs` (counted from the Unix epoch) across every node on the store. */
  add(name: string, periodMs: number, pass: () => Promise<unknown>): void;
  /** Claims and runs whatever is due now (also every CHECK_MS once started); resolves when those passes end. */
  check(): Promise<void>;
  start(): void;
  /** No new claims, no renewals: a run in flight is left to lapse, and another node takes it over. */
  stop(): void;
}

export function createDuties(deps: { store: Store; clock: Clock; onError: (what: string, err: unknown) => void; node?: string }): Duties {
  const { store, clock } = deps;
  const node = deps.node ?? crypto.randomUUID();
  const duties: Duty[] = [];
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;

  /**
   * One conditional write: a new run, or one whose claim lapsed unfinished. True when this node holds it now.
   * A read first, so a run that is done or held costs no write: on the SQLite file a write waits for the file's
   * lock, and another process holding it would hold this node's event loop each check.
   */
  const claim = async (duty: Duty, period: number): Promise<boolean> => {
    const now = clock();
    const row = await store.selectFrom('duty_runs').select(['done', 'until'])
      .where('duty', '=', duty.name).where('period', '=', period).executeTakeFirst();
    if (row?.done) duty.doneThrough = period;
    if (row && (row.done || row.until >= now)) return false;
    const result = await store.insertInto('duty_runs')
      .values({ duty: duty.name, period, node, until: now + HOLD_MS, done: 0 })
      .onConflict((oc) => oc.columns(['duty', 'period'])
        .doUpdateSet({ node, until: now + HOLD_MS })
        .where('duty_runs.done', '=', 0).where('duty_runs.until', '<', now))
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) === 1;
  };
  const renew = (duty: Duty, period: number) =>
    store.updateTable('duty_runs').set({ until: clock() + HOLD_MS })
      .where('duty', '=', duty.name).where('period', '=', period).where('node', '=', node).where('done', '=', 0).execute();
  const finish = async (duty: Duty, period: number) => {
    await store.updateTable('duty_runs').set({ done: 1 })
      .where('duty', '=', duty.name).where('period', '=', period).where('node', '=', node).execute();
    await store.deleteFrom('duty_runs').where('duty', '=', duty.name).where('period', '<', period - KEEP_PERIODS).execute();
  };

  const runIfDue = async (duty: Duty) => {
    if (duty.running || stopped) return;
    const period = Math.floor(clock() / duty.periodMs);
    if (period <= duty.doneThrough) return;
    duty.running = true;
    try {
      if (!(await claim(duty, period))) return;
      const keep = setInterval(() => {
        if (!stopped) renew(duty, period).catch((err: unknown) => deps.onError(`${duty.name} (claim)`, err));
      }, HOLD_MS / 3);
      keep.unref();
      try {
        await duty.pass();
      } finally {
        clearInterval(keep);
      }
      // Stopped mid-pass: left unfinished on purpose, as a node that died leaves it; the next one runs it whole.
      if (!stopped) {
        await finish(duty, period);
        duty.doneThrough = period;
      }
    } catch (err) {
      deps.onError(duty.name, err); // unfinished: the claim lapses and a node's next check runs it again
    } finally {
      duty.running = false;
    }
  };

  const check = async () => {
    await Promise.all(duties.map(runIfDue));
  };
  return {
    add(name, periodMs, pass) {
      duties.push({ name, periodMs, pass, running: false, doneThrough: -1 });
    },
    check,
    start() {
      stopped = false;
      void check();
      timer = setInterval(() => void check(), CHECK_MS);
      timer.unref();
    },
    stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      timer = null;
    },
  };
}
