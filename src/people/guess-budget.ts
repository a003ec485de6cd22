import type { Db } from '../platform/db.ts';
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
  lockedFor(subject: string): number;
  recordWrong(subject: string): void;
}

/** The budget key: the account when there is one (all its identifiers share it), else the identifier. */
export function guessSubject(flow: GuessFlow, userId: string | null, identifierHash: string): string {
  return userId ? `${flow}:${userId}` : `${flow}:?${identifierHash}`;
}

export function createGuessBudget(db: Db, clock: Clock, maxPerHour: number): GuessBudget {
  const count = db.prepare<[string, number], { n: number }>('SELECT COUNT(*) AS n FROM wrong_guesses WHERE subject = ? AND at > ?');
  // The guess whose ageing out brings the count back under the cap.
  const nthOldest = db.prepare<[string, number, number], { at: number }>(
    'SELECT at FROM wrong_guesses WHERE subject = ? AND at > ? ORDER BY at LIMIT 1 OFFSET ?',
  );
  const insert = db.prepare('INSERT INTO wrong_guesses (subject, at) VALUES (?, ?)');
  const prune = db.prepare('DELETE FROM wrong_guesses WHERE at <= ?');
  const now = () => toUnixSeconds(clock());
  let prunedAt = 0;

  return {
    lockedFor(subject) {
      const since = now() - GUESS_WINDOW_SECONDS;
      const { n } = count.get(subject, since)!;
      if (n < maxPerHour) return 0;
      const row = nthOldest.get(subject, since, n - maxPerHour);
      return row ? Math.max(1, row.at + GUESS_WINDOW_SECONDS - now()) : 0;
    },
    recordWrong(subject) {
      const at = now();
      insert.run(subject, at);
      if (at - prunedAt >= PRUNE_EVERY_SECONDS) {
        prunedAt = at;
        prune.run(at - GUESS_WINDOW_SECONDS);
      }
    },
  };
}
