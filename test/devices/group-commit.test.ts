import path from 'node:path';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import mqtt from 'mqtt';
import { openDatabase } from '../../src/platform/db.ts';
import { sql } from 'kysely';
import type { Store, StoreTransaction } from '../../src/platform/store/store.ts';
import { createGroupCommit } from '../../src/devices/group-commit.ts';
import { API } from '../support/people.ts';
import { databaseSize, fillUntilRefused, sqliteOnly, storeOf, testStore } from '../support/database.ts';
import { connectPacket, rawTcp, varint } from '../support/hostile.ts';
import { connectDevice, firmwareClient, getDevice, mosqueWithOwner, publish, registerTransmitter, settle, statusPayload, waitFor, type Credentials, type Registered } from '../support/devices.ts';
import { durableFiles, startTestService, type TestService } from '../support/service.ts';
import { baseEnv, confirmEmailByLog, listening, startProcess, tempDir } from '../support/process.ts';
import { httpClient, sha256 } from '../support/service.ts';

// Statuses are written in group commits (one transaction per event-loop turn) and each
// PUBACK still means "written": these tests read the database itself after the acknowledgements, through a
// connection of their own (the SQLite file, or the service's PostgreSQL), or the file as sqlite3 would.

/** The database file, read-only, as an operator's sqlite3 would see it. */
function readFile(t: TestContext, file: string): Database.Database {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  t.after(() => db.close());
  return db;
}

/** The service's store through a connection of its own, closed when the test ends. */
async function readStore(t: TestContext, ts: TestService): Promise<Store> {
  const { store, close } = await storeOf(ts);
  t.after(close);
  return store;
}

const deviceStatus = (store: Store, deviceId: string) =>
  store.selectFrom('devices').select(['status', 'status_reason']).where('id', '=', deviceId).executeTakeFirstOrThrow();

const statusRows = (store: Store, deviceId: string) =>
  store.selectFrom('mosque_device_events').select(['from_status', 'to_status', 'reason']).where('device_id', '=', deviceId).where('kind', '=', 'status').orderBy('id').execute();

/** A QoS 1 retained PUBLISH packet, built by hand so that several can go out in one TCP write. */
function publishPacket(topic: string, payload: string, messageId: number): Buffer {
  const t = Buffer.from(topic, 'utf8');
  const body = Buffer.concat([Buffer.from([t.length >> 8, t.length & 0xff]), t, Buffer.from([messageId >> 8, messageId & 0xff]), Buffer.from(payload, 'utf8')]);
  return Buffer.concat([Buffer.from([0x33]), varint(body.length), body]);
}

test('statuses many devices publish at once are all in the database file once acknowledged, each device ending at its last one', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const devices: Registered[] = [];
  for (let i = 0; i < 24; i++) devices.push(await registerTransmitter(ts, owner.token, mosque.id, `tx ${i}`));
  const clients = await Promise.all(devices.map((d) => connectDevice(t, d.credentials, { url: ts.service.mqttUrl })));

  // Every device sends four transitions without waiting, all devices at once: they land in shared batches.
  const states = ['ONLINE', 'PLAYING', 'ONLINE', 'PLAYING'];
  const acked: Array<Promise<void>> = [];
  devices.forEach((d, i) => {
    states.forEach((status, k) => {
      acked.push(publish(clients[i]!, `devices/${d.device.id}/status`, statusPayload(status, { reason: `burst-${i}-${k}` }), { qos: 1, retain: true }));
    });
  });
  await Promise.all(acked);

  const db = await readStore(t, ts);
  for (const [i, d] of devices.entries()) {
    assert.deepEqual(await deviceStatus(db, d.device.id), { status: 'PLAYING', status_reason: `burst-${i}-3` }, `device ${i}'s row holds its last status`);
    assert.deepEqual(await statusRows(db, d.device.id), [
      { from_status: 'UNKNOWN', to_status: 'ONLINE', reason: `burst-${i}-0` },
      { from_status: 'ONLINE', to_status: 'PLAYING', reason: `burst-${i}-1` },
      { from_status: 'PLAYING', to_status: 'ONLINE', reason: `burst-${i}-2` },
      { from_status: 'ONLINE', to_status: 'PLAYING', reason: `burst-${i}-3` },
    ], `device ${i}'s transitions, in order`);
  }
  assert.equal((await getDevice(ts, owner.token, devices[0]!.device.id)).status, 'PLAYING');
});

