import type { Clock } from '../platform/clock.ts';
import type { OneTimeCodes } from './codes.ts';
import { fail, failUntil, ok, type Result } from '../platform/failure.ts';
import { guessSubject, type GuessBudget } from './guess-budget.ts';
import { identifierHash, isSyntheticEmail, syntheticEmailForPhone } from '../platform/identifiers.ts';
import type { Logger } from '../platform/log.ts';
import type { Channel, Notifier } from '../platform/notify.ts';
import type { PasswordHasher } from './passwords.ts';
import type { AccessTokens, TokenResponse } from './tokens.ts';
import type { UserRow, UserStore } from './users.ts';

export interface PeopleAuthDeps {
  users: UserStore;
  codes: OneTimeCodes;
  hasher: PasswordHasher;
  guesses: GuessBudget;
  tokens: AccessTokens;
  notifier: Notifier;
  clock: Clock;
  logger: Logger;
  passwordResetTtlHours: number;
}

export interface SignupInput {
  email: string | null;
  phone: string | null;
  passwordHash: string | null;
}

export type SignupOutcome = { created: boolean; token: TokenResponse };

/**
 * Sign-in for members and mosque admins (seed "Regular login"). Every flow answers an unknown account
 * the way it answers a known one, and spends the same bcrypt time on it (a dummy comparison).
 */
export function createPeopleAuth(deps: PeopleAuthDeps) {
  const { users, codes, hasher, guesses, tokens, notifier } = deps;

  /** True when the password matches a non-superadmin account; always spends one bcrypt comparison (or is busy). */
  async function passwordMatches(user: UserRow | null, passwordHash: string | null): Promise<Result<boolean>> {
    const usable = user !== null && user.role !== 'superadmin' && passwordHash !== null ? user.password_bcrypt : null;
    return hasher.verify(passwordHash ?? '', usable);
  }

  async function signup(input: SignupInput): Promise<Result<SignupOutcome>> {
    const emailHash = input.email ? identifierHash(input.email) : null;
    const phoneHash = input.phone ? identifierHash(input.phone) : null;
    const byEmail = emailHash ? users.findByIdentifierHash(emailHash) : null;
    const byPhone = phoneHash ? users.findByIdentifierHash(phoneHash) : null;
    const existing = byEmail ?? byPhone;
    if (existing) {
      // The email and the phone belong to two different accounts: neither is "the" account.
      const sameAccount = !byEmail || !byPhone || byEmail.id === byPhone.id;
      const checked = await passwordMatches(existing, input.passwordHash);
      if (!checked.ok) return checked;
      return checked.value && sameAccount ? ok({ created: false, token: await tokens.issue(existing) }) : fail('invalid_credentials');
    }
    const hashed = input.passwordHash ? await hasher.hash(input.passwordHash) : null;
    if (hashed && !hashed.ok) return hashed;
    const passwordBcrypt = hashed ? hashed.value : null;
    try {
      const user = users.create({
        email: input.email ?? syntheticEmailForPhone(phoneHash!),
        emailHash: emailHash ?? identifierHash(syntheticEmailForPhone(phoneHash!)),
        phone: input.phone,
        phoneHash,
        passwordBcrypt,
        role: 'member',
      });
      return ok({ created: true, token: await tokens.issue(user) });
    } catch (err) {
      // Lost a race with a concurrent signup of the same identifier: it exists now.
      if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE') return fail('invalid_credentials');
      throw err;
    }
  }

  async function login(identifier: string, passwordHash: string): Promise<Result<TokenResponse>> {
    const user = users.findByIdentifierHash(identifier);
    const checked = await passwordMatches(user, passwordHash);
    if (!checked.ok) return checked;
    if (!checked.value) return fail('invalid_credentials');
    return ok(await tokens.issue(user!));
  }

  /** Sends a login code when a non-superadmin account exists; the caller answers 202 either way. */
  function requestLoginCode(identifier: string, channel: Channel | null): void {
    const user = users.findByIdentifierHash(identifier);
    if (!user || user.role === 'superadmin') return;
    const code = codes.issueLoginCode(user.id);
    const to = destination(user, channel);
    notifier.send({
      ...to,
      purpose: 'login_code',
      text: `Your Minaret sign-in code is ${code}. It expires in 15 minutes. If you did not ask for it, ignore this message.`,
      code,
    });
  }

  /**
   * Past the hourly cap of wrong guesses the account's code flow answers 429 until the oldest guess ages
   * out, even for the right code (which is not looked at, so it is not used up either).
   */
  async function verifyLoginCode(identifier: string, code: string): Promise<Result<TokenResponse>> {
    const found = users.findByIdentifierHash(identifier);
    const user = found && found.role !== 'superadmin' ? found : null;
    const subject = guessSubject('login_code', user?.id ?? null, identifier);
    const wait = guesses.lockedFor(subject);
    if (wait > 0) return failUntil('rate_limited', wait);
    if (!user) codes.spendLikeRedeem(code);
    if (!user || !codes.redeemLoginCode(user.id, code)) {
      guesses.recordWrong(subject);
      return fail('invalid_code');
    }
    return ok(await tokens.issue(user));
  }

  /** Sends a reset link token when a non-superadmin account exists (superadmins use superadmin-forgot). */
  function requestPasswordReset(identifier: string, channel: Channel | null): void {
    const user = users.findByIdentifierHash(identifier);
    if (!user || user.role === 'superadmin') return;
    const token = codes.issueResetToken(user.id, 'member', deps.passwordResetTtlHours * 3600);
    notifier.send({
      ...destination(user, channel),
      purpose: 'password_reset',
      text: `Use this token to reset your Minaret password within ${deps.passwordResetTtlHours} hours: ${token}`,
      token,
    });
  }

  /** The token is used up only once the new hash is ready: a busy hasher leaves it valid for a retry. */
  async function resetPassword(token: string, passwordHash: string): Promise<Result<void>> {
    if (!codes.findResetToken(token, 'member')) return fail('invalid_token');
    const hashed = await hasher.hash(passwordHash);
    if (!hashed.ok) return hashed;
    const userId = codes.redeemResetToken(token, 'member');
    const user = userId ? users.findById(userId) : null;
    if (!user) return fail('invalid_token');
    users.setPassword(user.id, hashed.value);
    return ok(undefined);
  }

  return { signup, login, requestLoginCode, verifyLoginCode, requestPasswordReset, resetPassword };
}

export type PeopleAuth = ReturnType<typeof createPeopleAuth>;

/** The requested channel when the account has that contact, otherwise the one it has. */
export function destination(user: Pick<UserRow, 'email' | 'phone'>, wanted: Channel | null): { channel: Channel; to: string } {
  const hasEmail = !isSyntheticEmail(user.email);
  if (user.phone && (wanted === 'sms' || wanted === 'whatsapp' || !hasEmail)) {
    return { channel: wanted === 'whatsapp' ? 'whatsapp' : 'sms', to: user.phone };
  }
  return { channel: 'email', to: user.email };
}
