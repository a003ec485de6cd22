/**
 * `npm run docs`: writes the machine-readable contract into docs/ from the code that enforces it, so a
 * clone carries it, the compiled payload checks into generated/payload-checks.ts (scripts/payload-checks.ts) and the
 * tables' row types into generated/tables.ts (scripts/tables.ts).
 * test/api/openapi.test.ts, test/broker/asyncapi.test.ts and test/broker/payload-checks.test.ts fail when the
 * committed files differ from what the code generates.
 */
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildOpenApi } from '../api/openapi.ts';
import { buildAsyncApi } from '../broker/asyncapi.ts';
import { PAYLOAD_CHECKS_FILE, generatedPayloadChecks } from './payload-checks.ts';
import { TABLES_FILE, generatedTables } from './tables.ts';
import { projectPath } from '../src/platform/config.ts';

export const DOCS_DIR = projectPath('docs');

/** File name in docs/ -> its content, exactly as committed. */
export function generatedDocs(): Record<string, string> {
  const text = (doc: unknown) => `${JSON.stringify(doc, null, 2)}\n`;
  return { 'openapi.json': text(buildOpenApi()), 'asyncapi.json': text(buildAsyncApi()) };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const [name, content] of Object.entries(generatedDocs())) {
    fs.writeFileSync(path.join(DOCS_DIR, name), content);
    console.log(`wrote docs/${name} (${content.length} bytes)`);
  }
  const checks = generatedPayloadChecks();
  fs.writeFileSync(PAYLOAD_CHECKS_FILE, checks);
  console.log(`wrote generated/payload-checks.ts (${checks.length} bytes)`);
  const tables = generatedTables();
  fs.writeFileSync(TABLES_FILE, tables);
  console.log(`wrote generated/tables.ts (${tables.length} bytes)`);
}
