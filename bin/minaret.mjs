#!/usr/bin/env node
// The `minaret` command (package.json "bin"): the operator CLI as the install compiled it to dist/ (`npm run
// build`, docs/architecture.md, "Running"), in this same node process, so exit codes and signals are the CLI's own
// (no npm, no shell between). No TypeScript loader here: tsx is a development tool, absent from a production install.
import fs from 'node:fs';

const cli = new URL('../dist/cli/index.js', import.meta.url);
if (!fs.existsSync(cli)) {
  process.stderr.write('minaret: dist/cli/index.js is missing: run `npm run build` (npm install and npm ci run it)\n');
  process.exit(1);
}
await import(cli.href);
