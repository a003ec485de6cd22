import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, failUntil, ok, type Result } from '../platform/failure.ts';
import { guessSubject, type GuessBudget } from './guess-budget.ts';
import type { PasswordHasher } from './passwords.ts';
import type { RevokedTokens } from './revoked-tokens.ts';
import type { AccessClaims, AccessTokens, TokenResponse } from './tokens.ts';
import type { UserStore } from './users.ts';

/**
 * How recent a sign-in must be for an account without a password to set its first one without a current
 * password (docs/api.md "Changing the password"): a token lifts a stolen laptop's session for days, a sign-in
 * code proves the mailbox or phone now.
 */
export const FRESH_SIGN_IN_SECONDS = 10 * 60;

interface Deps {
  users: UserStore;
  hasher: PasswordHasher;
  guesses: GuessBudget;
  tokens: AccessTokens;
  revoked: RevokedTokens;
  /** The superadmin two-step flow's pending sessions and reset tokens (src/people/superadmin.ts). */
  superadmin: { endPendingSessions(userId: string): void };
  clock: Clock;
}

/** The caller's own sessions: change the password, sign out this token, sign out everywhere. */
export function createSessions(deps: Deps) {
  const { users, hasher, guesses } = deps;

  /** What every older credential of the account loses once its token version was raised. */
  const endPending = (userId: string) => {
    deps.revoked.forgetUser(userId);
    deps.superadmin.endPendingSessions(userId);
  };

  /** Guard for `current === null`: allowed only for an account without a password, from a fresh sign-in. */
  function mayOmitCurrent(hasPassword: boolean, claims: AccessClaims): Result<void> {
    if (hasPassword) return fail('invalid_credentials', 'current_password_hash is required: this account has a password.');
    if (toUnixSeconds(deps.clock()) - claims.iat > FRESH_SIGN_IN_SECONDS) {
      return fail('forbidden', 'Setting a first password needs a sign-in from the last 10 minutes: sign in with a code, then try again.');
    }
    return ok(undefined);
  }

  /**
   * A wrong current password counts against the account's hourly guess budget (src/people/guess-budget.ts);
   * past it, 429 until the oldest wrong guess ages out, without looking at the password.
   */
  async function changePassword(claims: AccessClaims, current: string | null, next: string): Promise<Result<TokenResponse>> {
    const user = users.findById(claims.id);
    if (!user) return fail('unauthorized');
    const subject = guessSubject('password_change', user.id, '');
    const wait = guesses.lockedFor(subject);
    if (wait > 0) return failUntil('rate_limited', wait);
    if (current === null) {
      const allowed = mayOmitCurrent(user.password_bcrypt !== null, claims);
      if (!allowed.ok) return allowed;
    } else {
      const checked = await hasher.verify(current, user.password_bcrypt);
      if (!checked.ok) return checked;
      if (!checked.value) {
        guesses.recordWrong(subject);
        return fail('invalid_credentials');
      }
    }
    const hashed = await hasher.hash(next);
    if (!hashed.ok) return hashed;
    users.setPassword(user.id, hashed.value); // raises the token version: every older token ends
    endPending(user.id);
    const changed = users.findById(user.id);
    return changed ? ok(await deps.tokens.issue(changed)) : fail('unauthorized');
  }

  /** Every token of the account, and every pending superadmin sign-in or reset, stops working. */
  function logoutAll(userId: string): void {
    users.revokeTokens(userId);
    endPending(userId);
  }

  /** This token stops working, in every process (the change feed carries it); the account's others go on. */
  function logout(claims: AccessClaims): void {
    if (deps.revoked.revoke(claims.id, claims.tokenIdHash, claims.exp) === 'over_cap') logoutAll(claims.id);
  }

  return { changePassword, logout, logoutAll };
}

export type Sessions = ReturnType<typeof createSessions>;
