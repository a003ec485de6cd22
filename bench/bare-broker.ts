/**
 * Child process of bench/devices.ts: the baseline, a bare aedes broker (no hooks, in-memory store, no
 * database) on a TCP listener made the way Minaret makes its own (noDelay). Any credentials are accepted.
 * With REDIS_URL its persistence and pub/sub are in Redis (below).
 *
 *   node --expose-gc --import tsx bench/bare-broker.ts        (started by bench/devices.ts, IPC channel required)
 *
 * IPC protocol: the one of bench/device-server.ts ('ready' carries only mqttUrl; no 'otp').
 */
import net from 'node:net';
import { Aedes, type AedesOptions } from 'aedes';

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

/**
 * REDIS_URL: the persistence and the pub/sub a broker shared by several hosts needs, as their libraries ship
 * (aedes-persistence-redis, mqemitter-redis), none of Minaret's own parts: the baseline of the cluster benches'
 * reconnect storm. Without it, the in-memory broker.
 */
async function redisOptions(url: string | undefined): Promise<AedesOptions> {
  if (!url) return {};
  const { default: redisPersistence } = await import('aedes-persistence-redis');
  const { default: redisEmitter } = await import('mqemitter-redis');
  const { Redis } = await import('ioredis');
  return { persistence: redisPersistence({ conn: new Redis(url) }), mq: redisEmitter({ connectionString: url }) } as unknown as AedesOptions;
}

async function main(): Promise<void> {
  if (!process.send) throw new Error('bench/bare-broker.ts is started by bench/devices.ts (it needs an IPC channel)');
  const aedes = await Aedes.createBroker(await redisOptions(process.env['REDIS_URL']));
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    aedes.handle(socket);
  });
  let stopping = false;
  const stop = (code: number) => {
    if (stopping) return;
    stopping = true;
    const force = setTimeout(() => process.exit(code), 3000);
    force.unref();
    server.close();
    aedes.close(() => {
      for (const s of sockets) s.destroy();
      process.exit(code);
    });
  };
  process.on('disconnect', () => stop(0));
  process.on('SIGTERM', () => stop(0));
  process.on('SIGINT', () => stop(0));
  process.on('message', (msg: { type?: string }) => {
    if (msg?.type === 'mem') send(memory());
    else if (msg?.type === 'stop') stop(0);
  });
  const host = process.env['HOST'] ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  send({ type: 'ready', pid: process.pid, mqttUrl: `mqtt://${host}:${port}` });
}

main().catch((err: unknown) => {
  console.error(`bare-broker: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
