import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ensureBuilt } from '../support/process.ts';
import { freePort } from '../support/redis.ts';
import { projectPath } from '../../src/platform/config.ts';

/*
 * The docs run. Every ```sh block in docs/*.md is run with bash, in the order it appears, in one shell per doc,
 * so a reader who pastes them in order into one terminal gets what the test got (docs/walkthrough.md, at its
 * top, says so to the reader). The shell runs with `set -euo pipefail`: a command that fails, or a variable the
 * doc never set, fails its block. A doc that goes on from another one's blocks says so with
 * `<!-- docs-shell: after walkthrough.md -->` and runs in that doc's shell, after it. A block that cannot run
 * on a test machine (root, systemd, Docker, a certificate authority) carries `<!-- not run: <why> -->` on the
 * line before it; any other shell fence (bash, shell, console) is refused, so no block escapes by its label.
 * Output and synopses are ```text.
 */
const ROOT = projectPath('');
const TOOLS = ['curl', 'jq', 'openssl', 'sha256sum', 'mosquitto_sub', 'mosquitto_pub'];

before(ensureBuilt); // the docs start the service with npm start and run npx minaret: both run dist/

interface Block { doc: string; n: number; line: number; body: string; notRun: string | null }
interface Doc { name: string; after: string | null; blocks: Block[]; refusedFences: string[]; strayMarkers: string[] }

/** The shell blocks of one markdown file, numbered from 1 in the order they appear. */
function readDoc(name: string, text: string): Doc {
  const lines = text.split('\n');
  const doc: Doc = { name, after: null, blocks: [], refusedFences: [], strayMarkers: [] };
  const after = /<!--\s*docs-shell:\s*after\s+(\S+)\s*-->/.exec(text);
  if (after) doc.after = after[1]!;
  let pendingMarker: { reason: string; line: number } | null = null;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const marker = /^<!--\s*not run:\s*(.*?)\s*-->\s*$/.exec(line);
    if (marker) {
      if (pendingMarker) doc.strayMarkers.push(`${name}:${pendingMarker.line}`);
      pendingMarker = { reason: marker[1]!, line: i + 1 };
      continue;
    }
    const fence = /^```(\S*)/.exec(line);
    if (!fence) {
      if (pendingMarker && line.trim() !== '') { doc.strayMarkers.push(`${name}:${pendingMarker.line}`); pendingMarker = null; }
      continue;
    }
    const lang = fence[1]!;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    if (['bash', 'shell', 'console', 'zsh', 'shell-session'].includes(lang)) doc.refusedFences.push(`${name}:${start + 1} (${lang})`);
    if (lang === 'sh') {
      doc.blocks.push({ doc: name, n: doc.blocks.length + 1, line: start + 1, body: body.join('\n'), notRun: pendingMarker?.reason ?? null });
    } else if (pendingMarker) {
      doc.strayMarkers.push(`${name}:${pendingMarker.line}`);
    }
    pendingMarker = null;
  }
  if (pendingMarker) doc.strayMarkers.push(`${name}:${pendingMarker.line}`);
  return doc;
}

const MARK = '@@docs-shell-block';

/** One bash script of the blocks in order; each announces itself, so a failure names its doc and block. */
function script(blocks: Block[]): string {
  const parts = ['set -euo pipefail'];
  for (const b of blocks) parts.push(`printf '\\n${MARK} %s %s\\n' '${b.doc}' '${b.n}'`, b.body);
  parts.push(`printf '\\n${MARK} done\\n'`);
  return parts.join('\n') + '\n';
}

/**
 * Runs the blocks with bash in a process group of its own (the service and the simulators a doc starts with `&`
 * live in it), then stops the whole group: SIGTERM, and SIGKILL for what is still there after 15 s.
 */
async function runBlocks(blocks: Block[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ ok: boolean; report: string }> {
  const child = spawn('bash', ['-c', script(blocks)], { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
  const timer = setTimeout(() => { out += `\n(timed out after ${timeoutMs} ms)\n`; killGroup(child.pid!, 'SIGKILL'); }, timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  clearTimeout(timer);
  await stopGroup(child.pid!);
  const done = out.includes(`${MARK} done`);
  if (code === 0 && done) {
    const unmet = blocks.map((b) => unmetExpectation(b, outputOf(out, b))).filter((x): x is string => x !== null);
    return unmet.length ? { ok: false, report: unmet.join('\n\n') } : { ok: true, report: out };
  }
  const at = out.lastIndexOf(MARK);
  const [, doc, n] = at === -1 ? [] : /^@@docs-shell-block (\S+) (\S+)/.exec(out.slice(at))!;
  const block = blocks.find((b) => b.doc === doc && String(b.n) === n);
  const report = block
    ? `${block.doc}, block ${block.n} (line ${block.line}) failed with exit ${code}:\n${block.body}\n--- its output ---\n${out.slice(at).split('\n').slice(1).join('\n')}`
    : `the blocks failed (exit ${code}) before the first block:\n${out}`;
  return { ok: false, report };
}

/** What one block printed: from its own marker to the next one. */
function outputOf(out: string, b: Block): string {
  const start = out.indexOf(`${MARK} ${b.doc} ${b.n}\n`);
  if (start === -1) return '';
  const from = out.indexOf('\n', start) + 1;
  const next = out.indexOf(MARK, from);
  return out.slice(from, next === -1 ? undefined : next);
}

/**
 * A block's `#   ` lines (three spaces) are what it prints: each must be one of its output lines, in the order
 * given, with `...` standing for anything. Other comment lines are notes and are not checked.
 */
function unmetExpectation(b: Block, output: string): string | null {
  const expected = b.body.split('\n').filter((l) => l.startsWith('#   ')).map((l) => l.slice(4).trimEnd());
  const lines = output.split('\n').map((l) => l.trimEnd());
  let at = 0;
  for (const want of expected) {
    const escaped = want.split('...').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    const pattern = new RegExp('^' + escaped.join('.*') + '$');
    const found = lines.findIndex((line, i) => i >= at && pattern.test(line));
    if (found === -1) return `${b.doc}, block ${b.n} (line ${b.line}) does not print "${want}" (after its earlier lines):\n${b.body}\n--- its output ---\n${output}`;
    at = found + 1;
  }
  return null;
}

function killGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false; // the group is gone
  }
}

