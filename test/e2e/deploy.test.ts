import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/platform/config.ts';
import { mosqueWithOwner } from '../support/devices.ts';
import { baseEnv, ensureBuilt, isAlive, logLine, ROOT, startProcess, tempDir, withTimeout } from '../support/process.ts';
import { sha256, startTestService } from '../support/service.ts';

// Production deployment (deploy/, package.json): the process a supervisor signals is the service, the
// Dockerfile's health check works against a real service, the systemd unit parses, and operator tools keep
// secrets out of argv and out of the working tree.

const read = (file: string) => fs.readFileSync(path.join(ROOT, file), 'utf8');

before(ensureBuilt);

/** The pids and command lines of a process's children. */
function childrenOf(pid: number): Array<{ pid: number; args: string }> {
  const out = spawnSync('ps', ['-o', 'pid=,args=', '--ppid', String(pid)], { encoding: 'utf8' }).stdout;
  return out
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .map((l) => ({ pid: Number(l.split(/\s+/, 1)[0]), args: l.replace(/^\d+\s+/, '') }));
}

function descendantsOf(pid: number): number[] {
  return childrenOf(pid).flatMap((c) => [c.pid, ...descendantsOf(c.pid)]);
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`kill -${signal.slice(3)} <pid of npm start>: the service itself stops gracefully within 5 s and npm exits 0`, async (t) => {
    const run = startProcess(t, baseEnv(tempDir(t)), 'npm', ['start']);
    await logLine(run, 'minaret is listening');
    // Should the signal not reach the service, it must not outlive the test (nor hold its output pipes open).
    const descendants = descendantsOf(run.child.pid!);
    t.after(() => descendants.forEach((pid) => isAlive(pid) && process.kill(pid, 'SIGKILL')));
    // npm's only child is node itself (the script execs it): no shell in between to swallow the signal.
    const children = childrenOf(run.child.pid!);
    assert.equal(children.length, 1, JSON.stringify(children));
    assert.match(children[0]!.args, /^node --max-semi-space-size=8 dist\/src\/main\.js$/);
    const service = children[0]!.pid;
    // glibc's malloc arenas capped at 2 (bench/RESULTS.md, "Idle memory").
    assert.ok(fs.readFileSync(`/proc/${service}/environ`, 'utf8').split('\0').includes('MALLOC_ARENA_MAX=2'), 'npm start sets MALLOC_ARENA_MAX=2');

    run.child.kill(signal);
    const exit = await withTimeout(run.exited, 5000, `npm start to exit after ${signal}`);
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.equal(isAlive(service), false, 'the node process is gone, not orphaned');
    assert.equal((await logLine(run, 'shutting down', 100)).signal, signal);
    await logLine(run, 'minaret stopped', 100);
  });
}

