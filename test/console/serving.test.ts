import fs from 'node:fs';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import zlib from 'node:zlib';
import { startTestService } from '../support/service.ts';
import { launchBrowser } from './browser.ts';

const html = async (url: string) => {
  const res = await fetch(url);
  return { res, text: await res.text() };
};

test('the console is served at / with a strict CSP, and the API keeps its JSON 404s', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { res, text } = await html(`${ts.url}/`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /text\/html/);
  const csp = res.headers.get('content-security-policy') ?? '';
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'(;|$)/, 'no unsafe-inline, no CDN');
  assert.match(csp, /connect-src 'self'/);
  assert.equal(res.headers.get('cache-control'), 'no-cache');
  assert.doesNotMatch(text, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script in the page');
  assert.doesNotMatch(text, /https?:\/\//, 'nothing from another origin');

  const api404 = await fetch(`${ts.url}/api/v1/no-such-thing`);
  assert.equal(api404.status, 404);
  assert.equal((await api404.json() as any).error.code, 'not_found');
  const health = await fetch(`${ts.url}/healthz`);
  assert.equal((await health.json() as any).status, 'ok');
});

test('a client route such as a join link answers the index page, so a reload works', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const index = await html(`${ts.url}/`);
  const join = await html(`${ts.url}/join/ABCDEF`);
  assert.equal(join.res.status, 200);
  assert.equal(join.text, index.text);
  assert.ok(join.res.headers.get('content-security-policy'));
  const device = await html(`${ts.url}/devices/d123`);
  assert.equal(device.text, index.text);
  const unknown = await fetch(`${ts.url}/no-such-page`);
  assert.equal(unknown.status, 404, 'a path that is no client route keeps the API\'s 404');
  assert.equal((await unknown.json() as any).error.code, 'not_found');
});

test('hashed assets are cached for a year and unknown assets answer 404 in the error shape', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { text } = await html(`${ts.url}/`);
  const script = /src="(\/c\/[0-9a-f]{12}\/app\.js)"/.exec(text)?.[1];
  assert.ok(script, 'the page names its script under the build hash');
  const js = await fetch(`${ts.url}${script}`);
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type') ?? '', /text\/javascript/);
  assert.equal(js.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  const catalogue = await fetch(`${ts.url}${script.replace('app.js', 'i18n/ar.json')}`);
  assert.equal(catalogue.status, 200);
  assert.ok((await catalogue.json() as any)['nav.sign_in']);
  const missing = await fetch(`${ts.url}${script.replace('app.js', 'nope.js')}`);
  assert.equal(missing.status, 404);
  assert.equal((await missing.json() as any).error.code, 'not_found');
  const traversal = await fetch(`${ts.url}${script.replace('app.js', '..%2F..%2Fpackage.json')}`);
  assert.equal(traversal.status, 404, 'only the files read at start are served');
  const old = await fetch(`${ts.url}/c/000000000000/app.js`);
  assert.equal(old.headers.get('cache-control'), 'no-cache', 'an old hash is served but not cached');
});

test('console files go out brotli- or gzip-compressed as the client accepts, with Vary, and decode to the same bytes', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const get = (path: string, acceptEncoding: string) => fetch(`${ts.url}${path}`, { headers: { 'accept-encoding': acceptEncoding } })
    .then(async (res) => ({ res, bytes: Buffer.from(await res.arrayBuffer()) }));
  const index = await get('/', 'identity');
  const script = /src="(\/c\/[0-9a-f]{12}\/app\.js)"/.exec(index.bytes.toString('utf8'))?.[1];
  assert.ok(script);
  for (const path of ['/', script, script.replace('app.js', 'i18n/en.json'), script.replace('app.js', 'style.css'), script.replace('app.js', 'vendor/uqr.mjs')]) {
    // undici's fetch would decode the body itself: read the bytes as they were sent, with node:http.
    const raw = await rawGet(`${ts.url}${path}`, 'identity');
    assert.equal(raw.headers['content-encoding'], undefined, `${path}: identity asked, none sent`);
    assert.equal(raw.headers.vary, 'Accept-Encoding', `${path}: a cache must key on Accept-Encoding`);
    const br = await rawGet(`${ts.url}${path}`, 'gzip, deflate, br');
    assert.equal(br.headers['content-encoding'], 'br', `${path}: brotli preferred when accepted`);
    assert.ok(br.body.length < raw.body.length * 0.6, `${path}: brotli is ${br.body.length} of ${raw.body.length} bytes`);
    assert.deepEqual(zlib.brotliDecompressSync(br.body), raw.body);
    assert.ok(br.headers['content-security-policy'], `${path}: the compressed answer keeps its CSP`);
    const gzip = await rawGet(`${ts.url}${path}`, 'br;q=0, gzip');
    assert.equal(gzip.headers['content-encoding'], 'gzip', `${path}: br refused with q=0, gzip taken`);
    assert.deepEqual(zlib.gunzipSync(gzip.body), raw.body);
    assert.equal(Number(gzip.headers['content-length']), gzip.body.length);
  }
});

