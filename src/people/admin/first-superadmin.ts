import { fail, ok, type Result } from '../../platform/failure.ts';
import { identifierHash, sha256Hex } from '../../platform/identifiers.ts';
import { hexEquals, randomToken } from '../../platform/secret-codes.ts';
import type { PasswordHasher } from '../passwords.ts';
import type { UserRow, UserStore } from '../users.ts';

/**
 * The first start in the browser (docs/operator.md, "The first superadmin"): while no superadmin exists, the
 * process holds one random setup token, logged once as a link, valid until it is used or the process stops (as
 * Jupyter and Grafana do). Redeeming it creates the first superadmin; after that there is nothing to set up and
 * the setup route answers 404. `minaret superadmin create` stays for scripts.
 */
export async function createFirstSuperadmin(deps: { users: UserStore; hasher: PasswordHasher }) {
  let token: string | null = (await deps.users.hasSuperadmin()) ? null : randomToken(32);

  const isOpen = async (): Promise<boolean> => {
    // Another process, or the CLI, may have made one meanwhile: the store decides.
    if (token !== null && (await deps.users.hasSuperadmin())) token = null;
    return token !== null;
  };

  return {
    /** The token to put in the link the process logs at start, or null when a superadmin exists. */
    token: async (): Promise<string | null> => ((await isOpen()) ? token : null),
    isOpen,

    /** Creates the first superadmin with a proven email (the operator holds the link); the token is used up. */
    async create(presented: string, email: string, passwordHash: string): Promise<Result<UserRow>> {
      if (!(await isOpen())) return fail('not_found');
      if (!hexEquals(sha256Hex(presented), sha256Hex(token!))) return fail('invalid_token');
      const hashed = await deps.hasher.hash(passwordHash);
      if (!hashed.ok) return hashed;
      if (!(await isOpen())) return fail('not_found'); // made by someone else while the password was hashed
      token = null;
      return ok(await deps.users.create({
        email, emailHash: identifierHash(email), phone: null, phoneHash: null, passwordBcrypt: hashed.value, role: 'superadmin',
        proven: { email: true },
      }));
    },
  };
}

export type FirstSuperadmin = Awaited<ReturnType<typeof createFirstSuperadmin>>;
