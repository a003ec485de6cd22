import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { Redis } from 'ioredis';

/** A real redis-server for the REDIS_URL tests, on a free port of 127.0.0.1, without persistence. */
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
 * Starts redis-server; resolves with its URL once it answers PING. `stop` kills it: register it with
 * t.after after the services that use it (after hooks run in order), so they close first.
 */
export async function startRedis(): Promise<{ url: string; stop: () => void }> {
  const port = await freePort();
  const child: ChildProcess = spawn(REDIS_SERVER, ['--save', '', '--appendonly', 'no', '--port', String(port), '--bind', '127.0.0.1'], { stdio: 'ignore' });
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', kill); // a safety net should the test die before its hooks
  const stop = () => {
    kill();
    process.off('exit', kill);
  };
  const deadline = Date.now() + 5000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
    const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    try {
      await probe.connect();
      if ((await probe.ping()) === 'PONG') return { url: `redis://127.0.0.1:${port}`, stop };
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