test('two statuses of one device in one batch leave the later one as its state, and both transitions in order', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  const port = Number(new URL(ts.service.mqttUrl).port);
  const conn = await rawTcp(port);
  t.after(() => conn.socket.destroy());
  let received = Buffer.alloc(0);
  conn.socket.on('data', (chunk: Buffer) => (received = Buffer.concat([received, chunk])));
  conn.socket.write(connectPacket(id, id, tx.credentials.password));
  await waitFor('CONNACK 0', () => received.length >= 4 && received[0] === 0x20 && received[3] === 0);

  // One TCP write, two PUBLISH packets: aedes hands both to the hooks in the same turn, so one batch.
  conn.socket.write(Buffer.concat([
    publishPacket(`devices/${id}/status`, statusPayload('PLAYING', { reason: 'first' }), 1),
    publishPacket(`devices/${id}/status`, statusPayload('STREAM_ERROR', { reason: 'second', detail: { error: 'timeout' } }), 2),
  ]));
  const pubacks = () => {
    const ids: number[] = [];
    for (let i = 4; i + 3 < received.length; i += 4) if (received[i] === 0x40) ids.push(received.readUInt16BE(i + 2));
    return ids;
  };
  await waitFor('both PUBACKs', () => pubacks().length === 2);
  assert.deepEqual(pubacks(), [1, 2], 'acknowledged in the order sent');

  const db = await readStore(t, ts);
  assert.equal((await deviceStatus(db, id)).status, 'STREAM_ERROR');
  assert.deepEqual(await statusRows(db, id), [
    { from_status: 'UNKNOWN', to_status: 'PLAYING', reason: 'first' },
    { from_status: 'PLAYING', to_status: 'STREAM_ERROR', reason: 'second' },
  ]);
  assert.equal((await getDevice(ts, owner.token, id)).status, 'STREAM_ERROR', 'memory agrees with the row');

});

test('a batch whose commit fails keeps none of its writes and settles every one of them with the error', async (t) => {
  const { store } = await testStore(t);
  await sql`CREATE TABLE w (n INTEGER NOT NULL)`.execute(store);
  const insert = (trx: StoreTransaction, n: number) => sql`INSERT INTO w (n) VALUES (${n})`.execute(trx);
  const count = async () => Number((await sql<{ c: number | string }>`SELECT count(*) AS c FROM w`.execute(store)).rows[0]!.c);
  const commits = createGroupCommit(store, (err) => assert.fail(String(err)));
  const settled: Array<[number, boolean]> = [];
  for (let n = 1; n <= 5; n++) {
    commits.add({
      write: async (trx) => {
        if (n === 4) throw new Error('SQLITE_FULL: database or disk is full');
        await insert(trx, n);
      },
      settle: (err) => settled.push([n, err !== null]),
    });
  }
  await commits.flush();
  assert.deepEqual(settled, [[1, true], [2, true], [3, true], [4, true], [5, true]]);
  assert.equal(await count(), 0, 'nothing of the failed batch was kept');

  // The next batch is a fresh one: it commits.
  commits.add({ write: async (trx) => void (await insert(trx, 6)), settle: (err) => settled.push([6, err !== null]) });
  await commits.flush();
  assert.deepEqual(settled.at(-1), [6, false]);
  assert.equal(await count(), 1);
});

