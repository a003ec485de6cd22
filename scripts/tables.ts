/**
 * Writes generated/tables.ts (with `npm run docs`): the row type of every table, read from the schema the
 * numbered migrations build (data/migrations), for the store's typed query builder (src/platform/store). The
 * migrations are the schema of record: test/platform/store.test.ts fails when the committed file differs.
 * Declared types map as SQLite's affinity rules read them (sqlite.org/datatype3.html, 3.1): INT -> number,
 * TEXT/CHAR/CLOB -> string, BLOB -> Buffer, anything else -> number. A column is nullable unless NOT NULL or
 * part of the primary key (SQLite lets a TEXT key hold NULL; Minaret never writes one, PostgreSQL forbids it);
 * a column with a default, or an INTEGER PRIMARY KEY, may be left out of an insert.
 */
import { migrate, openDatabase } from '../src/platform/db.ts';
import { projectPath } from '../src/platform/config.ts';

export const TABLES_FILE = projectPath('generated/tables.ts');

interface Column { name: string; type: string; notnull: number; dflt_value: unknown; pk: number }

function tsType(declared: string): string {
  const t = declared.toUpperCase();
  if (t.includes('INT')) return 'number';
  if (/CHAR|CLOB|TEXT/.test(t)) return 'string';
  if (t.includes('BLOB') || t === '') return 'Buffer';
  return 'number';
}

const pascal = (name: string) => name.split('_').map((w) => w[0]!.toUpperCase() + w.slice(1)).join('');

export function generatedTables(): string {
  const db = openDatabase(':memory:');
  migrate(db);
  const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as Array<{ name: string }>).map((r) => r.name);
  const out: string[] = [
    '// Written by `npm run docs` (scripts/tables.ts) from the migrated schema; do not edit.',
    "import type { Generated } from 'kysely';",
    '',
  ];
  for (const table of tables) {
    const columns = db.prepare(`SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?) ORDER BY cid`).all(table) as Column[];
    const pks = columns.filter((c) => c.pk > 0);
    out.push(`export interface ${pascal(table)}Table {`);
    for (const c of columns) {
      const rowid = pks.length === 1 && c.pk === 1 && c.type.toUpperCase() === 'INTEGER';
      let type = tsType(c.type);
      if (!c.notnull && c.pk === 0) type += ' | null';
      if (rowid || c.dflt_value !== null) type = `Generated<${type}>`;
      out.push(`  ${c.name}: ${type};`);
    }
    out.push('}', '');
  }
  out.push('/** Every table, by name: the type the store (src/platform/store) is built over. */', 'export interface Tables {');
  for (const table of tables) out.push(`  ${table}: ${pascal(table)}Table;`);
  out.push('}', '');
  db.close();
  return out.join('\n');
}
