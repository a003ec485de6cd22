import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import zlib from 'node:zlib';
import { Hono } from 'hono';
import type { AppContext, AppEnv } from '../context.ts';
import { ApiError } from '../errors.ts';

/**
 * The browser console, served by this process at `/` (docs/console.md). Its files are plain ES modules
 * committed under console/: no bundler, no build step, nothing to install on a Raspberry Pi. At start
 * every file is read into memory and the folder gets one content hash; assets are served under
 * `/c/<hash>/...` with a year of immutable caching (relative imports inherit the prefix, so one hash covers
 * the module graph), and index.html, which names the hash, is never cached. The console's client routes
 * (`/join/<code>`, `/mosques/<id>`, ...) answer index.html so they survive a reload; other paths keep the 404.
 * Text files are compressed once, all of them at start (brotli and gzip), and chosen by
 * Accept-Encoding with `Vary`: on a phone's slow link the bytes are the first-load cost (bench/RESULTS.md,
 * "Console first load").
 */
/** The page's policy; `mediaOrigin` is the audio server members listen to in the page (ICECAST_URL), if any. */
export const consoleCsp = (mediaOrigin: string | null) => [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "manifest-src 'self'",
  `media-src 'self'${mediaOrigin ? ` ${mediaOrigin}` : ''}`,
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');
export const CONSOLE_CSP = consoleCsp(null);

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  // The web app manifest (W3C Web Application Manifest): the console installs as an app on a phone's home screen.
  '.webmanifest': 'application/manifest+json',
};

const BASE_PAGE_HEADERS = {
  'Content-Security-Policy': CONSOLE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
};

/** One file as sent: the raw bytes and, where they are smaller, its brotli and gzip forms. */
interface Encoded {
  raw: Buffer;
  br: Buffer | null;
  gzip: Buffer | null;
}

/** PNGs are compressed already; everything else of the console is text. */
const COMPRESSIBLE = new Set(['.html', '.js', '.mjs', '.css', '.json', '.svg']);

/**
 * The encoded forms already made in this process, by file name and content hash. A process runs one service,
 * so this changes nothing for it; a process that starts many services (the test suite starts one per test,
 * about a thousand) compresses each file once instead of once per start, where brotli at quality 11 was a
 * third of a second of CPU each time. The content hash keeps a changed file from being served stale.
 */
const encodedBefore = new Map<string, Encoded>();

/** Once per file, at start: 0.1-0.2 s for the whole console, before the service listens. */
function compress(name: string, raw: Buffer): Encoded {
  if (!COMPRESSIBLE.has(path.extname(name))) return { raw, br: null, gzip: null };
  const key = `${name}\0${crypto.createHash('sha256').update(raw).digest('hex')}`;
  const before = encodedBefore.get(key);
  if (before) return before;
  const encoded = compressNow(raw);
  encodedBefore.set(key, encoded);
  return encoded;
}

function compressNow(raw: Buffer): Encoded {
  const br = zlib.brotliCompressSync(raw, {
    params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 11, [zlib.constants.BROTLI_PARAM_MODE]: zlib.constants.BROTLI_MODE_TEXT, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: raw.length },
  });
  const gzip = zlib.gzipSync(raw, { level: 9 });
  return { raw, br: br.length < raw.length ? br : null, gzip: gzip.length < raw.length ? gzip : null };
}

/**
 * Every file's encoded forms, made at start and kept. Made on the console's first request instead, the
 * service idled ~3 MiB lighter (glibc keeps brotli's freed working memory), but that request would stall the
 * event loop, devices' packets included, for 0.1-0.2 s: a stall on a live service costs more than 3 MiB, and
 * the idle goal holds without it (bench/RESULTS.md, "Idle memory"). Not on libuv's thread pool either: each
 * pool thread kept a malloc arena of brotli's freed memory, 11-17 MiB more.
 */
function encodeAll(files: Map<string, Buffer>): Map<string, Encoded> {
  return new Map([...files].map(([name, raw]) => [name, compress(name, raw)]));
}

/** The codings the client accepts (RFC 9110 12.5.3): a name with `q=0` is refused, `*` stands for any other. */
export function acceptedCodings(header: string | undefined): { br: boolean; gzip: boolean } {
  const q = new Map<string, number>();
  for (const part of (header ?? '').toLowerCase().split(',')) {
    const [name, ...params] = part.trim().split(';');
    if (!name) continue;
    const weight = params.map((p) => /^\s*q=([0-9.]+)\s*$/.exec(p)?.[1]).find((v) => v !== undefined);
    q.set(name.trim(), weight === undefined ? 1 : Number(weight));
  }
  const ok = (coding: string) => (q.get(coding) ?? q.get('*') ?? 0) > 0;
  return { br: ok('br'), gzip: ok('gzip') || ok('x-gzip') };
}

