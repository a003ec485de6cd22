import type { Config } from '../config.ts';
import type { Clock } from '../clock.ts';
import type { Logger } from '../log.ts';
import type { Closer } from '../shutdown.ts';
import { checkpointInBackground, migrate, openDatabase, storageUse, type Db } from '../db.ts';
import { createFaults, sqliteProbe, storageFaultOf, type Faults, type StorageProbe } from '../faults.ts';
import { sqliteStore, type Store } from '../store/store.ts';
import { StartupError } from './startup-error.ts';

/** The store the settings name, migrated, with what the rest of the service asks of it. */
interface OpenedStore {
  store: Store;
  probe: StorageProbe;
  isOpen(): boolean;
  /** SQLite's WAL checkpoints in a worker (src/platform/db.ts); nothing to do on PostgreSQL. */
  checkpointer(onError: (err: Error) => void): { close(): Promise<void> };
  close(): Promise<void>;
}

export interface Storage {
  store: Store;
  faults: Faults;
  /** Whether the connection is open, read without a query (the health check's `db`). */
  isOpen(): boolean;
  checkpointer: { close(): Promise<void> };
}

/**
 * The store (SQLite, or PostgreSQL with DATABASE_URL), its fault watch and SQLite's checkpointer. The database
 * closes in `finals`, after every closer; the checkpointer stops before it, so the last connection folds the WAL
 * away. `dataSteps` are the SQLite file's data steps written in TypeScript, run after its SQL migrations.
 */
export async function openStorage(
  config: Config, ports: { clock: Clock; logger: Logger; dataSteps(db: Db): void }, closers: Closer[], finals: Closer[],
): Promise<Storage> {
  const opened = config.postgres ? await openPostgresStore(config.postgres, ports.logger) : openSqlite(config, ports);
  finals.push({ name: 'database', close: () => opened.close() });
  const faults = createFaults({ probe: opened.probe, clock: ports.clock, logger: ports.logger });
  const checkpointer = opened.checkpointer((err) => faults.report('database checkpoint', err));
  closers.push({ name: 'database checkpointer', close: () => checkpointer.close() });
  return { store: opened.store, faults, isOpen: () => opened.isOpen(), checkpointer };
}

/**
 * The SQLite file (DATABASE_PATH): the SQL migrations, then the data steps written in TypeScript (the rewrite of
 * stored identifiers), before any store reads a row. A database already at DATABASE_MAX_BYTES has no room for
 * them: say so in one line.
 */
function openSqlite(config: Config, ports: { logger: Logger; dataSteps(db: Db): void }): OpenedStore {
  const db = openDatabase(config.databasePath, { maxBytes: config.databaseMaxBytes });
  try {
    const version = migrate(db);
    ports.dataSteps(db);
    ports.logger.info({ database: config.databasePath, schema_version: version, ...(config.databaseMaxBytes !== undefined && storageUse(db)) }, 'database ready');
  } catch (err) {
    db.close();
    if (storageFaultOf(err) !== 'full') throw err;
    const setting = config.databaseMaxBytes === undefined ? 'DATABASE_PATH: the disk' : 'DATABASE_MAX_BYTES: the limit';
    throw new StartupError(`${setting} leaves no room to update the database schema; free space or raise the limit`);
  }
  return {
    store: sqliteStore(db),
    probe: sqliteProbe(db),
    isOpen: () => db.open,
    checkpointer: (onError) => checkpointInBackground(db, { onError }),
    close: async () => void db.close(),
  };
}

/** PostgreSQL (DATABASE_URL): loaded only then, as the pg driver is memory a single SQLite process never uses. */
async function openPostgresStore(settings: NonNullable<Config['postgres']>, logger: Logger): Promise<OpenedStore> {
  const { openPostgres } = await import('../store/postgres.ts');
  const opened = await openPostgres(settings.url, settings, 'DATABASE_URL').catch((err: Error) => {
    throw new StartupError(err.message);
  });
  logger.info({ database: opened.shown, pool_size: settings.poolSize, schema_version: opened.version }, 'database ready');
  const state = { open: true };
  return {
    store: opened.store,
    probe: opened.probe,
    isOpen: () => state.open,
    checkpointer: () => ({ close: async () => undefined }),
    close: async () => {
      state.open = false;
      await opened.store.destroy();
    },
  };
}
