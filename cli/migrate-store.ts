import crypto from 'node:crypto';
import fs from 'node:fs';
import { sql } from 'kysely';
import { migrate, openDatabase, type Db } from '../src/platform/db.ts';
import { normalizeStoredIdentifiersOnce } from '../src/people/addresses/identifier-migration.ts';
import type { OpenedPostgres } from '../src/platform/store/postgres.ts';
import type { Store } from '../src/platform/store/store.ts';

/**
 * `minaret migrate-store --from <sqlite file> --to <postgres url>` (docs/operator.md, "Moving to PostgreSQL"): a
 * deployment's SQLite file copied into an empty PostgreSQL, every table in one transaction, then verified by
 * each table's row count and a checksum of its rows read back from both sides. The service must be stopped
 * first: rows written meanwhile would be missing from the copy.
 *
 * The source is brought to this version's schema first (its migrations and data steps), as the service would at
 * its next start, so both sides hold the same tables and columns. A target that already holds a row anywhere
 * is refused before anything is copied: a second run must not mix two deployments.
 */
export class MigrateStoreError extends Error {}

/** Rows per INSERT: the widest table has ~30 columns, far below PostgreSQL's 65,535 parameters a statement. */
const BATCH = 500;
/** Minaret's bookkeeping of the schema version on PostgreSQL (the same version as SQLite's user_version). */
const SCHEMA_TABLE = 'minaret_schema';

export interface TableReport {
  table: string;
  rows: number;
  checksum: string;
}

