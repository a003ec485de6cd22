import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/platform/config.ts';
import { startService, StartupError } from '../../src/service.ts';
import { connectDevice, connectOnce, mosqueWithOwner, registerTransmitter } from '../support/devices.ts';
import { baseEnv, logLine, runToExit, startProcess, tempDir, withTimeout } from '../support/process.ts';
import { startTestService } from '../support/service.ts';

// MQTT over TLS on its own port (MQTTS_PORT, TLS_CERT_FILE, TLS_KEY_FILE): devices on the internet never
// send their password in clear, and a renewed certificate is picked up on SIGHUP without a restart.

interface Pair {
  cert: string;
  key: string;
  pem: string;
  fingerprint: string;
}

/** A self-signed certificate for 127.0.0.1, made by the openssl CLI as an operator would. */
function selfSigned(dir: string, name: string): Pair {
  const cert = path.join(dir, `${name}.pem`);
  const key = path.join(dir, `${name}.key`);
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', `/CN=${name}`, '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert,
  ], { stdio: 'ignore' });
  const pem = fs.readFileSync(cert, 'utf8');
  return { cert, key, pem, fingerprint: new crypto.X509Certificate(pem).fingerprint256 };
}

/** The certificate a fresh TLS connection to the port is shown (trusting `ca`). */
function servedFingerprint(port: number, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca, servername: undefined }, () => {
      const fp = socket.getPeerCertificate().fingerprint256;
      socket.destroy();
      resolve(fp);
    });
    socket.once('error', reject);
  });
}

/** The live files in `dir`: what TLS_CERT_FILE and TLS_KEY_FILE point at (a renewal overwrites them). */
function install(pair: Pair, dir: string): { cert: string; key: string } {
  const live = { cert: path.join(dir, 'live-cert.pem'), key: path.join(dir, 'live-key.pem') };
  fs.copyFileSync(pair.cert, live.cert);
  fs.copyFileSync(pair.key, live.key);
  return live;
}

async function tlsService(t: TestContext) {
  const dir = tempDir(t, 'minaret-tls-');
  const first = selfSigned(dir, 'first');
  const live = install(first, dir);
  const ts = await startTestService(t, { env: { MQTTS_PORT: '0', TLS_CERT_FILE: live.cert, TLS_KEY_FILE: live.key } });
  assert.ok(ts.service.mqttsPort! > 0);
  return { ts, dir, first, live, url: `mqtts://127.0.0.1:${ts.service.mqttsPort}` };
}

test('a device connects over mqtts:// with the CA, and a wrong password is refused there too', async (t) => {
  const { ts, first, url } = await tlsService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  // The credentials name the TLS door, and it is the one that works.
  assert.equal(tx.credentials.mqtts_url, url);
  const client = await connectDevice(t, tx.credentials, { url: tx.credentials.mqtts_url!, ca: first.pem });
  assert.equal(client.connected, true);
  const refused = await connectOnce(url, { ca: first.pem, clientId: tx.credentials.client_id, username: tx.credentials.username, password: 'not-the-password' });
  assert.ok(refused === 4 || refused === 5, `refused with CONNACK 4 or 5, got ${refused}`);
});

test('a client that does not trust the certificate cannot connect to the TLS port', async (t) => {
  const { ts, dir, url } = await tlsService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const stranger = selfSigned(dir, 'stranger');
  const outcome = await connectOnce(url, { ca: stranger.pem, clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password });
  assert.notEqual(outcome, 'connected');
});

test('plain MQTT sent to the TLS port gets no CONNACK', async (t) => {
  const { ts, url } = await tlsService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const plainToTls = url.replace('mqtts://', 'mqtt://');
  const outcome = await connectOnce(plainToTls, { clientId: tx.credentials.client_id, username: tx.credentials.username, password: tx.credentials.password });
  assert.notEqual(outcome, 'connected');
});

