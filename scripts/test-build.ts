import fs from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';

/**
 * The test run's JavaScript: every TypeScript file of the project transpiled once (types stripped, nothing
 * bundled, each file where it was under `outDir`), so that each test file's process loads plain JavaScript.
 * Loading a test file through tsx cost its process ~1.2 s more CPU than the same modules as JavaScript
 * (measured here: 1.5-1.7 s against 0.5-0.6 s), about a fifth of the whole run; this step costs about a
 * second for all of them. Types are checked by `tsc --noEmit` beside the tests, as before.
 *
 * esbuild is what tsx itself transpiles with, with the project's tsconfig.json, so the code that runs is the
 * code the tests ran under tsx. Relative imports name `.ts` files (allowImportingTsExtensions); they are
 * rewritten to `.js`, as `tsc` does for dist/ (rewriteRelativeImportExtensions).
 */
/** Every folder of the project that holds TypeScript (not what is built or installed). */
export const FOLDERS = ['api', 'bench', 'broker', 'cli', 'device', 'generated', 'icecast', 'notify', 'scripts', 'simulator', 'src', 'test'];

export async function transpileProject(root: string, outDir: string): Promise<number> {
  // A new folder of TypeScript would otherwise be missing from the run, and its importers fail to load.
  const unlisted = fs.readdirSync(root, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith('.') && !['node_modules', 'dist', ...FOLDERS].includes(e.name))
    .filter((e) => tsFiles(path.join(root, e.name)).length > 0);
  if (unlisted.length) throw new Error(`scripts/test-build.ts FOLDERS lacks ${unlisted.map((e) => e.name).join(', ')}, which hold TypeScript`);
  const entryPoints = FOLDERS.flatMap((folder) => tsFiles(path.join(root, folder)));
  const result = await build({
    entryPoints, outdir: outDir, outbase: root, bundle: false, format: 'esm', platform: 'node', target: 'node20',
    tsconfig: path.join(root, 'tsconfig.json'), write: false, logLevel: 'silent',
  });
  // Written only where it changed, and by a rename: a run started inside a test (test/runner.test.ts) rewrites
  // what the outer run's files are loading, which must never read half a file.
  for (const file of result.outputFiles) {
    const text = rewriteImports(file.text);
    if (fs.existsSync(file.path) && fs.readFileSync(file.path, 'utf8') === text) continue;
    fs.mkdirSync(path.dirname(file.path), { recursive: true });
    const partial = `${file.path}.${process.pid}.partial`;
    fs.writeFileSync(partial, text);
    fs.renameSync(partial, file.path);
  }
  return entryPoints.length;
}

/**
 * `import … from "./x.ts"` and `export … from` at the start of a line, `import "./x.ts"`, `import("./x.ts")`: as
 * esbuild prints them (double quotes); relative specifiers only. Code a test holds in a string (in single quotes
 * inside esbuild's double ones) is left as written.
 */
export function rewriteImports(text: string): string {
  return text
    .replace(/^((?:import|export)\b[^;"]*?(?:\sfrom\s*)?")(\.{1,2}\/[^"]*?)\.ts(";)/gm, '$1$2.js$3')
    .replace(/(\bimport\(")(\.{1,2}\/[^"]*?)\.ts("\))/g, '$1$2.js$3');
}

function tsFiles(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.d.ts'))
    .map((e) => path.join(e.parentPath, e.name));
}