/** `openTarget`: PostgreSQL at the URL, migrated (src/platform/store/postgres.ts, `openPostgres`). */
export async function migrateStore(from: string, to: string, openTarget: (url: string) => Promise<OpenedPostgres>): Promise<TableReport[]> {
  if (!fs.existsSync(from) || !fs.statSync(from).isFile()) throw new MigrateStoreError(`--from: ${from} is not a file`);
  if (!/^postgres(ql)?:\/\//i.test(to)) throw new MigrateStoreError('--to: must be a URL starting with postgres:// or postgresql://');
  const db = openDatabase(from);
  let store: Store | null = null;
  try {
    const version = migrate(db);
    normalizeStoredIdentifiersOnce(db, Math.floor(Date.now() / 1000));
    const opened = await openTarget(to);
    store = opened.store;
    if (opened.version !== version) throw new MigrateStoreError(`--to: its schema is at version ${opened.version}, the file at ${version}`);
    const tables = sqliteTables(db);
    const targetTables = await postgresTables(store);
    const missing = tables.filter((t) => !targetTables.includes(t.name)).map((t) => t.name);
    if (missing.length) throw new MigrateStoreError(`--to: has no table ${missing.join(', ')}`);
    for (const t of tables) {
      const { rows } = await sql<{ any: boolean }>`SELECT EXISTS (SELECT 1 FROM ${sql.table(t.name)}) AS any`.execute(store);
      if (rows[0]?.any) throw new MigrateStoreError(`--to: not empty (table ${t.name} holds rows); migrate-store copies into an empty database only`);
    }

    await store.transaction().execute(async (trx) => {
      for (const t of dependencyOrder(db, tables)) {
        let batch: Array<Record<string, unknown>> = [];
        const flush = async () => {
          if (batch.length) await trx.insertInto(t.name as never).values(batch as never).execute();
          batch = [];
        };
        // In the order written where the table has a rowid; a WITHOUT ROWID table in its key's.
        const order = t.key.length && t.withoutRowid ? t.key.map((k) => `"${k}"`).join(', ') : 'rowid';
        for (const row of db.prepare(`SELECT * FROM "${t.name}" ORDER BY ${order}`).iterate() as Iterable<Record<string, unknown>>) {
          batch.push(row);
          if (batch.length >= BATCH) await flush();
        }
        await flush();
      }
      // An identity column numbers the next row after the largest copied one, not from 1 again.
      const identities = await sql<{ table_name: string; column_name: string }>`
        SELECT table_name, column_name FROM information_schema.columns
        WHERE table_schema = current_schema() AND is_identity = 'YES'`.execute(trx);
      for (const { table_name, column_name } of identities.rows) {
        await sql`SELECT setval(pg_get_serial_sequence(${table_name}, ${column_name}),
          COALESCE((SELECT max(${sql.ref(column_name)}) FROM ${sql.table(table_name)}), 0) + 1, false)`.execute(trx);
      }
    });

    const reports: TableReport[] = [];
    for (const t of tables) {
      const source = await checksumOf(db.prepare(`SELECT * FROM "${t.name}"`).iterate() as Iterable<Record<string, unknown>>);
      const copied = await checksumOf(readAll(store, t));
      if (source.rows !== copied.rows || source.checksum !== copied.checksum) {
        throw new MigrateStoreError(`table ${t.name}: ${source.rows} rows (checksum ${source.checksum}) in the file, ${copied.rows} (${copied.checksum}) read back from PostgreSQL`);
      }
      reports.push({ table: t.name, ...source });
    }
    return reports;
  } finally {
    db.close();
    await store?.destroy();
  }
}

interface TableInfo {
  name: string;
  /** Its primary key's columns (empty: none), to read PostgreSQL's copy in pages. */
  key: string[];
  withoutRowid: boolean;
}

function sqliteTables(db: Db): TableInfo[] {
  const names = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").pluck().all() as string[];
  return names.map((name) => ({
    name,
    withoutRowid: /\bWITHOUT\s+ROWID\b/i.test(db.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?").pluck().get(name) as string),
    key: (db.prepare(`PRAGMA table_info("${name}")`).all() as Array<{ name: string; pk: number }>)
      .filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name),
  }));
}

async function postgresTables(store: Store): Promise<string[]> {
  const { rows } = await sql<{ table_name: string }>`
    SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`.execute(store);
  return rows.map((r) => r.table_name).filter((n) => n !== SCHEMA_TABLE);
}

/** Referenced tables before the tables that reference them (the schema has no cycle; a self-reference is copied in rowid order). */
function dependencyOrder(db: Db, tables: TableInfo[]): TableInfo[] {
  const byName = new Map(tables.map((t) => [t.name, t]));
  const done = new Set<string>();
  const out: TableInfo[] = [];
  const visit = (t: TableInfo, path: string[]) => {
    if (done.has(t.name)) return;
    if (path.includes(t.name)) throw new MigrateStoreError(`the schema's foreign keys form a cycle: ${[...path, t.name].join(' -> ')}`);
    const refs = (db.prepare(`PRAGMA foreign_key_list("${t.name}")`).all() as Array<{ table: string }>).map((f) => f.table);
    for (const r of refs) {
      const target = byName.get(r);
      if (target && r !== t.name) visit(target, [...path, t.name]);
    }
    done.add(t.name);
    out.push(t);
  };
  for (const t of tables) visit(t, []);
  return out;
}

/** PostgreSQL's copy, a page at a time in its key's order (a table without a key is small: read whole). */
async function* readAll(q: Store, t: TableInfo): AsyncGenerator<Record<string, unknown>> {
  if (t.key.length === 0) {
    yield* (await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(t.name)}`.execute(q)).rows;
    return;
  }
  const keys = sql.join(t.key.map((k) => sql.ref(k)));
  let after: unknown[] | null = null;
  for (;;) {
    const where = after === null ? sql`` : sql`WHERE (${keys}) > (${sql.join(after.map((v) => sql`${v}`))})`;
    const { rows }: { rows: Array<Record<string, unknown>> } = await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(t.name)} ${where} ORDER BY ${keys} LIMIT 5000`.execute(q);
    yield* rows;
    if (rows.length < 5000) return;
    const last: Record<string, unknown> = rows[rows.length - 1]!;
    after = t.key.map((k) => last[k]);
  }
}

/**
 * A table's rows as a count and an order-free checksum: the sum, modulo 2^256, of each row's SHA-256 over its
 * columns by name with their values in one form for both engines (a number, a text, bytes as base64, null). Order-free,
 * because the two engines sort text differently (SQLite by bytes, PostgreSQL by its collation).
 */
function checksumOf(rows: Iterable<Record<string, unknown>> | AsyncIterable<Record<string, unknown>>): { rows: number; checksum: string } | Promise<{ rows: number; checksum: string }> {
  const MOD = 1n << 256n;
  let sum = 0n;
  let n = 0;
  const add = (row: Record<string, unknown>) => {
    const canonical = JSON.stringify(Object.keys(row).sort().map((k) => [k, canonicalValue(row[k])]));
    sum = (sum + BigInt(`0x${crypto.createHash('sha256').update(canonical).digest('hex')}`)) % MOD;
    n++;
  };
  const result = () => ({ rows: n, checksum: sum.toString(16).padStart(64, '0').slice(0, 16) });
  if (Symbol.asyncIterator in rows) {
    return (async () => {
      for await (const row of rows as AsyncIterable<Record<string, unknown>>) add(row);
      return result();
    })();
  }
  for (const row of rows as Iterable<Record<string, unknown>>) add(row);
  return result();
}

function canonicalValue(v: unknown): unknown {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return Number(v);
  if (Buffer.isBuffer(v)) return `b64:${v.toString('base64')}`;
  return v;
}
