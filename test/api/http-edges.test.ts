import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import pino from 'pino';
import { sql } from 'kysely';
import { sha256, signupMember, startTestService, type HttpResult } from '../support/service.ts';
import { AUTH, assertError, emailId } from '../support/api.ts';
import { createMosque, signInSuperadmin } from '../support/people.ts';
import { storeOf } from '../support/database.ts';
import { withRequestContext } from '../../api/request-context.ts';
import type { RequestBindings } from '../../api/context.ts';

const SECURITY_HEADERS = {
  'strict-transport-security': 'max-age=31536000; includeSubDomains',
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store, no-cache, must-revalidate',
  pragma: 'no-cache',
};

function assertSecurityHeaders(res: HttpResult, what: string) {
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) {
    assert.equal(res.headers.get(name), value, `${name} on ${what} (status ${res.status})`);
  }
}

/** The contract's error body and nothing else: {"error": {"code", "message", "details"?}}. */
function assertErrorShape(res: HttpResult) {
  assert.deepEqual(Object.keys(res.body), ['error'], JSON.stringify(res.body));
  const keys = Object.keys(res.body.error);
  assert.ok(keys.includes('code') && keys.includes('message'));
  assert.ok(keys.every((k) => ['code', 'message', 'details'].includes(k)), `unexpected keys ${keys.join(',')}`);
  assert.match(res.body.error.code, /^[a-z]+(_[a-z]+)*$/);
  assert.equal(typeof res.body.error.message, 'string');
  assert.doesNotMatch(JSON.stringify(res.body), /\bat .+:\d+:\d+|node_modules|\.ts:\d+/, 'no stack trace');
}

const postRaw = (ts: { http: { request: (m: string, p: string, o: object) => Promise<HttpResult> } }, path: string, raw: string, contentType?: string) =>
  ts.http.request('POST', path, { raw, headers: contentType ? { 'content-type': contentType } : {} });

// ---- security headers ----

