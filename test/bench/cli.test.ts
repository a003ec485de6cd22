/**
 * The benches' shared command line and figures (bench/support.ts; docs/sizing.md, "Benchmarks"): every bench an
 * npm script runs answers --help with its usage and refuses an option it does not know, before it measures
 * anything; the parser and the formatting behave as the reports rely on.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { cli, cpuPerMessageUs, fmt, range, ratio, ratios } from '../../bench/support.ts';
import { projectPath } from '../../src/platform/config.ts';
import { nodeArgsFor } from '../support/process.ts';

const ROOT = projectPath('');

/** Every bench file the package's bench scripts run (`npm run bench` runs two). */
function benchFiles(): string[] {
  const scripts = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const files = Object.entries(scripts)
    .filter(([name]) => name === 'bench' || name.startsWith('bench:'))
    .flatMap(([, command]) => [...command.matchAll(/\bbench\/[\w/-]+\.ts\b/g)].map((m) => m[0]));
  return [...new Set(files)].sort();
}

function run(file: string, args: string[]) {
  return spawnSync(process.execPath, [...nodeArgsFor(file), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
}

test('the npm bench scripts name the benches this test walks', () => {
  const files = benchFiles();
  assert.ok(files.length >= 11, files.join(', '));
  for (const f of files) assert.ok(fs.existsSync(path.join(ROOT, f)), f);
});

// Each bench reads its command line through the one parser (cli() in bench/support.ts) before it measures
// anything: --help, answered by that parser, shows it does. What the parser does with an unknown option is
// the parser's own behaviour, tested once in this process below and once through a real bench file.
for (const file of benchFiles()) {
  test(`${file}: --help prints its usage and exits 0`, () => {
    const help = run(file, ['--help']);
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /^usage: /);
  });
}

test('an unknown option is a usage error (exit 2), in the parser and through a bench file', () => {
  const wrong = run(path.join('bench', 'devices.ts'), ['--no-such-option']);
  assert.equal(wrong.status, 2, `${wrong.stdout}\n${wrong.stderr}`);
  assert.match(wrong.stderr, /Unknown option '--no-such-option'/);
  assert.match(wrong.stderr, /usage: /);
  const exit = process.exit;
  const errors: string[] = [];
  const error = console.error;
  try {
    process.exit = ((code?: number) => {
      throw new Error(`exit ${code}`);
    }) as typeof process.exit;
    console.error = (...args: unknown[]) => void errors.push(args.join(' '));
    assert.throws(() => cli('usage: x', { rounds: { type: 'number', default: 1 } } as const, ['--nope']), /exit 2/);
  } finally {
    process.exit = exit;
    console.error = error;
  }
  assert.match(errors.join('\n'), /Unknown option '--nope'/);
});

test('cli: --flag value and --flag=value alike, defaults, repeatable values, a value that starts with a dash', () => {
  const spec = {
    rounds: { type: 'number', default: 3, min: 1 },
    timeout: { type: 'number' },
    settle: { type: 'number', default: 3, fraction: true },
    'node-args': { type: 'string', default: '' },
    env: { type: 'strings' },
    'no-write': { type: 'boolean' },
  } as const;
  assert.deepEqual(cli('usage: x', spec, []), { rounds: 3, timeout: undefined, settle: 3, 'node-args': '', env: [], 'no-write': false });
  assert.deepEqual(
    cli('usage: x', spec, ['--rounds', '5', '--timeout=20', '--settle', '0.5', '--node-args', '--max-semi-space-size=2', '--env', 'A=1', '--env=B=2', '--no-write']),
    { rounds: 5, timeout: 20, settle: 0.5, 'node-args': '--max-semi-space-size=2', env: ['A=1', 'B=2'], 'no-write': true },
  );
});

test('a malformed number is a usage error naming the option (exit 2), as a number below its minimum is', () => {
  const file = path.join(ROOT, 'bench', 'devices.ts');
  for (const [arg, message] of [['x', /--devices: expected a whole number >= 1 \(got "x"\)/], ['0', /--devices: expected a whole number >= 1 \(got "0"\)/]] as const) {
    const r = run(file, ['--devices', arg]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
  }
});

test('bench:compare refuses a --before that is not a commit, or an unknown bench, before it checks anything out (exit 2)', () => {
  const file = path.join(ROOT, 'bench', 'compare', 'compare.ts');
  const worktrees = () => spawnSync('git', ['worktree', 'list', '--porcelain'], { cwd: ROOT, encoding: 'utf8' }).stdout;
  const before = worktrees();
  for (const [args, message] of [
    [['--before', 'no-such-ref-0000'], /--before: "no-such-ref-0000" is not a commit of this repository/],
    [['--benches', 'devices,disk'], /--benches: some of devices, http, broadcast \(got "devices,disk"\)/],
    [['--rounds', '0'], /--rounds: expected a whole number >= 1 \(got "0"\)/],
  ] as const) {
    const r = run(file, [...args]);
    assert.equal(r.status, 2, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stderr, message);
    assert.match(r.stderr, /usage: npm run bench:compare/);
  }
  assert.equal(worktrees(), before);
});

test('figures: ranges over rounds, ratios against the same run, CPU per message', () => {
  assert.equal(fmt(1234.5, 1), '1,234.5');
  assert.equal(fmt(Number.NaN, 1), 'n/a');
  assert.equal(range([2.5, 1, 2], 1), '1.0–2.5');
  assert.equal(range([3, 3.01], 1, ' ms'), '3.0 ms');
  assert.equal(range([1, Number.NaN], 2, '×'), 'n/a');
  assert.equal(ratio(3, 2), '1.50×');
  assert.equal(ratio(1, 0), 'n/a');
  // Each round against its own baseline, not the medians against each other.
  assert.equal(ratios([2, 9], [1, 10]), '0.90–2.00×');
  assert.equal(cpuPerMessageUs(0.5, 1000), 500);
  assert.ok(Number.isNaN(cpuPerMessageUs(1, 0)));
});
