import type { Clock } from '../platform/clock.ts';
import type { OneTimeCodes } from './codes.ts';
import { fail, failUntil, ok, type Result } from '../platform/failure.ts';
import { guessSubject, type GuessBudget } from './guess-budget.ts';
import { identifierHash, isSyntheticEmail, syntheticEmailForPhone } from '../platform/identifiers.ts';
import type { Logger } from '../platform/log.ts';
import type { Channel, Notifier, PageUrl } from '../platform/notify.ts';
import type { PasswordHasher } from './passwords.ts';
import type { AccessTokens, TokenResponse } from './tokens.ts';
import type { UserRow, UserStore } from './users.ts';
import type { AddressProof } from './addresses/address-proof.ts';
import type { AfterAnswer } from '../platform/flow/after-answer.ts';

export interface PeopleAuthDeps {
  users: UserStore;
  codes: OneTimeCodes;
  hasher: PasswordHasher;
  guesses: GuessBudget;
  tokens: AccessTokens;
  notifier: Notifier;
  pageUrl: PageUrl;
  proof: AddressProof;
  clock: Clock;
  logger: Logger;
  passwordResetTtlHours: number;
  /** Where the code and reset flows put what depends on the account existing: after the answer. */
  afterAnswer: AfterAnswer;
}

export interface SignupInput {
  email: string | null;
  phone: string | null;
  passwordHash: string | null;
}

export type SignupOutcome = { created: boolean; token: TokenResponse };

/** An address is told of attempts to sign up with it at most this often. */
export const SIGNUP_NOTICE_GAP_SECONDS = 86_400;

/**
 * The accounts a password sign-in tries for one address: its proven holder and the earliest claims. Each costs
 * a bcrypt comparison for a wrong password, so claims past these (someone making accounts on one address) are
 * reachable by a code sent to the address, not by password.
 */
export const PASSWORD_CANDIDATES = 4;

/**
 * Sign-in for members and mosque admins (docs/api.md, "Signing in"). Every flow answers an unknown account
 * the way it answers a known one, and spends the same bcrypt time on it (a dummy comparison).
 */