test('an auth success carries the four security headers', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/signup`, { email: 'amina@example.com' });
  assert.equal(res.status, 201);
  assertSecurityHeaders(res, 'signup');
  const accepted = await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('amina@example.com') });
  assert.equal(accepted.status, 202);
  assertSecurityHeaders(accepted, 'login-code');
});

test('auth errors carry the four security headers', async (t) => {
  const ts = await startTestService(t);
  const errors = [
    await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('nobody@example.com'), password_hash: sha256('x') }), // 401
    await ts.http.post(`${AUTH}/login`, { identifier_hash: 'nope' }), // 400
    await ts.http.post(`${AUTH}/reset-password`, { token: 'unknown', password_hash: sha256('x') }), // 400 invalid_token
    await postRaw(ts, `${AUTH}/login`, 'hello', 'text/plain'), // 415
    await postRaw(ts, `${AUTH}/login`, '{"identifier_hash":', 'application/json'), // 400 malformed
  ];
  assert.deepEqual(errors.map((r) => r.status), [401, 400, 400, 415, 400]);
  for (const res of errors) assertSecurityHeaders(res, `error ${res.body?.error?.code}`);
});

test('auth 404s carry the four security headers', async (t) => {
  const ts = await startTestService(t);
  const missing = [
    await ts.http.post(`${AUTH}/no-such-endpoint`, {}),
    await ts.http.get(`${AUTH}/login`), // wrong method
    await ts.http.get(`${AUTH}/`),
  ];
  for (const res of missing) {
    assertError(res, 404, 'not_found');
    assertSecurityHeaders(res, '404');
  }
});

test('a body over 64 KiB on an auth route carries the four security headers', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: 'a'.repeat(65 * 1024), password_hash: sha256('x') });
  assertError(res, 413, 'payload_too_large');
  assertSecurityHeaders(res, '413');
});

test('a rate-limited auth request carries the four security headers', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_RATE_LIMIT: '1' } });
  await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('a@example.com') });
  const res = await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('a@example.com') });
  assertError(res, 429, 'rate_limited');
  assertSecurityHeaders(res, '429');
});

test('responses outside /api/v1/auth do not need the auth security headers but /healthz still answers', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.get('/healthz');
  assert.equal(res.status, 200);
  // Not a contract rule either way; this pins only that the auth middleware is scoped, not global.
  assert.equal(res.headers.get('pragma'), null);
});

// ---- request ids ----

test('every response carries X-Request-Id: auth, /me, /healthz, 404 and 413 alike', async (t) => {
  const ts = await startTestService(t);
  const responses = [
    await ts.http.post(`${AUTH}/signup`, { email: 'amina@example.com' }),
    await ts.http.post(`${AUTH}/login`, { identifier_hash: 'x' }),
    await ts.http.get('/api/v1/me'),
    await ts.http.get('/healthz'),
    await ts.http.get('/no-such-path'),
    await ts.http.get('/api/v2/no-such-path'),
    await ts.http.post(`${AUTH}/login`, { pad: 'a'.repeat(70 * 1024) }),
  ];
  assert.deepEqual(responses.map((r) => r.status), [201, 400, 401, 200, 404, 404, 413]);
  const ids = responses.map((r) => r.headers.get('x-request-id'));
  for (const id of ids) assert.ok(id && id.length > 0, 'X-Request-Id is present');
  assert.equal(new Set(ids).size, ids.length, 'each response has its own request id');
});

test('an inbound X-Request-Id of word characters is kept and echoed; a malformed or overlong one is replaced', async (t) => {
  const ts = await startTestService(t);
  const kept = await ts.http.request('GET', '/healthz', { headers: { 'x-request-id': 'proxy-abc_123=' } });
  assert.equal(kept.headers.get('x-request-id'), 'proxy-abc_123=');
  for (const bad of ['has space', 'semi;colon', 'a'.repeat(256)]) {
    const res = await ts.http.request('GET', '/healthz', { headers: { 'x-request-id': bad } });
    assert.match(res.headers.get('x-request-id') ?? '', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, JSON.stringify(bad));
  }
});

test('with LOG_REQUESTS=1 at LOG_LEVEL=info every request writes one request line carrying its request id; at warn none is written', async (t) => {
  const info = await startTestService(t, { logLevel: 'info', env: { LOG_REQUESTS: '1' } });
  const ids = [await info.http.get('/healthz'), await info.http.get('/api/v1/me'), await info.http.get('/no-such-path')].map((r) => r.headers.get('x-request-id'));
  const lines = info.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
  assert.deepEqual(lines.map((l) => [l.req_id, l.method, l.path, l.status]), [
    [ids[0], 'GET', '/healthz', 200], [ids[1], 'GET', '/api/v1/me', 401], [ids[2], 'GET', '/no-such-path', 404],
  ]);
  const warn = await startTestService(t, { logLevel: 'warn', env: { LOG_REQUESTS: '1' } });
  assert.equal((await warn.http.get('/healthz')).status, 200);
  assert.deepEqual(warn.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request'), []);
});

test('without LOG_REQUESTS, at LOG_LEVEL=info the console files and the API leave no request line; at debug they do', async (t) => {
  const info = await startTestService(t, { logLevel: 'info' });
  for (const path of ['/', '/healthz', '/api/v1/me', '/no-such-path']) await info.http.get(path);
  assert.deepEqual(info.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request'), []);
  const debug = await startTestService(t, { logLevel: 'debug' });
  await debug.http.get('/healthz');
  const lines = debug.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
  assert.deepEqual(lines.map((l) => [l.level, l.path, l.status]), [[20, '/healthz', 200]]);
});

test('two Authorization headers count as their joined value, so a second one cannot ride on a valid first one', async (t) => {
  const ts = await startTestService(t);
  const { access_token: token } = await signupMember(ts.http, 'amina@example.com');
  const me = (auth: string) => rawHttp(ts.url, `GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n${auth}\r\n`);
  assert.equal((await me(`Authorization: Bearer ${token}\r\n`)).status, 200);
  const twice = await me(`Authorization: Bearer ${token}\r\nAuthorization: Bearer ${token}\r\n`);
  assert.equal(twice.status, 401);
  assert.equal(twice.body.error.code, 'unauthorized');
});

test('a GET carrying a body over the limit is answered as if it had none; a POST that size answers 413', async (t) => {
  const ts = await startTestService(t);
  const body = 'a'.repeat(70 * 1024);
  const get = await rawHttp(ts.url, `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  assert.equal(get.status, 200);
  assert.equal(get.body.status, 'ok');
  const post = await rawHttp(ts.url, `POST ${AUTH}/login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  assert.equal(post.status, 413);
  assert.equal(post.body.error.code, 'payload_too_large');
});

// ---- error bodies ----

test('every error has the body {"error": {"code", "message", "details"?}} and nothing else', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_RATE_LIMIT: '8' } });
  const responses = [
    await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('nobody@example.com'), password_hash: sha256('x') }),
    await ts.http.post(`${AUTH}/login`, {}),
    await ts.http.post(`${AUTH}/login-code/verify`, { identifier_hash: emailId('nobody@example.com'), code: '123456' }),
    await ts.http.post(`${AUTH}/reset-password`, { token: 'unknown', password_hash: sha256('x') }),
    await postRaw(ts, `${AUTH}/signup`, '{', 'application/json'),
    await postRaw(ts, `${AUTH}/signup`, 'email=a@example.com', 'application/x-www-form-urlencoded'),
    await ts.http.post(`${AUTH}/signup`, { pad: 'a'.repeat(70 * 1024) }),
    await ts.http.post(`${AUTH}/nope`, {}),
    await ts.http.get('/api/v1/me'),
    await ts.http.get('/nope'),
  ];
  assert.deepEqual(responses.map((r) => r.status), [401, 400, 401, 400, 400, 415, 413, 404, 401, 404]);
  for (const res of responses) {
    assertErrorShape(res);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  }
});

test('validation_failed lists {path, message} for each problem', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: 'abc', password_hash: 42 });
  assertError(res, 400, 'validation_failed');
  assertErrorShape(res);
  const details = res.body.error.details as Array<Record<string, unknown>>;
  assert.ok(Array.isArray(details));
  for (const d of details) {
    assert.deepEqual(Object.keys(d).sort(), ['message', 'path']);
    assert.equal(typeof d.path, 'string');
    assert.equal(typeof d.message, 'string');
  }
  assert.deepEqual(details.map((d) => d.path).sort(), ['identifier_hash', 'password_hash']);
});

test('validation_failed names a missing field by its path', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('a@example.com') });
  assertError(res, 400, 'validation_failed');
  assert.deepEqual(res.body.error.details.map((d: { path: string }) => d.path), ['password_hash']);
});

test('validation_failed never echoes the submitted values', async (t) => {
  const ts = await startTestService(t);
  const secret = 'MySecretPassword-not-hex-4f1c';
  const attempts = [
    ts.http.request('POST', `${AUTH}/login`, { body: { identifier_hash: emailId('a@example.com'), password_hash: secret } }),
    ts.http.request('POST', `${AUTH}/signup`, { body: { email: `${secret}`, password_hash: secret } }),
    ts.http.request('POST', `${AUTH}/signup`, { body: { phone: secret } }),
    ts.http.request('POST', `${AUTH}/login-code/verify`, { body: { identifier_hash: secret, code: secret } }),
    ts.http.request('POST', `${AUTH}/login-code`, { body: { identifier_hash: emailId('a@example.com'), channel: secret } }),
    ts.http.request('POST', `${AUTH}/superadmin-2fa/verify`, { body: { session_token: 'abc', timestamp: secret, hmac: secret } }),
    ts.http.request('POST', `${AUTH}/reset-password`, { body: { token: secret.repeat(20), password_hash: secret } }),
  ];
  for (const res of await Promise.all(attempts)) {
    assertError(res, 400, 'validation_failed');
    const text = JSON.stringify(res.body);
    assert.ok(!text.includes(secret), `the response echoes the value: ${text}`);
    assert.ok(!text.includes('MySecret'), `the response echoes part of the value: ${text}`);
  }
});

test('validation messages never land in the log with the submitted value either', async (t) => {
  const ts = await startTestService(t);
  const secret = 'AnotherSecretValue-9f2e';
  await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('a@example.com'), password_hash: secret });
  assert.ok(ts.logs.length > 0);
  assert.ok(!ts.logs.some((line) => line.includes(secret)));
});

// ---- bodies and content types ----

test('a body over 64 KiB answers 413 payload_too_large', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.post(`${AUTH}/signup`, { email: 'amina@example.com', pad: 'a'.repeat(64 * 1024) });
  assertError(res, 413, 'payload_too_large');
  // Nothing was created: the same signup below is new.
  assert.equal((await ts.http.post(`${AUTH}/signup`, { email: 'amina@example.com' })).status, 201);
});

test('a body just under 64 KiB is read and judged by the schema', async (t) => {
  const ts = await startTestService(t);
  const body = { email: 'amina@example.com', pad: 'a'.repeat(60 * 1024) };
  assert.ok(JSON.stringify(body).length < 64 * 1024);
  const res = await ts.http.post(`${AUTH}/signup`, body);
  assert.equal(res.status, 201, JSON.stringify(res.body));
});

test('a body sent without a JSON content type answers 415 unsupported_media_type', async (t) => {
  const ts = await startTestService(t);
  const json = JSON.stringify({ email: 'amina@example.com' });
  assertError(await postRaw(ts, `${AUTH}/signup`, json, 'text/plain'), 415, 'unsupported_media_type');
  assertError(await postRaw(ts, `${AUTH}/signup`, 'email=amina%40example.com', 'application/x-www-form-urlencoded'), 415, 'unsupported_media_type');
  assertError(await postRaw(ts, `${AUTH}/signup`, json), 415, 'unsupported_media_type');
  // The same body with the JSON type is fine, charset parameter included.
  assert.equal((await postRaw(ts, `${AUTH}/signup`, json, 'application/json; charset=utf-8')).status, 201);
});

test('malformed JSON answers 400 validation_failed', async (t) => {
  const ts = await startTestService(t);
  for (const raw of ['{', '{"email": "a@example.com",}', 'not json', '']) {
    const res = await postRaw(ts, `${AUTH}/signup`, raw, 'application/json');
    assertError(res, 400, 'validation_failed');
    assertErrorShape(res);
  }
});

test('a JSON body that is not an object answers 400 validation_failed', async (t) => {
  const ts = await startTestService(t);
  for (const raw of ['[]', '"a@example.com"', 'null', '42']) {
    assertError(await postRaw(ts, `${AUTH}/login`, raw, 'application/json'), 400, 'validation_failed');
  }
});

// ---- routes ----

test('an unknown route answers 404 not_found, with a token, without one, or with a bad one', async (t) => {
  const ts = await startTestService(t);
  const signed = await signupMember(ts.http, 'amina@example.com');
  for (const res of [
    await ts.http.get('/no-such-path'),
    await ts.http.get('/api/v1/no-such-path', signed.access_token),
    await ts.http.get('/api/v1/no-such-path'),
    await ts.http.get('/api/v1/mosques/m1/no-such-thing'),
    await ts.http.post('/api/v1/devices/d1/commands/extra', {}),
    await ts.http.get('/api/v1/me/no-such-thing', 'not.a.token'),
    await ts.http.get('/api/v1'),
    await ts.http.post('/api/v1/auth/no-such-endpoint', {}),
    await ts.http.delete('/api/v1/auth/login'),
    await ts.http.get('/api/v2/auth/login'),
  ]) {
    assertError(res, 404, 'not_found');
    assertErrorShape(res);
  }
  // A path that names a route still needs the token: the 404 is for paths only.
  assertError(await ts.http.get('/api/v1/mosques/m1'), 401, 'unauthorized');
  assertError(await ts.http.get('/api/v1/me/'), 401, 'unauthorized');
});

test('an error no route expects answers 500 internal_error whose message carries the request id only; the log has the cause', async (t) => {
  const ts = await startTestService(t, { logLevel: 'error' });
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  // A damaged schema (a table dropped behind the service's back) is no storage fault: a bug to report.
  const { store, close } = await storeOf(ts);
  await sql`DROP TABLE activity`.execute(store);
  await close();

  const res = await ts.http.get(`/api/v1/mosques/${mosque.id}/activity`, root.token);
  assertErrorShape(res);
  assert.equal(res.status, 500);
  const requestId = res.headers.get('x-request-id');
  assert.ok(requestId);
  assert.deepEqual(res.body, { error: { code: 'internal_error', message: `Internal error; request id ${requestId}` } });
  const logged = ts.logs.map((l) => JSON.parse(l) as Record<string, any>).find((l) => l.msg === 'unhandled error');
  assert.equal(logged?.req_id, requestId, 'the operator finds the cause under the id the client was given');
  assert.match(String(logged?.err?.message), /activity/);
  // The service goes on.
  assert.equal((await ts.http.get(`/api/v1/mosques/${mosque.id}`, root.token)).status, 200);
});

test('GET /healthz answers 200 {"status":"ok","db":"ok","broker":"ok"}', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.get('/healthz');
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { status: 'ok', db: 'ok', broker: 'ok' });
});

// ---- rate limits ----

test('the fourth auth request in a minute from one address with AUTH_RATE_LIMIT=3 answers 429 with Retry-After', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_RATE_LIMIT: '3' } });
  // Different identifiers and endpoints: the limit is per address, over all of /api/v1/auth.
  const first = [
    await ts.http.post(`${AUTH}/login-code`, { identifier_hash: emailId('a@example.com') }),
    await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId('b@example.com') }),
    await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('c@example.com'), password_hash: sha256('x') }),
  ];
  assert.deepEqual(first.map((r) => r.status), [202, 202, 401]);
  const fourth = await ts.http.post(`${AUTH}/signup`, { email: 'd@example.com' });
  assertError(fourth, 429, 'rate_limited');
  assertErrorShape(fourth);
  const retryAfter = fourth.headers.get('retry-after');
  assert.match(retryAfter ?? '', /^\d+$/);
  assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= 60, `Retry-After ${retryAfter}`);
  // The refused signup did not happen.
  assert.equal((await ts.http.post(`${AUTH}/signup`, { email: 'd@example.com' })).status, 429);
});

test('the auth rate limit does not touch /healthz or /me', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_RATE_LIMIT: '1' } });
  const signed = await signupMember(ts.http, 'amina@example.com');
  assertError(await ts.http.post(`${AUTH}/signup`, { email: 'b@example.com' }), 429, 'rate_limited');
  for (let i = 0; i < 3; i++) {
    assert.equal((await ts.http.get('/healthz')).status, 200);
    assert.equal((await ts.http.get('/api/v1/me', signed.access_token)).status, 200);
  }
});

test('the fourth request for one identifier_hash with AUTH_IDENTIFIER_RATE_LIMIT=3 answers 429, other identifiers go on', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_IDENTIFIER_RATE_LIMIT: '3' } });
  await signupMember(ts.http, 'target@example.com', 'the right password');
  const target = emailId('target@example.com');
  for (let i = 0; i < 2; i++) {
    assertError(await ts.http.post(`${AUTH}/login`, { identifier_hash: target, password_hash: sha256(`guess ${i}`) }), 401, 'invalid_credentials');
  }
  const limited = await ts.http.post(`${AUTH}/login`, { identifier_hash: target, password_hash: sha256('the right password') });
  assertError(limited, 429, 'rate_limited');
  assert.match(limited.headers.get('retry-after') ?? '', /^[1-9]\d*$/);
  // The limit is per identifier over every auth endpoint that names one.
  assertError(await ts.http.post(`${AUTH}/login-code`, { identifier_hash: target }), 429, 'rate_limited');
  // Another identifier from the same address is still answered normally.
  assertError(await ts.http.post(`${AUTH}/login`, { identifier_hash: emailId('other@example.com'), password_hash: sha256('x') }), 401, 'invalid_credentials');
});

/** Sends raw bytes to the HTTP port and returns the status and the parsed JSON body of the one answer. */
async function rawHttp(url: string, bytes: string): Promise<{ status: number; body: any }> {
  const { port } = new URL(url);
  const socket = net.connect({ host: '127.0.0.1', port: Number(port) });
  socket.on('error', () => undefined);
  socket.write(bytes);
  const chunks: Buffer[] = [];
  for await (const chunk of socket) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  const [head = '', body = ''] = text.split('\r\n\r\n');
  return { status: Number(head.split(' ')[1]), body: JSON.parse(body) };
}

test('a request line over 16 KiB answers 431 with the error body, not the HTTP parser\'s empty one', async (t) => {
  const ts = await startTestService(t);
  const res = await rawHttp(ts.url, `GET /api/v1/me?q=${'x'.repeat(20_000)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  assert.equal(res.status, 431);
  assertErrorShape(res as HttpResult);
  assert.equal(res.body.error.code, 'payload_too_large');
});

test('a request that is not HTTP answers 400 with the error body', async (t) => {
  const ts = await startTestService(t);
  const res = await rawHttp(ts.url, 'HELLO THERE\r\n\r\n');
  assert.equal(res.status, 400);
  assertErrorShape(res as HttpResult);
  assert.equal(res.body.error.code, 'bad_request');
});

/**
 * api/request-context.ts on a real HTTP server: which request lines reach the log at which level
 * (docs/operator.md, "Reading the log"; LOG_REQUESTS in docs/settings.md).
 */
async function serve(t: TestContext, level: string, logRequests: boolean) {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({ write(chunk, _enc, done) { lines.push(...String(chunk).split('\n').filter(Boolean).map((l) => JSON.parse(l))); done(); } });
  const logger = pino({ level }, sink);
  const app = new Hono<{ Bindings: RequestBindings }>();
  app.get('/app.js', (c) => c.text('// the console'));
  app.get('/broken', (c) => c.json({ error: { code: 'internal', message: 'x' } }, 500));
  app.get('/unavailable', (c) => c.json({ error: { code: 'storage_unavailable', message: 'x' } }, 503));
  const server = http.createServer(getRequestListener(withRequestContext(app.fetch, logger, { kind: 'off' }, logRequests)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const get = async (path: string) => {
    const res = await fetch(base + path);
    await res.arrayBuffer();
    // The line is written on the response's 'close', just after the client has read it all.
    await new Promise((resolve) => setTimeout(resolve, 50));
    return res.status;
  };
  const requestLines = () => lines.filter((l) => l.msg === 'request').map((l) => [l.level, l.path, l.status]);
  return { get, requestLines };
}

const INFO = 30;
const DEBUG = 20;

const CASES: Array<{ level: string; logRequests: boolean; expected: Array<[number, string, number]> }> = [
  // The default: a static file is quiet at info; an answer of 500 or more still shows.
  { level: 'info', logRequests: false, expected: [[INFO, '/broken', 500], [INFO, '/unavailable', 503]] },
  { level: 'info', logRequests: true, expected: [[INFO, '/app.js', 200], [INFO, '/broken', 500], [INFO, '/unavailable', 503]] },
  { level: 'debug', logRequests: false, expected: [[DEBUG, '/app.js', 200], [INFO, '/broken', 500], [INFO, '/unavailable', 503]] },
  { level: 'warn', logRequests: true, expected: [] },
];

for (const { level, logRequests, expected } of CASES) {
  test(`at LOG_LEVEL=${level} with LOG_REQUESTS=${logRequests ? 1 : 0} the request lines are ${JSON.stringify(expected)}`, async (t) => {
    const s = await serve(t, level, logRequests);
    assert.equal(await s.get('/app.js'), 200);
    assert.equal(await s.get('/broken'), 500);
    assert.equal(await s.get('/unavailable'), 503);
    assert.deepEqual(s.requestLines(), expected);
  });
}
