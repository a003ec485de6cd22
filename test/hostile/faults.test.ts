import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openDatabase } from '../../src/platform/db.ts';
import type { OutgoingMessage, Transport } from '../../src/platform/notify.ts';
import { connectDevice, heartbeatPayload, mosqueWithOwner, publish, registerTransmitter, statusPayload, waitFor } from '../support/devices.ts';
import { startTestService, type TestService } from '../support/service.ts';

// docs/operator.md, "Faults": faults inside the process (a write lock held by another process, a part that fails or
// hangs on the way down) never end it and never lose what it had accepted.

const logged = (ts: TestService, msg: RegExp) => ts.logs.map((l) => JSON.parse(l) as Record<string, any>).filter((l) => msg.test(String(l.msg)));

async function transmitterOnline(ts: TestService, t: Parameters<typeof connectDevice>[0]) {
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const device = await connectDevice(t, tx.credentials);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });
  return { id: tx.device.id, device };
}

/**
 * GET /healthz, once more if the kept-alive socket was reset: a write waiting out the busy timeout holds the
 * event loop for 5 s, long enough for the server's keep-alive timeout to close a socket the client reuses.
 */
async function healthz(ts: TestService) {
  try {
    return await ts.http.get('/healthz');
  } catch {
    return ts.http.get('/healthz');
  }
}

test('a flush refused while another process holds the write lock keeps its batch and writes it once the lock is gone', async (t) => {
  const ts = await startTestService(t);
  const { id, device } = await transmitterOnline(ts, t);
  const other = openDatabase(ts.config.databasePath);
  t.after(() => other.close());
  const rssiInFile = () => (other.prepare('SELECT rssi FROM devices WHERE id = ?').get(id) as { rssi: number | null }).rssi;

  other.exec('BEGIN IMMEDIATE'); // as a second Minaret process or an operator's sqlite3 would
  await publish(device, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE', { rssi: -42 }), { qos: 0 });
  // A flush waits out the busy timeout (5 s), is refused, and is reported once, not thrown.
  await waitFor('the refused flush reported', () => logged(ts, /^telemetry flush: the database cannot take writes \(busy\)/).length > 0, 15_000);
  const health = await healthz(ts);
  assert.equal(health.status, 503);
  assert.deepEqual(health.body, { status: 'degraded', db: 'busy', broker: 'ok' });
  assert.equal(rssiInFile(), null, 'nothing of the heartbeat is written yet');
  assert.ok(device.connected, 'the device is still connected');

  other.exec('ROLLBACK');
  await waitFor('the kept heartbeat written by a later flush', () => rssiInFile() === -42, 10_000);
  await waitFor('healthz ok again', async () => (await healthz(ts)).status === 200, 5000);
});

/** A transport whose close fails or never ends: the notifier, one of the parts a stop closes. */
function transportClosing(how: 'throws' | 'hangs', box: { into: OutgoingMessage[] }): Transport {
  return {
    name: `closing-${how}`,
    deliver: async (m) => void box.into.push(m),
    close: () => (how === 'throws' ? Promise.reject(new Error('transport refused to close')) : new Promise<void>(() => undefined)),
  };
}

for (const how of ['throws', 'hangs'] as const) {
  test(`a part whose close ${how}: the stop goes on, and the last telemetry flush and db.close still run`, async (t) => {
    const box = { into: [] as OutgoingMessage[] };
    const ts = await startTestService(t, { transport: transportClosing(how, box), env: { SHUTDOWN_TIMEOUT_S: '2' } });
    box.into = ts.messages; // the superadmin's sign-in reads its OTP from there
    const { id, device } = await transmitterOnline(ts, t);
    // Held in memory until a flush (every 2 s): only the last flush, at shutdown, writes it.
    await publish(device, `devices/${id}/heartbeat`, heartbeatPayload('ONLINE', { rssi: -57 }), { qos: 0 });
    await new Promise((r) => setTimeout(r, 50));

    const started = performance.now();
    await ts.service.close();
    const took = performance.now() - started;
    assert.ok(took < 8000, `closed within the deadline and some: ${Math.round(took)} ms`);
    const expected = how === 'throws' ? /^shutdown: a part failed to stop; going on/ : /^shutdown: a part did not stop before the deadline/;
    assert.equal(logged(ts, expected)[0]?.closer, 'notifier');
    assert.ok(logged(ts, /^minaret stopped$/).length === 1);
    // db.close ran: SQLite checkpoints the WAL into the file and removes it on the last close.
    assert.equal(fs.existsSync(`${ts.config.databasePath}-wal`), false, 'the WAL was checkpointed and removed by db.close');
    const db = openDatabase(ts.config.databasePath);
    t.after(() => db.close());
    assert.equal((db.prepare('SELECT rssi FROM devices WHERE id = ?').get(id) as { rssi: number }).rssi, -57, 'the last flush ran after the failed part');
  });
}

const REDIS_SERVER = '/usr/bin/redis-server';

/** A redis-server on a free loopback port, without persistence; resolves once it accepts connections. */
async function startRedis(t: Parameters<typeof connectDevice>[0]): Promise<{ url: string; kill: () => void }> {
  const probe = net.createServer();
  const port = await new Promise<number>((resolve) => probe.listen(0, '127.0.0.1', () => resolve((probe.address() as net.AddressInfo).port)));
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  const child = spawn(REDIS_SERVER, ['--save', '', '--appendonly', 'no', '--port', String(port), '--bind', '127.0.0.1'], { stdio: 'ignore' });
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  t.after(kill);
  await waitFor('redis-server accepting', () => new Promise<boolean>((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => (socket.destroy(), resolve(true))).once('error', () => resolve(false));
  }), 5000);
  return { url: `redis://127.0.0.1:${port}`, kill };
}

test('Redis going away under the broker (REDIS_URL) does not end the process: HTTP and the other door keep answering', { timeout: 60_000 }, async (t) => {
  if (!fs.existsSync(REDIS_SERVER)) return t.skip(`no redis-server at ${REDIS_SERVER}`);
  const redis = await startRedis(t);
  const ts = await startTestService(t, { env: { REDIS_URL: redis.url } });
  const { id, device } = await transmitterOnline(ts, t);

  redis.kill();
  // Retained status and session writes now fail inside aedes' persistence: reported, never thrown.
  device.publish(`devices/${id}/status`, statusPayload('PLAYING', { detail: { source: 'local' } }), { qos: 1, retain: true });
  device.publish(`devices/${id}/heartbeat`, heartbeatPayload('PLAYING'), { qos: 0 });
  await new Promise((r) => setTimeout(r, 3000));
  assert.equal((await ts.http.get('/healthz')).status, 200, 'the HTTP door still answers (and the database is fine)');
  assert.ok(logged(ts, /^mqtt broker/).length + logged(ts, /^redis connection/).length > 0, 'the Redis failure was reported');
});
