import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** ARCHITECTURE.md, "Dependency rule", read from the import statements of every source file. */
const ROOT = fileURLToPath(new URL('..', import.meta.url));

type Rule = { folder: string; allowedPackages: RegExp; allowedFolders: string[]; exempt?: string[] };

const RULES: Rule[] = [
  {
    folder: 'src',
    allowedPackages: /^(node:.*|better-sqlite3|jose|bcryptjs|valibot)$/,
    allowedFolders: ['src'],
    // The composition root and the process edge wire every part together.
    exempt: ['src/main.ts', 'src/service.ts'],
  },
  { folder: 'api', allowedPackages: /^(node:.*|hono(\/.*)?|@hono\/.*|valibot|@valibot\/to-json-schema|rate-limiter-flexible)$/, allowedFolders: ['api', 'src'] },
  { folder: 'broker', allowedPackages: /^(node:.*|aedes.*|mqemitter.*|ioredis|ws|valibot)$/, allowedFolders: ['broker', 'src'] },
  { folder: 'notify', allowedPackages: /^(node:.*|nodemailer(\/.*)?|web-push)$/, allowedFolders: ['notify', 'src'] },
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
      } else if (!rule.allowedPackages.test(spec)) {
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
