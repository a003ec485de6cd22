import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Aedes } from 'aedes';
import redisPersistence from 'aedes-persistence-redis';
import redisEmitter from 'mqemitter-redis';
import { Redis } from 'ioredis';
import { openDatabase } from '../../src/platform/db.ts';
import { durableFiles, startTestService, type TestService } from '../support/service.ts';
import { redisInstalled, startRedis, REDIS_SERVER } from '../support/redis.ts';
import {
  connectDevice, deviceEvents, getDevice, mosqueWithOwner, publish, registerTransmitter, settle, statusPayload, statusWill, waitFor, waitForStatus,
} from '../support/devices.ts';

// A stored will is ingested only when the device has no live connection anywhere. With
// REDIS_URL, aedes publishes the stored wills of a broker process whose heartbeat stopped, and passes the
// device's live client when it is connected to the publishing process. (The same within one process, a
// taken-over connection's will: test/broker/connect.test.ts.)

/** The broker heartbeat of the services here: a silent process's wills come up within about a second. */
const HEARTBEAT_MS = 200;

/**
 * Leaves in Redis the will a broker process stored for `deviceId` before it died: a real aedes with the
 * Redis persistence stores it and stops without publishing it (it has no client to close).
 */
async function willOfDeadProcess(url: string, deviceId: string): Promise<string> {
  const id = `dead-${crypto.randomBytes(4).toString('hex')}`;
  const conn = new Redis(url);
  const dead = await Aedes.createBroker({ id, persistence: redisPersistence({ conn }) as never, mq: redisEmitter({ connectionString: url }) as never });
  const will = { cmd: 'publish' as const, topic: `devices/${deviceId}/status`, payload: Buffer.from(JSON.stringify({ v: '1.0', status: 'OFFLINE', reason: 'lwt', ts: 1_767_225_600 })), qos: 1 as const, retain: true, dup: false };
  await ((dead as unknown as { persistence: unknown }).persistence as { putWill(client: { id: string }, packet: typeof will): Promise<void> }).putWill({ id: deviceId }, will);
  await new Promise<void>((resolve) => dead.close(() => resolve()));
  conn.disconnect();
  return `will:${id}:${deviceId}`;
}

test('with REDIS_URL, a dead process\'s stored will is ignored while the device is connected here or to another process, and ingested when it is connected nowhere', { timeout: 60_000 }, async (t) => {
  if (!redisInstalled()) {
    t.skip(`redis-server is not installed at ${REDIS_SERVER}; the Redis mode is untested here`);
    return;
  }
  const redis = await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-wills-'));
  const env = { REDIS_URL: redis.url, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir };
  const services: TestService[] = [];
  const a = await startTestService(t, { env, logLevel: 'warn', brokerHeartbeatMs: HEARTBEAT_MS });
  services.push(a);
  const b = await startTestService(t, { env, logLevel: 'warn', brokerHeartbeatMs: HEARTBEAT_MS });
  services.push(b);
  const probe = new Redis(redis.url);
  // After the services' own hooks (after hooks run in order): Redis goes last.
  t.after(() => {
    probe.disconnect();
    redis.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const { owner, mosque } = await mosqueWithOwner(a);
  const hereTx = await registerTransmitter(a, owner.token, mosque.id, 'connected to b');
  const elsewhereTx = await registerTransmitter(a, owner.token, mosque.id, 'connected to a');
  const goneTx = await registerTransmitter(a, owner.token, mosque.id, 'connected nowhere');
  // b learns of devices registered through a at its next registry reload; it finds unknown ones on CONNECT.
  const here = await connectDevice(t, { ...hereTx.credentials, mqtt_url: b.service.mqttUrl }, { will: statusWill(hereTx.device.id) });
  const elsewhere = await connectDevice(t, elsewhereTx.credentials, { will: statusWill(elsewhereTx.device.id) });
  const gone = await connectDevice(t, goneTx.credentials, { will: statusWill(goneTx.device.id) });
  await publish(here, `devices/${hereTx.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await publish(elsewhere, `devices/${elsewhereTx.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await publish(gone, `devices/${goneTx.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  await new Promise<void>((resolve) => gone.end(false, {}, () => resolve())); // a clean DISCONNECT: no will of its own
  await waitFor('disconnected', async () => (await getDevice(a, owner.token, goneTx.device.id)).connected === false);

  const keys = [
    await willOfDeadProcess(redis.url, hereTx.device.id),
    await willOfDeadProcess(redis.url, elsewhereTx.device.id),
    await willOfDeadProcess(redis.url, goneTx.device.id),
  ];
  // Every stored will of the dead processes is published and deleted within a few heartbeats.
  await waitFor('the dead processes\' wills handled', async () => {
    const left = await probe.lrange('will', 0, -1);
    return keys.every((k) => !left.includes(k));
  }, 10_000);

  // Connected nowhere: the will is the truth.
  const offline = await waitForStatus(a, owner.token, goneTx.device.id, 'OFFLINE', 3000);
  assert.equal(offline.status_detail.reason, 'lwt');
  await settle(300);
  // Connected to b, which aedes handed the live client; connected to a, which the row names.
  for (const [what, reg] of [['connected to the process that published the will', hereTx], ['connected to another process', elsewhereTx]] as const) {
    const device = await getDevice(a, owner.token, reg.device.id);
    assert.equal(device.status, 'ONLINE', what);
    const offlineEvents = (await deviceEvents(a, owner.token, reg.device.id)).filter((e) => e.kind === 'status' && e.to === 'OFFLINE');
    assert.deepEqual(offlineEvents, [], what);
  }
  assert.equal(here.connected && elsewhere.connected, true);
});

test('a single process releases, at start, the connection claims a run with REDIS_URL left in the rows (they would name a process that is gone)', async (t) => {
  const { env } = durableFiles(t, 'claims');
  const first = await startTestService(t, { env, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(first);
  const tx = await registerTransmitter(first, owner.token, mosque.id, 'claimed by a dead process');
  await first.service.close();
  const db = openDatabase(env.DATABASE_PATH);
  db.prepare('UPDATE devices SET connected_broker = ? WHERE id = ?').run('dead-process', tx.device.id);
  db.close();

  const second = await startTestService(t, { env, logLevel: 'warn' });
  const claim = () => {
    const reader = openDatabase(env.DATABASE_PATH);
    try {
      return reader.prepare<[string], { connected_broker: string | null }>('SELECT connected_broker FROM devices WHERE id = ?').get(tx.device.id)!.connected_broker;
    } finally {
      reader.close();
    }
  };
  assert.equal(claim(), null);
  // A single process claims nothing on CONNECT either (no write per CONNECT).
  const client = await connectDevice(t, { ...tx.credentials, mqtt_url: second.service.mqttUrl });
  await publish(client, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { retain: true });
  assert.equal(claim(), null);
});