test('the console is compressed before its first request: concurrent first requests all get the same compressed bytes', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const page = await rawGet(`${ts.url}/signin`, 'br');
  assert.equal(page.headers['content-encoding'], 'br', 'the very first request of the page');
  const script = /src="(\/c\/[0-9a-f]{12}\/app\.js)"/.exec(zlib.brotliDecompressSync(page.body).toString('utf8'))?.[1];
  assert.ok(script);
  const css = script.replace('app.js', 'style.css');
  const answers = await Promise.all([...Array(6)].map((_, i) => rawGet(`${ts.url}${css}`, i % 2 ? 'br' : 'gzip')));
  const plain = await rawGet(`${ts.url}${css}`, 'identity');
  for (const [i, a] of answers.entries()) {
    assert.equal(a.headers['content-encoding'], i % 2 ? 'br' : 'gzip');
    assert.deepEqual(i % 2 ? zlib.brotliDecompressSync(a.body) : zlib.gunzipSync(a.body), plain.body);
    assert.deepEqual(a.body, answers[i % 2]!.body, 'every request of a coding gets the same bytes');
  }
});

function rawGet(url: string, acceptEncoding: string): Promise<{ headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    http.get(url, { headers: { 'accept-encoding': acceptEncoding } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

test('every file the index page preloads is one the console serves, so a renamed module cannot fail silently', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { text } = await html(`${ts.url}/`);
  const preloads = [...text.matchAll(/<link rel="(?:modulepreload|preload)" href="([^"]+)"/g)].map((m) => m[1]!);
  assert.ok(preloads.length >= 5, 'the sign-in page\'s modules and catalogue are preloaded');
  for (const href of preloads) {
    const res = await fetch(`${ts.url}${href}`);
    assert.equal(res.status, 200, `${href} is preloaded but not served`);
    await res.arrayBuffer();
  }
});

test('the QR encoder is served from node_modules under the hash, and PUBLIC_URL reaches the page for join links', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: { PUBLIC_URL: 'https://minaret.example.org/' } });
  const { text } = await html(`${ts.url}/mosques/m1/devices`);
  assert.match(text, /<meta name="minaret-public-url" content="https:\/\/minaret\.example\.org">/);
  const prefix = /src="(\/c\/[0-9a-f]{12}\/)app\.js"/.exec(text)?.[1];
  const uqr = await fetch(`${ts.url}${prefix}vendor/uqr.mjs`);
  assert.equal(uqr.status, 200);
  assert.match(uqr.headers.get('content-type') ?? '', /text\/javascript/);
  assert.equal(uqr.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  const shipped = fs.readFileSync(createRequire(import.meta.url).resolve('uqr').replace(/\.cjs$/, '.mjs'), 'utf8');
  assert.equal(await uqr.text(), shipped, 'the npm package as installed, not a copy in the repo');
  for (const page of ['team', 'activity', 'print', 'members', 'members/ms1', 'settings']) assert.equal((await fetch(`${ts.url}/mosques/m1/${page}`)).status, 200);
  assert.equal((await fetch(`${ts.url}/mosques/m1/nope`)).status, 404);
  assert.equal((await fetch(`${ts.url}/mosques/m1/members/ms1/nope`)).status, 404);
});