test('after the files are replaced, reloadTls serves the new certificate to new connections and keeps the live one', async (t) => {
  const { ts, dir, first, live, url } = await tlsService(t);
  const { owner, mosque } = await mosqueWithOwner(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const client = await connectDevice(t, tx.credentials, { url, ca: first.pem });
  assert.equal(await servedFingerprint(ts.service.mqttsPort!, first.pem), first.fingerprint);

  const second = selfSigned(dir, 'second');
  install(second, dir);
  const reloaded = ts.service.reloadTls();
  assert.equal(reloaded.ok, true);
  assert.equal(await servedFingerprint(ts.service.mqttsPort!, second.pem), second.fingerprint);
  await assert.rejects(servedFingerprint(ts.service.mqttsPort!, first.pem), 'the old certificate is no longer served');
  assert.equal(client.connected, true, 'a connection made before the renewal stays up');
  assert.ok(fs.existsSync(live.cert));
});

test('a reload with a broken key file reports it in one line and keeps serving the old certificate', async (t) => {
  const { ts, first, live } = await tlsService(t);
  fs.writeFileSync(live.key, 'not a key\n');
  const reloaded = ts.service.reloadTls();
  assert.equal(reloaded.ok, false);
  assert.match(!reloaded.ok ? reloaded.error : '', /^TLS_KEY_FILE: /);
  assert.equal(await servedFingerprint(ts.service.mqttsPort!, first.pem), first.fingerprint);
});

test('SIGHUP to the real process reloads the certificate files; the process keeps running', async (t) => {
  const dir = tempDir(t, 'minaret-tls-');
  const first = selfSigned(dir, 'first');
  const live = install(first, dir);
  const run = startProcess(t, baseEnv(dir, { MQTTS_PORT: '0', TLS_CERT_FILE: live.cert, TLS_KEY_FILE: live.key }));
  const ready = await logLine(run, 'minaret is listening');
  const port = ready.mqtts_port as number;
  assert.ok(port > 0);
  assert.equal(await servedFingerprint(port, first.pem), first.fingerprint);

  const second = selfSigned(dir, 'second');
  install(second, dir);
  run.child.kill('SIGHUP');
  await logLine(run, 'mqtts certificate reloaded', 5000);
  assert.equal(await servedFingerprint(port, second.pem), second.fingerprint);

  run.child.kill('SIGTERM');
  assert.equal((await withTimeout(run.exited, 5000, 'exit after SIGTERM')).code, 0);
});

test('SIGHUP without MQTTS_PORT logs that there is nothing to reload and does not end the process', async (t) => {
  const dir = tempDir(t);
  const run = startProcess(t, baseEnv(dir));
  await logLine(run, 'minaret is listening');
  run.child.kill('SIGHUP');
  const line = await logLine(run, 'mqtts certificate not reloaded', 5000);
  assert.match(String(line.error), /MQTTS_PORT is not set/);
  assert.equal(run.child.exitCode, null);
  run.child.kill('SIGTERM');
  assert.equal((await withTimeout(run.exited, 5000, 'exit after SIGTERM')).code, 0);
});

for (const [what, env, says] of [
  ['MQTTS_PORT without TLS_CERT_FILE', { MQTTS_PORT: '8883' }, /^TLS_CERT_FILE: required when MQTTS_PORT is set$/],
  ['MQTTS_PORT without TLS_KEY_FILE', { MQTTS_PORT: '8883', TLS_CERT_FILE: '/x.pem' }, /^TLS_KEY_FILE: required when MQTTS_PORT is set$/],
  ['MQTTS_PORT that is not a port', { MQTTS_PORT: 'tls', TLS_CERT_FILE: '/x.pem', TLS_KEY_FILE: '/x.key' }, /^MQTTS_PORT: must be a whole number/],
  ['MQTTS_PORT equal to MQTT_PORT', { MQTTS_PORT: '1883', TLS_CERT_FILE: '/x.pem', TLS_KEY_FILE: '/x.key' }, /^MQTTS_PORT: must differ from MQTT_PORT/],
] as const) {
  test(`the settings refuse ${what} with one line naming the setting`, () => {
    const loaded = loadConfig(env);
    assert.equal(loaded.ok, false);
    assert.match(!loaded.ok ? loaded.error : '', says);
  });
}

test('without MQTTS_PORT there is no TLS listener, and certificate files alone only warn', async (t) => {
  const loaded = loadConfig({ TLS_CERT_FILE: '/x.pem', TLS_KEY_FILE: '/x.key' });
  assert.ok(loaded.ok);
  assert.ok(loaded.warnings.some((w) => w.includes('MQTTS_PORT is not')));
  const ts = await startTestService(t);
  assert.equal(ts.service.mqttsPort, null);
});

test('a missing certificate file, a file that is not a certificate, and a key of another certificate each stop the start', async (t) => {
  const dir = tempDir(t, 'minaret-tls-');
  const a = selfSigned(dir, 'a');
  const b = selfSigned(dir, 'b');
  const cases: Array<[string, string, RegExp]> = [
    [path.join(dir, 'missing.pem'), a.key, /^TLS_CERT_FILE: cannot read .*missing\.pem \(ENOENT\)$/],
    [a.key, a.key, /^TLS_CERT_FILE: .* does not hold a PEM certificate$/],
    [a.cert, b.key, /^TLS_KEY_FILE: .* is not the key of the certificate in TLS_CERT_FILE$/],
  ];
  for (const [cert, key, says] of cases) {
    const loaded = loadConfig(baseEnv(dir, { MQTTS_PORT: '0', TLS_CERT_FILE: cert, TLS_KEY_FILE: key, LOG_LEVEL: 'silent' }));
    assert.ok(loaded.ok);
    await assert.rejects(startService(loaded.config), (err: Error) => err instanceof StartupError && says.test(err.message));
  }
  assert.ok(!fs.existsSync(path.join(dir, 'minaret.db')), 'the database was not opened');
});

test('the real process refuses a bad certificate file with exit 1 and one stderr line, opening nothing', async (t) => {
  const dir = tempDir(t);
  const { code, stderrLines } = await runToExit(t, baseEnv(dir, { MQTTS_PORT: '0', TLS_CERT_FILE: path.join(dir, 'nope.pem'), TLS_KEY_FILE: path.join(dir, 'nope.key') }));
  assert.equal(code, 1);
  assert.deepEqual(stderrLines.length, 1, JSON.stringify(stderrLines));
  assert.match(stderrLines[0]!, /^minaret: TLS_CERT_FILE: cannot read /);
  assert.ok(!fs.existsSync(path.join(dir, 'minaret.db')), 'the database was not opened');
});
