import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { projectPath } from '../src/platform/config.ts';
import { rewriteImports } from '../scripts/test-build.ts';

/*
 * `npm test`'s runner (scripts/test.ts, docs/architecture.md "Developing"): it runs test files several at a time, each
 * in its own process, and sums their results into one closing summary, which .ci/run reads from its last
 * `# pass` and `# fail` lines. Here it runs small test files made for the purpose in a temp folder.
 */
const ROOT = projectPath('');

function runner(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/test.ts', ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, out })));
}

function fixtures(t: { after: (fn: () => void) => void }, files: Record<string, string>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-runner-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  for (const [name, body] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), `import { test } from 'node:test';\nimport assert from 'node:assert/strict';\n${body}\n`);
  return dir;
}

/** The closing summary: the last line of each kind, as .ci/run reads it. */
function last(out: string, key: string): number | null {
  const all = [...out.matchAll(new RegExp(`^# ${key} (\\d+)$`, 'gm'))];
  return all.length ? Number(all[all.length - 1]![1]) : null;
}

test('the runner sums every file\'s results and exits 0 when all pass', async (t) => {
  const dir = fixtures(t, {
    'a.test.ts': "test('one', () => assert.equal(1, 1));\ntest('two', () => assert.ok(true));",
    'b.test.ts': "test('three', async () => { await new Promise((r) => setTimeout(r, 20)); });\ntest('skipped', { skip: true }, () => {});",
    'c.test.ts': "test('four', () => {});",
  });
  const run = await runner([dir], { TEST_CONCURRENCY: '2' });
  assert.equal(run.code, 0, run.out);
  assert.equal(last(run.out, 'tests'), 5);
  assert.equal(last(run.out, 'pass'), 4);
  assert.equal(last(run.out, 'skipped'), 1);
  assert.equal(last(run.out, 'fail'), 0);
  assert.match(run.out, /^# 3 test files: 3 2 at a time \(/m, 'no type check when files are named');
  assert.doesNotMatch(run.out, /tsc --noEmit/);
  // The summary ends the output, so a file's own closing lines can never be the ones read.
  assert.match(run.out, /# pass 4\n# fail 0\n# cancelled 0\n# skipped 1\n# todo 0\n# duration_ms \d+\n$/);
});

test('a failing file fails the run, its TAP is printed, and its failures are counted', async (t) => {
  const dir = fixtures(t, {
    'good.test.ts': "test('fine', () => {});",
    'bad.test.ts': "test('fine too', () => {});\ntest('broken on purpose', () => assert.equal(1, 2, 'the runner test expects this failure'));",
  });
  const run = await runner([dir]);
  assert.equal(run.code, 1, run.out);
  assert.equal(last(run.out, 'pass'), 2);
  assert.equal(last(run.out, 'fail'), 1);
  assert.match(run.out, /^# FAILED .*bad\.test\.ts: 1\/2 passed/m);
  assert.match(run.out, /^not ok \d+ - broken on purpose$/m, 'the failing file\'s own output is shown');
  assert.match(run.out, /the runner test expects this failure/);
  assert.match(run.out, /^# failed: .*bad\.test\.ts$/m);
});

test('a file that failed beside the others runs once more alone: passing then, it passes the run and is named flaky; failing again, it fails the run', async (t) => {
  const marker = path.join(os.tmpdir(), `minaret-runner-flaky-${process.pid}-${Date.now()}`);
  t.after(() => fs.rmSync(marker, { force: true }));
  const dir = fixtures(t, {
    'good.test.ts': "test('fine', () => {});",
    // Fails the first time it runs, passes the second: what a file that fails only under load looks like here.
    'flaky.test.ts': `import fs from 'node:fs';\ntest('fails once', () => { const seen = fs.existsSync(${JSON.stringify(marker)}); fs.writeFileSync(${JSON.stringify(marker)}, ''); assert.ok(seen, 'the first run fails'); });`,
  });
  const run = await runner([dir]);
  assert.equal(run.code, 0, run.out);
  assert.match(run.out, /^# FAILED .*flaky\.test\.ts: 0\/1 passed/m, 'the first failure is shown');
  assert.match(run.out, /^# running .*flaky\.test\.ts again, alone$/m);
  assert.match(run.out, /^# flaky \(failed beside the others, passed alone\): .*flaky\.test\.ts$/m);
  assert.equal(last(run.out, 'pass'), 2);
  assert.equal(last(run.out, 'fail'), 0);

  const broken = fixtures(t, { 'bad.test.ts': "test('broken on purpose', () => assert.equal(1, 2));" });
  const again = await runner([broken]);
  assert.equal(again.code, 1, again.out);
  assert.match(again.out, /^# running .*bad\.test\.ts again, alone$/m);
  assert.doesNotMatch(again.out, /^# flaky/m);
  assert.equal(last(again.out, 'fail'), 1);

  // Three failing files are not a flake: none runs again.
  const many = fixtures(t, Object.fromEntries([1, 2, 3].map((n) => [`bad${n}.test.ts`, "test('broken on purpose', () => assert.equal(1, 2));"])));
  const all = await runner([many]);
  assert.equal(all.code, 1, all.out);
  assert.doesNotMatch(all.out, /again, alone/);
  assert.equal(last(all.out, 'fail'), 3);
});

test('a file whose process dies before its summary counts as a failure', async (t) => {
  const dir = fixtures(t, {
    'ok.test.ts': "test('fine', () => {});",
    'dies.test.ts': "test('starts', () => { process.exit(7); });",
  });
  const run = await runner([dir]);
  assert.equal(run.code, 1, run.out);
  assert.match(run.out, /^# FAILED .*dies\.test\.ts/m);
  assert.ok((last(run.out, 'fail') ?? 0) >= 1, run.out);
});

test('TEST_CONCURRENCY must be a whole number of at least 1', async (t) => {
  const dir = fixtures(t, { 'a.test.ts': "test('fine', () => {});" });
  const run = await runner([dir], { TEST_CONCURRENCY: '0' });
  assert.notEqual(run.code, 0);
  assert.match(run.out, /TEST_CONCURRENCY: a whole number of at least 1, not 0/);
});

test('a file still running after TEST_FILE_TIMEOUT_S is killed, with what it started, and fails the run', async (t) => {
  const dir = fixtures(t, {
    'ok.test.ts': "test('fine', () => {});",
    'hangs.test.ts': "import { spawn } from 'node:child_process';\ntest('never ends', async () => { spawn('sleep', ['300'], { stdio: 'inherit' }); await new Promise(() => setInterval(() => {}, 1000)); });",
  });
  const started = Date.now();
  const run = await runner([dir], { TEST_FILE_TIMEOUT_S: '3' });
  assert.equal(run.code, 1, run.out);
  assert.ok(Date.now() - started < 60_000, 'the run ended without waiting for the hung file');
  assert.match(run.out, /^# FAILED .*hangs\.test\.ts/m);
  assert.match(run.out, /killed after 3 s \(TEST_FILE_TIMEOUT_S\)/);
  assert.match(run.out, /^# done .*ok\.test\.ts: 1\/1 passed/m);
});

test('the test run\'s JavaScript names .js where the source imported .ts, and leaves code held in a string as written', () => {
  const cases: Array<[string, string]> = [
    ['import { a } from "./a.ts";', 'import { a } from "./a.js";'],
    ['import {\n  a,\n  b\n} from "../b.ts";', 'import {\n  a,\n  b\n} from "../b.js";'],
    ['export * from "./d.ts";', 'export * from "./d.js";'],
    ['import "./e.ts";', 'import "./e.js";'],
    ['const m = await import("../../f.ts");', 'const m = await import("../../f.js");'],
    ['fs.writeFileSync(f, "import x from \'../api/index.ts\';\\n");', 'fs.writeFileSync(f, "import x from \'../api/index.ts\';\\n");'],
    ['import x from "pkg.ts";', 'import x from "pkg.ts";'],
  ];
  for (const [source, expected] of cases) assert.equal(rewriteImports(source), expected);
});
