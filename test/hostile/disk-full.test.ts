import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openDatabase } from '../../src/platform/db.ts';
import { API, member } from '../support/people.ts';
import { databaseSize, fillUntilRefused } from '../support/database.ts';
import { heartbeatPayload, mosqueWithOwner, publish, registerTransmitter, settle, statusPayload, waitFor, connectDevice, firmwareClient, getDevice } from '../support/devices.ts';
import { durableFiles, sha256, startTestService } from '../support/service.ts';

// docs/operator.md, "Faults": a full database (DATABASE_MAX_BYTES reached, against a real SQLite file) refuses writes
// with 503 storage_unavailable, keeps reads, tells /healthz, keeps its devices, and recovers once space is freed.

/** A status whose row cannot fit in any page's slack: the detail alone spills onto a new (overflow) page. */
const bigStatus = (status: string) => statusPayload(status, { detail: { note: 'n'.repeat(3800) } });

test('a full database: writes answer 503 storage_unavailable, reads work, healthz names db, devices stay, and it all recovers once space is freed', async (t) => {
  const { dir, env } = durableFiles(t, 'full');
  const dbFile = env.DATABASE_PATH!;

  // First run, no limit: the people, the mosque and a transmitter the rest of the test needs.
  const first = await startTestService(t, { env });
  const { owner, mosque } = await mosqueWithOwner(first);
  const tx = await registerTransmitter(first, owner.token, mosque.id);
  const tx2 = await registerTransmitter(first, owner.token, mosque.id, 'second');
  const reader = await member(first, 'reader@example.com');
  await first.http.post(`${API}/auth/signup`, { email: 'pw@example.com', password_hash: sha256('a password') });
  await first.service.close();

  // Second run on the same file (new ports: devices connect to ts.service.mqttUrl), capped at its size now
  // plus 64 KiB: room for some signups, whose deletion later frees whole pages.
  const cap = databaseSize(dbFile) + 64 * 1024;
  const ts = await startTestService(t, { env: { ...env, DATABASE_MAX_BYTES: String(cap) } });
  assert.deepEqual((await ts.http.get('/healthz')).body, { status: 'ok', db: 'ok', broker: 'ok' });
  const device = await firmwareClient(t, ts.service.mqttUrl, tx.credentials);
  await publish(device, `devices/${tx.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true });

  const requests = await fillUntilRefused(ts.http);
  assert.ok(requests > 8, `the cap left room for ${requests} signups`);

  // Reads, sign-in included (it writes nothing).
  assert.equal((await ts.http.get(`${API}/me`, owner.token)).status, 200);
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}`, owner.token)).status, 200);
  assert.equal((await ts.http.post(`${API}/auth/login`, { identifier_hash: sha256('pw@example.com'), password_hash: sha256('a password') })).status, 200);

  const health = await ts.http.get('/healthz');
  assert.equal(health.status, 503);
  assert.deepEqual(health.body, { status: 'degraded', db: 'full', broker: 'ok' });

  // Devices: the connected one stays connected through heartbeats and a status the disk cannot take;
  // that status is not acknowledged (no PUBACK), so the device still holds it.
  await publish(device, `devices/${tx.device.id}/heartbeat`, heartbeatPayload('ONLINE', { rssi: -42 }), { qos: 0 });
  let statusAcked = false;
  device.publish(`devices/${tx.device.id}/status`, bigStatus('PLAYING'), { qos: 1, retain: true }, (err) => {
    if (!err) statusAcked = true;
  });
  await settle(1000);
  assert.equal(statusAcked, false, 'a status that was not written is not acknowledged');
  assert.ok(device.connected, 'the device is still connected');
  const during = await getDevice(ts, owner.token, tx.device.id);
  assert.equal(during.status, 'ONLINE', 'the backend believes only what it wrote');
  assert.ok(during.counters.writes_failed >= 1, `writes_failed counted: ${JSON.stringify(during.counters)}`);
  // Another device can still connect while the disk is full.
  const second = await connectDevice(t, tx2.credentials, { url: ts.service.mqttUrl });
  assert.ok(second.connected);
  const peek = openDatabase(dbFile);
  t.after(() => peek.close());

  // The operator frees space (here: deletes the filler accounts with a second connection, as sqlite3 would).
  peek.prepare("DELETE FROM users WHERE email LIKE 'filler-%'").run();
  await waitFor('healthz ok again', async () => (await ts.http.get('/healthz')).status === 200, 5000);
  assert.deepEqual((await ts.http.get('/healthz')).body, { status: 'ok', db: 'ok', broker: 'ok' });
  assert.equal((await ts.http.patch(`${API}/devices/${tx.device.id}`, { name: 'renamed' }, owner.token)).status, 200);
  assert.equal((await ts.http.post(`${API}/auth/signup`, { email: 'after@example.com' })).status, 201);
  // The unacknowledged status: sent again on the device's next connection, written, acknowledged.
  device.stream.destroy();
  await waitFor('the status acknowledged after a reconnect', () => statusAcked, 5000);
  assert.equal((await getDevice(ts, owner.token, tx.device.id)).status, 'PLAYING');
  assert.ok(fs.existsSync(path.join(dir, 'minaret.db')));
});
