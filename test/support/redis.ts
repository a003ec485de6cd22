import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { Redis } from 'ioredis';

/** A real redis-server for the Redis mode (REDIS_URL), on a free port, without persistence. */

export const REDIS_SERVER = '/usr/bin/redis-server';

export const redisInstalled = () => fs.existsSync(REDIS_SERVER);

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts redis-server and waits for PING; returns its URL, a client and `stop`. Register `t.after(stop)`
 * after starting the service: after-hooks run in the order registered, and the service must close first.
 * `onPort` starts it again where a stopped one was (a Redis outage and its end). `address`: one of this host's
 * addresses to listen on besides 127.0.0.1 (the bridge of test/platform/hosts.ts); the URL then names it.
 */
export async function startRedis(onPort?: number, address?: string): Promise<{ url: string; client: Redis; stop: () => void }> {
  const port = onPort ?? (await freePort());
  // Without a password Redis answers only loopback clients (protected mode): the bridge's clients are the test's own.
  const bind = address ? ['127.0.0.1', address, '--protected-mode', 'no'] : ['127.0.0.1'];
  const child: ChildProcess = spawn(REDIS_SERVER, ['--save', '', '--appendonly', 'no', '--port', String(port), '--bind', ...bind], { stdio: 'ignore' });
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', kill); // a safety net should the test die before its hooks
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1, lazyConnect: true });
  client.on('error', () => undefined); // the server goes away at the end of the test
  const stop = () => {
    client.disconnect();
    kill();
    process.off('exit', kill);
  };
  const deadline = Date.now() + 5000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
    const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined); // refused until the server is up
    try {
      await probe.connect();
      if ((await probe.ping()) === 'PONG') {
        await client.connect();
        return { url: `redis://${address ?? '127.0.0.1'}:${port}`, client, stop };
      }
    } catch {
      /* not up yet */
    } finally {
      probe.disconnect();
    }
    if (Date.now() > deadline) {
      stop();
      throw new Error('redis-server did not answer within 5 s');
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
