import type { Clock } from '../platform/clock.ts';
import type { OneTimeCodes } from './codes.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
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
  const { users, codes, hasher, tokens, notifier } = deps;

  /** True when the password matches a non-superadmin account; always spends one bcrypt comparison. */
  async function passwordMatches(user: UserRow | null, passwordHash: string | null): Promise<boolean> {
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
      const matched = (await passwordMatches(existing, input.passwordHash)) && sameAccount;
      return matched ? ok({ created: false, token: await tokens.issue(existing) }) : fail('invalid_credentials');
    }
    const passwordBcrypt = input.passwordHash ? await hasher.hash(input.passwordHash) : null;
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
    if (!(await passwordMatches(user, passwordHash))) return fail('invalid_credentials');
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

  async function verifyLoginCode(identifier: string, code: string): Promise<Result<TokenResponse>> {
    const user = users.findByIdentifierHash(identifier);
    if (!user || user.role === 'superadmin') {
      codes.spendLikeRedeem(code);
      return fail('invalid_code');
    }
    if (!codes.redeemLoginCode(user.id, code)) return fail('invalid_code');
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

  async function resetPassword(token: string, passwordHash: string): Promise<Result<void>> {
    const userId = codes.redeemResetToken(token, 'member');
    const user = userId ? users.findById(userId) : null;
    if (!user) return fail('invalid_token');
    users.setPassword(user.id, await hasher.hash(passwordHash));
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
