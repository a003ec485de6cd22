import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { openDatabase } from '../../src/platform/db.ts';
import { ensureBuilt } from '../support/process.ts';
import { hmacHex, sha256, startTestService } from '../support/service.ts';
import { projectPath } from '../../src/platform/config.ts';

// The operator command (docs/operator.md, "The first superadmin"): `superadmin create --email <email> [--phone <phone>]`, password on stdin.

const ROOT = projectPath('');
const PASSWORD = 'operator chosen password';

before(ensureBuilt); // npx minaret runs the compiled CLI

function tempDb(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-cli-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'minaret.db');
}

/** Runs the CLI as `npm run cli --` would (bin/minaret.mjs, the compiled CLI), with `stdin` as its standard input. */
function cli(args: string[], stdin: string, databasePath: string, extraEnv: Record<string, string> = {}) {
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? os.tmpdir(), NODE_ENV: 'test', BCRYPT_COST: '4', DATABASE_PATH: databasePath, ...extraEnv };
  const child = spawn(process.execPath, ['bin/minaret.mjs', ...args], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  // The CLI may exit before it reads anything (a bad argument): a closed pipe is not an error here.
  child.stdin.on('error', () => {});
  child.stdin.end(stdin);
  return new Promise<{ code: number | null; stdout: string; stderrLines: string[] }>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`cli ${args.join(' ')} did not exit`));
    }, 20_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderrLines: stderr.split('\n').filter((l) => l !== '') });
    });
  });
}

function usersIn(databasePath: string): Array<{ email: string; role: string; phone: string | null; password_bcrypt: string | null }> {
  const db = openDatabase(databasePath);
  try {
    return db.prepare('SELECT email, role, phone, password_bcrypt FROM users ORDER BY created_at').all() as never;
  } finally {
    db.close();
  }
}

test('superadmin create: exits 0, and the service on that database accepts the two-step login', async (t) => {
  const databasePath = tempDb(t);
  const run = await cli(['superadmin', 'create', '--email', 'Root@Example.com', '--phone', '+47 123 45 678'], `${PASSWORD}\n`, databasePath);
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  assert.deepEqual(run.stderrLines, []);
  assert.match(run.stdout, /superadmin created: id \S+, email root@example\.com/);

  const rows = usersIn(databasePath);
  assert.equal(rows.length, 1);
  assert.equal(rows[0]!.email, 'root@example.com');
  assert.equal(rows[0]!.role, 'superadmin');
  assert.equal(rows[0]!.phone, '+4712345678');
  assert.match(rows[0]!.password_bcrypt ?? '', /^\$2[aby]\$/, 'stored as bcrypt');
  assert.ok(!JSON.stringify(rows).includes(sha256(PASSWORD)), 'never the SHA-256 itself');

  const ts = await startTestService(t, { env: { DATABASE_PATH: databasePath } });
  const step1 = await ts.http.post('/api/v1/auth/superadmin-2fa', { identifier_hash: sha256('root@example.com'), password_hash: sha256(PASSWORD) });
  assert.equal(step1.status, 200, JSON.stringify(step1.body));
  assert.equal(step1.body.expires_in, 600);
  await ts.service.notifier.idle();
  assert.equal(ts.messages.length, 1);
  const message = ts.messages[0]!;
  assert.equal(message.purpose, 'superadmin_otp');
  assert.equal(message.to, 'root@example.com');
  assert.match(message.code ?? '', /^\d{6}$/);

  const timestamp = Math.floor(Date.now() / 1000);
  const hmac = hmacHex(step1.body.session_token, `${message.code}|${timestamp}`);
  const step2 = await ts.http.post('/api/v1/auth/superadmin-2fa/verify', { session_token: step1.body.session_token, timestamp, hmac });
  assert.equal(step2.status, 200, JSON.stringify(step2.body));
  assert.equal(step2.body.user.role, 'superadmin');
  assert.equal(step2.body.user.email, 'root@example.com');
  const me = await ts.http.get('/api/v1/me', step2.body.access_token);
  assert.equal(me.status, 200);
  assert.equal(me.body.user.role, 'superadmin');

  // A superadmin cannot use the member login with the same password (docs/decisions.md, "Superadmins sign in only through the two-step flow.").
  const memberLogin = await ts.http.post('/api/v1/auth/login', { identifier_hash: sha256('root@example.com'), password_hash: sha256(PASSWORD) });
  assert.equal(memberLogin.status, 401);
});