test('CONSOLE_DIR=off serves the API alone', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: { CONSOLE_DIR: 'off' } });
  const res = await fetch(`${ts.url}/`);
  assert.equal(res.status, 404);
  assert.equal((await res.json() as any).error.code, 'not_found');
});

test('the browser tests stop with one clear line when chromium is missing', async (t) => {
  const saved = process.env.CHROMIUM_PATH;
  process.env.CHROMIUM_PATH = '/nonexistent/chromium';
  t.after(() => {
    if (saved === undefined) delete process.env.CHROMIUM_PATH;
    else process.env.CHROMIUM_PATH = saved;
  });
  await assert.rejects(launchBrowser(t), /console tests need a browser: \/nonexistent\/chromium is missing \(apt-get install chromium/);
});

test('the console installs as an app: a web app manifest with 192, 512 and maskable icons that load, and a theme colour', async (t) => {
  const ts = await startTestService(t);
  const page = await (await fetch(`${ts.url}/`)).text();
  const href = /<link rel="manifest" href="([^"]+)">/.exec(page)?.[1];
  assert.ok(href, 'the page links its manifest');
  assert.match(page, /<meta name="theme-color" content="#[0-9a-f]{6}">/);
  const res = await fetch(`${ts.url}${href}`);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/manifest+json');
  const manifest = await res.json() as { name: string; start_url: string; display: string; theme_color: string; icons: Array<{ src: string; sizes: string; type: string; purpose: string }> };
  assert.deepEqual([manifest.name, manifest.start_url, manifest.display], ['Minaret', '/', 'standalone']);
  assert.deepEqual(manifest.icons.map((i) => `${i.sizes} ${i.purpose}`).sort(), ['192x192 any', '512x512 any', '512x512 maskable']);
  for (const icon of manifest.icons) {
    const png = await fetch(new URL(icon.src, `${ts.url}${href}`));
    assert.equal(png.status, 200, icon.src);
    const bytes = Buffer.from(await png.arrayBuffer());
    // PNG: the signature, then IHDR's width and height (ISO/IEC 15948, 11.2.2).
    assert.equal(bytes.subarray(1, 4).toString('latin1'), 'PNG');
    assert.equal(`${bytes.readUInt32BE(16)}x${bytes.readUInt32BE(20)}`, icon.sizes);
  }
});

test('both catalogues hold the same keys with the same placeholders, and every key the pages name exists', () => {
  const read = (lang: string) => JSON.parse(fs.readFileSync(`console/i18n/${lang}.json`, 'utf8')) as Record<string, string>;
  const en = read('en');
  const ar = read('ar');
  // A plural key (console/i18n.js) has the forms its language's rules name: Arabic's zero, two, few and many are its own.
  const ownForms = /\.(zero|two|few|many)$/;
  const plural = /\.(zero|one|two|few|many|other)$/;
  assert.deepEqual(Object.keys(ar).filter((k) => !ownForms.test(k)).sort(), Object.keys(en).sort(), 'the Arabic catalogue has exactly the English keys');
  for (const key of Object.keys(ar).filter((k) => ownForms.test(k))) assert.ok(`${key.replace(plural, '')}.other` in en, `${key}: a form of no English plural key`);
  const holes = (s: string) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
  for (const [key, text] of Object.entries(en)) {
    assert.ok(text.trim() && ar[key]!.trim(), `${key} is empty in a catalogue`);
    // One of a count may be said without the number ("عضو واحد", "one member"); every other form keeps the holes.
    if (!key.endsWith('.one')) assert.deepEqual(holes(ar[key]!), holes(text), `${key}: the placeholders differ`);
  }
  // Literal keys only (a key built at run time, t(`status.${s}`), is checked by the pages' own tests).
  const sources = ['console', 'console/views'].flatMap((dir) => fs.readdirSync(dir).filter((f) => f.endsWith('.js')).map((f) => `${dir}/${f}`));
  const missing = sources.flatMap((file) => [...fs.readFileSync(file, 'utf8').matchAll(/\bt\('([\w.]+)'/g)]
    .map((m) => m[1]!).filter((key) => !(key in en) && !(`${key}.other` in en)).map((key) => `${file}: ${key}`));
  assert.deepEqual(missing, []);
});
