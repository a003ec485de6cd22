import type { Config } from '../platform/config.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Db } from '../platform/db.ts';
import type { Logger } from '../platform/log.ts';
import type { Store } from '../platform/store/store.ts';
import type { ChangePublisher } from '../platform/changes.ts';
import type { Notifier, PageUrl } from '../platform/notify.ts';
import type { AfterAnswer } from '../platform/flow/after-answer.ts';
import { deriveKey } from '../platform/secrets.ts';
import { createUserStore } from './users.ts';
import { createOneTimeCodes } from './codes.ts';
import { createGuessBudget } from './guess-budget.ts';
import { createRevokedTokens } from './revoked-tokens.ts';
import { createAccessTokens } from './tokens.ts';
import { createAddressProof } from './addresses/address-proof.ts';
import { createAddressChange } from './addresses/address-change.ts';
import { createSuperadminAuth } from './superadmin.ts';
import { createConsoleSessions, createSessions } from './sessions.ts';
import { createPeopleAuth } from './auth.ts';
import { createFirstSuperadmin } from './admin/first-superadmin.ts';
import type { PasswordHasher } from './passwords.ts';
import { logIdentifierRewrite, normalizeStoredIdentifiersOnce } from './addresses/identifier-migration.ts';

/** The people's data step of the SQLite file, run once after its SQL migrations (src/platform/boot/storage.ts). */
export function peopleDataSteps(clock: Clock, logger: Logger): (db: Db) => void {
  return (db) => logIdentifierRewrite(normalizeStoredIdentifiersOnce(db, toUnixSeconds(clock())), logger);
}

/** What the people domain is built from: the platform's parts, the service's key, and the bcrypt workers. */
export interface PeoplePorts {
  store: Store;
  clock: Clock;
  logger: Logger;
  jwtSecret: string;
  hasher: PasswordHasher;
  notifier: Notifier;
  pageUrl: PageUrl;
  changes: ChangePublisher;
  afterAnswer: AfterAnswer;
  onError: (what: string, err: unknown) => void;
}

/** People, their credentials and the ways they sign in (docs/api.md, "Signing in"). */
export async function buildPeople(config: Config, p: PeoplePorts) {
  const { store, clock, hasher, notifier, pageUrl } = p;
  const users = await createUserStore(store, clock, p.changes, p.onError);
  const codes = createOneTimeCodes(store, clock, deriveKey(p.jwtSecret, 'one-time-codes'));
  const guesses = createGuessBudget(store, clock, config.authMaxWrongGuessesPerHour);
  const revoked = await createRevokedTokens(store, clock, p.changes, p.onError);
  const tokens = createAccessTokens({ secret: p.jwtSecret, expireDays: config.accessTokenExpireDays, clock, currentVersion: users.tokenVersion, isRevoked: revoked.isRevoked });
  const proof = createAddressProof({ users });
  const addressChange = createAddressChange({ users, hasher, codes, guesses, notifier, proof, pageUrl });
  const superadminAuth = createSuperadminAuth({ store, users, codes, hasher, guesses, tokens, notifier, pageUrl, clock });
  const consoleSessions = createConsoleSessions({ store, users, tokens, clock, settings: config.consoleSessions });
  return {
    users, tokens, revoked, proof, addressChange, superadminAuth, consoleSessions,
    peopleAuth: createPeopleAuth({ users, codes, hasher, guesses, tokens, notifier, pageUrl, proof, clock, logger: p.logger, passwordResetTtlHours: config.passwordResetTtlHours, afterAnswer: p.afterAnswer }),
    sessions: createSessions({ users, hasher, guesses, tokens, revoked, superadmin: superadminAuth, consoleSessions, clock }),
    // The setup link of a service without a superadmin (docs/operator.md, "The first superadmin").
    firstSuperadmin: await createFirstSuperadmin({ users, hasher }),
  };
}

export type People = Awaited<ReturnType<typeof buildPeople>>;
