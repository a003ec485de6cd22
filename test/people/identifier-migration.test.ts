import { test } from 'node:test';
import assert from 'node:assert/strict';
import bcrypt from 'bcryptjs';
import { migrate, openDatabase, readMigrations } from '../../src/platform/db.ts';
import { NORMALIZE_IDENTIFIERS_STEP } from '../../src/people/addresses/identifier-migration.ts';
import { durableFiles, sha256, startTestService } from '../support/service.ts';
import { sqliteOnly } from '../support/database.ts';

const PASSWORD = 'correct horse battery staple';
const BEFORE = 1_700_000_000;

interface Stored { id: string; email: string; phone?: string | null; password?: boolean }

/** A database at schema version 12 holding users as older versions kept them (trimmed, lower-cased, digits only). */
function olderDatabase(file: string, users: Stored[]): void {
  const db = openDatabase(file);
  try {
    migrate(db, readMigrations().filter((m) => m.version < 14));
    const insert = db.prepare(`INSERT INTO users (id, email, email_hash, phone, phone_hash, password_bcrypt, role, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, 'member', ?, ?)`);
    for (const u of users) {
      const phone = u.phone ?? null;
      insert.run(u.id, u.email, sha256(u.email), phone, phone && sha256(phone), u.password ? bcrypt.hashSync(sha256(PASSWORD), 4) : null, BEFORE, BEFORE);
    }
  } finally {
    db.close();
  }
}

function readUsers(file: string) {
  const db = openDatabase(file);
  try {
    const rows = db.prepare('SELECT id, email, email_hash, phone, phone_hash, updated_at FROM users').all() as Array<Record<string, string | number | null>>;
    const steps = db.prepare('SELECT name FROM data_steps').all() as Array<{ name: string }>;
    return { byId: new Map(rows.map((r) => [r.id as string, r])), steps: steps.map((s) => s.name) };
  } finally {
    db.close();
  }
}

// The rewrite is a data step of the SQLite file, run when the service opens it (peopleDataSteps, run by src/platform/boot/storage.ts); a
// PostgreSQL store starts from `minaret migrate-store`, which runs the step on the file first, or empty.
const skip = sqliteOnly('the identifier rewrite is a data step of the SQLite file, written here at an older schema version');

const lines = (logs: string[]) => logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.step === NORMALIZE_IDENTIFIERS_STEP);

test('at start, stored emails and phones are rewritten to their normal form once; a collision is reported, not merged', { skip }, async (t) => {
  const { env } = durableFiles(t, 'identifiers');
  olderDatabase(env.DATABASE_PATH, [
    { id: 'fullwidth', email: 'ｏmar@example.com', password: true },
    // "+44 (0)20 7946 0123" as the old rule kept it (brackets and spaces dropped, the trunk 0 left in).
    { id: 'phone-only', email: `phone-${sha256('+4402079460123').slice(0, 16)}@phone.invalid`, phone: '+4402079460123', password: true },
    { id: 'oa-latin', email: 'oa@example.com' },
    { id: 'oa-fullwidth', email: 'ｏａ@example.com' },
    { id: 'mobile', email: 'mobile@example.com', phone: '+447700900123' },
    { id: 'mobile-trunk', email: 'trunk@example.com', phone: '+4407700900123' },
    { id: 'zero-width', email: 'zw\u200b@example.com' },
    { id: 'plain', email: 'plain@example.com', phone: '+4712345678' },
    // A placeholder that is not the phone's own (.invalid: never an address) stays; its phone is rewritten.
    { id: 'other-placeholder', email: 'lost-0123456789abcdef@claim.invalid', phone: '+4407700900999' },
  ]);

  const ts = await startTestService(t, { env });
  const logged = lines(ts.logs);
  const collisions = logged.filter((l) => l.level === 40 && Array.isArray(l.user_ids));
  assert.deepEqual(collisions.map((l) => [l.field, l.user_ids]), [['email', ['oa-latin', 'oa-fullwidth']], ['phone', ['mobile', 'mobile-trunk']]]);
  assert.deepEqual(logged.filter((l) => l.level === 40 && l.user_id).map((l) => [l.field, l.user_id]), [['email', 'zero-width']]);
  assert.equal(logged.find((l) => l.level === 30)?.rewritten, 3);

  // The rewritten accounts sign in by the hash of their normal form.
  const omar = await ts.http.post('/api/v1/auth/login', { identifier_hash: sha256('omar@example.com'), password_hash: sha256(PASSWORD) });
  assert.equal(omar.status, 200);
  assert.equal(omar.body.user.id, 'fullwidth');
  const phone = await ts.http.post('/api/v1/auth/login', { identifier_hash: sha256('+442079460123'), password_hash: sha256(PASSWORD) });
  assert.equal(phone.status, 200);
  assert.equal(phone.body.user.id, 'phone-only');
  await ts.service.close();

  const { byId, steps } = readUsers(env.DATABASE_PATH);
  assert.deepEqual(steps, [NORMALIZE_IDENTIFIERS_STEP]);
  assert.deepEqual(byId.get('phone-only'), {
    id: 'phone-only', email: `phone-${sha256('+442079460123').slice(0, 16)}@phone.invalid`, email_hash: sha256(`phone-${sha256('+442079460123').slice(0, 16)}@phone.invalid`),
    phone: '+442079460123', phone_hash: sha256('+442079460123'), updated_at: byId.get('phone-only')!.updated_at,
  });
  assert.notEqual(byId.get('phone-only')!.updated_at, BEFORE);
  assert.deepEqual([byId.get('other-placeholder')!.email, byId.get('other-placeholder')!.phone], ['lost-0123456789abcdef@claim.invalid', '+447700900999']);
  // Both sides of each collision, the refused row and the row already normal are as they were.
  for (const [id, email, phoneNumber] of [
    ['oa-latin', 'oa@example.com', null], ['oa-fullwidth', 'ｏａ@example.com', null], ['mobile', 'mobile@example.com', '+447700900123'],
    ['mobile-trunk', 'trunk@example.com', '+4407700900123'], ['zero-width', 'zw\u200b@example.com', null], ['plain', 'plain@example.com', '+4712345678'],
  ] as const) {
    const row = byId.get(id)!;
    assert.deepEqual([row.email, row.email_hash, row.phone, row.updated_at], [email, sha256(email), phoneNumber, BEFORE], id);
  }
});

test('the rewrite runs once: a row put back in an old form afterwards is not rewritten at the next start', { skip }, async (t) => {
  const { env } = durableFiles(t, 'identifiers-once');
  olderDatabase(env.DATABASE_PATH, [{ id: 'upper', email: 'ｕｐｐｅｒ@example.com' }]);
  const first = await startTestService(t, { env });
  assert.equal(lines(first.logs).find((l) => l.level === 30)?.rewritten, 1);
  await first.service.close();
  assert.equal(readUsers(env.DATABASE_PATH).byId.get('upper')!.email, 'upper@example.com');

  const db = openDatabase(env.DATABASE_PATH);
  db.prepare("UPDATE users SET email = 'ｕｐｐｅｒ@example.com' WHERE id = 'upper'").run();
  db.close();
  const second = await startTestService(t, { env });
  assert.deepEqual(lines(second.logs), []);
  await second.service.close();
  assert.equal(readUsers(env.DATABASE_PATH).byId.get('upper')!.email, 'ｕｐｐｅｒ@example.com');
});