test('npm start runs the JavaScript the install compiled, with no TypeScript loader, and it serves /healthz', async (t) => {
  const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string>; dependencies: Record<string, string> };
  assert.equal(pkg.scripts['prepare'], 'npm run build', 'npm install and npm ci build dist/');
  assert.ok(!('tsx' in pkg.dependencies), 'tsx is not installed in production (npm prune --omit=dev)');
  const main = read('dist/src/main.js');
  assert.doesNotMatch(main, /from ["']\.{1,2}\/[^"']*\.ts["']/, 'relative imports point at the compiled .js files');

  const run = startProcess(t, baseEnv(tempDir(t)), 'npm', ['start']);
  const { http_port } = await logLine(run, 'minaret is listening');
  const [service] = childrenOf(run.child.pid!);
  assert.ok(service, 'npm started node');
  // SIGKILL to npm at the end would leave node running (and holding this test's pipes): it is ended itself.
  t.after(async () => {
    if (isAlive(service.pid)) process.kill(service.pid, 'SIGTERM');
    await withTimeout(run.exited, 10_000, 'npm start to exit');
  });
  // A TypeScript loader gets into node only through its arguments (--import, --loader, --require) or NODE_OPTIONS.
  const argv = fs.readFileSync(`/proc/${service.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  assert.deepEqual(argv.slice(1), ['--max-semi-space-size=8', 'dist/src/main.js']);
  const nodeOptions = fs.readFileSync(`/proc/${service.pid}/environ`, 'utf8').split('\0').filter((e) => e.startsWith('NODE_OPTIONS='));
  assert.deepEqual(nodeOptions.filter((e) => /tsx|--import|--loader|--require/.test(e)), [], 'no loader through NODE_OPTIONS');

  const health = await fetch(`http://127.0.0.1:${http_port as number}/healthz`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: 'ok', db: 'ok', broker: 'ok' });
  // The files it reads by path, not compiled, were found from dist/: the migrations (above: db ok), the
  // console, and the bcrypt worker (an unknown account is still checked against a dummy hash: a 401, not a 500).
  assert.equal((await fetch(`http://127.0.0.1:${http_port as number}/`)).status, 200, 'the console is served');
  const login = await fetch(`http://127.0.0.1:${http_port as number}/api/v1/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ identifier_hash: sha256('nobody@example.org'), password_hash: sha256('not a password') }),
  });
  assert.equal(login.status, 401, await login.text());
});

/** The exec-form command of the Dockerfile's HEALTHCHECK. */
function healthcheckCommand(): string[] {
  const dockerfile = read('deploy/Dockerfile').replace(/\\\n\s*/g, '');
  const line = dockerfile.split('\n').find((l) => l.startsWith('HEALTHCHECK '));
  assert.ok(line, 'the Dockerfile has a HEALTHCHECK');
  return JSON.parse(line.slice(line.indexOf('CMD ') + 4)) as string[];
}

function runHealthcheck(port: number): Promise<number | null> {
  const [command, ...args] = healthcheckCommand();
  assert.equal(command, 'node', 'node itself: the slim image has no curl');
  const child = spawn(process.execPath, args, { env: { PATH: process.env.PATH ?? '', HTTP_PORT: String(port) }, stdio: 'ignore' });
  return withTimeout(new Promise((resolve) => child.on('exit', (code) => resolve(code))), 10_000, 'the health check');
}

async function listenOnce(t: TestContext, handler: http.RequestListener): Promise<number> {
  const server = http.createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as AddressInfo).port;
}

test("the Dockerfile's HEALTHCHECK exits 0 against a running service, 1 on a 503 and on a closed port", async (t) => {
  const run = startProcess(t, baseEnv(tempDir(t)));
  const { http_port } = await logLine(run, 'minaret is listening');
  assert.equal(await runHealthcheck(http_port as number), 0);

  const unhealthy = await listenOnce(t, (_req, res) => {
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end('{"status":"unavailable","db":"failed","broker":"ok"}');
  });
  assert.equal(await runHealthcheck(unhealthy), 1);

  run.child.kill('SIGTERM');
  assert.equal((await withTimeout(run.exited, 5000, 'exit')).code, 0);
  assert.equal(await runHealthcheck(http_port as number), 1, 'nothing listens there any more');
});

test('the Dockerfile runs node as a non-root user on a /data volume, and the context keeps what the service runs', () => {
  const dockerfile = read('deploy/Dockerfile');
  const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
  assert.match(dockerfile, /FROM node:\$\{NODE_VERSION\}-bookworm AS build[\s\S]*python3 make g\+\+/);
  assert.match(runtime, /FROM node:\$\{NODE_VERSION\}-bookworm-slim/);
  assert.match(runtime, /\nUSER minaret\n/);
  assert.match(runtime, /VOLUME \["\/data"\]/);
  assert.match(runtime, /DATABASE_PATH=\/data\/minaret\.db/);
  const cmd = JSON.parse(runtime.split('\n').find((l) => l.startsWith('CMD '))!.slice(4)) as string[];
  const start = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts['start']!;
  // npm start sets MALLOC_ARENA_MAX (unless the caller did) before it execs node; the image sets it in ENV.
  assert.equal(`MALLOC_ARENA_MAX=\${MALLOC_ARENA_MAX:-2} exec ${cmd.join(' ')}`, start, 'the image starts the service exactly as npm start does');
  assert.match(runtime, /\bMALLOC_ARENA_MAX=2\b/);

  const ignored = read('.dockerignore').split('\n').filter((l) => l && !l.startsWith('#'));
  for (const needed of ['src', 'api', 'broker', 'notify', 'cli', 'bin', 'package.json', 'package-lock.json']) {
    assert.ok(!ignored.includes(needed), `${needed} is in the build context`);
  }
  for (const secret of ['.git', 'node_modules', '.minaret', 'data/*', 'deploy/*.env']) assert.ok(ignored.includes(secret), `${secret} stays out of the image`);
});

test('the systemd unit passes systemd-analyze verify and carries the hardening and the data folder', { skip: !hasSystemdAnalyze() && 'systemd-analyze is not installed' }, (t) => {
  const unit = read('deploy/minaret.service');
  for (const line of [
    'User=minaret', 'Restart=on-failure', 'NoNewPrivileges=yes', 'ProtectSystem=strict', 'ReadWritePaths=/var/lib/minaret',
    'EnvironmentFile=/etc/minaret/minaret.env', 'ExecReload=/bin/kill -HUP $MAINPID', 'PrivateTmp=yes',
  ]) {
    assert.ok(unit.split('\n').includes(line), `has ${line}`);
  }
  assert.match(unit, /^Environment=.*DATABASE_PATH=\/var\/lib\/minaret\/minaret\.db/m, 'the database is inside the writable folder');
  assert.match(unit, /^Environment=.*\bMALLOC_ARENA_MAX=2\b/m, 'glibc\'s malloc arenas capped as npm start caps them');
  const start = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts['start']!;
  assert.ok(start.endsWith(`exec ${unit.split('\n').find((l) => l.startsWith('ExecStart='))!.slice('ExecStart=/usr/bin/'.length)}`), 'the unit starts node with the flags npm start gives it');
  // verify checks that ExecStart's binary exists: point it at this node, wherever it is installed here.
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, 'minaret.service'), unit.replace('ExecStart=/usr/bin/node', `ExecStart=${process.execPath}`));
  const verify = spawnSync('systemd-analyze', ['verify', './minaret.service'], { cwd: dir, encoding: 'utf8' });
  assert.equal(verify.status, 0, verify.stderr);
  assert.equal(verify.stderr.trim(), '', 'no unknown or ignored keys');
});

function hasSystemdAnalyze(): boolean {
  return spawnSync('systemd-analyze', ['--version'], { stdio: 'ignore' }).status === 0;
}

test('the cluster compose file gives HAProxy every address deploy/haproxy.cfg reads, and its nodes PostgreSQL and Redis', () => {
  // No Docker here (docs/operator.md, "Docker and compose"): the file is checked as text against what it feeds.
  const compose = read('deploy/compose.cluster.yaml');
  const cfg = read('deploy/haproxy.cfg').split('\n').filter((l) => !l.trimStart().startsWith('#')).join('\n');
  const wanted = [...new Set([...cfg.matchAll(/"\$\{(\w+)\}"/g)].map((m) => m[1]!))];
  assert.ok(wanted.length >= 9, wanted.join());
  for (const name of wanted) assert.match(compose, new RegExp(`^ {6}${name}: \\S`, 'm'), `compose.cluster.yaml sets ${name} for HAProxy`);
  assert.match(compose, /- \.\/haproxy\.cfg:\/usr\/local\/etc\/haproxy\/haproxy\.cfg:ro/);
  assert.match(compose, /^ {4}DATABASE_URL: postgres:\/\/minaret:\$\{POSTGRES_PASSWORD:\?[^}]*\}@postgres:5432\/minaret$/m);
  assert.match(compose, /^ {4}REDIS_URL: redis:\/\/redis:6379$/m);
  assert.match(compose, /^ {4}image: postgres:15-/m);
  assert.doesNotMatch(compose, /DATABASE_PATH/, 'the nodes keep no SQLite file');
});

test('the example environment file, with a secret filled in, is a production configuration the service accepts', () => {
  const env: Record<string, string> = {};
  for (const line of read('deploy/minaret.env.example').split('\n')) {
    const m = /^([A-Z_]+)=(.*)$/.exec(line);
    if (m) env[m[1]!] = m[2]!;
  }
  assert.equal(env['NODE_ENV'], 'production');
  assert.equal(env['JWT_SECRET'], '', 'shipped without a secret');
  const loaded = loadConfig({ ...env, JWT_SECRET: 'x'.repeat(48) });
  assert.ok(loaded.ok, loaded.ok ? '' : loaded.error);
  assert.equal(loadConfig(env).ok, false, 'refused until JWT_SECRET is filled in');
});

test('the simulator writes device passwords to the git-ignored .minaret/ with mode 0600, and refuses --token', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const name = `deploy-test-${process.pid}-${Date.now()}.json`;
  const saved = path.join(ROOT, '.minaret', name);
  // An older copy left world-readable must not stay so.
  fs.mkdirSync(path.dirname(saved), { recursive: true });
  fs.writeFileSync(saved, '[]', { mode: 0o644 });
  fs.chmodSync(saved, 0o644);
  t.after(() => fs.rmSync(saved, { force: true }));

  const simulate = (args: string[], token: string) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'simulator/index.ts', ...args], {
        cwd: ROOT, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', MINARET_TOKEN: token }, stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
      child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
      child.on('close', (code) => resolve({ code, out }));
    });

  const run = await withTimeout(simulate(['--url', ts.url, '--mosque', mosque.id, '--transmitters', '1', '--save', name, '--duration', '1', '--quiet'], owner.token), 30_000, 'the simulator');
  assert.equal(run.code, 0, run.out);
  assert.match(run.out, new RegExp(`saved 1 device credential\\(s\\) to \\.minaret/${name.replace(/[.]/g, '\\.')} \\(mode 0600\\)`));
  assert.ok(!run.out.includes(owner.token), 'the token is never printed');
  assert.equal(fs.statSync(saved).mode & 0o777, 0o600);
  const creds = JSON.parse(fs.readFileSync(saved, 'utf8')) as Array<{ id: string; password: string }>;
  assert.equal(creds.length, 1);
  assert.ok(creds[0]!.password.length >= 32);
  assert.equal(execFileSync('git', ['check-ignore', path.join('.minaret', name)], { cwd: ROOT, encoding: 'utf8' }).trim(), path.join('.minaret', name));

  const refused = await simulate(['--url', ts.url, '--token', owner.token, '--players', '1'], '');
  assert.equal(refused.code, 2);
  assert.match(refused.out, /--token is refused: .*set MINARET_TOKEN or pass --token-file/);
  assert.ok(!refused.out.includes(owner.token), 'the token is not echoed back');
});
