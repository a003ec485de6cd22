import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { startTestService, type TestService } from '../../support/service.ts';
import { assertError } from '../../support/api.ts';
import { member } from '../../support/people.ts';
import { connectDevice, registerPlayer, waitFor, wsUrlOf } from '../../support/devices.ts';

/** Attacks on the HTTP door (SECURITY.md, "HTTP door"): slow clients, socket floods, bodies without a length. */

interface HeldSocket {
  socket: net.Socket;
  /** Resolves with the ms from open to close and the bytes the server sent before closing. */
  closed: Promise<{ afterMs: number; received: string }>;
}

/** A raw TCP socket to the service; everything it receives is collected until it closes. */
function openSocket(ts: TestService): Promise<HeldSocket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(ts.service.httpPort, '127.0.0.1');
    const opened = Date.now();
    let received = '';
    socket.on('data', (d) => (received += d));
    socket.on('error', () => {}); // a reset is one of the ways the server may refuse; 'close' follows
    const closed = new Promise<{ afterMs: number; received: string }>((done) => socket.once('close', () => done({ afterMs: Date.now() - opened, received })));
    socket.once('connect', () => resolve({ socket, closed }));
    socket.once('error', reject);
  });
}

/** Sends one header byte every `everyMs` until the socket closes: the slow-loris pattern. */
function dripHeaders(held: HeldSocket, everyMs: number): void {
  held.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
  const timer = setInterval(() => {
    if (held.socket.destroyed || held.socket.writableEnded) return clearInterval(timer);
    held.socket.write('a');
  }, everyMs);
  held.socket.once('close', () => clearInterval(timer));
}

function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

test('slow-loris sockets that send a header byte every 250 ms are closed after the headers timeout, and the service answers meanwhile', async (t) => {
  const ts = await startTestService(t, { env: { HTTP_HEADERS_TIMEOUT_S: '1', HTTP_REQUEST_TIMEOUT_S: '2' } });
  const sockets = await Promise.all(Array.from({ length: 20 }, () => openSocket(ts)));
  t.after(() => sockets.forEach((s) => s.socket.destroy()));
  for (const s of sockets) dripHeaders(s, 250);

  assert.equal((await ts.http.get('/healthz')).status, 200, 'a normal client is answered during the attack');
  const outcomes = await within(Promise.all(sockets.map((s) => s.closed)), 8000, 'every slow-loris socket closed');
  for (const { afterMs, received } of outcomes) {
    assert.ok(afterMs >= 900, `closed after ${afterMs} ms: the headers timeout, not an immediate refusal`);
    assert.ok(!received.includes('200 OK'), 'a request whose headers never finished is never answered');
  }
  assert.equal((await ts.http.get('/healthz')).status, 200);
});

test('a body sent a byte at a time is cut off after the request timeout', async (t) => {
  const ts = await startTestService(t, { env: { HTTP_HEADERS_TIMEOUT_S: '1', HTTP_REQUEST_TIMEOUT_S: '2' } });
  const held = await openSocket(ts);
  t.after(() => held.socket.destroy());
  held.socket.write('POST /api/v1/auth/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{');
  const timer = setInterval(() => !held.socket.destroyed && held.socket.write(' '), 250);
  t.after(() => clearInterval(timer));
  const { afterMs } = await within(held.closed, 8000, 'the slow body socket closed');
  assert.ok(afterMs >= 1900, `closed after ${afterMs} ms, not before the request timeout`);
});

test('an idle keep-alive connection is closed after the keep-alive timeout', async (t) => {
  const ts = await startTestService(t, { env: { HTTP_KEEP_ALIVE_TIMEOUT_S: '1' } });
  const held = await openSocket(ts);
  t.after(() => held.socket.destroy());
  held.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  const { afterMs, received } = await within(held.closed, 6000, 'the idle connection closed');
  assert.match(received, /^HTTP\/1\.1 200 /);
  assert.match(received, /Keep-Alive: timeout=1/i);
  assert.ok(afterMs >= 900, `closed after ${afterMs} ms`);
});

test('sockets over HTTP_MAX_CONNECTIONS are dropped while the held ones are still answered', async (t) => {
  const ts = await startTestService(t, { env: { HTTP_MAX_CONNECTIONS: '4' } });
  const held: HeldSocket[] = [];
  for (let i = 0; i < 4; i++) {
    const s = await openSocket(ts);
    s.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n'); // headers not finished: the slot stays taken
    held.push(s);
  }
  t.after(() => held.forEach((s) => s.socket.destroy()));
  await new Promise((r) => setTimeout(r, 200)); // let the server accept the four

  const extra = await Promise.all(Array.from({ length: 3 }, () => openSocket(ts)));
  t.after(() => extra.forEach((s) => s.socket.destroy()));
  for (const s of extra) s.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  for (const outcome of await within(Promise.all(extra.map((s) => s.closed)), 3000, 'the extra sockets were dropped')) {
    assert.equal(outcome.received, '', 'a refused socket gets no answer');
  }

  // A held socket finishes its request and is answered.
  held[0]!.socket.write('Connection: close\r\n\r\n');
  const answered = await within(held[0]!.closed, 3000, 'the held request was answered');
  assert.match(answered.received, /^HTTP\/1\.1 200 /);
  // Its slot is free again: a new client gets in.
  await waitFor('a new client is answered once a slot is free', async () => (await ts.http.get('/healthz').catch(() => null))?.status === 200, 3000);
});

