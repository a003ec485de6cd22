import fs from 'node:fs';
import path from 'node:path';
import { before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { openDatabase, readMigrations } from '../../src/platform/db.ts';
import { ensureBuilt, runNode, tempDir, type Finished } from '../support/process.ts';
import { signupMember, sha256, startTestService, type TestService } from '../support/service.ts';

// `minaret backup <file>` (SQLite's online backup, while the service writes) and `minaret restore <file>`
// (refused while the service has the database open; only a Minaret database this version can run).

const LATEST = readMigrations().at(-1)!.version;

before(ensureBuilt); // bin/minaret.mjs runs the compiled CLI


/** The `minaret` command as installed (bin/minaret.mjs), with DATABASE_PATH and nothing else of ours. */
function minaret(args: string[], databasePath: string): Promise<Finished> {
  return runNode(['bin/minaret.mjs', ...args], { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', NODE_ENV: 'test', DATABASE_PATH: databasePath });
}

function emails(file: string): string[] {
  const db = openDatabase(file);
  try {
    return (db.prepare('SELECT email FROM users ORDER BY email').all() as Array<{ email: string }>).map((r) => r.email);
  } finally {
    db.close();
  }
}

function refused(run: Finished, says: RegExp): void {
  assert.equal(run.code, 1);
  assert.equal(run.stdout, '');
  assert.equal(run.stderrLines.length, 1, JSON.stringify(run.stderrLines));
  assert.match(run.stderrLines[0]!, /^minaret: /);
  assert.match(run.stderrLines[0]!, says);
}

/** Signs up members one after another until stopped: the service writes all through the backup. */
function keepWriting(ts: TestService) {
  let stop = false;
  let written = 0;
  const done = (async () => {
    while (!stop) await signupMember(ts.http, `writer-${written++}@example.com`);
  })();
  return async () => {
    stop = true;
    await done;
    return written;
  };
}

test('backup while the service writes: a consistent copy with every user made before it, mode 0600', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const databasePath = ts.config.databasePath;
  for (const name of ['amina', 'bilal', 'yusuf']) await signupMember(ts.http, `${name}@example.com`);
  const stopWriting = keepWriting(ts);
  // The folder does not exist yet: backup makes it (0700), as a first cron run would need.
  const target = path.join(tempDir(t), 'backups', 'minaret.db');
  const run = await minaret(['backup', target], databasePath);
  const written = await stopWriting();
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  assert.match(run.stdout, new RegExp(`^backup written: ${target.replace(/[.]/g, '\\.')} \\(\\d+ bytes, schema version ${LATEST}\\)\\n$`));
  assert.ok(written > 0, 'the service kept writing during the backup');

  assert.equal(fs.statSync(target).mode & 0o777, 0o600);
  assert.equal(fs.statSync(path.dirname(target)).mode & 0o777, 0o700);
  assert.deepEqual(fs.readdirSync(path.dirname(target)), ['minaret.db'], 'no partial file left beside it');
  const copy = openDatabase(target);
  try {
    assert.equal(copy.pragma('quick_check', { simple: true }), 'ok');
    assert.equal(copy.pragma('user_version', { simple: true }), LATEST);
  } finally {
    copy.close();
  }
  const saved = emails(target);
  for (const name of ['amina', 'bilal', 'yusuf']) assert.ok(saved.includes(`${name}@example.com`));
  assert.ok(saved.length <= emails(databasePath).length);
});

test('restore puts the backup back: a user made after the backup is gone, one before signs in, the old file is kept', async (t) => {
  const dir = tempDir(t);
  const target = path.join(dir, 'backup.db');
  let databasePath: string;
  {
    const ts = await startTestService(t, { logLevel: 'warn', env: { DATABASE_PATH: path.join(dir, 'live', 'minaret.db') } });
    databasePath = ts.config.databasePath;
    await signupMember(ts.http, 'before@example.com', 'before password');
    assert.equal((await minaret(['backup', target], databasePath)).code, 0);
    await signupMember(ts.http, 'after@example.com');
    await ts.service.close(); // the operator stops the service first
  }
  const run = await minaret(['restore', target], databasePath);
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  assert.match(run.stdout, /^restored .*backup\.db into .*minaret\.db \(schema version \d+\); the previous database is kept at .*minaret\.db\.before-restore\n$/);
  assert.deepEqual(emails(databasePath), ['before@example.com']);
  assert.deepEqual(emails(`${databasePath}.before-restore`), ['after@example.com', 'before@example.com']);
  assert.ok(!fs.readdirSync(path.dirname(databasePath)).some((f) => f.includes('.partial-')), 'no partial file left');

  const again = await startTestService(t, { logLevel: 'warn', env: { DATABASE_PATH: databasePath } });
  const login = await again.http.post('/api/v1/auth/login', { identifier_hash: sha256('before@example.com'), password_hash: sha256('before password') });
  assert.equal(login.status, 200);
});

test('restore writes the live database with mode 0600, and the -wal and -shm the service makes beside it get 0600 too', async (t) => {
  const dir = tempDir(t);
  const target = path.join(dir, 'backup.db');
  const databasePath = path.join(dir, 'live', 'minaret.db');
  {
    const ts = await startTestService(t, { logLevel: 'warn', env: { DATABASE_PATH: databasePath } });
    await signupMember(ts.http, 'before@example.com');
    assert.equal((await minaret(['backup', target], databasePath)).code, 0);
    await ts.service.close();
  }
  fs.chmodSync(target, 0o644); // a copy someone loosened must not loosen the live file
  const run = await minaret(['restore', target], databasePath);
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  const mode = (file: string) => fs.statSync(file).mode & 0o777;
  assert.equal(mode(databasePath), 0o600);
  assert.equal(mode(`${databasePath}.before-restore`), 0o600);
  const again = await startTestService(t, { logLevel: 'warn', env: { DATABASE_PATH: databasePath } });
  assert.equal((await again.http.post('/api/v1/auth/signup', { email: 'after@example.com' })).status, 201);
  assert.equal(mode(`${databasePath}-wal`), 0o600);
  assert.equal(mode(`${databasePath}-shm`), 0o600);
});

test('restore is refused while the service has the database open, and nothing changes', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  await signupMember(ts.http, 'kept@example.com');
  const backup = path.join(tempDir(t), 'backup.db');
  assert.equal((await minaret(['backup', backup], ts.config.databasePath)).code, 0);
  await signupMember(ts.http, 'later@example.com');

  refused(await minaret(['restore', backup], ts.config.databasePath), /is in use: stop the service first/);
  assert.deepEqual(emails(ts.config.databasePath), ['kept@example.com', 'later@example.com']);
  assert.equal((await ts.http.get('/healthz')).status, 200, 'the service did not notice');
  assert.ok(!fs.existsSync(`${ts.config.databasePath}.before-restore`));
});

test('restore refuses what is not a Minaret database this version can run, each with one line', async (t) => {
  const dir = tempDir(t);
  const databasePath = path.join(dir, 'minaret.db');
  const ts = await startTestService(t, { logLevel: 'warn', env: { DATABASE_PATH: databasePath } });
  await signupMember(ts.http, 'stays@example.com');
  await ts.service.close();

  const text = path.join(dir, 'notes.txt');
  fs.writeFileSync(text, 'this is not a database, just some text that is long enough to have a header\n'.repeat(20));
  const other = path.join(dir, 'other.db');
  const o = openDatabase(other);
  o.exec('CREATE TABLE recipes (name TEXT)');
  o.pragma('user_version = 3');
  o.close();
  const future = path.join(dir, 'future.db');
  fs.copyFileSync(databasePath, future);
  const f = openDatabase(future);
  f.pragma(`user_version = ${LATEST + 1}`);
  f.close();

  for (const [file, says] of [
    [path.join(dir, 'missing.db'), /missing\.db does not exist/],
    [text, /notes\.txt is not an SQLite database/],
    [other, /other\.db is not a Minaret database/],
    [future, new RegExp(`future\\.db has schema version ${LATEST + 1}, newer than this Minaret knows \\(${LATEST}\\): upgrade Minaret first`)],
  ] as const) {
    refused(await minaret(['restore', file], databasePath), says);
  }
  assert.deepEqual(emails(databasePath), ['stays@example.com']);
  assert.ok(!fs.existsSync(`${databasePath}.before-restore`));
});

test('backup refuses a DATABASE_PATH that does not exist and creates nothing', async (t) => {
  const dir = tempDir(t);
  const databasePath = path.join(dir, 'nothing-here.db');
  refused(await minaret(['backup', path.join(dir, 'b.db')], databasePath), /DATABASE_PATH: .*nothing-here\.db does not exist/);
  assert.deepEqual(fs.readdirSync(dir), []);
  refused(await minaret(['backup'], databasePath), /usage:/);
});
