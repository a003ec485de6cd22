import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import pino from 'pino';
import { withRequestContext } from '../../api/request-context.ts';
import type { RequestBindings } from '../../api/context.ts';

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
