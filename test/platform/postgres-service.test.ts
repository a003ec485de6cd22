import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { postgresInstalled, startPostgres, type PostgresCluster } from './postgres.ts';
import { durableFiles, startTestService } from '../support/service.ts';
import { connectDevice, getDevice, mosqueWithOwner, publish, registerTransmitter, statusPayload, waitFor, waitForStatus } from '../support/devices.ts';
import { ensureBuilt, runNode, type Finished } from '../support/process.ts';
import { sqliteOnly } from '../support/database.ts';

// docs/operator.md, "Several hosts": DATABASE_URL selects PostgreSQL (the same migrations and queries as the
// SQLite file), and `minaret migrate-store` moves a deployment's SQLite file into an empty PostgreSQL.

const skip = postgresInstalled() ? false : 'PostgreSQL 15 or newer is not installed (.ci/run installs it)';
let cluster: PostgresCluster;
before(async () => {
  if (skip) return;
  ensureBuilt(); // bin/minaret.mjs runs the compiled CLI
  cluster = await startPostgres();
});
after(() => cluster?.stop());

async function rowsOf(url: string, query: string): Promise<Array<Record<string, unknown>>> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    return (await client.query(query)).rows;
  } finally {
    await client.end();
  }
}

/** The `minaret` command as installed, with only the settings given. */
function minaret(args: string[], env: Record<string, string> = {}): Promise<Finished> {
  return runNode(['bin/minaret.mjs', ...args], { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', NODE_ENV: 'test', ...env });
}

test('with DATABASE_URL the service keeps everything in PostgreSQL: a mosque, a device and its acknowledged status are there, and survive a restart; no SQLite file is made', { skip, timeout: 60_000 }, async (t) => {
  const url = await cluster.database();
  const files = durableFiles(t, 'pg-service');
  const env = { ...files.env, DATABASE_URL: url };
  const ts = await startTestService(t, { env });
  assert.deepEqual((await ts.http.get('/healthz')).body, { status: 'ok', db: 'ok', broker: 'ok' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${tx.device.id}/status`, statusPayload('ONLINE', { fw: 'pg-test/1.0' }), { qos: 1 }); // resolves on PUBACK
  const [row] = await rowsOf(url, `SELECT status, fw FROM devices WHERE id = '${tx.device.id}'`);
  assert.deepEqual(row, { status: 'ONLINE', fw: 'pg-test/1.0' }, 'the acknowledged status is in PostgreSQL');
  assert.equal((await rowsOf(url, `SELECT name FROM mosques WHERE id = '${mosque.id}'`)).length, 1);
  assert.equal(fs.existsSync(files.env.DATABASE_PATH), false, 'no SQLite file beside it');
  await new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
  await ts.service.close();

  const again = await startTestService(t, { env });
  const device = await getDevice(again, owner.token, tx.device.id);
  assert.equal(device.fw, 'pg-test/1.0');
  assert.equal((await again.http.get(`/api/v1/mosques/${mosque.id}`, owner.token)).status, 200);
});

test('the service refuses to start on a PostgreSQL it cannot reach, in one line naming DATABASE_URL and no password', { skip, timeout: 30_000 }, async (t) => {
  const files = durableFiles(t, 'pg-unreachable');
  const url = `postgres://minaret:s3cret-pw@127.0.0.1:${cluster.port + 1}/nowhere`;
  await assert.rejects(startTestService(t, { env: { ...files.env, DATABASE_URL: url } }), (err: Error) => {
    assert.match(err.message, /^DATABASE_URL: PostgreSQL at postgres:\/\/minaret:\*\*\*@127\.0\.0\.1:\d+\/nowhere could not be used/);
    assert.doesNotMatch(err.message, /s3cret-pw/);
    return true;
  });
});

test('migrate-store moves a SQLite deployment into an empty PostgreSQL, verified table by table; the service then runs on it; a target holding rows is refused', { skip: skip || sqliteOnly('its source is a SQLite deployment, which the PostgreSQL run replaces'), timeout: 90_000 }, async (t) => {
  const files = durableFiles(t, 'pg-migrate');
  const sqlite = await startTestService(t, { env: files.env });
  const { owner, mosque } = await mosqueWithOwner(sqlite);
  const tx = await registerTransmitter(sqlite, owner.token, mosque.id);
  const client = await connectDevice(t, tx.credentials);
  await publish(client, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1 });
  await waitForStatus(sqlite, owner.token, tx.device.id, 'ONLINE');
  await new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
  await sqlite.service.close();

  const url = await cluster.database();
  const moved = await minaret(['migrate-store', '--from', files.env.DATABASE_PATH, '--to', url]);
  assert.equal(moved.code, 0, moved.stderrLines.join("\n"));
  assert.match(moved.stdout, /^ {2}users +2 rows {2}checksum [0-9a-f]{16}$/m, 'the superadmin and the owner');
  assert.match(moved.stdout, /^ {2}devices +1 rows {2}checksum [0-9a-f]{16}$/m);
  assert.match(moved.stdout, /^moved \d+ rows in \d+ tables; every table's row count and checksum match$/m);
  const [count] = await rowsOf(url, 'SELECT count(*)::int AS n FROM mosque_device_events');
  assert.ok((count!.n as number) >= 2, 'the device\'s timeline came along');

  const pgService = await startTestService(t, { env: { ...files.env, DATABASE_URL: url } });
  assert.equal((await pgService.http.get(`/api/v1/mosques/${mosque.id}`, owner.token)).status, 200, 'the owner\'s session carries over');
  const device = await getDevice(pgService, owner.token, tx.device.id);
  assert.equal(device.status, 'OFFLINE', 'its goodbye was written before the stop');
  // A row made on PostgreSQL takes the next number after the copied ones (the identity sequences moved on).
  const second = await registerTransmitter(pgService, owner.token, mosque.id, 'second');
  assert.ok(second.device.id);
  await pgService.service.close();

  const again = await minaret(['migrate-store', '--from', files.env.DATABASE_PATH, '--to', url]);
  assert.equal(again.code, 1);
  assert.match(again.stderrLines.join("\n"), /^minaret: --to: not empty \(table \w+ holds rows\); migrate-store copies into an empty database only$/);

  const wrong = await minaret(['migrate-store', '--from', path.join(files.dir, 'missing.db'), '--to', url]);
  assert.equal(wrong.code, 1);
  assert.match(wrong.stderrLines.join("\n"), /--from: .*missing\.db is not a file/);
  const notPg = await minaret(['migrate-store', '--from', files.env.DATABASE_PATH, '--to', 'mysql://x']);
  assert.match(notPg.stderrLines.join("\n"), /--to: must be a URL starting with postgres:\/\/ or postgresql:\/\//);
});

test('PostgreSQL restarting under the service: writes answer 503 storage_unavailable and /healthz names it, the device stays connected, and all recovers', { skip, timeout: 90_000 }, async (t) => {
  const own = await startPostgres(); // a server of its own: this test stops it
  t.after(() => own.stop());
  const url = await own.database();
  const files = durableFiles(t, 'pg-restart');
  const ts = await startTestService(t, { env: { ...files.env, DATABASE_URL: url }, logLevel: 'fatal' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const client = await connectDevice(t, tx.credentials);
  let closed = false;
  client.on('close', () => (closed = true));
  const rename = (name: string) => ts.http.patch(`/api/v1/mosques/${mosque.id}`, { name }, owner.token);
  assert.equal((await rename('Before the restart')).status, 200);

  await own.stopServer();
  const refused = await rename('While it is down');
  assert.equal(refused.status, 503, JSON.stringify(refused.body));
  assert.equal(refused.body.error.code, 'storage_unavailable');
  await waitFor('/healthz names it', async () => {
    const h = await ts.http.get('/healthz');
    return h.status === 503 && h.body.db === 'unavailable';
  }, 5000);
  assert.equal(closed, false, 'the device stays connected while the store is away');

  await own.startServer();
  await waitFor('writes are taken again', async () => (await rename('After the restart')).status === 200, 15_000);
  await waitFor('/healthz is ok again', async () => (await ts.http.get('/healthz')).status === 200, 5000);
  const [row] = await rowsOf(url, `SELECT name FROM mosques WHERE id = '${mosque.id}'`);
  assert.equal(row!.name, 'After the restart');
  assert.equal(closed, false);
});

test('a statement past DATABASE_STATEMENT_TIMEOUT_MS, and a query kept waiting 5 s for a free connection of a full pool, answer 503 storage_unavailable and change nothing', { skip, timeout: 90_000 }, async (t) => {
  const url = await cluster.database();
  const files = durableFiles(t, 'pg-timeouts');
  const rename = (ts: Awaited<ReturnType<typeof startTestService>>, id: string, token: string, name: string) =>
    ts.http.patch(`/api/v1/mosques/${id}`, { name }, token);
  // Another program holds the mosques table (a long migration, a stuck admin session): every statement on it waits.
  const holder = new pg.Client(url);
  t.after(() => holder.end().catch(() => undefined));

  // The statement timeout: PostgreSQL cancels the wait for the lock (SQLSTATE 57014), and the rename answers 503.
  {
    const ts = await startTestService(t, { env: { ...files.env, DATABASE_URL: url, DATABASE_STATEMENT_TIMEOUT_MS: '500' }, logLevel: 'fatal' });
    const { owner, mosque } = await mosqueWithOwner(ts);
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE mosques IN ACCESS EXCLUSIVE MODE');
    const refused = await rename(ts, mosque.id, owner.token, 'Renamed under the lock');
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(refused.body.error.code, 'storage_unavailable');
    await holder.query('ROLLBACK');
    const [row] = await rowsOf(url, `SELECT name FROM mosques WHERE id = '${mosque.id}'`);
    assert.equal(row!.name, mosque.name, 'the cancelled write changed nothing');
    assert.equal((await rename(ts, mosque.id, owner.token, 'Renamed after')).status, 200, 'and the next one is taken');
    await ts.service.close();
  }

  // The pool's wait: one connection, held by a statement waiting on the lock; the next query waits 5 s for it, then 503.
  {
    const fresh = await cluster.database();
    const other = durableFiles(t, 'pg-pool-wait');
    const ts = await startTestService(t, { env: { ...other.env, DATABASE_URL: fresh, DATABASE_POOL_SIZE: '1', DATABASE_STATEMENT_TIMEOUT_MS: '30000' }, logLevel: 'fatal' });
    const { owner: admin, mosque } = await mosqueWithOwner(ts);
    const locker = new pg.Client(fresh);
    t.after(() => locker.end().catch(() => undefined));
    await locker.connect();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE mosques IN ACCESS EXCLUSIVE MODE');
    const first = rename(ts, mosque.id, admin.token, 'First, waiting on the lock');
    await new Promise((r) => setTimeout(r, 300)); // the first holds the pool's one connection now
    const started = Date.now();
    const second = await rename(ts, mosque.id, admin.token, 'Second, waiting for a connection');
    const waited = Date.now() - started;
    assert.equal(second.status, 503, JSON.stringify(second.body));
    assert.equal(second.body.error.code, 'storage_unavailable');
    assert.ok(waited >= 4500, `refused after ${waited} ms: it waits for a free connection first`);
    await locker.query('ROLLBACK');
    assert.equal((await first).status, 200, 'the first goes through once the lock is released');
    const [row] = await rowsOf(fresh, `SELECT name FROM mosques WHERE id = '${mosque.id}'`);
    assert.equal(row!.name, 'First, waiting on the lock', 'the refused write changed nothing');
  }
});