/** The body and headers for one file: brotli, else gzip, else the raw bytes; `Vary` whenever a choice exists. */
function encode(file: Encoded, acceptEncoding: string | undefined): { body: Buffer; headers: Record<string, string> } {
  if (!file.br && !file.gzip) return { body: file.raw, headers: {} };
  const accepts = acceptedCodings(acceptEncoding);
  const vary = { Vary: 'Accept-Encoding' };
  if (file.br && accepts.br) return { body: file.br, headers: { ...vary, 'Content-Encoding': 'br' } };
  if (file.gzip && accepts.gzip) return { body: file.gzip, headers: { ...vary, 'Content-Encoding': 'gzip' } };
  return { body: file.raw, headers: vary };
}

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
const CLIENT_ROUTES = /^\/(?:|signin|signup|setup|account|superadmin|admin(?:\/firmware)?|pair|join\/[A-Za-z0-9_-]+|mosques\/[^/]+(?:\/(?:schedule|devices|team|activity|print|members(?:\/[^/]+)?|settings))?|devices\/[^/]+)\/?$/;

/**
 * npm packages the console imports, served from node_modules under the same hash (no copy in the repo,
 * no CDN): `vendor/uqr.mjs` draws the join link's QR code (docs/console.md, "Mosque admin and superadmin pages: decisions").
 */
const VENDORED = { 'vendor/uqr.mjs': 'uqr' };

/** The console's own paths (Hono syntax): pages and files, not API routes (docs/console.md, not OpenAPI). */
export const CONSOLE_PATHS = new Set(['/c/:build/*', '/sw.js']);

/**
 * `publicUrl`: PUBLIC_URL's origin, handed to the page so a printed join link names it, not a LAN address.
 * `recordingMaxBytes`: RECORDING_MAX_BYTES, so the page refuses a file too large before sending it.
 */
export function consoleRoutes(dir: string, publicUrl: string | null = null, recordingMaxBytes: number | null = null, mediaOrigin: string | null = null) {
  const app = new Hono<AppEnv>();
  const PAGE_HEADERS = { ...BASE_PAGE_HEADERS, 'Content-Security-Policy': consoleCsp(mediaOrigin) };
  const files = readTree(dir);
  const require = createRequire(import.meta.url);
  for (const [name, pkg] of Object.entries(VENDORED)) files.set(name, fs.readFileSync(require.resolve(pkg).replace(/\.cjs$/, '.mjs')));
  const hash = crypto.createHash('sha256');
  for (const [name, body] of [...files].sort(([a], [b]) => a.localeCompare(b))) hash.update(name).update(body);
  const build = hash.digest('hex').slice(0, 12);
  const indexSource = files.get('index.html');
  if (!indexSource) throw new Error(`console: ${dir}/index.html is missing`);
  const page = indexSource.toString('utf8').replaceAll('__BUILD__', `/c/${build}`)
    .replace('__PUBLIC_URL__', (publicUrl ?? '').replace(/[&"<>]/g, (ch) => `&#${ch.charCodeAt(0)};`))
    .replace('__RECORDING_MAX_BYTES__', recordingMaxBytes === null ? '' : String(recordingMaxBytes));
  // index.html's own entry is the page as sent (the hash and PUBLIC_URL filled in); only pageFor serves it.
  const served = encodeAll(new Map([...files, ['index.html', Buffer.from(page)]]));

  app.get('/c/:build/*', (c) => {
    const name = c.req.path.slice(`/c/${c.req.param('build')}/`.length);
    const file = served.get(name);
    if (!file || name === 'index.html') throw new ApiError('not_found');
    // An old hash still serves today's file (a tab open across an upgrade) but is not cached for long.
    const current = c.req.param('build') === build;
    const { body, headers } = encode(file, c.req.header('accept-encoding'));
    return c.body(new Uint8Array(body), 200, {
      ...PAGE_HEADERS,
      ...headers,
      'Content-Type': TYPES[path.extname(name)]!,
      'Cache-Control': current ? 'public, max-age=31536000, immutable' : 'no-cache',
    });
  });
  // The service worker lives at the root so its scope is the whole console (a worker under /c/<hash>/ could
  // control only that folder). no-cache: the browser checks for a new one on every visit after an upgrade.
  const worker = files.get('sw.js');
  if (worker) {
    app.get('/sw.js', (c) => c.body(new Uint8Array(worker), 200, { ...PAGE_HEADERS, 'Content-Type': TYPES['.js']!, 'Cache-Control': 'no-cache' }));
  }
  /**
   * The page for a console path, or null: called from the API's not-found handler rather than registered as
   * a `get('*')`, which every GET would match beside its own route and so pass through a compose chain
   * (/healthz answered through a promise because of it).
   */
  const pageFor = (c: AppContext): Response | null => {
    if ((c.req.method !== 'GET' && c.req.method !== 'HEAD') || !CLIENT_ROUTES.test(c.req.path)) return null;
    const { body, headers } = encode(served.get('index.html')!, c.req.header('accept-encoding'));
    return c.body(new Uint8Array(body), 200, { ...PAGE_HEADERS, ...headers, 'Content-Type': TYPES['.html']!, 'Cache-Control': 'no-cache' });
  };
  return { app, build, pageFor };
}
