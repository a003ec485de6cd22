import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { projectPath } from '../src/platform/config.ts';

/** ARCHITECTURE.md, "Dependency rule", read from the import statements of every source file. */
const ROOT = projectPath('');

type Rule = { folder: string; allowedPackages: RegExp; allowedFolders: string[]; exempt?: string[]; alsoAllowed?: Record<string, RegExp> };

const RULES: Rule[] = [
  {
    folder: 'src',
    // libphonenumber-js: the one phone normaliser (src/platform/identifiers.ts) is needed by the API's schemas,
    // the CLI and the start-up rewrite of stored identifiers alike, so it lives in src/.
    allowedPackages: /^(node:.*|better-sqlite3|kysely|jose|bcryptjs|valibot|adhan|libphonenumber-js)$/,
    // generated/ holds code written by `npm run docs` from src/'s own sources (the tables' row types the store is
    // typed over), importing nothing of src/.
    allowedFolders: ['src', 'generated'],
    // The composition root and the process edge wire every part together.
    exempt: ['src/main.ts', 'src/service.ts'],
    // The change feed's Redis side (docs/decisions.md, "Several processes") is plumbing like the database driver; only it may use ioredis.
    alsoAllowed: {
      [path.join('src', 'platform', 'net', 'redis-changes.ts')]: /^ioredis$/,
      // What a recorded azaan must be (a whole MP3, Ogg Vorbis or Ogg Opus file) is the audio domain's rule,
      // whichever door the file comes through; the maintained parser reads it there, and only there.
      [path.join('src', 'audio', 'recordings.ts')]: /^music-metadata$/,
      // PostgreSQL's driver is the store's plumbing (docs/architecture.md, "The store port"), like better-sqlite3.
      [path.join('src', 'platform', 'store', 'postgres.ts')]: /^pg$/,
    },
  },
  { folder: 'api', allowedPackages: /^(node:.*|hono(\/.*)?|@hono\/.*|valibot|@valibot\/to-json-schema|rate-limiter-flexible)$/, allowedFolders: ['api', 'src'] },
  { folder: 'broker', allowedPackages: /^(node:.*|aedes.*|mqemitter.*|ioredis|ws|valibot|@valibot\/to-json-schema)$/, allowedFolders: ['broker', 'src', 'generated'] },
  { folder: 'notify', allowedPackages: /^(node:.*|nodemailer(\/.*)?|web-push)$/, allowedFolders: ['notify', 'src'] },
  // The AudioServer port's implementation (Icecast's admin API) and the icecast.xml writer.
  { folder: 'icecast', allowedPackages: /^node:.*$/, allowedFolders: ['icecast', 'src'] },
  // The operator CLI is an edge over src/ (store-level commands, and migrate-store's queries over any table through
  // the store's builder), the public HTTP API, and prints icecast.xml (icecast/).
  { folder: 'cli', allowedPackages: /^(node:.*|bcryptjs|kysely)$/, allowedFolders: ['cli', 'src', 'icecast'] },
  // The reference device speaks only the wire (docs/firmware.md): MQTT, HTTP for pairing, uqr for the pairing QR code.
  { folder: 'device', allowedPackages: /^(node:.*|mqtt|uqr)$/, allowedFolders: ['device'] },
  // The simulator plays firmware from outside: MQTT and HTTP only, nothing of the service's own code; its firmware is device/'s.
  { folder: 'simulator', allowedPackages: /^(node:.*|mqtt|aedes.*)$/, allowedFolders: ['simulator', 'device'] },
];

function sourceFiles(dir: string): string[] {
  const full = path.join(ROOT, dir);
  if (!fs.existsSync(full)) return [];
  return fs.readdirSync(full, { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.(ts|mjs|js)$/.test(f) && !f.endsWith('.d.ts'))
    .map((f) => path.join(dir, f));
}

function importsOf(file: string): string[] {
  const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
  const found = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+['"]([^'"]+)['"]/g), ...text.matchAll(/import\(\s*['"]([^'"]+)['"]\s*\)/g)];
  return found.map((m) => m[1]!);
}