test('a chunked body over 64 KiB without Content-Length answers 413 payload_too_large', async (t) => {
  const ts = await startTestService(t);
  const res = await new Promise<{ status: number; body: any }>((resolve, reject) => {
    const req = http.request(`${ts.url}/api/v1/auth/signup`, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } }, (r) => {
      let text = '';
      r.on('data', (d) => (text += d));
      r.on('end', () => resolve({ status: r.statusCode!, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.write('{"email":"amina@example.com","pad":"');
    for (let i = 0; i < 80; i++) req.write('a'.repeat(1024));
    req.end('"}');
  });
  assertError({ ...res, headers: new Headers() }, 413, 'payload_too_large');
  // Nothing was created: the same signup is new.
  assert.equal((await ts.http.post('/api/v1/auth/signup', { email: 'amina@example.com' })).status, 201);
});

test('a device on MQTT over WebSocket outlives the request timeout and does not count against HTTP_MAX_CONNECTIONS', async (t) => {
  const ts = await startTestService(t, { env: { HTTP_HEADERS_TIMEOUT_S: '1', HTTP_REQUEST_TIMEOUT_S: '1', HTTP_MAX_CONNECTIONS: '3' } });
  const person = await member(ts, 'amina@example.com');
  const devices = [await registerPlayer(ts, person, undefined, 'kitchen'), await registerPlayer(ts, person, undefined, 'hall')];
  const clients: Awaited<ReturnType<typeof connectDevice>>[] = [];
  for (const d of devices) clients.push(await connectDevice(t, d.credentials, { url: wsUrlOf(ts) }));
  await new Promise((r) => setTimeout(r, 2500));
  for (const c of clients) assert.equal(c.connected, true, 'still connected past the request timeout');
  // Two upgraded sockets and three plain ones: the plain ones all fit under the cap of 3.
  const plain = await Promise.all([ts.http.get('/healthz'), ts.http.get('/healthz'), ts.http.get('/healthz')]);
  assert.deepEqual(plain.map((r) => r.status), [200, 200, 200]);
});

// ---- TRUST_PROXY: who is the client behind a reverse proxy ----

const codeRequest = (ts: TestService, forwardedFor?: string) =>
  ts.http.request('POST', '/api/v1/auth/login-code', {
    body: { identifier_hash: 'a'.repeat(64) },
    headers: forwardedFor ? { 'x-forwarded-for': forwardedFor } : {},
  });

test('with TRUST_PROXY off a forged X-Forwarded-For does not escape the per-address rate limit', async (t) => {
  const ts = await startTestService(t, { env: { AUTH_RATE_LIMIT: '2' } });
  assert.equal((await codeRequest(ts, '198.51.100.1')).status, 202);
  assert.equal((await codeRequest(ts, '198.51.100.2')).status, 202);
  const third = await codeRequest(ts, '198.51.100.3');
  assertError(third, 429, 'rate_limited');
  assert.match(third.headers.get('retry-after') ?? '', /^[1-9]\d*$/);
  const logged = ts.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
  assert.ok(logged.length >= 3 && logged.every((l) => l.client === '127.0.0.1'), 'the log names the socket address');
});

for (const setting of ['1', '127.0.0.1/32']) {
  test(`with TRUST_PROXY=${setting} two clients behind one proxy get separate rate-limit buckets`, async (t) => {
    const ts = await startTestService(t, { env: { AUTH_RATE_LIMIT: '2', TRUST_PROXY: setting } });
    assert.equal((await codeRequest(ts, '198.51.100.1')).status, 202);
    assert.equal((await codeRequest(ts, '198.51.100.1')).status, 202);
    assertError(await codeRequest(ts, '198.51.100.1'), 429, 'rate_limited');
    // Another client through the same proxy still has its own budget...
    assert.equal((await codeRequest(ts, '198.51.100.2')).status, 202);
    // ...and a client cannot borrow one by prepending addresses: the proxy's own entry is what counts.
    assertError(await codeRequest(ts, '203.0.113.50, 198.51.100.1'), 429, 'rate_limited');
    const clients = ts.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request').map((l) => l.client);
    assert.deepEqual(clients, ['198.51.100.1', '198.51.100.1', '198.51.100.1', '198.51.100.2', '198.51.100.1']);
  });
}
