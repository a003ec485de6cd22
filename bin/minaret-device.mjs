#!/usr/bin/env node
// The `minaret-device` command (package.json "bin"): the reference device for Linux boards (docs/devices/raspberry-pi.md) as the
// install compiled it to dist/ (`npm run build`), in this same node process, so exit codes and signals (SIGTERM
// from systemd: a graceful OFFLINE) are the device's own. No TypeScript loader: tsx is absent from a production install.
import fs from 'node:fs';

const device = new URL('../dist/device/index.js', import.meta.url);
if (!fs.existsSync(device)) {
  process.stderr.write('minaret-device: dist/device/index.js is missing: run `npm run build` (npm install and npm ci run it)\n');
  process.exit(1);
}
await import(device.href);
