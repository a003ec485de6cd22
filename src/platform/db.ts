import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
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

/** How often the background checkpointer runs, and the WAL size past which commits checkpoint inline again. */
export const CHECKPOINT_INTERVAL_MS = 100;
export const WAL_INLINE_CHECKPOINT_BYTES = 64 * 1024 * 1024;

// The worker's whole program. A string (not a file) so it needs no TypeScript loader; it loads better-sqlite3
// from the path the main thread resolved, whatever the working directory.
const CHECKPOINT_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
const frameBytes = db.pragma('page_size', { simple: true }) + 24;
let over = false;
let timer;
const tick = () => {
  let behind = false;
  try {
    // log: the frames now in the WAL (it starts again from 0 once a checkpoint has caught up); not the file's size.
    const [{ log, checkpointed }] = db.pragma('wal_checkpoint(PASSIVE)');
    const size = Math.max(0, log) * frameBytes;
    if ((size > workerData.limit) !== over) { over = !over; parentPort.postMessage({ over, size }); }
    // Frames written during this pass: chase them at once, so the WAL can start over in the next quiet moment.
    behind = checkpointed >= 0 && checkpointed < log;
  } catch (err) { parentPort.postMessage({ error: String(err && err.message) }); }
  timer = setTimeout(tick, behind ? 1 : workerData.intervalMs);
};
timer = setTimeout(tick, workerData.intervalMs);
parentPort.on('message', () => { clearTimeout(timer); db.close(); parentPort.close(); });
`;

export interface Checkpointer {
  /** Stops the worker and closes its connection, so the last close of the main connection can remove the WAL. */
  close(): Promise<void>;
}

/**
 * Moves WAL checkpoints off the event loop (issue 13: a commit that carried SQLite's automatic checkpoint stalled
 * the loop 40-171 ms, copying pages and syncing the file). The main connection stops checkpointing; a worker
 * thread with its own connection runs PASSIVE checkpoints, which never wait on or block the writer. Under a write
 * load the worker cannot catch up with, the WAL would grow without bound: past WAL_INLINE_CHECKPOINT_BYTES the main
 * connection checkpoints inline again (the old behaviour, stalls and all) until the WAL is back under the limit.
 * A worker that fails hands checkpointing back to the main connection for good, so the file never stops shrinking.
 */
export function checkpointInBackground(db: Db, opts: { onError(err: Error): void; intervalMs?: number; walLimitBytes?: number }): Checkpointer {
  const inline = () => db.pragma('wal_autocheckpoint = 1000');
  if (db.memory) return { close: async () => {} };
  const limit = opts.walLimitBytes ?? WAL_INLINE_CHECKPOINT_BYTES;
  db.pragma('wal_autocheckpoint = 0');
  // A WAL that once grew past the limit is cut back to it when it starts over, not kept at its high-water mark.
  db.pragma(`journal_size_limit = ${limit}`);
  const worker = new Worker(CHECKPOINT_WORKER, {
    eval: true,
    workerData: {
      file: path.resolve(db.name),
      driver: createRequire(import.meta.url).resolve('better-sqlite3'),
      intervalMs: opts.intervalMs ?? CHECKPOINT_INTERVAL_MS,
      limit,
    },
  });
  worker.unref();
  let closing = false;
  worker.on('message', (m: { over?: boolean; size?: number; error?: string }) => {
    if (m.error !== undefined) return opts.onError(new Error(`background checkpoint: ${m.error}`));
    db.pragma(`wal_autocheckpoint = ${m.over ? 1000 : 0}`);
  });
  worker.on('error', (err) => { inline(); opts.onError(err); });
  worker.on('exit', (code) => {
    if (closing || !db.open) return;
    inline();
    opts.onError(new Error(`background checkpointer exited (code ${code}); checkpoints run inline again`));
  });
  return {
    close: () => {
      if (closing) return Promise.resolve();
      closing = true;
      const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
      worker.ref(); // waiting for its exit keeps the process alive that long
      worker.postMessage('stop');
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
