import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { projectPath } from './config.ts';

export type Db = Database.Database;

export const MIGRATIONS_DIR = projectPath('data/migrations');

/**
 * Opens the database the way every part of Minaret expects it: WAL, NORMAL sync, foreign keys, busy timeout.
 * WAL with NORMAL sync: a commit survives the process dying (kill -9); only a power cut may lose the last
 * few, and never leaves the file inconsistent.
 * `maxBytes` (DATABASE_MAX_BYTES) caps the file through max_page_count: writes past it fail with SQLITE_FULL
 * while reads go on. SQLite never sets it below the current size, so a file already over it is full at once.
 */
export function openDatabase(file: string, opts: { maxBytes?: number | undefined } = {}): Db {
  if (file !== ':memory:') keepPrivate(file);
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

/**
 * The database holds password and device-secret hashes: it is created 0600 (its folder 0700) before SQLite opens
 * it, as the key files beside it are. SQLite's unix VFS gives the -wal and -shm it creates later the database
 * file's own mode, so they follow. A file a former version left readable to others is narrowed, with its -wal
 * and -shm; one this user does not own is left as it is (its owner chose).
 */
function keepPrivate(file: string): void {
  fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true, mode: 0o700 });
  try {
    fs.closeSync(fs.openSync(file, 'wx', 0o600));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  for (const f of [file, `${file}-wal`, `${file}-shm`]) {
    try {
      const { mode } = fs.statSync(f);
      if ((mode & 0o077) !== 0) fs.chmodSync(f, mode & 0o700);
    } catch (err) {
      if (!['ENOENT', 'EPERM'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
    }
  }
}

/** How often the background checkpointer runs, and the WAL size past which commits checkpoint inline again. */
export const CHECKPOINT_INTERVAL_MS = 100;
export const WAL_INLINE_CHECKPOINT_BYTES = 64 * 1024 * 1024;
/**
 * The worker starts once the WAL file has grown past this (SQLite's own inline checkpoint comes at 1000 pages,
 * ~4 MiB), looked at this often, and ends after this long without a new frame (an idle service
 * holds no worker thread, ~10 MiB of RSS each).
 */
export const CHECKPOINT_START_WAL_BYTES = 1024 * 1024;
export const CHECKPOINT_POLL_MS = 1000;
export const CHECKPOINT_IDLE_MS = 60_000;

// The worker's whole program. A string (not a file) so it needs no TypeScript loader; it loads better-sqlite3
// from the path the main thread resolved, whatever the working directory.
const CHECKPOINT_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
const frameBytes = db.pragma('page_size', { simple: true }) + 24;
let over = false;
let timer;
let lastLog = -1;
let quietSince = Date.now();
const stop = () => { clearTimeout(timer); db.close(); parentPort.close(); };
// After an idle spell the WAL is truncated to nothing (so the main thread sees it grow again from 0) and the
// worker ends. TRUNCATE takes the write lock; without a busy handler it gives up at once when a writer holds it.
const truncated = () => {
  try { return db.pragma('wal_checkpoint(TRUNCATE)')[0].busy === 0; }
  catch (err) { if (/BUSY|LOCKED/.test(String(err && err.code))) return false; throw err; }
};
const tick = () => {
  let behind = false;
  try {
    // log: the frames now in the WAL (it starts again from 0 once a checkpoint has caught up); not the file's size.
    const [{ log, checkpointed }] = db.pragma('wal_checkpoint(PASSIVE)');
    const size = Math.max(0, log) * frameBytes;
    if ((size > workerData.limit) !== over) { over = !over; parentPort.postMessage({ over, size }); }
    // Frames written during this pass: chase them at once, so the WAL can start over in the next quiet moment.
    behind = checkpointed >= 0 && checkpointed < log;
    if (log !== lastLog) { lastLog = log; quietSince = Date.now(); }
    else if (!behind && Date.now() - quietSince >= workerData.idleMs && truncated()) {
      parentPort.postMessage({ idle: true });
      return stop();
    }
  } catch (err) { parentPort.postMessage({ error: String(err && err.message) }); }
  timer = setTimeout(tick, behind ? 1 : workerData.intervalMs);
};
timer = setTimeout(tick, workerData.intervalMs);
parentPort.on('message', stop);
`;

export interface Checkpointer {
  /** Whether the worker thread runs now (tests, the idle-memory bench). */
  running(): boolean;
  /** Stops the worker and closes its connection, so the last close of the main connection can remove the WAL. */
  close(): Promise<void>;
}

export interface CheckpointerOptions {
  onError(err: Error): void;
  intervalMs?: number;
  walLimitBytes?: number;
  /** Tests shorten these: the WAL size that starts the worker, how often it is looked at, the idle spell that ends it. */
  startWalBytes?: number;
  pollMs?: number;
  idleMs?: number;
}

/**
 * Moves WAL checkpoints off the event loop (a commit that carried SQLite's automatic checkpoint stalled
 * the loop 40-171 ms, copying pages and syncing the file). While the worker runs, the main connection does not
 * checkpoint; the worker's own connection runs PASSIVE checkpoints, which never wait on or block the writer. Under
 * a write load the worker cannot catch up with, the WAL would grow without bound: past WAL_INLINE_CHECKPOINT_BYTES
 * the main connection checkpoints inline again (the old behaviour, stalls and all) until the WAL is back under it.
 * The worker starts only once the WAL file grows past startWalBytes and ends after idleMs without a write; with
 * no worker the main connection checkpoints inline (SQLite's default), so a trickle of writes never piles up.
 * A worker that fails hands checkpointing back to the main connection for good, so the file never stops shrinking.
 */
export function checkpointInBackground(db: Db, opts: CheckpointerOptions): Checkpointer {
  const inline = () => db.pragma('wal_autocheckpoint = 1000');
  if (db.memory) return { running: () => false, close: async () => {} };
  const limit = opts.walLimitBytes ?? WAL_INLINE_CHECKPOINT_BYTES;
  const file = path.resolve(db.name);
  // A WAL that once grew past the limit is cut back to it when it starts over, not kept at its high-water mark.
  db.pragma(`journal_size_limit = ${limit}`);
  inline();
  let worker: Worker | null = null;
  let closing = false;
  let failed = false;
  const start = () => {
    const w = new Worker(CHECKPOINT_WORKER, {
      eval: true,
      workerData: {
        file, driver: createRequire(import.meta.url).resolve('better-sqlite3'),
        intervalMs: opts.intervalMs ?? CHECKPOINT_INTERVAL_MS, idleMs: opts.idleMs ?? CHECKPOINT_IDLE_MS, limit,
      },
    });
    w.unref();
    worker = w;
    db.pragma('wal_autocheckpoint = 0');
    let ending = false;
    w.on('message', (m: { over?: boolean; size?: number; idle?: boolean; error?: string }) => {
      if (m.error !== undefined) return opts.onError(new Error(`background checkpoint: ${m.error}`));
      if (m.idle) {
        ending = true;
        if (db.open) inline();
        return;
      }
      if (db.open) db.pragma(`wal_autocheckpoint = ${m.over ? 1000 : 0}`);
    });
    w.on('error', (err) => {
      failed = true;
      if (db.open) inline();
      opts.onError(err);
    });
    w.on('exit', (code) => {
      if (worker === w) worker = null;
      if (closing || ending || failed || !db.open) return;
      failed = true;
      inline();
      opts.onError(new Error(`background checkpointer exited (code ${code}); checkpoints run inline again`));
    });
  };
  const walBytes = () => fs.statSync(`${file}-wal`, { throwIfNoEntry: false })?.size ?? 0;
  const poll = setInterval(() => {
    if (worker || failed || closing || !db.open) return;
    try {
      if (walBytes() > (opts.startWalBytes ?? CHECKPOINT_START_WAL_BYTES)) start();
    } catch (err) {
      opts.onError(err as Error);
    }
  }, opts.pollMs ?? CHECKPOINT_POLL_MS);
  poll.unref();
  return {
    running: () => worker !== null,
    close: () => {
      if (closing) return Promise.resolve();
      closing = true;
      clearInterval(poll);
      const w = worker;
      if (!w) return Promise.resolve();
      const exited = new Promise<void>((resolve) => w.once('exit', () => resolve()));
      w.ref(); // waiting for its exit keeps the process alive that long
      w.postMessage('stop');
      // A worker stuck in a checkpoint is not waited on for ever; db.close then just leaves the WAL behind.
      return Promise.race([exited, new Promise<void>((r) => setTimeout(r, 2000).unref())]).then(() => {
        if (db.open) inline();
      });
    },
  };
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

/**
 * A migration's PostgreSQL form, beside it where SQLite's text cannot be carried over (a table rebuild, a
 * SQLite-only function): `012_timeline_chains.postgres.sql` (docs/architecture.md, "Migrations").
 */
export const POSTGRES_SUFFIX = '.postgres.sql';

/** The numbered migrations as SQLite runs them. */
export function readMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /^\d+_.+\.sql$/.test(f) && !f.endsWith(POSTGRES_SUFFIX))
    .map((f) => ({ version: Number.parseInt(f, 10), name: f, sql: fs.readFileSync(path.join(dir, f), 'utf8') }))
    .sort((a, b) => a.version - b.version);
}

/**
 * A migration whose first line is this marker rebuilds a table that others reference: it runs with foreign
 * key enforcement off (SQLite ignores the pragma inside a transaction, so it is set around it), and every
 * reference is checked before the commit (sqlite.org/lang_altertable.html, section 7).
 */
const FOREIGN_KEYS_OFF = '-- minaret:foreign-keys-off';

/** Applies every migration above PRAGMA user_version, each in its own transaction. Returns the new version. */
export function migrate(db: Db, migrations = readMigrations()): number {
  let current = db.pragma('user_version', { simple: true }) as number;
  for (const m of migrations) {
    if (m.version <= current) continue;
    const rebuilds = m.sql.startsWith(FOREIGN_KEYS_OFF);
    const enforced = db.pragma('foreign_keys', { simple: true }) === 1;
    if (rebuilds) db.pragma('foreign_keys = OFF');
    try {
      db.transaction(() => {
        db.exec(m.sql);
        const broken = rebuilds ? db.pragma('foreign_key_check') as unknown[] : [];
        if (broken.length > 0) throw new Error(`migration ${m.name} leaves ${broken.length} broken references`);
        db.pragma(`user_version = ${m.version}`);
      })();
    } finally {
      if (rebuilds && enforced) db.pragma('foreign_keys = ON');
    }
    current = m.version;
  }
  return current;
}

/**
 * Runs a data step (a change to stored rows written in TypeScript) once per database: it is recorded in
 * data_steps (migration 014) inside the same IMMEDIATE transaction, so a second process starting on the same
 * file waits, then finds it done. Returns what the step returned, or null when it had already run.
 */
export function runDataStepOnce<T>(db: Db, name: string, nowS: number, step: () => T): T | null {
  return db.transaction(() => {
    if (db.prepare('SELECT 1 FROM data_steps WHERE name = ?').get(name)) return null;
    const result = step();
    db.prepare('INSERT INTO data_steps (name, applied_at) VALUES (?, ?)').run(name, nowS);
    return result;
  }).immediate();
}

/** The file's cap and how much of it is in use, for the start-up line (SQLite never sets the cap below the file's size). */
export function storageUse(db: Db): { database_max_bytes: number; database_used_bytes: number } {
  const pageSize = db.pragma('page_size', { simple: true }) as number;
  const used = (db.pragma('page_count', { simple: true }) as number) - (db.pragma('freelist_count', { simple: true }) as number);
  const max = db.pragma('max_page_count', { simple: true }) as number;
  return { database_max_bytes: max * pageSize, database_used_bytes: used * pageSize };
}
