import { fileURLToPath } from 'node:url';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { projectPath } from '../../src/platform/config.ts';

/** The real process as an operator starts it (node or npm), its output, and its end. */

export const ROOT = projectPath('');
export const GOOD_SECRET = 'process-test-secret-0123456789-abcdefghijklmnop';

export interface Run {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** What the build compiles, and what decides it (docs/architecture.md, "Running"). */
const BUILD_INPUTS = ['src', 'api', 'broker', 'generated', 'notify', 'icecast', 'cli', 'device', 'tsconfig.json', 'tsconfig.build.json', 'package.json'];
let built = false;

/**
 * dist/ as the install builds it, for a test that starts the process or the CLI as an operator does (npm
 * start, bin/minaret.mjs): built again (`npm run build`) when a source is newer than it, so such a test never
 * runs JavaScript older than the sources it is read beside.
 */
export function ensureBuilt(): void {
  if (built) return;
  const builtAt = fs.statSync(path.join(ROOT, 'dist/src/main.js'), { throwIfNoEntry: false })?.mtimeMs ?? 0;
  // Files only: a folder's own time changes whenever a file comes or goes in it, as the probes
  // test/architecture.test.ts writes into src/ for a moment do, and counting it rebuilt dist/ (~20 s of CPU) in
  // every later test file that starts the process. A file gone between the listing and its stat counts as nothing.
  const changedAt = (file: string): number => {
    const stat = fs.statSync(file, { throwIfNoEntry: false });
    if (!stat) return 0;
    if (!stat.isDirectory()) return stat.mtimeMs;
    return Math.max(0, ...fs.readdirSync(file).map((entry) => changedAt(path.join(file, entry))));
  };
  if (Math.max(...BUILD_INPUTS.map((input) => changedAt(path.join(ROOT, input)))) > builtAt) {
    execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'], timeout: 180_000 });
  }
  built = true;
}

export function tempDir(t: TestContext, prefix = 'minaret-proc-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A clean environment (nothing inherited but PATH and HOME) so the host's settings cannot leak in. */
export function baseEnv(dir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? dir,
    NODE_ENV: 'test',
    HOST: '127.0.0.1',
    HTTP_PORT: '0',
    MQTT_PORT: '0',
    DATABASE_PATH: path.join(dir, 'minaret.db'),
    DATA_DIR: dir,
    JWT_SECRET: GOOD_SECRET,
    BCRYPT_COST: '4',
    ...extra,
  };
}

/** tsx for the main thread only, so the service's worker threads start without it (scripts/tsx-main-thread.mjs). */
export const TSX_MAIN_THREAD = path.join(ROOT, 'scripts/tsx-main-thread.mjs');

/**
 * The node arguments that run a TypeScript file of the project (a path from the root): its JavaScript beside this
 * module's when this module runs as the test run's JavaScript (scripts/test-build.ts transpiled every file; ~1 s less
 * CPU a process), else the file itself through tsx. `file`: from the root, or absolute.
 */
export function nodeArgsFor(file: string): string[] {
  if (!import.meta.url.endsWith('.js')) return ['--import', 'tsx', file];
  const fromRoot = path.relative(ROOT, path.resolve(ROOT, file)).replace(/\.ts$/, '.js');
  return [fileURLToPath(new URL(`../../${fromRoot.split(path.sep).join('/')}`, import.meta.url))];
}

/** The service from its sources through tsx, as `npm run dev` runs it: ~1.2 s more CPU a start than compiled. */
export const FROM_SOURCES = ['--import', TSX_MAIN_THREAD, 'src/main.ts'];

/**
 * Spawns `command args` in the repository root; killed (SIGKILL) when the test ends if still running. Without
 * `command`, the service as `npm start` runs it in production: dist/src/main.js, built first if a source is newer.
 */
export function startProcess(t: TestContext, env: Record<string, string>, command?: string, args?: string[]): Run {
  if (command === undefined) ensureBuilt();
  command ??= process.execPath;
  args ??= ['dist/src/main.js'];
  const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr!.on('data', (c: Buffer) => (err += c.toString('utf8')));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  return { child, stdout: () => out, stderr: () => err, exited };
}

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export function logLines(stdout: string): Array<Record<string, any>> {
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, any>);
}

/** Waits for a JSON log line with this `msg` (and optional predicate); returns it. */
export async function logLine(run: Run, msg: string, ms = 20_000, match: (l: Record<string, any>) => boolean = () => true): Promise<Record<string, any>> {
  const found = () => logLines(run.stdout()).find((l) => l.msg === msg && match(l));
  // The look ends with the wait: a look left polling after a timeout (or after a kill, which leaves exitCode null
  // and sets signalCode) kept the test process alive after its last test, to the run's own timeout.
  let over = false;
  await withTimeout(
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (over) return;
        if (found()) return resolve();
        if (run.child.exitCode !== null || run.child.signalCode !== null) return reject(new Error(`exited early (${run.child.exitCode ?? run.child.signalCode}): ${run.stderr()}`));
        setTimeout(check, 25);
      };
      check();
    }),
    ms,
    msg,
  ).finally(() => (over = true));
  return found()!;
}

/** Runs the process to its end (a refused start); its exit code and stderr lines. */
export async function runToExit(t: TestContext, env: Record<string, string>) {
  const run = startProcess(t, env);
  const { code } = await withTimeout(run.exited, 20_000, 'the process to exit');
  return { code, stdout: run.stdout(), stderrLines: run.stderr().split('\n').filter((l) => l !== '') };
}

/** True while a process with this pid exists (signal 0 probes without sending anything). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Waits for the 'minaret is listening' line; returns its ports. */
export async function listening(run: Run): Promise<{ http_port: number; mqtt_port: number }> {
  const line = await logLine(run, 'minaret is listening');
  assert.equal(typeof line.http_port, 'number');
  assert.ok(line.http_port > 0);
  return { http_port: line.http_port, mqtt_port: line.mqtt_port };
}

export interface Finished {
  code: number | null;
  stdout: string;
  stderrLines: string[];
}

/** Runs `args` with node in the repository root with exactly `env`, to its end (killed after 30 s). */
export function runNode(args: string[], env: Record<string, string>): Promise<Finished> {
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not exit`));
    }, 30_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderrLines: stderr.split('\n').filter((l) => l !== '') });
    });
  });
}

/**
 * Confirms the account's email with the code the process's console transport logs: an account that has proven
 * nothing holds nothing (docs/api.md, "Addresses: claims and proof"), so a test's member confirms before joining or
 * adding a device. `http` is any client with `post(path, body, token)`.
 */
export async function confirmEmailByLog(run: Run, http: { post(path: string, body: unknown, token?: string): Promise<{ status: number; body: any }> }, token: string, email: string): Promise<void> {
  const before = logLines(run.stdout()).filter((l) => l.purpose === 'confirm_address' && l.to === email).length;
  const asked = await http.post('/api/v1/me/addresses/confirm', { channel: 'email' }, token);
  assert.equal(asked.status, 202, JSON.stringify(asked.body));
  let code: string | undefined;
  for (let i = 0; i < 200 && !code; i++) {
    code = logLines(run.stdout()).filter((l) => l.purpose === 'confirm_address' && l.to === email && typeof l.code === 'string')[before]?.code;
    if (!code) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(code, `no confirmation code for ${email} in the log`);
  const verified = await http.post('/api/v1/me/addresses/verify', { code }, token);
  assert.equal(verified.status, 200, JSON.stringify(verified.body));
}