async function stopGroup(pgid: number): Promise<void> {
  if (!killGroup(pgid, 'SIGTERM')) return;
  for (let i = 0; i < 150; i++) {
    await new Promise((r) => setTimeout(r, 100));
    if (!killGroup(pgid, 0 as unknown as NodeJS.Signals)) return;
  }
  killGroup(pgid, 'SIGKILL');
}

function docs(): Doc[] {
  const dir = path.join(ROOT, 'docs');
  return fs.readdirSync(dir).filter((f) => f.endsWith('.md')).sort().map((f) => readDoc(f, fs.readFileSync(path.join(dir, f), 'utf8')));
}

/** Each shell: a doc that stands alone, followed by the docs that go on from it. */
function sessions(all: Doc[]): Block[][] {
  const out: Block[][] = [];
  for (const d of all.filter((x) => x.after === null)) {
    const blocks = [d, ...all.filter((x) => x.after === d.name)].flatMap((x) => x.blocks.filter((b) => b.notRun === null));
    if (blocks.length) out.push(blocks);
  }
  return out;
}

test('docs/: every shell block is ```sh, and each one that is not run says why on the line before it', () => {
  const all = docs();
  assert.deepEqual(all.flatMap((d) => d.refusedFences), [], 'shell blocks are ```sh (run) or ```text (not a command)');
  assert.deepEqual(all.flatMap((d) => d.strayMarkers), [], 'a <!-- not run: ... --> marker stands right before a ```sh block');
  const unexplained = all.flatMap((d) => d.blocks).filter((b) => b.notRun !== null && b.notRun.length < 10);
  assert.deepEqual(unexplained.map((b) => `${b.doc}:${b.line}`), [], 'each block that is not run says why');
  for (const d of all.filter((x) => x.after)) assert.ok(all.some((x) => x.name === d.after && x.after === null), `${d.name} goes on from ${d.after}, which must stand alone`);
  // The walk-through is the one that really runs, end to end.
  const walk = all.find((d) => d.name === 'walkthrough.md');
  assert.ok(walk && walk.blocks.filter((b) => b.notRun === null).length >= 10, 'docs/walkthrough.md has its runnable blocks');
});

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, '').replace(/ /g, '-');
}

