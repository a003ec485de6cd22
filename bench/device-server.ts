/**
 * Child process of bench/devices.ts: one whole Minaret service (HTTP API + embedded broker), configured
 * from the environment the parent passes, so that its memory and CPU are measured apart from the load
 * generator's.
 *
 *   node --expose-gc --import tsx bench/device-server.ts      (started by bench/devices.ts, IPC channel required)
 *
 * IPC protocol (process.send / 'message'), shared with bench/bare-broker.ts:
 *   child -> {type:'ready', pid, httpUrl, mqttUrl}     once listening
 *   child -> {type:'otp', purpose, code}                 a one-time code the notifier delivered (superadmin login)
 *   parent -> {type:'mem'}   child -> {type:'mem', rss, heapUsed, heapTotal, external, arrayBuffers}  after a full GC
 *   parent -> {type:'stop'}  child closes the service and exits 0
 *   parent -> {type:'starts'}  child -> {type:'starts', starts: {broadcast id: epoch ms}}  each start since the last ask
 * The child exits by itself when the IPC channel closes (the parent died).
 */
import { pathToFileURL } from 'node:url';
import type { Service } from '../src/service.ts';
import { ROOT, serviceModule } from './support.ts';

// What npm start runs in this checkout: the compiled service when it runs dist/ (bench/support.ts, serviceModule).
const { loadConfig } = (await import(pathToFileURL(serviceModule(ROOT, 'src/platform/config.ts')).href)) as typeof import('../src/platform/config.ts');
const { createLogger, startService } = (await import(pathToFileURL(serviceModule(ROOT, 'src/service.ts')).href)) as typeof import('../src/service.ts');

const send = (msg: Record<string, unknown>): void => {
  if (process.connected) process.send?.(msg);
};

function memory(): Record<string, unknown> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc) {
    gc();
    gc();
  }
  const m = process.memoryUsage();
  return { type: 'mem', rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers, gc: gc !== undefined };
}

async function main(): Promise<void> {
  if (!process.send) throw new Error('bench/device-server.ts is started by bench/devices.ts (it needs an IPC channel)');
  const loaded = loadConfig(process.env);
  if (!loaded.ok) throw new Error(`config: ${loaded.error}`);
  const logger = createLogger(loaded.config);
  let service: Service | undefined;
  let stopping = false;
  const stop = async (code: number) => {
    if (stopping) return;
    stopping = true;
    const force = setTimeout(() => process.exit(code), 5000);
    force.unref();
    try {
      await service?.close();
    } finally {
      process.exit(code);
    }
  };
  process.on('disconnect', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));
  process.on('SIGINT', () => void stop(0));
  // Each broadcast's start as this process told its listeners (wall clock, ms), by id: the azaan minute's
  // latency from a mosque's start (bench/cluster/azaan-minute.ts). {type:'starts'} answers and forgets them.
  const starts = new Map<string, number>();
  process.on('message', (msg: { type?: string }) => {
    if (msg?.type === 'mem') send(memory());
    else if (msg?.type === 'stop') void stop(0);
    else if (msg?.type === 'starts') {
      send({ type: 'starts', starts: Object.fromEntries(starts) });
      starts.clear();
    }
  });

  service = await startService(loaded.config, {
    logger,
    transport: {
      name: 'bench',
      deliver: async (m) => {
        if (m.code) send({ type: 'otp', purpose: m.purpose, code: m.code });
      },
    },
  });
  service.broadcasts.listen({ started: (b) => void starts.set(b.id, Date.now()), stopped: () => undefined });
  send({ type: 'ready', pid: process.pid, httpUrl: service.httpUrl, mqttUrl: service.mqttUrl });
}

main().catch((err: unknown) => {
  console.error(`device-server: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