test('superadmin create: a password line ending in CRLF is read without the CR', async (t) => {
  const databasePath = tempDb(t);
  const run = await cli(['superadmin', 'create', '--email', 'crlf@example.com'], `${PASSWORD}\r\n`, databasePath);
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  const ts = await startTestService(t, { env: { DATABASE_PATH: databasePath } });
  const step1 = await ts.http.post('/api/v1/auth/superadmin-2fa', { identifier_hash: sha256('crlf@example.com'), password_hash: sha256(PASSWORD) });
  assert.equal(step1.status, 200);
});

/** Every refusal: a non-zero exit, exactly one line on stderr, nothing created. */
async function assertRefused(t: TestContext, args: string[], stdin: string, says: RegExp, databasePath = tempDb(t), usersBefore = 0) {
  const run = await cli(args, stdin, databasePath);
  assert.notEqual(run.code, 0);
  assert.equal(run.stderrLines.length, 1, `one line, got: ${JSON.stringify(run.stderrLines)}`);
  assert.match(run.stderrLines[0]!, says);
  assert.equal(run.stdout, '');
  assert.ok(!run.stderrLines[0]!.includes(PASSWORD.trim()), 'the password is never echoed');
  if (fs.existsSync(databasePath)) assert.equal(usersIn(databasePath).length, usersBefore, 'nothing was created');
}

test('superadmin create without --email exits non-zero with one line', async (t) => {
  await assertRefused(t, ['superadmin', 'create'], `${PASSWORD}\n`, /--email/);
});

test('superadmin create with --email but no value exits non-zero with one line', async (t) => {
  await assertRefused(t, ['superadmin', 'create', '--email'], `${PASSWORD}\n`, /--email/);
});

test('superadmin create with a bad email exits non-zero with one line', async (t) => {
  await assertRefused(t, ['superadmin', 'create', '--email', 'not-an-email'], `${PASSWORD}\n`, /--email.*not an email/);
});

test('superadmin create with a bad phone exits non-zero with one line', async (t) => {
  await assertRefused(t, ['superadmin', 'create', '--email', 'ok@example.com', '--phone', '12'], `${PASSWORD}\n`, /--phone/);
});

test('superadmin create with an email that exists (any case) exits non-zero with one line', async (t) => {
  const databasePath = tempDb(t);
  const first = await cli(['superadmin', 'create', '--email', 'dup@example.com'], `${PASSWORD}\n`, databasePath);
  assert.equal(first.code, 0, first.stderrLines.join('\n'));
  await assertRefused(t, ['superadmin', 'create', '--email', ' DUP@Example.com '], `${PASSWORD}\n`, /already exists/, databasePath, 1);
});

test('superadmin create with an empty password exits non-zero with one line', async (t) => {
  await assertRefused(t, ['superadmin', 'create', '--email', 'empty@example.com'], '\n', /password/);
});

test('superadmin create with no standard input at all exits non-zero with one line', async (t) => {
  await assertRefused(t, ['superadmin', 'create', '--email', 'nostdin@example.com'], '', /password/);
});

test('an unknown command exits non-zero with one usage line', async (t) => {
  await assertRefused(t, ['superadmin', 'destroy', '--email', 'x@example.com'], `${PASSWORD}\n`, /usage/);
  await assertRefused(t, [], '', /usage/);
});

/**
 * `npx minaret ...` exactly as an operator types it: npx finds the package's own bin (bin/minaret.mjs) in the
 * checkout. No npx option goes before the name (after one, npx takes `--help` as its own); npm_config_yes=false
 * makes npx refuse to fetch a package of that name from the registry should the local bin ever be missing.
 */