test('runAlone runs after the open batch and before the next one, never beside a batch', async (t) => {
  const { store } = await testStore(t);
  const commits = createGroupCommit(store, (err) => assert.fail(String(err)));
  const events: string[] = [];
  const slowWrite = (name: string) => ({
    write: async () => {
      events.push(`${name} begins`);
      await new Promise((r) => setTimeout(r, 50));
      events.push(`${name} ends`);
    },
    settle: () => undefined,
  });
  commits.add(slowWrite('batch 1'));
  const alone = commits.runAlone(async () => {
    events.push('alone begins');
    await new Promise((r) => setTimeout(r, 50));
    events.push('alone ends');
    return 7;
  });
  commits.add(slowWrite('batch 2')); // added while the first batch runs: it waits for the lone one
  assert.equal(await alone, 7);
  await commits.flush();
  assert.deepEqual(events, ['batch 1 begins', 'batch 1 ends', 'alone begins', 'alone ends', 'batch 2 begins', 'batch 2 ends']);
  // A lone run that fails fails for its caller only: the queue goes on.
  await assert.rejects(commits.runAlone(async () => { throw new Error('deadlock detected'); }), /deadlock/);
  commits.add(slowWrite('batch 3'));
  await commits.flush();
  assert.deepEqual(events.slice(-2), ['batch 3 begins', 'batch 3 ends']);
});

