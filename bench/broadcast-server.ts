/**
 * Child process of bench/broadcast.ts: either the whole Minaret service (HTTP API + embedded broker), configured
 * from the environment the parent passes (its notifier is the real one NOTIFY_TRANSPORT names, a webhook into
 * the bench process), or, with the argument `bare`, the baseline: a bare aedes broker (no hooks, in-memory
 * store) on a TCP listener made the way Minaret makes its own (noDelay). Any credentials are accepted there.
 *
 *   node --import tsx bench/broadcast-server.ts [minaret|bare]     (started by bench/broadcast.ts, IPC required)
 *
 * IPC: child -> {type:'ready', pid, httpUrl?, mqttUrl} once listening; parent -> {type:'stop'}: the child
 * closes and exits 0. The child also exits when the IPC channel closes (the parent died) or on SIGTERM/SIGINT.
 */
import net from 'node:net';
import { Aedes } from 'aedes';
import { pathToFileURL } from 'node:url';
import type { Service } from '../src/service.ts';
import { ROOT, serviceModule } from './support.ts';

const send = (msg: Record<string, unknown>): void => {
  if (process.connected) process.send?.(msg);
};

/** Wires the exits: a 'stop' message, a closed IPC channel, SIGTERM/SIGINT; never hangs longer than 5 s. */
function onStop(close: () => Promise<void>): void {
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    const force = setTimeout(() => process.exit(0), 5000);
    force.unref();
    try {
      await close();
    } finally {
      process.exit(0);
    }
  };
  process.on('disconnect', () => void stop());
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
  process.on('message', (msg: { type?: string }) => {
    if (msg?.type === 'stop') void stop();
  });
}

async function minaret(): Promise<void> {
  // Loaded here, not at the top: the bare broker's process holds none of Minaret's code.
  // What npm start runs in this checkout: the compiled service when it runs dist/ (bench/support.ts, serviceModule).
  const { loadConfig } = (await import(pathToFileURL(serviceModule(ROOT, 'src/platform/config.ts')).href)) as typeof import('../src/platform/config.ts');
  const { createLogger, startService } = (await import(pathToFileURL(serviceModule(ROOT, 'src/service.ts')).href)) as typeof import('../src/service.ts');
  const loaded = loadConfig(process.env);
  if (!loaded.ok) throw new Error(`config: ${loaded.error}`);
  const logger = createLogger(loaded.config);
  let service: Service | undefined;
  onStop(async () => {
    await service?.close();
  });
  service = await startService(loaded.config, { logger });
  send({ type: 'ready', pid: process.pid, httpUrl: service.httpUrl, mqttUrl: service.mqttUrl });
}

async function bare(): Promise<void> {
  const aedes = await Aedes.createBroker();
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    aedes.handle(socket);
  });
  onStop(
    () =>
      new Promise<void>((resolve) => {
        server.close();
        aedes.close(() => {
          for (const s of sockets) s.destroy();
          resolve();
        });
      }),
  );
  const host = process.env['HOST'] ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  send({ type: 'ready', pid: process.pid, mqttUrl: `mqtt://${host}:${port}` });
}

const mode = process.argv[2] ?? 'minaret';
if (!process.send) {
  console.error('bench/broadcast-server.ts is started by bench/broadcast.ts (it needs an IPC channel)');
  process.exit(1);
}
(mode === 'bare' ? bare() : minaret()).catch((err: unknown) => {
  console.error(`broadcast-server (${mode}): ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
