import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import mqtt from 'mqtt';
import { openDatabase } from '../../src/platform/db.ts';
import { httpClient } from '../support/service.ts';
import { baseEnv, confirmEmailByLog, listening, logLines, runToExit, startProcess, tempDir, withTimeout, type Run } from '../support/process.ts';

// docs/operator.md, "Faults", over the real process (src/main.ts, compiled as npm start runs it): the fatal-error policy, and acknowledged data
// surviving kill -9.

async function logged(run: Run, msg: string): Promise<void> {
  await withTimeout(
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (logLines(run.stdout()).some((l) => l.msg === msg)) return resolve();
        if (run.child.exitCode !== null) return reject(new Error(`exited before "${msg}": ${run.stderr()}`));
        setTimeout(check, 25);
      };
      check();
    }),
    20_000,
    msg,
  );
}

for (const fault of ['uncaught_exception', 'unhandled_rejection'] as const) {
  test(`an ${fault.replace('_', ' ')} is logged as fatal, the process stops gracefully and exits 1 for its supervisor`, async (t) => {
    const dir = tempDir(t);
    const run = startProcess(t, baseEnv(dir, { TEST_FAULT: fault, SHUTDOWN_TIMEOUT_S: '3' }));
    const { http_port } = await listening(run);
    await logged(run, 'TEST_FAULT is armed: SIGUSR2 raises it');
    const api = httpClient(`http://127.0.0.1:${http_port}`);
    assert.equal((await api.post('/api/v1/auth/signup', { email: 'before-the-fault@example.com' })).status, 201);

    run.child.kill('SIGUSR2');
    const { code, signal } = await withTimeout(run.exited, 15_000, 'the exit after the fault');
    assert.equal(signal, null, 'it exited on its own, it was not killed');
    assert.equal(code, 1);
    const lines = logLines(run.stdout());
    const fatal = lines.find((l) => l.level === 60);
    assert.equal(fatal?.msg, 'fatal error; stopping');
    assert.equal(fatal?.kind, fault);
    assert.match(String(fatal?.err?.message), /TEST_FAULT/);
    assert.ok(lines.some((l) => l.msg === 'minaret stopped'), 'the graceful stop ran to its end');
    assert.equal(fs.existsSync(path.join(dir, 'minaret.db-wal')), false, 'db.close ran (the WAL was checkpointed away)');
    const db = openDatabase(path.join(dir, 'minaret.db'));
    t.after(() => db.close());
    assert.ok(db.prepare('SELECT 1 FROM users WHERE email = ?').get('before-the-fault@example.com'));
  });
}

test('TEST_FAULT outside NODE_ENV=test refuses to start, naming it', async (t) => {
  const { code, stderrLines } = await runToExit(t, baseEnv(tempDir(t), { NODE_ENV: 'development', BCRYPT_COST: '10', TEST_FAULT: 'uncaught_exception' }));
  assert.equal(code, 1);
  assert.equal(stderrLines.length, 1);
  assert.match(stderrLines[0]!, /^minaret: TEST_FAULT: .*NODE_ENV=test/);
});

test('what was acknowledged (PUBACK, 2xx) survives kill -9: statuses and an HTTP write are there after a restart', async (t) => {
  const dir = tempDir(t);
  const env = baseEnv(dir);
  const first = startProcess(t, env);
  const ports = await listening(first);
  const api = httpClient(`http://127.0.0.1:${ports.http_port}`);
  const token = (await api.post('/api/v1/auth/signup', { email: 'durable@example.com' })).body.access_token as string;
  await confirmEmailByLog(first, api, token, 'durable@example.com');
  const registered = await api.post('/api/v1/devices', { kind: 'stream_player', name: 'kitchen' }, token);
  assert.equal(registered.status, 201);
  const { id } = registered.body.device as { id: string };
  const creds = registered.body.credentials as { client_id: string; username: string; password: string };

  const device = mqtt.connect(`mqtt://127.0.0.1:${ports.mqtt_port}`, { clientId: creds.client_id, username: creds.username, password: creds.password, protocolVersion: 4, reconnectPeriod: 0 });
  t.after(() => void device.end(true));
  device.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => device.once('connect', () => resolve()).once('close', () => reject(new Error('not connected'))));
  // Each resolves on its PUBACK, which aedes sends only after the hook has written the status.
  for (const status of ['UNBOUND', 'MUTED']) {
    await new Promise<void>((resolve, reject) =>
      device.publish(`devices/${id}/status`, JSON.stringify({ v: '1.0', status, reason: 'test', ts: Math.floor(Date.now() / 1000) }), { qos: 1, retain: true }, (err) => (err ? reject(err) : resolve())),
    );
  }
  assert.equal((await api.patch(`/api/v1/devices/${id}`, { name: 'bedroom' }, token)).status, 200);
  // At once, before any telemetry flush: heartbeats (QoS 0, batched) may be lost here; these may not.
  first.child.kill('SIGKILL');
  assert.equal((await first.exited).signal, 'SIGKILL');

  const second = startProcess(t, env);
  const again = httpClient(`http://127.0.0.1:${(await listening(second)).http_port}`);
  const after = await again.get(`/api/v1/devices/${id}`, token);
  assert.equal(after.status, 200, 'the account and the device were kept');
  assert.equal(after.body.name, 'bedroom');
  assert.equal(after.body.status, 'MUTED');
  const events = (await again.get(`/api/v1/devices/${id}/events`, token)).body as Array<{ kind: string; to: string | null }>;
  const reached = events.filter((e) => e.kind === 'status').map((e) => e.to);
  assert.ok(reached.includes('UNBOUND') && reached.includes('MUTED'), `both transitions are in the timeline: ${JSON.stringify(reached)}`);
  second.child.kill('SIGTERM');
  assert.equal((await withTimeout(second.exited, 10_000, 'the second process to stop')).code, 0);
});