function npxMinaret(args: string[]) {
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? os.tmpdir(), NODE_ENV: 'test', npm_config_yes: 'false' };
  const child = spawn('npx', ['minaret', ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

test('npx minaret --help, -h and help print every command on stdout and exit 0', { timeout: 60_000 }, async () => {
  for (const flag of ['--help', '-h', 'help']) {
    const run = await npxMinaret([flag]);
    assert.equal(run.code, 0, `${flag}: ${run.stderr}`);
    assert.equal(run.stderr, '', flag);
    assert.match(run.stdout, /^minaret: operator commands\n/, flag);
    for (const command of ['superadmin create', 'backup <file>', 'restore <file>', 'device diagnose', 'device timeline', 'icecast-config']) {
      assert.ok(run.stdout.includes(command), `${flag} names ${command}`);
    }
  }
});

test('npx minaret with an unknown command exits 1 with the usage line on stderr', { timeout: 60_000 }, async () => {
  const run = await npxMinaret(['sing']);
  assert.equal(run.code, 1);
  assert.equal(run.stdout, '');
  assert.match(run.stderr, /^minaret: usage: minaret superadmin create/);
});

test('a bad setting (BCRYPT_COST=99) stops the command with one line naming it', async (t) => {
  const databasePath = tempDb(t);
  const run = await cli(['superadmin', 'create', '--email', 'cost@example.com'], `${PASSWORD}\n`, databasePath, { BCRYPT_COST: '99' });
  assert.notEqual(run.code, 0);
  assert.equal(run.stderrLines.length, 1, JSON.stringify(run.stderrLines));
  assert.match(run.stderrLines[0]!, /BCRYPT_COST/);
  assert.ok(!fs.existsSync(databasePath), 'no database was created');
});

// docs/operator.md, "Audio: Icecast" and "A first trial": Icecast on 127.0.0.1 unless --bind; settings from a file.
test('icecast-config binds Icecast to 127.0.0.1 unless --bind names another address, reading its settings from MINARET_ENV_FILE', async (t) => {
  const databasePath = tempDb(t);
  const file = path.join(path.dirname(databasePath), 'minaret.env');
  fs.writeFileSync(file, `ICECAST_URL=https://audio.example.org\nICECAST_ADMIN_PASSWORD=${'a'.repeat(16)}\nICECAST_HOOK_SECRET=${'h'.repeat(40)}\n`, { mode: 0o600 });
  const env = { MINARET_ENV_FILE: file };
  const plain = await cli(['icecast-config'], '', databasePath, env);
  assert.equal(plain.code, 0, plain.stderrLines.join('\n'));
  assert.match(plain.stdout, /<bind-address>127\.0\.0\.1<\/bind-address>/);
  assert.match(plain.stdout, /<hostname>audio\.example\.org<\/hostname>/, 'the settings came from the file');
  assert.match(plain.stderrLines.join('\n'), /127\.0\.0\.1 only: serve https:\/\/audio\.example\.org through a TLS reverse proxy/);
  const everywhere = await cli(['icecast-config', '--bind', '0.0.0.0'], '', databasePath, env);
  assert.equal(everywhere.code, 0);
  assert.match(everywhere.stdout, /<bind-address>0\.0\.0\.0<\/bind-address>/);
  assert.deepEqual(everywhere.stderrLines, [], 'a chosen address needs no warning');
  const bad = await cli(['icecast-config', '--bind', '0.0.0.0"/><x'], '', databasePath, env);
  assert.equal(bad.code, 1);
  assert.match(bad.stderrLines[0]!, /^minaret: --bind: must be an IP address/);
  assert.equal(bad.stdout, '');
});

test('a MINARET_ENV_FILE that does not exist stops the command with one line naming it', async (t) => {
  const databasePath = tempDb(t);
  const run = await cli(['icecast-config'], '', databasePath, { MINARET_ENV_FILE: path.join(path.dirname(databasePath), 'missing.env') });
  assert.equal(run.code, 1);
  assert.deepEqual(run.stderrLines.length, 1);
  assert.match(run.stderrLines[0]!, /^minaret: MINARET_ENV_FILE: cannot read .*missing\.env \(ENOENT\)/);
});