function violations(rule: Rule): string[] {
  const out: string[] = [];
  for (const file of sourceFiles(rule.folder)) {
    if (rule.exempt?.includes(file)) continue;
    for (const spec of importsOf(file)) {
      if (spec.startsWith('.')) {
        const target = path.relative(ROOT, path.resolve(ROOT, path.dirname(file), spec)).split(path.sep)[0]!;
        if (!rule.allowedFolders.includes(target)) out.push(`${file} imports ${spec}`);
      } else if (!rule.allowedPackages.test(spec) && !rule.alsoAllowed?.[file]?.test(spec)) {
        out.push(`${file} imports package ${spec}`);
      }
    }
  }
  return out;
}

for (const rule of RULES) {
  test(`${rule.folder}/ imports only what the dependency rule allows`, () => {
    assert.ok(sourceFiles(rule.folder).length > 0, `${rule.folder}/ has source files`);
    assert.deepEqual(violations(rule), []);
  });
}

test('the rule checker itself catches a forbidden import', () => {
  const tmp = path.join(ROOT, 'src', '__arch_probe__.ts');
  fs.writeFileSync(tmp, "import { Hono } from 'hono';\nimport x from '../api/index.ts';\n");
  try {
    const found = violations(RULES[0]!);
    assert.ok(found.some((v) => v.includes('package hono')));
    assert.ok(found.some((v) => v.includes('../api/index.ts')));
  } finally {
    fs.rmSync(tmp);
  }
});

/** Each file of `folder` with the files of `folder` it imports (type-only imports too: they tie the files as tightly). */
function importGraph(folder: string): Map<string, string[]> {
  const files = new Set(sourceFiles(folder));
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets = importsOf(file).filter((s) => s.startsWith('.')).map((s) => path.relative(ROOT, path.resolve(ROOT, path.dirname(file), s)));
    graph.set(file, targets.filter((t) => files.has(t)));
  }
  return graph;
}

/** Every import cycle of `folder`, each as the path that closes it (a.ts -> b.ts -> a.ts). */
function importCycles(folder: string): string[] {
  const graph = importGraph(folder);
  const done = new Set<string>();
  const cycles: string[] = [];
  const visit = (file: string, trail: string[]): void => {
    const at = trail.indexOf(file);
    if (at >= 0) return void cycles.push([...trail.slice(at), file].join(' -> '));
    if (done.has(file)) return;
    for (const next of graph.get(file) ?? []) visit(next, [...trail, file]);
    done.add(file);
  };
  for (const file of [...graph.keys()].sort()) visit(file, []);
  return cycles;
}

// A cycle makes two files one unit (neither can be read, tested or moved alone) and leaves which one
// loads first to the order of imports elsewhere. console/ is not held to this yet.
for (const folder of ['broker', 'src', 'api']) {
  test(`${folder}/ has no import cycle`, () => {
    assert.ok(importGraph(folder).size > 0, `${folder}/ has source files`);
    assert.deepEqual(importCycles(folder), []);
  });
}

test('the cycle checker catches two files that import each other', () => {
  const a = path.join(ROOT, 'broker', 'hooks', '__cycle_probe_a__.ts');
  const b = path.join(ROOT, 'broker', 'hooks', '__cycle_probe_b__.ts');
  fs.writeFileSync(a, "import type { B } from './__cycle_probe_b__.ts';\nexport type A = B;\n");
  fs.writeFileSync(b, "import type { A } from './__cycle_probe_a__.ts';\nexport type B = A | 1;\n");
  try {
    assert.ok(importCycles('broker').some((c) => c.includes('__cycle_probe_a__') && c.includes('__cycle_probe_b__')));
  } finally {
    fs.rmSync(a);
    fs.rmSync(b);
  }
});

/**
 * Inside src/, domains depend one way (ARCHITECTURE: plumbing <- people <- mosques <- devices <- audio <- broadcasts /
 * schedule <- firmware): firmware updates wait on both the schedule and the broadcasts (docs/architecture.md).
 */
const DOMAIN_ORDER = ['platform', 'people', 'mosques', 'devices', 'audio', 'broadcasts', 'schedule', 'firmware'];
const SIBLINGS = new Set(['broadcasts', 'schedule']);