// The walk-through promises that every sh block on it runs: a block it must not run is visible text (a ```text fence
// after a sentence saying why), never an HTML comment a rendered page hides from the reader who pastes.
test('docs/walkthrough.md hides no block behind a not-run comment', () => {
  const walkthrough = docs().find((d) => d.name === 'walkthrough.md')!;
  assert.deepEqual(walkthrough.blocks.filter((b) => b.notRun !== null).map((b) => `line ${b.line}: ${b.notRun}`), []);
});

test('README.md and docs/: every relative link reaches a file, and every #anchor a heading in it', () => {
  const withoutCode = (text: string): string => text.replace(/^```[\s\S]*?^```/gm, '');
  const files = ['README.md', 'SECURITY.md', ...fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  const broken: string[] = [];
  let links = 0;
  for (const file of files) {
    const text = withoutCode(fs.readFileSync(path.join(ROOT, file), 'utf8'));
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue;
      links++;
      const [rel, anchor] = target.split('#') as [string, string | undefined];
      const to = rel ? path.join(path.dirname(path.join(ROOT, file)), rel) : path.join(ROOT, file);
      if (!fs.existsSync(to)) { broken.push(`${file}: ${target} (no such file)`); continue; }
      if (anchor === undefined || !to.endsWith('.md')) continue;
      const headings = [...withoutCode(fs.readFileSync(to, 'utf8')).matchAll(/^#+\s+(.*)$/gm)].map((h) => slug(h[1]!));
      if (!headings.includes(anchor)) broken.push(`${file}: ${target} (no such heading)`);
    }
  }
  assert.ok(links > 50, `found ${links} links`);
  assert.deepEqual(broken, []);
});

test('README.md stays the front door: at most 200 lines, one picture, and a link to every document in docs/', () => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  assert.ok(readme.split('\n').length <= 200, `README.md has ${readme.split('\n').length} lines`);
  assert.equal([...readme.matchAll(/!\[[^\]]*\]\(docs\/console\/[^)]+\.png\)/g)].length, 1, 'one picture from docs/console/');
  const docsFiles = fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => /\.(md|json)$/.test(f));
  assert.deepEqual(docsFiles.filter((f) => !readme.includes(`](docs/${f}`)), [], 'README.md links every document');
});

test('the runner names the doc, the block and its output when a block fails, when a variable the doc never set is used, and when a block does not print what its #   lines show', async () => {
  const fake = readDoc('fake.md', ['```sh', 'A=1', 'echo "first $A"', '```', '', '```text', 'not run', '```', '', '```sh', 'echo "second $NEVER_SET"', '```'].join('\n'));
  const run = await runBlocks(fake.blocks, { PATH: process.env.PATH ?? '/usr/bin:/bin' }, 20_000);
  assert.equal(run.ok, false);
  assert.match(run.report, /^fake\.md, block 2 \(line 10\) failed/);
  assert.match(run.report, /NEVER_SET: unbound variable/);
  const good = await runBlocks(fake.blocks.slice(0, 1), { PATH: process.env.PATH ?? '/usr/bin:/bin' }, 20_000);
  assert.equal(good.ok, true, good.report);
  assert.match(good.report, /first 1/);
  // A block's `#   ` lines are checked against what it printed, in order, `...` standing for anything.
  const shown = readDoc('shown.md', ['```sh', 'echo "id 42, ok"', 'echo done', '#   id ..., ok', '#   done', '```', '', '```sh', 'echo two', '#   three', '```'].join('\n'));
  const checked = await runBlocks(shown.blocks, { PATH: process.env.PATH ?? '/usr/bin:/bin' }, 20_000);
  assert.equal(checked.ok, false);
  assert.match(checked.report, /^shown\.md, block 2 \(line 8\) does not print "three"/);
  assert.equal((await runBlocks(shown.blocks.slice(0, 1), { PATH: process.env.PATH ?? '/usr/bin:/bin' }, 20_000)).ok, true);
});

