import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { startTestService, type TestService } from '../support/service.ts';
import {
  connectDevice, getDevice, heartbeatPayload, mosqueWithOwner, nextMessage, publish, registerTransmitter, statusPayload, subscribeCode,
} from '../support/devices.ts';

// Contract 1, REDIS_URL: broker persistence and pub/sub go through Redis. A real redis-server, on a free port.

const REDIS_SERVER = '/usr/bin/redis-server';

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Starts redis-server without persistence; resolves once it answers PING. */
async function startRedis(port: number): Promise<ChildProcess> {
  const child = spawn(REDIS_SERVER, ['--save', '', '--appendonly', 'no', '--port', String(port), '--bind', '127.0.0.1'], { stdio: 'ignore' });
  const deadline = Date.now() + 5000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
    const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    try {
      await probe.connect();
      if ((await probe.ping()) === 'PONG') return child;
    } catch {
      /* not up yet */
    } finally {
      probe.disconnect();
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error('redis-server did not answer within 5 s');
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('with REDIS_URL, retained state lives in Redis and outlives the process: a second service serves the retained config', { timeout: 30_000 }, async (t) => {
  if (!fs.existsSync(REDIS_SERVER)) {
    t.skip(`redis-server is not installed at ${REDIS_SERVER}; the Redis mode is untested here`);
    return;
  }
  const port = await freePort();
  const redisProcess = await startRedis(port);
  const killRedis = () => {
    if (redisProcess.exitCode === null && redisProcess.signalCode === null) redisProcess.kill('SIGKILL');
  };
  process.once('exit', killRedis); // a safety net should the test die before its hooks
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-redis-'));
  const services: TestService[] = [];
  const redis = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
  // Registered first, so it runs before startTestService's own hooks (which then close nothing twice).
  t.after(async () => {
    for (const s of services) await s.service.close();
    redis.disconnect();
    killRedis();
    process.off('exit', killRedis);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const env = { REDIS_URL: `redis://127.0.0.1:${port}`, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir };

  // --- first process ---
  const first = await startTestService(t, { env, logLevel: 'warn' });
  services.push(first);
  const { owner, mosque } = await mosqueWithOwner(first, { stream_url: 'https://icecast.example.org/noor' });
  const tx = await registerTransmitter(first, owner.token, mosque.id);
  const id = tx.device.id;
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${id}/status`, statusPayload('ONLINE', { fw: '2.0.1' }), { retain: true });
  // A bad retained status and a retained heartbeat must not become retained state.
  await publish(device, `devices/${id}/status`, '{"v":"1.0","status":"BROKEN"', { retain: true });
  await publish(device, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE'), { qos: 1, retain: true });
  assert.equal((await getDevice(first, owner.token, id)).status, 'ONLINE');

  const retainedStatus = await redis.hgetBuffer('retained', `devices/${id}/status`);
  assert.ok(retainedStatus, 'the status is retained in Redis');
  assert.ok(retainedStatus.includes('"status":"ONLINE"'), 'the good status, not the bad one');
  assert.equal(retainedStatus.includes('BROKEN'), false);
  assert.equal(await redis.hexists('retained', `devices/${id}/heartbeat`), 0, 'heartbeats are never retained');
  assert.equal(await redis.hexists('retained', `$dropped/${id}`), 0);
  const retainedConfig = await redis.hgetBuffer('retained', `devices/${id}/config`);
  assert.ok(retainedConfig?.includes(`"config_version":${tx.device.config_version}`), 'the config is retained in Redis');

  device.end(true);
  const closing = Date.now();
  await first.service.close();
  assert.ok(Date.now() - closing < 3000, 'the first service closes promptly');
  assert.equal(await redis.hexists('retained', `devices/${id}/config`), 1, 'the retained config outlives the process');

  // --- second process: same database, same Redis ---
  const second = await startTestService(t, { env, logLevel: 'warn' });
  services.push(second);
  const health = await second.http.get('/healthz');
  assert.equal(health.status, 200);
  assert.deepEqual(health.body, { status: 'ok', db: 'ok', broker: 'ok' });

  const again = await connectDevice(t, { ...tx.credentials, mqtt_url: second.service.mqttUrl });
  const config = nextMessage(again, `devices/${id}/config`);
  assert.equal(await subscribeCode(again, `devices/${id}/config`), 1);
  const { body, retain } = await config;
  assert.equal(retain, true);
  assert.deepEqual(body, {
    v: '1.0', config_version: tx.device.config_version, heartbeat_secs: 60, log_enabled: false,
    mosque_id: mosque.id, stream_url: 'https://icecast.example.org/noor',
  });
  // The device record came back from SQLite; the second process hears the device.
  await publish(again, `devices/${id}/status`, statusPayload('PLAYING', { detail: { source: 'stream' } }), { retain: true });
  const seen = await getDevice(second, owner.token, id);
  assert.equal(seen.status, 'PLAYING');
  assert.equal(seen.fw, '2.0.1');
  assert.equal(seen.connected, true);
  assert.ok((await redis.hgetBuffer('retained', `devices/${id}/status`))?.includes('"status":"PLAYING"'));

  again.end(true);
  const closingSecond = Date.now();
  await second.service.close();
  assert.ok(Date.now() - closingSecond < 3000, 'the second service closes promptly');
});
