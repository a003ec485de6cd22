import { runDataStepOnce, type Db } from '../../platform/db.ts';
import type { Logger } from '../../platform/log.ts';
import { identifierHash, isSyntheticEmail, normalizeEmail, normalizePhone, syntheticEmailForPhone } from '../../platform/identifiers.ts';

/** The data_steps name of this rewrite; a later change to the normal form would be a new step. */
export const NORMALIZE_IDENTIFIERS_STEP = 'normalize-identifiers';

interface StoredIdentifiers {
  id: string;
  email: string;
  email_hash: string;
  phone: string | null;
  phone_hash: string | null;
}

type Target = Omit<StoredIdentifiers, 'id'>;

/** What the rewrite did, for the start-up log: it never merges accounts and never deletes one. */
export interface IdentifierRewriteReport {
  rewritten: string[];
  /** Rows whose identifiers would become one another's: all left as they are, for an operator to settle. */
  collisions: Array<{ field: 'email' | 'phone'; userIds: string[] }>;
  /** Rows holding an email or phone that today's rules refuse (docs/api.md#identifiers): left as they are. */
  refused: Array<{ userId: string; field: 'email' | 'phone' }>;
}

/**
 * Rewrites every user whose email or phone is not in the normal form of docs/api.md#identifiers (and its
 * hashes, the identifier_hash a client now computes), once per database. Run after the SQL migrations and
 * before anything reads the users table; null when it had already run.
 */
export function normalizeStoredIdentifiersOnce(db: Db, nowS: number): IdentifierRewriteReport | null {
  return runDataStepOnce(db, NORMALIZE_IDENTIFIERS_STEP, nowS, () => normalizeStoredIdentifiers(db, nowS));
}

/** One line for the rewrite, and one warning per collision or refused value, naming only user ids. */
export function logIdentifierRewrite(report: IdentifierRewriteReport | null, logger: Logger): void {
  if (report === null) return;
  logger.info({ step: NORMALIZE_IDENTIFIERS_STEP, rewritten: report.rewritten.length }, 'stored emails and phones normalised');
  for (const c of report.collisions) {
    logger.warn(
      { step: NORMALIZE_IDENTIFIERS_STEP, field: c.field, user_ids: c.userIds },
      `these users' ${c.field}s normalise to the same one, so none of them was changed or merged: keep one (PATCH or DELETE /api/v1/users/<id>)`,
    );
  }
  for (const r of report.refused) {
    logger.warn({ step: NORMALIZE_IDENTIFIERS_STEP, field: r.field, user_id: r.userId }, `this user's ${r.field} is refused by today's rules and was left as it is: correct it with PATCH /api/v1/users/<id>`);
  }
}

/**
 * On better-sqlite3's statements, not the store: it runs once, at start, inside runDataStepOnce's synchronous
 * transaction with the data_steps row (src/platform/db.ts), before any request; an async query may not run inside it.
 */
export function normalizeStoredIdentifiers(db: Db, nowS: number): IdentifierRewriteReport {
  const rows = db.prepare<[], StoredIdentifiers>('SELECT id, email, email_hash, phone, phone_hash FROM users ORDER BY rowid').all();
  const report: IdentifierRewriteReport = { rewritten: [], collisions: [], refused: [] };
  const targets = new Map(rows.map((row) => [row.id, targetOf(row, report.refused)]));
  const changes = rows.filter((row) => differs(row, targets.get(row.id)!));
  const held = new Set<string>();
  for (const field of ['email', 'phone'] as const) {
    for (const [value, group] of groupBy(rows, (row) => targets.get(row.id)![field])) {
      // Rows that already shared a value (allowed for unproven addresses) are not this rewrite's doing.
      if (group.length < 2 || !group.some((row) => row[field] !== value)) continue;
      report.collisions.push({ field, userIds: group.map((row) => row.id) });
      for (const row of group) held.add(row.id);
    }
  }
  const update = db.prepare('UPDATE users SET email = ?, email_hash = ?, phone = ?, phone_hash = ?, updated_at = ? WHERE id = ?');
  for (const row of changes) {
    if (held.has(row.id)) continue;
    const t = targets.get(row.id)!;
    update.run(t.email, t.email_hash, t.phone, t.phone_hash, nowS, row.id);
    report.rewritten.push(row.id);
  }
  return report;
}

/** The row as today's normalisers would store it; a value they refuse is kept as it is (and reported). */
function targetOf(row: StoredIdentifiers, refused: IdentifierRewriteReport['refused']): Target {
  let phone = row.phone;
  if (phone !== null) {
    const checked = normalizePhone(phone);
    if (checked.ok) phone = checked.value;
    else refused.push({ userId: row.id, field: 'phone' });
  }
  const phoneHash = phone === null ? null : identifierHash(phone);
  let email = row.email;
  // A phone-only account's placeholder email is named after its phone's hash, so it follows the phone;
  // any other placeholder is not an address and is left as it is.
  if (row.phone !== null && email === syntheticEmailForPhone(identifierHash(row.phone))) {
    email = syntheticEmailForPhone(phoneHash!);
  } else if (!isSyntheticEmail(email)) {
    const checked = normalizeEmail(email);
    if (checked.ok) email = checked.value;
    else refused.push({ userId: row.id, field: 'email' });
  }
  return { email, email_hash: identifierHash(email), phone, phone_hash: phoneHash };
}

const differs = (row: StoredIdentifiers, t: Target) =>
  row.email !== t.email || row.email_hash !== t.email_hash || row.phone !== t.phone || row.phone_hash !== t.phone_hash;

function groupBy<T>(items: T[], key: (item: T) => string | null): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    if (k === null) continue;
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}