test('a full disk during a batch acknowledges none of its statuses, and the devices resend them after space returns', { skip: sqliteOnly('fills the SQLite file up to DATABASE_MAX_BYTES') }, async (t) => {
  const { dir, env } = durableFiles(t, 'gc-full');
  const first = await startTestService(t, { env, logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(first);
  const devices: Registered[] = [];
  for (let i = 0; i < 6; i++) devices.push(await registerTransmitter(first, owner.token, mosque.id, `tx ${i}`));
  await first.service.close();
  const size = databaseSize(env.DATABASE_PATH);

  const ts = await startTestService(t, { env: { ...env, DATABASE_MAX_BYTES: String(size + 64 * 1024) }, logLevel: 'error' });
  // Firmware-like clients: they reconnect by themselves and then send again what was not acknowledged.
  const clients = await Promise.all(devices.map((d) => firmwareClient(t, ts.service.mqttUrl, d.credentials)));
  await Promise.all(clients.map((c, i) => publish(c, `devices/${devices[i]!.device.id}/status`, statusPayload('ONLINE'), { qos: 1, retain: true })));
  await fillUntilRefused(ts.http);

  // All at once, each status too big for any page's slack: the batch cannot commit.
  const acked = new Set<number>();
  clients.forEach((c, i) => {
    c.publish(`devices/${devices[i]!.device.id}/status`, statusPayload('PLAYING', { reason: `full-${i}`, detail: { note: 'n'.repeat(3800) } }), { qos: 1, retain: true }, (err) => {
      if (!err) acked.add(i);
    });
  });
  await settle(1000);
  assert.equal(acked.size, 0, `no status of the failed batch acknowledged (acked: ${[...acked].join(', ')})`);
  assert.ok(clients.every((c) => c.connected), 'the devices stay connected');
  for (const d of devices) {
    const seen = await getDevice(ts, owner.token, d.device.id);
    assert.equal(seen.status, 'ONLINE', 'the backend believes only what it wrote');
    assert.ok(seen.counters.writes_failed >= 1, JSON.stringify(seen.counters));
  }

  // Space comes back; each device's next connection carries its unacknowledged status again.
  const peek = openDatabase(env.DATABASE_PATH);
  t.after(() => peek.close());
  peek.prepare("DELETE FROM users WHERE email LIKE 'filler-%'").run();
  await waitFor('healthz ok again', async () => (await ts.http.get('/healthz')).status === 200, 5000);
  for (const c of clients) c.stream.destroy();
  await waitFor('every resent status acknowledged', () => acked.size === devices.length, 10_000);
  const db = readFile(t, env.DATABASE_PATH);
  devices.forEach((d, i) => {
    const row = db.prepare<[string], { status: string; status_reason: string }>('SELECT status, status_reason FROM devices WHERE id = ?').get(d.device.id)!;
    assert.deepEqual(row, { status: 'PLAYING', status_reason: `full-${i}` });
  });
});

test('every status acknowledged before a kill -9 of the service process is in the database file afterwards', { skip: sqliteOnly('the process it kills runs on a SQLite file of its own, read afterwards') }, async (t) => {
  const dir = tempDir(t, 'minaret-gc-kill-');
  // Bursts beyond the default status budget, so every status sent is one the service writes.
  const run = startProcess(t, baseEnv(dir, { DEVICE_STATUS_BURST: '100000', DEVICE_STATUS_RATE: '10000', MAX_PLAYERS_PER_USER: '100' }));
  const { http_port, mqtt_port } = await listening(run);
  const http = httpClient(`http://127.0.0.1:${http_port}`);
  const signup = await http.post(`${API}/auth/signup`, { email: 'home@example.com', password_hash: sha256('a password') });
  assert.equal(signup.status, 201);
  const token = (signup.body as { access_token: string }).access_token;
  await confirmEmailByLog(run, http, token, 'home@example.com');
  const players: Array<{ id: string; creds: Credentials }> = [];
  for (let i = 0; i < 16; i++) {
    const r = await http.post(`${API}/devices`, { kind: 'stream_player', name: `p${i}` }, token);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const reg = r.body as Registered;
    players.push({ id: reg.device.id, creds: reg.credentials });
  }
  const url = `mqtt://127.0.0.1:${mqtt_port}`;
  const clients = await Promise.all(players.map(async (p) => {
    const c = mqtt.connect(url, { clientId: p.id, username: p.id, password: p.creds.password, protocolVersion: 4, reconnectPeriod: 0 });
    t.after(() => c.end(true));
    await new Promise<void>((resolve, reject) => c.once('connect', () => resolve()).once('error', reject));
    c.on('error', () => undefined);
    return c;
  }));

  // Each device keeps four statuses in flight, alternating states, every one with its own reason; the
  // process is killed from inside the callback of the 300th PUBACK, while others are on the wire.
  const acked: Array<{ id: string; reason: string }> = [];
  let killed = false;
  const sendNext = (i: number, k: number) => {
    if (killed) return;
    const reason = `kill-${i}-${k}`;
    clients[i]!.publish(`devices/${players[i]!.id}/status`, statusPayload(k % 2 ? 'PLAYING' : 'ONLINE', { reason }), { qos: 1, retain: true }, (err) => {
      if (err || killed) return;
      acked.push({ id: players[i]!.id, reason });
      if (acked.length >= 300) {
        killed = true;
        run.child.kill('SIGKILL');
        return;
      }
      sendNext(i, k + 4);
    });
  };
  clients.forEach((_, i) => [0, 1, 2, 3].forEach((k) => sendNext(i, k)));
  const exit = await run.exited;
  assert.equal(exit.signal, 'SIGKILL');
  assert.ok(acked.length >= 300);

  const db = readFile(t, path.join(dir, 'minaret.db'));
  const written = new Set(db.prepare<[], { device_id: string; reason: string }>("SELECT device_id, reason FROM mosque_device_events WHERE kind = 'status'").all().map((r) => `${r.device_id} ${r.reason}`));
  const missing = acked.filter((a) => !written.has(`${a.id} ${a.reason}`));
  assert.deepEqual(missing, [], `${missing.length} of ${acked.length} acknowledged statuses are not in the file`);
});

test('rows join the set at the batch\'s end; a write of another kind between them starts the next set, so the order holds', async (t) => {
  const { store } = await testStore(t);
  const commits = createGroupCommit(store, (err) => assert.fail(String(err)));
  const order: string[] = [];
  class Set {
    readonly rows: number[] = [];
    write() {
      order.push(`set [${this.rows.join(', ')}]`);
    }
    settle(err: unknown) {
      order.push(`settled [${this.rows.join(', ')}]${err ? ' with an error' : ''}`);
    }
  }
  const open = () => new Set();
  commits.join(open).rows.push(1);
  commits.join(open).rows.push(2);
  commits.add({ write: () => void order.push('other'), settle: () => void order.push('other settled') });
  commits.join(open).rows.push(3);
  assert.equal(commits.pending(), 4, 'each row counts toward the batch');
  await commits.flush();
  assert.deepEqual(order, ['set [1, 2]', 'other', 'set [3]', 'settled [1, 2]', 'other settled', 'settled [3]']);

  // A batch that fails settles each set once, with the error, and the next batch opens a new set.
  order.length = 0;
  commits.join(open).rows.push(4);
  commits.add({ write: () => { throw new Error('SQLITE_FULL: database or disk is full'); }, settle: () => undefined });
  await commits.flush();
  commits.join(open).rows.push(5);
  await commits.flush();
  assert.deepEqual(order, ['set [4]', 'settled [4] with an error', 'set [5]', 'settled [5]']);
});
