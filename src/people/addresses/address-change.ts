import { fail, failUntil, ok, type Result } from '../../platform/failure.ts';
import { identifierHash, isSyntheticEmail } from '../../platform/identifiers.ts';
import type { Notifier, PageUrl } from '../../platform/notify.ts';
import type { OneTimeCodes } from '../codes.ts';
import { guessSubject, type GuessBudget } from '../guess-budget.ts';
import type { PasswordHasher } from '../passwords.ts';
import { hasProvenAddress, type UserRow, type UserStore, type UserUpdate } from '../users.ts';
import type { AddressProof } from './address-proof.ts';

/** What the person sends to show the change is theirs (docs/api.md, "Changing your email or phone"). */
export interface ChangeProof {
  currentPasswordHash: string | null;
  /** A code sent to one of the account's proven addresses (`POST /me/addresses/confirm`), for an account without a password. */
  code: string | null;
}

export interface AddressFields {
  email?: string;
  /** null removes the phone. */
  phone?: string | null;
}

/**
 * Changing an account's email or phone (docs/api.md, "Changing your email or phone"). The new address is a
 * claim made now. On an account with a proven address the person shows it is theirs: the current password,
 * or, without one, a code sent to a proven address (a bearer token alone must not move an account). Each old
 * address is told. A change that leaves the account with no proven address ends its tokens and console sessions
 * (the store raises its token version) and everything it holds goes (`proof.release`): an account that has
 * proven nothing holds nothing.
 */
export function createAddressChange(deps: {
  users: UserStore; hasher: PasswordHasher; codes: OneTimeCodes; guesses: GuessBudget; notifier: Notifier; proof: AddressProof; pageUrl: PageUrl;
}) {
  const { users } = deps;

  /** The person's own change: shown to be theirs when the account has something to protect. */
  async function changeOwn(userId: string, fields: AddressFields, shown: ChangeProof): Promise<Result<UserRow>> {
    const row = await users.findById(userId);
    if (!row) return fail('unauthorized');
    const change = changeOf(row, fields);
    if (!change.ok) return change;
    if (!change.value) return ok(row);
    if (hasProvenAddress(row)) {
      const allowed = await isTheirs(row, shown);
      if (!allowed.ok) return allowed;
    }
    return ok(await apply(row.id, change.value));
  }

  /** A superadmin's change of another account (PATCH /users/{id}): the same consequences, no proof asked. */
  async function apply(userId: string, change: UserUpdate): Promise<UserRow> {
    const { before, after } = await users.update(userId, change);
    tellOldAddresses(before, after);
    if (hasProvenAddress(before) && !hasProvenAddress(after) && after.role !== 'superadmin') await deps.proof.release(after.id);
    return after;
  }

  async function isTheirs(row: UserRow, shown: ChangeProof): Promise<Result<void>> {
    const subject = guessSubject('password_change', row.id, '');
    const wait = await deps.guesses.lockedFor(subject);
    if (wait > 0) return failUntil('rate_limited', wait);
    if (shown.currentPasswordHash !== null) {
      const checked = await deps.hasher.verify(shown.currentPasswordHash, row.password_bcrypt);
      if (!checked.ok) return checked;
      if (checked.value) return ok(undefined);
      await deps.guesses.recordWrong(subject);
      return fail('invalid_credentials');
    }
    if (shown.code !== null) {
      const redeemed = await deps.codes.redeemLoginCode(row.id, shown.code);
      if (redeemed && redeemed.sentToHash !== null && isProvenAddress(row, redeemed.sentToHash)) return ok(undefined);
      await deps.guesses.recordWrong(subject);
      return fail('invalid_code');
    }
    return fail('forbidden', row.password_bcrypt !== null
      ? 'Changing the address of a confirmed account needs your current password (current_password_hash).'
      : 'Changing the address of a confirmed account needs a code sent to your confirmed address (code): ask for one with POST /me/addresses/confirm.');
  }

  /** The old email and phone hear of the change, so a stolen session cannot move the account unseen. */
  function tellOldAddresses(before: UserRow, after: UserRow): void {
    const link = deps.pageUrl('/account');
    const text = (what: string) => `The ${what} of your Minaret account was changed (your account: ${link}). If you did not do this, `
      + "tell your mosque's administrator or the operator of the service at once.";
    if (before.email_hash !== after.email_hash && !isSyntheticEmail(before.email)) {
      deps.notifier.send({ channel: 'email', to: before.email, purpose: 'address_changed', text: text('email address'), link });
    }
    if (before.phone && before.phone_hash !== after.phone_hash) {
      deps.notifier.send({ channel: 'sms', to: before.phone, purpose: 'address_changed', text: text('phone number'), link });
    }
  }

  return { changeOwn, apply };
}

export type AddressChange = ReturnType<typeof createAddressChange>;

/** What changes, if anything: an unchanged address is no change; the account keeps an email or a phone. */
export function changeOf(row: UserRow, fields: AddressFields): Result<UserUpdate | null> {
  const change: UserUpdate = {};
  if (fields.email !== undefined && identifierHash(fields.email) !== row.email_hash) change.email = { email: fields.email, emailHash: identifierHash(fields.email) };
  if (fields.phone !== undefined && (fields.phone === null ? row.phone !== null : identifierHash(fields.phone) !== row.phone_hash)) {
    change.phone = { phone: fields.phone, phoneHash: fields.phone === null ? null : identifierHash(fields.phone) };
  }
  if (change.phone?.phone === null && isSyntheticEmail(change.email?.email ?? row.email)) {
    return { ok: false, failure: 'validation_failed', message: 'An account needs an email or a phone.', details: [{ path: 'phone', message: 'cannot remove the only address' }] };
  }
  return ok(Object.keys(change).length > 0 ? change : null);
}

function isProvenAddress(row: UserRow, hash: string): boolean {
  return (row.email_hash === hash && row.email_proven_at !== null) || (row.phone_hash === hash && row.phone_proven_at !== null);
}
