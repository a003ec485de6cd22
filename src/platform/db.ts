import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';

export type Db = Database.Database;

const MIGRATIONS_DIR = fileURLToPath(new URL('../../data/migrations', import.meta.url));

/**
 * Opens the database the way every part of Minaret expects it: WAL, NORMAL sync, foreign keys, busy timeout.
 * WAL with NORMAL sync: a commit survives the process dying (kill -9); only a power cut may lose the last
 * few, and never leaves the file inconsistent.
 * `maxBytes` (DATABASE_MAX_BYTES) caps the file through max_page_count: writes past it fail with SQLITE_FULL
 * while reads go on. SQLite never sets it below the current size, so a file already over it is full at once.
 */
export function openDatabase(file: string, opts: { maxBytes?: number | undefined } = {}): Db {
  if (file !== ':memory:') fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  if (opts.maxBytes !== undefined) {
    const pageSize = db.pragma('page_size', { simple: true }) as number;
    db.pragma(`max_page_count = ${Math.max(1, Math.floor(opts.maxBytes / pageSize))}`);
  }
  return db;
}

/** Opens a file that must already exist, with no pragmas set: operator tools inspect it, never create one by mistake. */
export function openExistingDatabase(file: string): Db {
  return new Database(file, { fileMustExist: true });
}

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export function readMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /^\d+_.+\.sql$/.test(f))
    .map((f) => ({ version: Number.parseInt(f, 10), name: f, sql: fs.readFileSync(path.join(dir, f), 'utf8') }))
    .sort((a, b) => a.version - b.version);
}

/** Applies every migration above PRAGMA user_version, each in its own transaction. Returns the new version. */
export function migrate(db: Db, migrations = readMigrations()): number {
  let current = db.pragma('user_version', { simple: true }) as number;
  for (const m of migrations) {
    if (m.version <= current) continue;
    db.transaction(() => {
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    })();
    current = m.version;
  }
  return current;
}
