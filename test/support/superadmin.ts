import fs from 'node:fs';
import bcrypt from 'bcryptjs';
import { identifierHash, normalizeEmail, sha256Hex } from '../../src/platform/identifiers.ts';
import { createUserStore, type UserRow } from '../../src/people/users.ts';
import { storeOf } from './database.ts';
import type { TestService } from './service.ts';

/**
 * Creates a superadmin in the running service's store (its SQLite file, or its PostgreSQL with DATABASE_URL)
 * through a connection of its own, the way the operator CLI does: there is no HTTP route that makes one. The
 * service picks the row up on its own.
 */
export async function createSuperadmin(ts: TestService, email: string, password: string): Promise<UserRow> {
  const checked = normalizeEmail(email);
  if (!checked.ok) throw new Error(`createSuperadmin: ${email} ${checked.reason}`);
  const normalized = checked.value;
  const { store, close } = await storeOf(ts);
  try {
    const users = await createUserStore(store, ts.clock);
    return await users.create({
      email: normalized,
      emailHash: identifierHash(normalized),
      phone: null,
      phoneHash: null,
      // Cost 4: the service compares any cost, and tests should not wait for bcrypt.
      passwordBcrypt: bcrypt.hashSync(sha256Hex(password), 4),
      role: 'superadmin',
      proven: { email: true, phone: true },
    });
  } finally {
    await close();
  }
}


/** Every row of a table of the running service's database (SQLite or PostgreSQL), read through a second connection. */
export async function readRows(ts: TestService, table: 'users' | 'login_codes' | 'reset_tokens' | 'superadmin_sessions'): Promise<Record<string, unknown>[]> {
  const { store, close } = await storeOf(ts);
  try {
    return (await store.selectFrom(table).selectAll().execute()) as Record<string, unknown>[];
  } finally {
    await close();
  }
}

/**
 * The raw bytes of the SQLite database file and its write-ahead log, as an attacker with a copy would see them
 * (SQLite only: a PostgreSQL cluster's files are not the service's).
 */
export function databaseBytes(ts: TestService): Buffer {
  if (ts.config.postgres) throw new Error('databaseBytes: the service runs on PostgreSQL, it has no database file');
  const files = [ts.config.databasePath, `${ts.config.databasePath}-wal`].filter((f) => fs.existsSync(f));
  return Buffer.concat(files.map((f) => fs.readFileSync(f)));
}
