#!/usr/bin/env node
// The `minaret` command (package.json "bin"): the operator CLI of cli/index.ts in this same node process,
// with tsx's loader registered here, so exit codes and signals are the CLI's own (no npm, no shell between).
import { register } from 'tsx/esm/api';

register();
await import('../cli/index.ts');