export function createPeopleAuth(deps: PeopleAuthDeps) {
  const { users, codes, hasher, guesses, tokens, notifier, proof } = deps;

  /**
   * The accounts a password sign-in with this address may reach, in the order it tries them: the one that
   * proved it, then each claim in the order made (docs/api.md, "Signup"), at most PASSWORD_CANDIDATES of them.
   */
  async function reachedBy(hash: string): Promise<UserRow[]> {
    const holder = await users.findProvenHolder(hash);
    const claims = await users.listUnprovenClaimants(hash);
    return (holder ? [holder, ...claims] : claims).slice(0, PASSWORD_CANDIDATES);
  }

  /**
   * The first of the candidates whose password this is (never a superadmin's: they sign in in two steps).
   * Always spends at least one bcrypt comparison, a dummy when no candidate has a password, so an address
   * nobody claims costs what a claimed one costs.
   */
  async function firstMatching(candidates: UserRow[], passwordHash: string | null): Promise<Result<UserRow | null>> {
    const usable = passwordHash === null ? [] : candidates.filter((u) => u.role !== 'superadmin' && u.password_bcrypt !== null);
    if (usable.length === 0) {
      const spent = await hasher.verify(passwordHash ?? '', null);
      return spent.ok ? ok(null) : spent;
    }
    for (const user of usable) {
      const checked = await hasher.verify(passwordHash!, user.password_bcrypt);
      if (!checked.ok) return checked;
      if (checked.value) return ok(user);
    }
    return ok(null);
  }

  /**
   * docs/api.md, "Signup": a password that is the password of an account the address reaches (email and phone,
   * when both are given, must reach the same one) signs in to it (200). Anything else makes a new account whose
   * addresses are claims (201), with the same work and the same body: whichever claimant's password matches,
   * signup and login answer alike for an address that has an account and one that has none. An address someone
   * holds is told (at most once a day) that someone tried, after the answer.
   */
  async function signup(input: SignupInput): Promise<Result<SignupOutcome>> {
    const emailHash = input.email ? identifierHash(input.email) : null;
    const phoneHash = input.phone ? identifierHash(input.phone) : null;
    const byEmail = emailHash ? await reachedBy(emailHash) : [];
    const byPhone = phoneHash ? await reachedBy(phoneHash) : [];
    const candidates = emailHash && phoneHash ? byEmail.filter((u) => u.phone_hash === phoneHash) : emailHash ? byEmail : byPhone;
    const matched = await firstMatching(candidates, input.passwordHash);
    if (!matched.ok) return matched;
    if (matched.value) return ok({ created: false, token: await tokens.issue(matched.value) });
    const hashed = input.passwordHash ? await hasher.hash(input.passwordHash) : null;
    if (hashed && !hashed.ok) return hashed;
    const user = await users.create({
      email: input.email ?? syntheticEmailForPhone(phoneHash!),
      emailHash: emailHash ?? identifierHash(syntheticEmailForPhone(phoneHash!)),
      phone: input.phone,
      phoneHash,
      passwordBcrypt: hashed ? hashed.value : null,
      role: 'member',
    });
    if (byEmail.length > 0) tellLater(emailHash!, { channel: 'email', to: input.email! });
    if (byPhone.length > 0) tellLater(phoneHash!, { channel: 'sms', to: input.phone! });
    return ok({ created: true, token: await tokens.issue(user) });
  }

  /** The notice's write and message come after the answer: a taken address must not answer later than a free one. */
  function tellLater(hash: string, to: { channel: Channel; to: string }): void {
    deps.afterAnswer.defer('signup notice', () => tellOfSignupAttempt(hash, to));
  }

  async function tellOfSignupAttempt(hash: string, to: { channel: Channel; to: string }): Promise<void> {
    if (!(await users.claimSignupNotice(hash, SIGNUP_NOTICE_GAP_SECONDS))) return;
    const link = deps.pageUrl('/signin');
    notifier.send({
      ...to,
      purpose: 'signup_attempt',
      text: 'Someone tried to sign up to Minaret with this address, which already has an account. If it was you, sign in '
        + `instead at ${link}, or ask for a sign-in code there. If not, you need do nothing: they cannot use your address.`,
      link,
    });
  }

  /** Reaches whichever account the address reaches whose password this is (docs/api.md, "Signing in"). */
  async function login(identifier: string, passwordHash: string): Promise<Result<TokenResponse>> {
    const matched = await firstMatching(await reachedBy(identifier), passwordHash);
    if (!matched.ok) return matched;
    if (!matched.value) return fail('invalid_credentials');
    return ok(await tokens.issue(matched.value));
  }

  /**
   * Sends a login code when a non-superadmin account exists; the caller answers 202 either way. docs/api.md
   * "Signing in": the lookup, the code's write and the send all run after the answer, so a held address costs the
   * answer no more than a free one.
   */
  async function requestLoginCode(identifier: string, channel: Channel | null): Promise<void> {
    deps.afterAnswer.defer('login code', async () => {
      const user = await users.findByIdentifierHash(identifier);
      if (!user || user.role === 'superadmin') return;
      await sendCode(user, destination(user, channel), 'login_code', '/signin',
        (code, link) => `Your Minaret sign-in code is ${code}. Type it at ${link} within 15 minutes. If you did not ask for it, ignore this message.`);
    });
  }

  /** Issues a login code bound to the address it goes to (redeeming it proves that address), and sends it. */
  async function sendCode(user: UserRow, to: Destination | null, purpose: 'login_code' | 'confirm_address', page: string, text: (code: string, link: string) => string): Promise<void> {
    if (!to) return;
    const code = await codes.issueLoginCode(user.id, to.hash);
    const link = deps.pageUrl(page);
    notifier.send({ channel: to.channel, to: to.to, purpose, text: text(code, link), code, link });
  }

  /**
   * Past the hourly cap of wrong guesses the account's code flow answers 429 until the oldest guess ages
   * out, even for the right code (which is not looked at, so it is not used up either).
   */
  async function verifyLoginCode(identifier: string, code: string): Promise<Result<TokenResponse>> {
    const found = await users.findByIdentifierHash(identifier);
    const user = found && found.role !== 'superadmin' ? found : null;
    const subject = guessSubject('login_code', user?.id ?? null, identifier);
    const wait = await guesses.lockedFor(subject);
    if (wait > 0) return failUntil('rate_limited', wait);
    if (!user) codes.spendLikeRedeem(code);
    const redeemed = user ? await codes.redeemLoginCode(user.id, code) : null;
    if (!user || !redeemed) {
      await guesses.recordWrong(subject);
      return fail('invalid_code');
    }
    const holder = await proveBy(user, redeemed.sentToHash, false);
    if (!holder) return fail('invalid_code');
    return ok(await tokens.issue(holder));
  }

  /** The account a code or link sent to `hash` signs in to, once it proved the address; null when it cannot. */
  async function proveBy(user: UserRow, hash: string | null, signedIn: boolean): Promise<UserRow | null> {
    // Codes issued before addresses were proven name no address: they sign in as they always did.
    if (hash === null) return user;
    const proved = await proof.prove(user.id, hash, { signedIn });
    return proved.ok ? proved.user : null;
  }

  /**
   * Sends a reset link token when a non-superadmin account exists (superadmins use superadmin-forgot); after the
   * answer, as for a login code.
   */
  async function requestPasswordReset(identifier: string, channel: Channel | null): Promise<void> {
    deps.afterAnswer.defer('password reset', async () => {
      const user = await users.findByIdentifierHash(identifier);
      const to = user && user.role !== 'superadmin' ? destination(user, channel) : null;
      if (!to) return;
      const token = await codes.issueResetToken(user!.id, 'member', deps.passwordResetTtlHours * 3600, to.hash);
      // The console has no page for the token (apps use it); a sign-in code there needs no password at all.
      const link = deps.pageUrl('/signin');
      notifier.send({
        channel: to.channel,
        to: to.to,
        purpose: 'password_reset',
        text: `Use this token to reset your Minaret password within ${deps.passwordResetTtlHours} hours: ${token} `
          + `(or sign in with a code sent to you at ${link}).`,
        token,
        link,
      });
    });
  }

  /** The token is used up only once the new hash is ready: a busy hasher leaves it valid for a retry. */
  async function resetPassword(token: string, passwordHash: string): Promise<Result<void>> {
    if (!(await codes.findResetToken(token, 'member'))) return fail('invalid_token');
    const hashed = await hasher.hash(passwordHash);
    if (!hashed.ok) return hashed;
    const redeemed = await codes.redeemResetToken(token, 'member');
    const user = redeemed ? await users.findById(redeemed.userId) : null;
    const holder = user ? await proveBy(user, redeemed!.sentToHash, false) : null;
    if (!holder) return fail('invalid_token');
    await users.setPassword(holder.id, hashed.value);
    return ok(undefined);
  }

  /**
   * docs/api.md, "Addresses: claims and proof": a code to the signed-in account's own unproven email or phone.
   * Redeemed while signed in, it proves the address and the account keeps all it has.
   */
  async function requestAddressConfirmation(userId: string, channel: 'email' | 'sms'): Promise<Result<void>> {
    const user = await users.findById(userId);
    if (!user) return fail('unauthorized');
    const to = addressOf(user, channel);
    if (!to) return fail('validation_failed', channel === 'email' ? 'The account has no email to confirm.' : 'The account has no phone to confirm.');
    await sendCode(user, to, 'confirm_address', '/account',
      (code, link) => `Your Minaret confirmation code is ${code}. Type it where you asked for it (${link}) within 15 minutes. If you did not ask for it, ignore this message.`);
    return ok(undefined);
  }

  async function confirmAddress(userId: string, code: string): Promise<Result<UserRow>> {
    const user = await users.findById(userId);
    if (!user) return fail('unauthorized');
    const subject = guessSubject('login_code', user.id, user.email_hash);
    const wait = await guesses.lockedFor(subject);
    if (wait > 0) return failUntil('rate_limited', wait);
    const redeemed = await codes.redeemLoginCode(user.id, code);
    if (!redeemed) {
      await guesses.recordWrong(subject);
      return fail('invalid_code');
    }
    if (redeemed.sentToHash === null) return ok(user);
    const proved = await proof.prove(user.id, redeemed.sentToHash, { signedIn: true });
    if (!proved.ok) return fail('conflict', proved.message);
    return ok(proved.user);
  }

  return { signup, login, requestLoginCode, verifyLoginCode, requestPasswordReset, resetPassword, requestAddressConfirmation, confirmAddress };
}

export type PeopleAuth = ReturnType<typeof createPeopleAuth>;

interface Destination {
  channel: Channel;
  to: string;
  /** identifier_hash of the address: what receiving there proves. */
  hash: string;
}

/** The account's email or phone as a place to send to; null when it has none (a placeholder is no address). */
function addressOf(user: Pick<UserRow, 'email' | 'email_hash' | 'phone' | 'phone_hash'>, channel: 'email' | 'sms' | 'whatsapp'): Destination | null {
  if (channel === 'email') return isSyntheticEmail(user.email) ? null : { channel, to: user.email, hash: user.email_hash };
  return user.phone && user.phone_hash ? { channel, to: user.phone, hash: user.phone_hash } : null;
}

/** The requested channel when the account has that contact, otherwise the one it has. */
export function destination(user: Pick<UserRow, 'email' | 'email_hash' | 'phone' | 'phone_hash'>, wanted: Channel | null): Destination | null {
  const hasEmail = !isSyntheticEmail(user.email);
  if (user.phone && (wanted === 'sms' || wanted === 'whatsapp' || !hasEmail)) return addressOf(user, wanted === 'whatsapp' ? 'whatsapp' : 'sms');
  return addressOf(user, 'email');
}