function domainViolations(): string[] {
  const out: string[] = [];
  for (const file of sourceFiles('src')) {
    const parts = file.split(path.sep);
    if (parts.length < 3) continue; // src/main.ts and src/service.ts are the wiring
    const from = DOMAIN_ORDER.indexOf(parts[1]!);
    if (from < 0) { out.push(`${file} is in no known domain folder`); continue; }
    for (const spec of importsOf(file).filter((s) => s.startsWith('.'))) {
      const target = path.relative(path.join(ROOT, 'src'), path.resolve(ROOT, path.dirname(file), spec)).split(path.sep);
      if (target.length < 2) { out.push(`${file} imports the wiring ${spec}`); continue; }
      const to = DOMAIN_ORDER.indexOf(target[0]!);
      // schedule and broadcasts are siblings: neither may import the other.
      const siblings = SIBLINGS.has(parts[1]!) && SIBLINGS.has(target[0]!) && from !== to;
      if (to > from || siblings) out.push(`${file} imports ${spec}`);
    }
  }
  return out;
}

test('src/ domains import only plumbing and earlier domains', () => {
  assert.ok(sourceFiles('src').some((f) => f.startsWith(path.join('src', 'devices'))), 'src/devices holds files');
  assert.deepEqual(domainViolations(), []);
});

test('the domain checker catches an earlier domain importing a later one', () => {
  const tmp = path.join(ROOT, 'src', 'people', '__arch_probe__.ts');
  fs.writeFileSync(tmp, "import type { DeviceRow } from '../devices/devices.ts';\n");
  try {
    assert.ok(domainViolations().some((v) => v.includes('__arch_probe__')));
  } finally {
    fs.rmSync(tmp);
  }
});

test('no folder holds more than 12 files', () => {
  const crowded: string[] = [];
  const walk = (dir: string): void => {
    const entries = fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true });
    const files = entries.filter((e) => e.isFile());
    if (files.length > 12) crowded.push(`${dir}: ${files.length}`);
    for (const e of entries) {
      if (e.isDirectory() && !['node_modules', '.git', '.tmp', 'data', 'dist'].includes(e.name)) walk(path.join(dir, e.name));
    }
  };
  for (const top of ['src', 'api', 'broker', 'notify', 'icecast', 'cli', 'device', 'simulator', 'bench', 'docs', 'test']) {
    if (fs.existsSync(path.join(ROOT, top))) walk(top);
  }
  assert.deepEqual(crowded, []);
});

// What only some services use loads when first used, not with the process (idle memory).
// music-metadata: read only when a mosque uploads its recorded azaan.
const LOADED_WHEN_USED = /^(ioredis|web-push|nodemailer|music-metadata)(\/.*)?$/;

test('ioredis, web-push, nodemailer and music-metadata are never imported at start: only as types or with import() when first used', () => {
  const eager: string[] = [];
  for (const folder of ['src', 'api', 'broker', 'notify', 'icecast']) {
    for (const file of sourceFiles(folder)) {
      const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
      for (const m of text.matchAll(/(?:^|\n)\s*import\s+(?!type\s)[^;]*?from\s+['"]([^'"]+)['"]/g)) {
        if (LOADED_WHEN_USED.test(m[1]!)) eager.push(`${file} imports ${m[1]}`);
      }
    }
  }
  assert.deepEqual(eager, []);
});

// docs/operator.md, "Several hosts": the pg driver loads only with DATABASE_URL. Its one importer,
// src/platform/store/postgres.ts, is reached only by import() (a type-only import loads nothing).
test('src/platform/store/postgres.ts (and with it pg) is imported only with import(), never at start', () => {
  const eager: string[] = [];
  for (const folder of ['src', 'api', 'broker', 'notify', 'icecast', 'cli']) {
    for (const file of sourceFiles(folder)) {
      const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
      for (const m of text.matchAll(/(?:^|\n)\s*import\s+(?!type\s)[^;]*?from\s+['"]([^'"]+)['"]/g)) {
        if (/(^|\/)store\/postgres\.ts$|^\.\/postgres\.ts$/.test(m[1]!) || (m[1] === 'pg' && file !== path.join('src', 'platform', 'store', 'postgres.ts'))) {
          eager.push(`${file} imports ${m[1]}`);
        }
      }
    }
  }
  assert.deepEqual(eager, []);
});

