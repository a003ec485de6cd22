import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, type TestContext } from 'node:test';
import { migrate, openDatabase, type Db } from '../../src/platform/db.ts';
import { sqliteStore, type Store } from '../../src/platform/store/store.ts';
import type { PostgresCluster } from '../platform/postgres.ts';
import { assertError } from './api.ts';
import { API } from './people.ts';
import type { TestService } from './service.ts';

/**
 * The tests' database (not a test file itself): which dialect the store tests and the service tests run on,
 * a fresh store of it, a second connection to a running service's; and the helpers of the tests that fill a
 * real SQLite file up to DATABASE_MAX_BYTES.
 *
 * MINARET_TEST_STORE=postgres runs them on PostgreSQL (docs/architecture.md, "Developing"): one private cluster
 * per test process (test/platform/postgres.ts), started when a test first asks for a database and ended with
 * the process, and a fresh database for each store and each service, copied from one this process migrated
 * once. Unset (or `sqlite`), everything is the SQLite file it always was.
 */

export type TestDialect = 'sqlite' | 'postgres';

export const testDialect: TestDialect = (() => {
  const chosen = process.env.MINARET_TEST_STORE || 'sqlite';
  if (chosen !== 'sqlite' && chosen !== 'postgres') throw new Error(`MINARET_TEST_STORE: sqlite or postgres, not ${chosen}`);
  return chosen;
})();

export const onPostgres = testDialect === 'postgres';

/**
 * A test's `skip` when it holds only on SQLite, with the reason (it opens the file, reads its pages or its WAL,
 * tests the SQLite dialect): false on SQLite, `SQLite only: <reason>` on PostgreSQL, which the run reports.
 */
export function sqliteOnly(reason: string): string | false {
  return onPostgres ? `SQLite only: ${reason}` : false;
}

let cluster: Promise<{ cluster: PostgresCluster; template: string }> | null = null;
// Registered when a test file loads this module, so it runs at the root, once the file's last test (and each
// test's own after hooks, which close its services) is done: the server's process would keep the file's alive.
after(async () => {
  if (cluster) (await cluster).cluster.stop();
});

/**
 * This process's cluster, started on first use, with a database migrated once to copy for each test. Loaded
 * then: the SQLite run's processes never load pg.
 */
function sharedCluster(): Promise<{ cluster: PostgresCluster; template: string }> {
  cluster ??= (async () => {
    const { postgresInstalled, startPostgres } = await import('../platform/postgres.ts');
    if (!postgresInstalled()) throw new Error('MINARET_TEST_STORE=postgres: PostgreSQL 15 or newer is not installed (.ci/run installs it)');
    const started = await startPostgres(); // its own exit hook stops the server if the process ends first
    const url = await started.database();
    const { openPostgres } = await import('../../src/platform/store/postgres.ts');
    const opened = await openPostgres(url, { poolSize: 1, statementTimeoutMs: 30_000 }, 'test template');
    await opened.store.destroy(); // a template must have no connections while it is copied
    return { cluster: started, template: new URL(url).pathname.slice(1) };
  })();
  return cluster;
}

/** A fresh PostgreSQL database of this process's cluster, migrated: its URL. */
export async function freshPostgresUrl(): Promise<string> {
  const { cluster: c, template } = await sharedCluster();
  return c.database(template);
}

/** A copy of `url` (a database of this process's cluster no one is connected to now). */
export async function copyPostgresDatabase(url: string): Promise<string> {
  const { cluster: c } = await sharedCluster();
  return c.database(new URL(url).pathname.slice(1));
}

/**
 * A migrated store of the selected dialect (or of `dialect`, for a test that runs on each), for the tests of a
 * repository: SQLite, a file in a temp folder (`db`, its connection, for what only SQLite can say); PostgreSQL, a
 * fresh database of this process's cluster (`db` null). Closed (and the file removed) when the test ends.
 */
export async function testStore(t: Pick<TestContext, 'after'>, dialect: TestDialect = testDialect): Promise<{ store: Store; dialect: TestDialect; db: Db | null }> {
  if (dialect === 'postgres') {
    const { postgresStore } = await import('../../src/platform/store/postgres.ts');
    const store = postgresStore(await freshPostgresUrl(), { poolSize: 4, statementTimeoutMs: 30_000 });
    t.after(() => store.destroy());
    return { store, dialect: 'postgres', db: null };
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-store-'));
  const db = openDatabase(path.join(dir, 'minaret.db'));
  migrate(db);
  const store = sqliteStore(db);
  t.after(async () => {
    await store.destroy();
    db.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { store, dialect: 'sqlite', db };
}

/**
 * A second connection to a running (or stopped) service's store, its SQLite file or its PostgreSQL
 * (DATABASE_URL), as another process or the operator CLI would have one.
 */
export async function storeOf(ts: Pick<TestService, 'config'>): Promise<{ store: Store; close(): Promise<void> }> {
  if (ts.config.postgres) {
    const { postgresStore } = await import('../../src/platform/store/postgres.ts');
    const store = postgresStore(ts.config.postgres.url, { poolSize: 1, statementTimeoutMs: 30_000 });
    return { store, close: () => store.destroy() };
  }
  const db = openDatabase(ts.config.databasePath);
  const store = sqliteStore(db);
  return { store, close: async () => {
    await store.destroy();
    db.close();
  } };
}

/** Helpers of the tests that fill a real database file up to DATABASE_MAX_BYTES. */

/** The database file's size now (a closed database has no WAL left: the file is all of it). */
export function databaseSize(file: string): number {
  const db = openDatabase(file);
  try {
    return (db.pragma('page_count', { simple: true }) as number) * (db.pragma('page_size', { simple: true }) as number);
  } finally {
    db.close();
  }
}

/**
 * Signs up throw-away accounts (`filler-*` emails) until the database refuses `streak` in a row (b-tree pages
 * keep some slack after splits, so a write may still fit after the first refusal). Every refusal must be
 * 503 storage_unavailable. Returns the index of the last request.
 */
export async function fillUntilRefused(http: TestService['http'], streak = 8): Promise<number> {
  let refusedInARow = 0;
  for (let i = 0; i < 5000; i++) {
    const res = await http.post(`${API}/auth/signup`, { email: `filler-${i}-${'x'.repeat(40)}@example.com` });
    if (res.status === 201) {
      refusedInARow = 0;
      continue;
    }
    assertError(res, 503, 'storage_unavailable');
    if (++refusedInARow === streak) return i;
  }
  assert.fail('the database never filled up');
}

/**
 * A device's lease and config version as its row holds them, read through a second connection to the service's
 * store (the service may be stopped).
 */
export async function storedLease(ts: Pick<TestService, 'config'>, id: string): Promise<{ lease_token: string | null; lease_expires_at: number | null; config_version: number }> {
  const { store, close } = await storeOf(ts);
  try {
    return await store.selectFrom('devices').select(['lease_token', 'lease_expires_at', 'config_version']).where('id', '=', id).executeTakeFirstOrThrow();
  } finally {
    await close();
  }
}
