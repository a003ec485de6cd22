import { fail, ok, type Result } from '../../platform/failure.ts';
import { identifierHash, syntheticEmailForPhone } from '../../platform/identifiers.ts';
import { isUniqueViolation } from '../../platform/store/store.ts';
import type { PasswordHasher } from '../passwords.ts';
import type { Role, UserRow, UserStore, UserUpdate } from '../users.ts';
import type { AddressChange } from '../addresses/address-change.ts';

export interface UserFields {
  email?: string | null;
  phone?: string | null;
  passwordHash?: string | null;
  role?: Role;
}

/**
 * What user administration needs to know of mosques, declared here because people/ comes before mosques/
 * (ARCHITECTURE: dependency rule); the mosques' AdminStore satisfies it.
 */
export interface MosqueOwnership {
  ownedBy(userId: string): Promise<readonly unknown[]>;
}

/** Called just before a user is deleted; the function it returns runs just after (their devices stop working). */
export type BeforeUserDelete = (userId: string, actorId: string | null) => Promise<(() => Promise<void>) | void> | (() => void) | void;

/** Superadmin user administration (users list/create/update/delete; docs/walkthrough.md, "3. The mosque and its members"). */
export function createUserAdmin(deps: {
  users: UserStore; admins: MosqueOwnership; hasher: PasswordHasher; addressChange: Pick<AddressChange, 'apply'>; beforeDelete?: BeforeUserDelete;
}) {
  const { users } = deps;

  /** The other account holding this email or phone, if any. */
  const takenBy = async (id: string | null, email?: string | null, phone?: string | null): Promise<UserRow | null> => {
    for (const value of [email, phone]) {
      const other = value ? await users.findByIdentifierHash(identifierHash(value)) : null;
      if (other && other.id !== id) return other;
    }
    return null;
  };

  return {
    async create(f: UserFields): Promise<Result<UserRow>> {
      if (await takenBy(null, f.email, f.phone)) return fail('conflict', 'A user with that email or phone already exists.');
      const phoneHash = f.phone ? identifierHash(f.phone) : null;
      const email = f.email ?? syntheticEmailForPhone(phoneHash!);
      const hashed = f.passwordHash ? await deps.hasher.hash(f.passwordHash) : null;
      if (hashed && !hashed.ok) return hashed;
      const passwordBcrypt = hashed ? hashed.value : null;
      try {
        return ok(await users.create({ email, emailHash: identifierHash(email), phone: f.phone ?? null, phoneHash, passwordBcrypt, role: f.role ?? 'member' }));
      } catch (err) {
        if (isUniqueViolation(err)) return fail('conflict', 'A user with that email or phone already exists.');
        throw err;
      }
    },

    async update(id: string, f: UserFields): Promise<Result<UserRow>> {
      const row = await users.findById(id);
      if (!row) return fail('not_found');
      if (await takenBy(id, f.email, f.phone)) return fail('conflict', 'A user with that email or phone already exists.');
      const change: UserUpdate = {};
      if (f.email) change.email = { email: f.email, emailHash: identifierHash(f.email) };
      if (f.phone !== undefined) change.phone = { phone: f.phone, phoneHash: f.phone ? identifierHash(f.phone) : null };
      if (f.role) change.role = f.role;
      if (f.passwordHash) {
        const hashed = await deps.hasher.hash(f.passwordHash);
        if (!hashed.ok) return hashed;
        change.passwordBcrypt = hashed.value;
      }
      try {
        // An address change has the same consequences as the person's own (docs/api.md, "Changing your email or phone").
        return ok(await deps.addressChange.apply(id, change));
      } catch (err) {
        if (isUniqueViolation(err)) return fail('conflict', 'A user with that email or phone already exists.');
        throw err;
      }
    },

    /** Revokes every token and removes memberships and admin rows; an owner must hand the mosque over first. */
    async delete(id: string, actorId: string | null = null): Promise<Result<void>> {
      if (!(await users.findById(id))) return fail('not_found');
      if ((await deps.admins.ownedBy(id)).length > 0) {
        return fail('conflict', 'This user owns a mosque; make another admin the owner first.');
      }
      const after = await deps.beforeDelete?.(id, actorId);
      await users.delete(id);
      await after?.();
      return ok(undefined);
    },
  };
}

export type UserAdmin = ReturnType<typeof createUserAdmin>;