// The payload checks are ajv's generated code, so the service never loads ajv (~90 ms and
// ~13 MiB of RSS at start); the generated module itself loads nothing.
test('the service never loads ajv: the compiled payload checks are generated code that imports nothing', () => {
  const loads: string[] = [];
  for (const folder of ['src', 'api', 'broker', 'notify']) {
    for (const file of sourceFiles(folder)) {
      const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
      if (/(?:from\s+|import\(\s*|require\(\s*)['"]ajv(?:[/'"])/.test(text)) loads.push(file);
    }
  }
  assert.deepEqual(loads, []);
  assert.deepEqual(importsOf(path.join('generated', 'payload-checks.ts')), []);
  assert.doesNotMatch(fs.readFileSync(path.join(ROOT, 'generated', 'payload-checks.ts'), 'utf8'), /\brequire\(|\bimport\(/);
});

/**
 * One owner per table (docs/architecture.md, "One owner per table"): each table is named in SQL only inside its owning domain's folder;
 * any other domain asks that domain's store. A new table needs a row here, so its owner is a decision.
 */
const TABLE_OWNERS: Record<string, string> = {
  data_steps: 'src/platform', change_log: 'src/platform', duty_runs: 'src/platform',
  users: 'src/people', login_codes: 'src/people', reset_tokens: 'src/people', superadmin_sessions: 'src/people',
  superadmin_decoy_sessions: 'src/people', revoked_tokens: 'src/people', wrong_guesses: 'src/people',
  signup_notices: 'src/people', console_sessions: 'src/people',
  mosques: 'src/mosques', mosque_admins: 'src/mosques', memberships: 'src/mosques', membership_removals: 'src/mosques',
  invites: 'src/mosques', activity: 'src/mosques', address_grants: 'src/mosques',
  devices: 'src/devices', device_pairings: 'src/devices', mosque_device_events: 'src/devices', device_logs: 'src/devices', device_timeline_orphans: 'src/devices',
  audio_on_air: 'src/audio', audio_listener_sessions: 'src/audio', audio_refusals: 'src/audio', recordings: 'src/audio',
  broadcasts: 'src/broadcasts', push_subscriptions: 'src/broadcasts', push_outbox: 'src/broadcasts',
  schedule_timetables: 'src/schedule', schedule_slots: 'src/schedule', schedule_alerts: 'src/schedule',
  firmware_images: 'src/firmware', firmware_rollouts: 'src/firmware', firmware_offers: 'src/firmware',
};
// In SQL text, or in the store's query builder (src/platform/store): selectFrom('t'), insertInto('t'), a join...
const SQL_NAMING = (table: string) => new RegExp(
  `\\b(?:(?:FROM|JOIN|INTO|UPDATE|TABLE)\\s+${table}\\b|(?:selectFrom|insertInto|replaceInto|updateTable|deleteFrom|mergeInto|(?:inner|left|right|full|cross)Join)\\(\\s*['"\`]${table}\\b)`, 'i');

/** Where a table is named in SQL outside its owner's folder, in the given source files. */
function tablesOutOfPlace(files: Array<{ file: string; text: string }>): string[] {
  const found: string[] = [];
  for (const { file, text } of files) {
    for (const [table, owner] of Object.entries(TABLE_OWNERS)) {
      if (!file.startsWith(`${owner}/`) && SQL_NAMING(table).test(text)) found.push(`${file} names ${table} (owned by ${owner})`);
    }
  }
  return found;
}

test('every table of the schema has an owner, and is named in SQL only inside its owner\'s folder', async () => {
  const { openDatabase, migrate } = await import('../src/platform/db.ts');
  const db = openDatabase(':memory:');
  migrate(db);
  const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as Array<{ name: string }>).map((r) => r.name);
  db.close();
  assert.deepEqual(tables.filter((t) => !(t in TABLE_OWNERS)), [], 'a table without an owner in TABLE_OWNERS');
  const files = ['src', 'api', 'broker', 'notify', 'icecast', 'cli', 'device', 'simulator'].flatMap((dir) => sourceFiles(dir))
    .map((file) => ({ file: file.split(path.sep).join('/'), text: fs.readFileSync(path.join(ROOT, file), 'utf8') }));
  assert.ok(files.length > 100, `read ${files.length} source files`);
  assert.deepEqual(tablesOutOfPlace(files), []);
});

test('the table-owner check catches a later domain reading an earlier one\'s table', () => {
  assert.deepEqual(tablesOutOfPlace([
    { file: 'src/broadcasts/fanout.ts', text: "db.prepare(`SELECT user_id FROM memberships WHERE mosque_id = ?`)" },
    { file: 'src/mosques/memberships.ts', text: "db.prepare('SELECT * FROM memberships WHERE id = ?')" },
    { file: 'src/audio/audio.ts', text: "store.selectFrom('devices').select('id')" },
    { file: 'src/schedule/slots.ts', text: "q.innerJoin(\n 'mosques', 'mosques.id', 'schedule_slots.mosque_id')" },
    { file: 'src/devices/devices.ts', text: "store.updateTable('devices').set({ status })" },
  ]), [
    'src/broadcasts/fanout.ts names memberships (owned by src/mosques)',
    'src/audio/audio.ts names devices (owned by src/devices)',
    'src/schedule/slots.ts names mosques (owned by src/mosques)',
  ]);
});

/**
 * Repositories speak through the store port (docs/architecture.md, "The store port"): better-sqlite3's own
 * statements and transactions are the SQLite plumbing's alone (opening, migrating, checkpointing, the disk
 * probe), and the start-up data step that rewrites stored identifiers in the migration's transaction.
 */
const RAW_SQLITE_ALLOWED = /^(src\/platform\/(db|faults)\.ts|src\/platform\/store\/.*|src\/people\/addresses\/identifier-migration\.ts|cli\/.*)$/;
function rawSqliteUses(files: Array<{ file: string; text: string }>): string[] {
  return files.filter((f) => !RAW_SQLITE_ALLOWED.test(f.file) && /\b(db|database)\.(prepare|exec|transaction|pragma)\(/.test(f.text)).map((f) => f.file);
}

test('outside the SQLite plumbing no file opens a statement or a transaction of its own: every query goes through the store', () => {
  const files = ['src', 'api', 'broker'].flatMap((dir) => sourceFiles(dir))
    .map((file) => ({ file: file.split(path.sep).join('/'), text: fs.readFileSync(path.join(ROOT, file), 'utf8') }));
  assert.ok(files.length > 100, `read ${files.length} source files`);
  assert.deepEqual(rawSqliteUses(files), []);
  assert.deepEqual(rawSqliteUses([
    { file: 'src/devices/devices.ts', text: "const byId = db.prepare('SELECT * FROM devices WHERE id = ?');" },
    { file: 'src/platform/db.ts', text: "db.exec('BEGIN')" },
    { file: 'api/x.ts', text: "store.selectFrom('devices')" },
  ]), ['src/devices/devices.ts'], 'the check itself catches a raw statement');
});

test('the composition root only constructs and connects: no value of src/service.ts is set after it was made', () => {
  const text = fs.readFileSync(path.join(ROOT, 'src', 'service.ts'), 'utf8');
  // A `let` (or `var`) is a reference resolved later: a mutable hook object, a port or an origin set once the
  // process listens. Each part asks the part that knows (a server where it listens) instead.
  const mutable = text.split('\n').map((line, i) => ({ line: line.trim(), n: i + 1 })).filter(({ line }) => /^(let|var)\s/.test(line));
  assert.deepEqual(mutable.map(({ line, n }) => `${n}: ${line}`), []);
});

// Comments, test names and docs cite what a reader of the repository can open: a docs/ section, SECURITY.md, an
// RFC or the MQTT spec, or the test that holds a rule. Never a private document's section ("contract N"), the
// private description ("seed"), or a private tracker ("issue N"). A random seed (FUZZ_SEED, a PRNG's seed) is
// a word like any other: only the forms that name the description are caught.
// The forms are listed, with examples, in the checker's own test below (this file must not cite them itself).
const PRIVATE_CITATIONS: RegExp[] = [
  /\bcontracts?\s*[-§#]?\s*\d/i, // a private section number, alone, as a range or a list
  /\bissues?\s*#?\d/i, // a private tracker's number
  /\bseed\s+rules?\b/i, // a rule of the description
  /\bseed(?:'s)?\s+["“]/i, // a section of it, by its quoted name
  /\bthe\s+seed's\b/i, // something of it
  /\(seed\)/i, // the description as a bare citation
  /\(seed[,:;]\s*(?:rule\b|["“]|[a-z]+\s+[a-z])/i, // a citation followed by a rule, a name or words (never a parameter's type)
  /\bseed\s+(?:table|fields|description|document|says|requires|wants)\b/i, // a part of it, or what it says
  /(?:\/\/|\/\*|^\s*\*|--|#)\s*seed[:;,]\s/im, // a comment that opens by citing it
];

/** The lines of `text` that cite a private document, as `line: text`. */
function privateCitations(text: string): string[] {
  const found: string[] = [];
  text.split('\n').forEach((line, i) => {
    if (PRIVATE_CITATIONS.some((re) => re.test(line))) found.push(`${i + 1}: ${line.trim().slice(0, 160)}`);
  });
  return found;
}

/**
 * Every source, test and doc file the repository tracks, as paths from ROOT. Left out: what git ignores (node_modules,
 * data/ but its migrations, .tmp/, logs, the walk-through's desktop shots), images, and what `npm run docs` generates
 * from sources that are checked (docs/openapi.json from api/openapi.ts, docs/asyncapi.json).
 */
function citingFiles(): string[] {
  const SKIP_DIRS = new Set(['node_modules', '.git', '.tmp', '.minaret', 'generated']);
  const SKIP_FILES = new Set([path.join('docs', 'openapi.json'), path.join('docs', 'asyncapi.json')]);
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      const rel = path.join(dir, e.name);
      if (e.isDirectory()) {
        if (SKIP_DIRS.has(e.name) || rel === path.join('docs', 'console', 'walkthrough', 'desktop')) continue;
        if (rel === 'data') { walk(path.join('data', 'migrations')); continue; }
        walk(rel);
      } else if (e.isFile() && !/\.(png|jpe?g|webp|gif|ico|svg|mp3|ogg|opus|db|sqlite|log)$/i.test(e.name) && !SKIP_FILES.has(rel)) {
        out.push(rel);
      }
    }
  };
  walk('');
  return out;
}

test('comments, test names and docs cite no private contract section, seed or issue number', () => {
  const files = citingFiles();
  for (const must of ['README.md', 'SECURITY.md', path.join('src', 'service.ts'), path.join('docs', 'api.md'), path.join('data', 'migrations', '001_people_auth.sql')]) {
    assert.ok(files.includes(must), `${must} is checked`);
  }
  const cited = files.flatMap((file) => privateCitations(fs.readFileSync(path.join(ROOT, file), 'utf8')).map((hit) => `${file}:${hit}`));
  assert.deepEqual(cited, [], 'cite a docs/ section, SECURITY.md, an RFC or the test that holds the rule instead');
});

test('the citation checker catches each private form and leaves a random seed alone', () => {
  // Written in pieces, so that this file does not cite what it forbids.
  const [C, I, S] = ['con' + 'tract', 'is' + 'sue', 'se' + 'ed'];
  const caught = [
    `/** ${C} 7: the device registry. */`, `// ${C.toUpperCase()} 5 as one table`, `Response shapes (${C} 2-7)`,
    `// ${I} 13: the 201 goes now`, `(${I} 9, item 5)`, `see ${I} #12`,
    `(${S} rule 2)`, `// ${S[0]!.toUpperCase()}${S.slice(1)} "Heartbeat cadence": per-kind minimum.`, `the ${S}'s "Membership status" table`,
    `-- The ${S}'s mosque_device_events timeline`, `never failures (${S}). */`, `(${S}, rule 6)`, `(${S}, "Response headers")`,
    `summary: 'Delete a mosque (${S}: the coarser admin check)'`, `status shape (${S} fields and types)`, `Self-service join (${S} table)`,
    `    // ${S[0]!.toUpperCase()}${S.slice(1)}: ONLINE -> CONFIG_ERROR when a config cannot be applied`,
  ];
  for (const line of caught) assert.equal(privateCitations(line).length, 1, `caught: ${line}`);
  const allowed = [
    ` *   FUZZ_${S.toUpperCase()}=<n>        the run's ${S} (default: a fixed one)`, ` * derived from (${S}, iteration), so one can be replayed alone.`,
    `  ${S}: number;`, `export function createRng(${S}: number): Rng {`, `  let a = ${S} >>> 0;`, `function random(${S}: number) {`,
    'const rng = iterationRng(settings.' + S + ', i);', `failure prints the ${S} and iteration to replay it`,
    'assert.deepEqual(errors, [], `error-level log lines after ' + S + ' ${settings.' + S + '}`);',
    `the contract's error body`, `a mosque's issues are its own`, `[MQTT-3.3.5-2] allows either`, `RFC 9110 §14.2`,
  ];
  for (const line of allowed) assert.deepEqual(privateCitations(line), [], `allowed: ${line}`);
});
