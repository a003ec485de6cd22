import type { Clock } from './clock.ts';
import type { Db } from './db.ts';
import type { Logger } from './log.ts';

/** Why the database cannot take a write right now; /healthz names it as `db`. */
export type StorageFault = 'full' | 'busy' | 'io_error' | 'read_only' | 'unavailable';

/** One log line per kind of fault a minute: a full disk must not fill the log too. */
export const FAULT_LOG_INTERVAL_MS = 60_000;
/** While degraded, /healthz tries a write at most this often to see whether space came back. */
const PROBE_INTERVAL_MS = 1000;

/**
 * The storage fault an SQLite or PostgreSQL error stands for, or null (a constraint, a bug: not the store's
 * fault). PostgreSQL's are its SQLSTATE classes (postgresql.org/docs/current/errcodes-appendix.html): 53
 * insufficient resources, 08 connection exceptions, 57P0x the server shutting down or starting, 25006 a
 * read-only transaction (a standby), 40001/40P01/55P03/57014 contention and a statement over its timeout.
 */
export function storageFaultOf(err: unknown): StorageFault | null {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return null;
  if (/^[0-9A-Z]{5}$/.test(code)) return postgresFaultOf(code);
  if (code === 'SQLITE_FULL') return 'full';
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return 'busy';
  if (code.startsWith('SQLITE_IOERR') || code === 'SQLITE_CANTOPEN') return 'io_error';
  if (code.startsWith('SQLITE_READONLY')) return 'read_only';
  return null;
}

function postgresFaultOf(sqlstate: string): StorageFault | null {
  if (sqlstate.startsWith('53')) return 'full';
  if (sqlstate.startsWith('08') || /^57P0[1-4]$/.test(sqlstate)) return 'unavailable';
  if (sqlstate === '25006') return 'read_only';
  if (['40001', '40P01', '55P03', '57014'].includes(sqlstate)) return 'busy';
  return null;
}

/**
 * What /healthz asks while the store is degraded: whether it takes writes again (null) or still not (the fault).
 * `busy`: a probe now would disturb a transaction in progress; the next call probes. `write` may answer later
 * (a network store): meanwhile the last state stands.
 */
export interface StorageProbe {
  busy(): boolean;
  write(): StorageFault | null | Promise<StorageFault | null>;
}

/** The SQLite file's probe: a write (below), skipped while a store transaction holds the connection. */
export function sqliteProbe(db: Db): StorageProbe {
  // A store transaction holds the connection between its awaits: a probe's BEGIN would fail inside it and
  // its ROLLBACK would undo that transaction's writes.
  return { busy: () => db.inTransaction, write: () => probeWrite(db) };
}

/**
 * Whether the database can take a write now: allocating a page (a table created and rolled back) fails
 * exactly when an insert would. It does not wait out the busy timeout, or /healthz would stall with it.
 */
function probeWrite(db: Db): StorageFault | null {
  const timeout = db.pragma('busy_timeout', { simple: true }) as number;
  db.pragma('busy_timeout = 0');
  try {
    db.exec('BEGIN IMMEDIATE');
    db.exec('CREATE TABLE minaret_write_probe (x)');
    return null;
  } catch (err) {
    const fault = storageFaultOf(err);
    if (!fault) throw err;
    return fault;
  } finally {
    // SQLITE_FULL may already have rolled the transaction back.
    if (db.inTransaction) db.exec('ROLLBACK');
    db.pragma(`busy_timeout = ${timeout}`);
  }
}

/**
 * Faults the service rides out instead of dying of them (docs/operator.md, "Faults"): a write the disk refused, a broker hook
 * or a timer that threw. Each is counted by kind and logged at most once a minute per kind; a storage fault
 * also makes /healthz answer 503 until a probe write succeeds again.
 */
export function createFaults(deps: { probe: StorageProbe; clock: Clock; logger: Logger }) {
  const counts = new Map<string, number>();
  const lastLogged = new Map<string, { at: number; count: number }>();
  let storage: StorageFault | null = null;
  let probedAt = -Infinity;
  const probed = (fault: StorageFault | null) => {
    if (storage !== null && fault === null) deps.logger.info({}, 'the database takes writes again');
    storage = fault;
  };

  return {
    /** Counts and (rate-limited) logs a fault of kind `what`; returns the storage fault it was, if any. */
    report(what: string, err: unknown, fields: Record<string, unknown> = {}): StorageFault | null {
      const fault = storageFaultOf(err);
      if (fault) storage = fault;
      const count = (counts.get(what) ?? 0) + 1;
      counts.set(what, count);
      const now = deps.clock();
      const last = lastLogged.get(what);
      if (last && now - last.at < FAULT_LOG_INTERVAL_MS) return fault;
      lastLogged.set(what, { at: now, count });
      const e = err as { message?: string; code?: string; stack?: string } | null;
      deps.logger.error(
        { what, storage: fault, code: e?.code, err: fault ? e?.message : { message: e?.message, stack: e?.stack }, count, since_last_line: count - (last?.count ?? 0), ...fields },
        fault ? `${what}: the database cannot take writes (${fault}); dropped` : `${what} failed; dropped`,
      );
      return fault;
    },

    /** 'ok', or what keeps the database from taking writes (re-checked with a probe write while degraded). */
    storageState(): 'ok' | StorageFault {
      if (storage === null) return 'ok';
      const now = deps.clock();
      if (now - probedAt >= PROBE_INTERVAL_MS && !deps.probe.busy()) {
        probedAt = now;
        const answer = deps.probe.write();
        if (answer instanceof Promise) answer.then(probed, () => undefined);
        else probed(answer);
      }
      return storage ?? 'ok';
    },

    counts: (): Record<string, number> => Object.fromEntries(counts),
  };
}

export type Faults = ReturnType<typeof createFaults>;
