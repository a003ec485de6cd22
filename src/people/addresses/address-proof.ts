import type { StoreTransaction } from '../../platform/store/store.ts';
import { identifierHash, syntheticEmailForPhone } from '../../platform/identifiers.ts';
import { hasProvenAddress, type UserRow, type UserStore } from '../users.ts';

/**
 * What a first proof of an address did (docs/api.md, "Addresses: claims and proof"). Told to the listeners
 * after the commit: mosques and devices give what waited on the address and revoke what the `revoked`
 * accounts gained while their claims were unproven.
 */
export interface AddressProven {
  /** The account that now holds the address (or, for a release, the account that let its last one go). */
  userId: string;
  /** The address proven; null when an account let its last proven address go (`release`). */
  addressHash: string | null;
  /**
   * Accounts whose memberships, admin rows, devices and push subscriptions go: the other unproven claimants
   * left with no proven address, the prover's account itself when the proof came without its token, and an
   * account that let its last proven address go. Under the rule that an account with no proven address holds
   * nothing there is usually nothing left to take; what an account gained before that rule goes here.
   */
  revoked: string[];
  /** Why, as the mosques' activity feeds say it. */
  reason: 'address_claim_lost' | 'address_unproven';
}

export type AddressProvenListener = (event: AddressProven) => void | Promise<void>;

export type ProofOutcome = { ok: true; user: UserRow } | { ok: false; message: string };

/**
 * The first proof of an address settles its claims: the prover holds it; every other account that claimed
 * it loses the claim (and its tokens), and those left with no proven address lose what they gained.
 *
 * Who the prover is: a proof made while signed in (`signedIn`) is the account's own, and it keeps what it
 * has. A proof without the account's token (a login code or reset link, used by whoever reads the address)
 * proves the address, not the account: an account with no proven address is handed to the prover afresh (its
 * password cleared, its tokens and console sessions ended: whoever knew it before may not own the address; it
 * held nothing, so nothing else goes), and an account that another address already vouches for is someone
 * else's, so the prover gets a new account of their own.
 */
export function createAddressProof(deps: { users: UserStore }) {
  const { users } = deps;
  const listeners: AddressProvenListener[] = [];

  return {
    /** Adds a listener told after each first proof's commit (src/devices/stories/address-claims.ts is the story). */
    listen: (listener: AddressProvenListener) => void listeners.push(listener),
    /**
     * The account let its last proven address go (an email changed, a phone removed): it holds nothing from now
     * on (docs/api.md, "Changing your email or phone"), so what it held goes, told as a proof's revocation is.
     */
    async release(userId: string): Promise<void> {
      const event: AddressProven = { userId, addressHash: null, revoked: [userId], reason: 'address_unproven' };
      for (const listener of listeners) await listener(event);
    },
    /**
     * Proves `hash`, one of the account's addresses, through that account. Refused when the address is not
     * (or no longer) the account's, or another account proved it first. The checks and the settling run in one
     * transaction: two proofs of one address at once cannot both settle it.
     */
    async prove(userId: string, hash: string, opts: { signedIn: boolean }): Promise<ProofOutcome> {
      const outcome = await users.transaction(async (trx): Promise<ProofOutcome | AddressProven> => {
        const claimant = await users.findById(userId, trx);
        const kind = claimant ? (claimant.email_hash === hash ? 'email' : claimant.phone_hash === hash ? 'phone' : null) : null;
        if (!claimant || !kind) return { ok: false, message: 'The address is no longer this account’s.' };
        if ((kind === 'email' ? claimant.email_proven_at : claimant.phone_proven_at) !== null) return { ok: true, user: claimant };
        if (await users.findProvenHolder(hash, trx)) {
          return { ok: false, message: 'Another account has proven this address; sign in with a code sent to it.' };
        }
        return settle(trx, claimant, hash, opts.signedIn);
      });
      if ('ok' in outcome) return outcome;
      // Awaited: the proof's answer (a sign-in, a reset, a confirmation) comes with what waited on the address
      // already given (docs/api.md, "Addresses: claims and proof"). Not awaited, that was true on SQLite only,
      // where the listener's transaction held the one connection before the read below; on PostgreSQL's pool the
      // answer came first, and a failing listener was an unhandled rejection.
      for (const listener of listeners) await listener(outcome);
      return { ok: true, user: (await users.findById(outcome.userId))! };
    },
  };

  async function settle(trx: StoreTransaction, claimant: UserRow, hash: string, signedIn: boolean): Promise<AddressProven> {
    const revoked: string[] = [];
    let prover = claimant;
    if (!signedIn && hasProvenAddress(claimant)) {
      prover = await users.create(addressOnly(claimant, hash), trx);
    } else if (!signedIn) {
      await users.resetAfterTakeover(claimant.id, trx);
      revoked.push(claimant.id);
    }
    for (const other of await users.listUnprovenClaimants(hash, trx)) {
      if (other.id === prover.id) continue;
      await users.dropClaim(other.id, hash, trx);
      const after = await users.findById(other.id, trx);
      if (after && !hasProvenAddress(after)) revoked.push(other.id);
    }
    await users.markProven(prover.id, hash, trx);
    return { userId: prover.id, addressHash: hash, revoked, reason: 'address_claim_lost' };
  }
}

/** A new account holding only the one address of `from` that `hash` names. */
function addressOnly(from: UserRow, hash: string) {
  const isEmail = from.email_hash === hash;
  return isEmail
    ? { email: from.email, emailHash: from.email_hash, phone: null, phoneHash: null, passwordBcrypt: null, role: 'member' as const }
    : { email: syntheticEmailForPhone(hash), emailHash: identifierHash(syntheticEmailForPhone(hash)), phone: from.phone, phoneHash: from.phone_hash, passwordBcrypt: null, role: 'member' as const };
}

export type AddressProof = ReturnType<typeof createAddressProof>;
