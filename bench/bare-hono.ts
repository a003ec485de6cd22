/**
 * Child process of bench/http.ts: the baseline, a bare Hono app with one route (`GET /hello`, a small JSON
 * body) on @hono/node-server, from the same node_modules and under the same loader as Minaret, with no
 * middleware, no database and no logger. What the HTTP door would cost if Minaret added nothing.
 *
 *   node --import tsx bench/bare-hono.ts        (started by bench/http.ts; prints one JSON line when listening)
 */
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';

const app = new Hono();
app.get('/hello', (c) => c.json({ status: 'ok' }));

const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info: AddressInfo) => {
  process.stdout.write(`${JSON.stringify({ pid: process.pid, url: `http://127.0.0.1:${info.port}` })}\n`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
// The parent going away (a crashed bench) must not leave a listener behind.
process.stdin.on('end', stop);
process.stdin.resume();
