import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { Hono } from 'hono';
import type { AppEnv } from '../context.ts';
import { ApiError } from '../errors.ts';

/**
 * The browser console, served by this process at `/` (docs/console.md). Its files are plain ES modules
 * committed under console/: no bundler, no build step, nothing to install on a Raspberry Pi. At start
 * every file is read into memory and the folder gets one content hash; assets are served under
 * `/c/<hash>/...` with a year of immutable caching (relative imports inherit the prefix, so one hash covers
 * the module graph), and index.html, which names the hash, is never cached. The console's client routes
 * (`/join/<code>`, `/mosques/<id>`, ...) answer index.html so they survive a reload; other paths keep the 404.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

const PAGE_HEADERS = {
  'Content-Security-Policy': CONSOLE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
};

/** Every file of the folder (recursively), keyed by its `/`-joined relative path. */
function readTree(root: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (TYPES[path.extname(entry.name)]) files.set(path.relative(root, full).split(path.sep).join('/'), fs.readFileSync(full));
    }
  };
  walk(root);
  return files;
}

/**
 * The console's client routes (console/app.js ROUTES): these answer index.html so a reload or a shared link
 * works; any other unknown path keeps the contract's JSON 404.
 */
const CLIENT_ROUTES = /^\/(?:|signin|signup|superadmin|admin|join\/[A-Za-z0-9_-]+|mosques\/[^/]+(?:\/(?:devices|team|activity|print))?|devices\/[^/]+)\/?$/;

/**
 * npm packages the console imports, served from node_modules under the same hash (no copy in the repo,
 * no CDN): `vendor/uqr.mjs` draws the join link's QR code (issue 12).
 */
const VENDORED = { 'vendor/uqr.mjs': 'uqr' };

/** The console's own paths (Hono syntax): pages and files, not API routes (docs/console.md, not OpenAPI). */
export const CONSOLE_PATHS = new Set(['/c/:build/*', '/*', '*']);

/** `publicUrl`: PUBLIC_URL's origin, handed to the page so a printed join link names it, not a LAN address. */
export function consoleRoutes(dir: string, publicUrl: string | null = null) {
  const app = new Hono<AppEnv>();
  const files = readTree(dir);
  const require = createRequire(import.meta.url);
  for (const [name, pkg] of Object.entries(VENDORED)) files.set(name, fs.readFileSync(require.resolve(pkg).replace(/\.cjs$/, '.mjs')));
  const hash = crypto.createHash('sha256');
  for (const [name, body] of [...files].sort(([a], [b]) => a.localeCompare(b))) hash.update(name).update(body);
  const build = hash.digest('hex').slice(0, 12);
  const indexSource = files.get('index.html');
  if (!indexSource) throw new Error(`console: ${dir}/index.html is missing`);
  const index = indexSource.toString('utf8').replaceAll('__BUILD__', `/c/${build}`)
    .replace('__PUBLIC_URL__', (publicUrl ?? '').replace(/[&"<>]/g, (ch) => `&#${ch.charCodeAt(0)};`));

  app.get('/c/:build/*', (c) => {
    const name = c.req.path.slice(`/c/${c.req.param('build')}/`.length);
    const body = files.get(name);
    if (!body || name === 'index.html') throw new ApiError('not_found');
    // An old hash still serves today's file (a tab open across an upgrade) but is not cached for long.
    const current = c.req.param('build') === build;
    return c.body(new Uint8Array(body), 200, {
      ...PAGE_HEADERS,
      'Content-Type': TYPES[path.extname(name)]!,
      'Cache-Control': current ? 'public, max-age=31536000, immutable' : 'no-cache',
    });
  });
  app.get('*', (c, next) => {
    if (!CLIENT_ROUTES.test(c.req.path)) return next();
    return c.html(index, 200, { ...PAGE_HEADERS, 'Cache-Control': 'no-cache' });
  });
  return { app, build };
}
