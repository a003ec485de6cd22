/**
 * Child process of bench/http.ts: one server under load, in its own process so that every server measured
 * runs the same way (same loader, same node_modules) and wrk and the parent stay out of its CPU figures.
 *
 *   node --import tsx bench/http-server.ts bare                 the baseline: bare Hono, `GET /hello`, no middleware
 *   node --import tsx bench/http-server.ts minaret [<root>]     Minaret from this checkout, or from <root> (an older
 *                                                               checkout with node_modules, for before/after)
 *
 * IPC: sends {type:'ready', pid, url}; answers {type:'start'} by opening a measurement window and
 * {type:'stop'} with {type:'window', ...} (CPU, event-loop delay, GC pauses over the window).
 */
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay, performance, PerformanceObserver } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { serviceModule } from './support.ts';

const send = (msg: Record<string, unknown>): void => {
  if (process.connected) process.send?.(msg);
};

/** What one window of load cost this process and how long its event loop and GC held requests up. */
function openWindow() {
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const gc = { count: 0, totalMs: 0, maxMs: 0, majorMaxMs: 0 };
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gc.count++;
      gc.totalMs += e.duration;
      gc.maxMs = Math.max(gc.maxMs, e.duration);
      // NODE_PERFORMANCE_GC_MAJOR = 4: mark-compact of the old generation
      if ((e as { detail?: { kind?: number } }).detail?.kind === 4) gc.majorMaxMs = Math.max(gc.majorMaxMs, e.duration);
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  const cpu = process.cpuUsage();
  const wall = performance.now();
  return () => {
    const used = process.cpuUsage(cpu);
    loop.disable();
    observer.disconnect();
    return {
      type: 'window', cpuS: (used.user + used.system) / 1e6, wallS: (performance.now() - wall) / 1000,
      loopP50Ms: loop.percentile(50) / 1e6, loopP99Ms: loop.percentile(99) / 1e6, loopMaxMs: loop.max / 1e6,
      gcCount: gc.count, gcTotalMs: gc.totalMs, gcMaxMs: gc.maxMs, gcMajorMaxMs: gc.majorMaxMs,
      heapUsedMiB: process.memoryUsage().heapUsed / 2 ** 20,
    };
  };
}

async function startBare(): Promise<{ url: string; close: () => Promise<void> }> {
  const app = new Hono();
  app.get('/hello', (c) => c.json({ status: 'ok' }));
  return new Promise((resolve) => {
    const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info: AddressInfo) =>
      resolve({ url: `http://127.0.0.1:${info.port}`, close: () => new Promise((done) => server.close(() => done())) }),
    );
  });
}

/** Minaret as bench/http.ts has always run it: temp database, LOG_LEVEL from the parent, high auth limits. */
async function startMinaret(root: string): Promise<{ url: string; close: () => Promise<void> }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-http-'));
  // What npm start runs in that checkout: the compiled service when it runs dist/ (bench/support.ts, serviceModule).
  const { loadConfig } = await import(pathToFileURL(serviceModule(root, 'src/platform/config.ts')).href);
  const { createLogger, startService } = await import(pathToFileURL(serviceModule(root, 'src/service.ts')).href);
  const loaded = loadConfig({
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0',
    DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir,
    JWT_SECRET: 'bench-jwt-secret-0123456789-abcdefghijklmnopqrstuvwxyz', BCRYPT_COST: '4',
    AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000', LOG_LEVEL: process.env['BENCH_LOG_LEVEL'] ?? 'warn',
  });
  if (!loaded.ok) throw new Error(`config: ${loaded.error}`);
  const service = await startService(loaded.config, { logger: createLogger(loaded.config) });
  return {
    url: service.httpUrl,
    close: async () => {
      await service.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function main(): Promise<void> {
  if (!process.send) throw new Error('bench/http-server.ts is started by bench/http.ts (it needs an IPC channel)');
  const [mode, root] = process.argv.slice(2);
  const here = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
  const server = mode === 'bare' ? await startBare() : mode === 'minaret' ? await startMinaret(path.resolve(root ?? here)) : null;
  if (!server) throw new Error(`unknown mode ${JSON.stringify(mode)}: bare or minaret`);
  let close: (() => Record<string, unknown>) | undefined;
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(0), 3000).unref();
    await server.close();
    process.exit(0);
  };
  process.on('message', (msg: { type?: string }) => {
    if (msg?.type === 'start') close = openWindow();
    else if (msg?.type === 'stop' && close) send(close());
    else if (msg?.type === 'exit') void stop();
  });
  process.on('disconnect', () => void stop());
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
  send({ type: 'ready', pid: process.pid, url: server.url });
}

main().catch((err: unknown) => {
  console.error(`http-server: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
