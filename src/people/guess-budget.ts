import type { Store } from '../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';

export const GUESS_WINDOW_SECONDS = 3600;
const PRUNE_EVERY_SECONDS = 60;

/** The flows whose secrets are short enough to guess; each has its own budget per account. */
export type GuessFlow = 'login_code' | 'superadmin_login' | 'superadmin_reset' | 'password_change';

/**
 * Caps wrong guesses per account and flow over a sliding hour (docs/decisions.md, "Guessing is capped per account": a fresh code must not bring fresh
 * guesses). Counted in SQLite, so a restart does not hand out a new budget. An identifier without an account
 * gets a budget of its own under the same rule, so the 429 that follows 20 wrong guesses says nothing about
 * whether the account exists.
 */
export interface GuessBudget {
  /** Seconds until this subject may guess again; 0 while it is under the cap. */
  lockedFor(subject: string): Promise<number>;
  recordWrong(subject: string): Promise<void>;
}

/** The budget key: the account when there is one (all its identifiers share it), else the identifier. */
export function guessSubject(flow: GuessFlow, userId: string | null, identifierHash: string): string {
  return userId ? `${flow}:${userId}` : `${flow}:?${identifierHash}`;
}

export function createGuessBudget(store: Store, clock: Clock, maxPerHour: number): GuessBudget {
  const now = () => toUnixSeconds(clock());
  let prunedAt = 0;

  return {
    async lockedFor(subject) {
      const since = now() - GUESS_WINDOW_SECONDS;
      const counted = await store.selectFrom('wrong_guesses').select((eb) => eb.fn.countAll<number>().as('n'))
        .where('subject', '=', subject).where('at', '>', since).executeTakeFirstOrThrow();
      const n = Number(counted.n);
      if (n < maxPerHour) return 0;
      // The guess whose ageing out brings the count back under the cap.
      const row = await store.selectFrom('wrong_guesses').select('at').where('subject', '=', subject).where('at', '>', since)
        .orderBy('at').limit(1).offset(n - maxPerHour).executeTakeFirst();
      return row ? Math.max(1, row.at + GUESS_WINDOW_SECONDS - now()) : 0;
    },
    async recordWrong(subject) {
      const at = now();
      await store.insertInto('wrong_guesses').values({ subject, at }).execute();
      if (at - prunedAt >= PRUNE_EVERY_SECONDS) {
        prunedAt = at;
        await store.deleteFrom('wrong_guesses').where('at', '<=', at - GUESS_WINDOW_SECONDS).execute();
      }
    },
  };
}
