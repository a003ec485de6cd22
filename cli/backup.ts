import fs from 'node:fs';
import path from 'node:path';
import { openExistingDatabase, readMigrations, type Db } from '../src/platform/db.ts';

/**
 * `backup <file>` and `restore <file>` of the operator CLI.
 * Backup uses SQLite's online backup API: a consistent copy while the service keeps writing.
 * Restore refuses while anything has the database open (the service holds it for its whole life), checks the
 * file is a Minaret database this version can run, keeps the current one as `<db>.before-restore`, and swaps
 * the file in with a rename, so the database is either the old one or the new one, never half of each.
 */
export class BackupError extends Error {}

/** Tables every Minaret database has had since its first migration. */
const CORE_TABLES = ['users', 'mosques', 'memberships'];

export async function backupDatabase(databasePath: string, target: string): Promise<string> {
  if (path.resolve(target) === path.resolve(databasePath)) throw new BackupError('backup: the target is the database itself');
  const source = openExisting(databasePath, 'DATABASE_PATH');
  try {
    const version = checkMinaret(source, `DATABASE_PATH ${databasePath}`);
    const tmp = partialName(target);
    try {
      fs.mkdirSync(path.dirname(path.resolve(target)), { recursive: true, mode: 0o700 });
      await source.backup(tmp);
      checkCopy(tmp);
      fs.chmodSync(tmp, 0o600); // it holds password and device-secret hashes
      fs.renameSync(tmp, target);
    } catch (err) {
      fs.rmSync(tmp, { force: true });
      if (err instanceof BackupError) throw err;
      throw new BackupError(`backup: cannot write ${target}: ${(err as Error).message}`);
    }
    return `backup written: ${target} (${fs.statSync(target).size} bytes, schema version ${version})`;
  } finally {
    source.close();
  }
}

export async function restoreDatabase(databasePath: string, file: string): Promise<string> {
  if (path.resolve(file) === path.resolve(databasePath)) throw new BackupError('restore: the file is the database itself');
  const source = openExisting(file, 'restore');
  let version: number;
  const tmp = partialName(databasePath);
  try {
    version = checkMinaret(source, file);
    fs.mkdirSync(path.dirname(path.resolve(databasePath)), { recursive: true, mode: 0o700 });
    // Made 0600 before a byte is written: it holds password and device-secret hashes. SQLite gives the -wal
    // and -shm it later creates beside a database the database file's own mode.
    fs.closeSync(fs.openSync(tmp, 'wx', 0o600));
    await source.backup(tmp);
    fs.chmodSync(tmp, 0o600);
  } catch (err) {
    fs.rmSync(tmp, { force: true });
    if (err instanceof BackupError) throw err;
    throw new BackupError(`restore: cannot copy ${file}: ${(err as Error).message}`);
  } finally {
    source.close();
  }
  try {
    const kept = fs.existsSync(databasePath) ? await setAside(databasePath) : null;
    // A stale -wal of the old file would be replayed into the new one on the next open.
    for (const suffix of ['-wal', '-shm']) fs.rmSync(databasePath + suffix, { force: true });
    fs.renameSync(tmp, databasePath);
    const latest = readMigrations().at(-1)?.version ?? 0;
    const migrations = version < latest ? `; migrations ${version + 1}..${latest} run at the next start` : '';
    return `restored ${file} into ${databasePath} (schema version ${version}${migrations})` + (kept ? `; the previous database is kept at ${kept}` : '');
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/**
 * Takes the database's exclusive lock without waiting: the running service holds a shared lock for as long
 * as it has the file open, so this fails exactly while a service (or another tool) uses it.
 * Then copies it aside and folds its WAL in, so nothing of it is left beside the file.
 */
async function setAside(databasePath: string): Promise<string> {
  const current = openExistingDatabase(databasePath);
  try {
    current.pragma('busy_timeout = 0');
    current.pragma('locking_mode = EXCLUSIVE');
    try {
      current.exec('BEGIN EXCLUSIVE; COMMIT');
    } catch {
      throw new BackupError(
        `restore: ${databasePath} is in use: stop the service first (systemctl stop minaret, or docker compose stop), then restore`,
      );
    }
    const kept = `${databasePath}.before-restore`;
    await current.backup(kept);
    fs.chmodSync(kept, 0o600);
    current.pragma('wal_checkpoint(TRUNCATE)');
    return kept;
  } finally {
    current.close();
  }
}

function openExisting(file: string, what: string): Db {
  if (!fs.existsSync(file)) throw new BackupError(`${what}: ${file} does not exist`);
  try {
    const db = openExistingDatabase(file);
    db.pragma('busy_timeout = 5000');
    return db;
  } catch (err) {
    throw new BackupError(`${what}: cannot open ${file}: ${(err as Error).message}`);
  }
}

/** A Minaret database this version can run: its tables, intact, at a schema version we know. Returns the version. */
function checkMinaret(db: Db, label: string): number {
  let version: number;
  let tables: string[];
  try {
    version = db.pragma('user_version', { simple: true }) as number;
    tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((r) => r.name);
  } catch (err) {
    throw new BackupError(`${label} is not an SQLite database (${(err as Error).message})`);
  }
  if (version < 1 || !CORE_TABLES.every((t) => tables.includes(t))) throw new BackupError(`${label} is not a Minaret database`);
  const latest = readMigrations().at(-1)?.version ?? 0;
  if (version > latest) throw new BackupError(`${label} has schema version ${version}, newer than this Minaret knows (${latest}): upgrade Minaret first`);
  const check = db.pragma('quick_check', { simple: true });
  if (check !== 'ok') throw new BackupError(`${label} fails SQLite's quick_check: ${String(check)}`);
  return version;
}

function checkCopy(file: string): void {
  const copy = openExistingDatabase(file);
  try {
    const check = copy.pragma('quick_check', { simple: true });
    if (check !== 'ok') throw new BackupError(`backup: the copy fails SQLite's quick_check: ${String(check)}`);
  } finally {
    copy.close();
  }
}

/** Beside the final file (same filesystem, so the rename is atomic); named so an interrupted run is recognisable. */
function partialName(target: string): string {
  return path.join(path.dirname(path.resolve(target)), `.${path.basename(target)}.partial-${process.pid}`);
}