test('every runnable shell block in docs/ runs, in order, against a service the doc itself starts', { timeout: 420_000 }, async (t) => {
  const missing = TOOLS.filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0);
  assert.deepEqual(missing, [], `the docs need these tools (.ci/run installs them): ${missing.join(', ')}`);
  const all = sessions(docs());
  assert.ok(all.length >= 1);
  for (const blocks of all) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-docs-'));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    // What a reader's shell has: PATH and HOME, and nothing of this test's (no token, no URL). The ports are
    // free ones and the database a temporary file, which the doc reads as a reader's own settings.
    const env = {
      PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? dir, LANG: 'C.UTF-8',
      HTTP_PORT: String(await freePort()), MQTT_PORT: String(await freePort()), DATABASE_PATH: path.join(dir, 'minaret.db'),
      BCRYPT_COST: '10',
    };
    const run = await runBlocks(blocks, env, 300_000);
    if (process.env.DOCS_SHELL_VERBOSE) console.log(run.report);
    assert.ok(run.ok, run.report);
    // Every block announced itself and ended: none was skipped by an early exit 0.
    for (const b of blocks) assert.ok(run.report.includes(`${MARK} ${b.doc} ${b.n}\n`), `${b.doc}, block ${b.n} did not run`);
  }
});

// The same story in the browser (scripts/screenshots.ts, `npm run screenshots`), which also makes the pictures
// of docs/console.md and the README: every step passes, and each main page is pictured at phone and desktop width.
const PAGES = ['signin', 'signin-arabic', 'superadmin-step2', 'superadmin-mosques', 'member-player-credentials', 'admin-member-waiting', 'member-player-online', 'admin-broadcast-live'];

/** Width and height from a PNG's IHDR chunk; throws when the file is no PNG. */
function pngSize(file: string): { width: number; height: number; bytes: number } {
  const data = fs.readFileSync(file);
  assert.deepEqual([...data.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], `${file} is not a PNG`);
  assert.equal(data.toString('latin1', 12, 16), 'IHDR');
  return { width: data.readUInt32BE(16), height: data.readUInt32BE(20), bytes: data.length };
}

test('the walk-through in the browser takes a fresh service to a broadcast and leaves a picture of each main page', { timeout: 240_000 }, async (t) => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-screenshots-test-'));
  t.after(() => fs.rmSync(out, { recursive: true, force: true }));
  const script = spawn(process.execPath, ['--import', 'tsx', 'scripts/screenshots.ts', '--out', out], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  script.stdout.on('data', (c: Buffer) => (log += c.toString('utf8')));
  script.stderr.on('data', (c: Buffer) => (log += c.toString('utf8')));
  const code = await new Promise<number | null>((resolve) => script.on('exit', resolve));
  assert.equal(code, 0, `the browser walk-through failed:\n${log}`);
  for (const step of [
    'ok: the superadmin signs in at /superadmin in two steps', 'ok: the superadmin creates the mosque with the imam as its owner',
    'ok: a member opens the join link, signs up and joins', 'ok: the member adds a stream player and sees its credentials once',
    'ok: the imam sees the member waiting and approves them', "ok: the simulator plays the player with those credentials: ONLINE on the member's and the imam's pages",
    'ok: the imam starts the Maghrib azaan and sees the delivery report count the player', 'walk-through complete',
  ]) assert.ok(log.includes(step), `missing "${step}" in:\n${log}`);

  for (const name of PAGES) {
    const phone = pngSize(path.join(out, `${name}.png`));
    assert.equal(phone.width, 390, `${name}.png is phone width`);
    assert.ok(phone.height >= 600, `${name}.png shows a page (${phone.height} px tall)`);
    // A blank or one-colour page compresses to a few hundred bytes; a rendered page with text does not.
    assert.ok(phone.bytes > 10_000 && phone.bytes < 400_000, `${name}.png is ${phone.bytes} bytes`);
    const desktop = pngSize(path.join(out, 'desktop', `${name}.png`));
    assert.equal(desktop.width, 1280, `desktop/${name}.png is desktop width`);
    assert.ok(desktop.bytes > 10_000, `desktop/${name}.png is ${desktop.bytes} bytes`);
  }
});
