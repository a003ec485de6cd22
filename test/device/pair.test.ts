import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { nodeArgsFor, runNode, tempDir } from '../support/process.ts';
import { freePort } from '../support/redis.ts';

// `minaret-device pair` (docs/devices/raspberry-pi.md, RFC 8628): against a small real HTTP server that answers as
// docs/devices/raspberry-pi.md describes the pairing endpoints, and against servers that are not Minaret.

type Handler = (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void;

async function server(t: TestContext, handler: Handler): Promise<string> {
  const s = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => handler(req, body, res));
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => s.close(() => r())));
  return `http://127.0.0.1:${(s.address() as { port: number }).port}`;
}

const json = (res: http.ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

const pairArgs = (url: string, dir: string) => [...nodeArgsFor('device/index.ts'), 'pair', '--server', url, '--kind', 'player', '--name', 'kitchen', '--state', dir];
const env = (dir: string) => ({ PATH: process.env.PATH ?? '', HOME: dir });

test('pair shows the code, waits out authorization_pending and slow_down (5 s more), and stores the credentials 0600 in a 0700 folder', async (t) => {
  const polls: number[] = [];
  let asked: Record<string, unknown> = {};
  const url = await server(t, (req, body, res) => {
    if (req.url === '/api/v1/devices/pairing') {
      asked = JSON.parse(body) as Record<string, unknown>;
      return json(res, 200, { device_code: 'dev-code-1', user_code: 'WDJB-MJHT', verification_uri: 'https://m.example/pair', verification_uri_complete: 'https://m.example/pair?code=WDJB-MJHT', expires_in: 60, interval: 1 });
    }
    assert.equal(JSON.parse(body).device_code, 'dev-code-1');
    polls.push(Date.now());
    if (polls.length === 1) return json(res, 400, { error: { code: 'slow_down', message: 'slow down' } });
    if (polls.length === 2) return json(res, 400, { error: { code: 'authorization_pending', message: 'waiting' } });
    json(res, 200, { device: { id: 'dq7x2m4k5pa3bz5te', kind: 'stream_player' }, credentials: { client_id: 'dq7x2m4k5pa3bz5te', username: 'dq7x2m4k5pa3bz5te', password: 'secret-password-0123456789', mqtt_url: 'mqtt://127.0.0.1:1883', mqtts_url: null, ws_url: 'ws://127.0.0.1/mqtt', api_url: `${url}/api/v1` } });
  });
  const dir = path.join(tempDir(t), 'state');
  const done = await runNode(pairArgs(url, dir), env(dir));
  assert.equal(done.code, 0, done.stderrLines.join('\n'));
  assert.deepEqual([asked['kind'], asked['name'], typeof asked['fw'], typeof asked['hw_rev']], ['stream_player', 'kitchen', 'string', 'string']);
  assert.match(done.stdout, /WDJB-MJHT/);
  assert.match(done.stdout, /https:\/\/m\.example\/pair\?code=WDJB-MJHT/);
  assert.match(done.stdout, /[▀▄█]{10}/, 'a QR code drawn with half blocks');
  assert.equal(polls.length, 3);
  assert.ok(polls[1]! - polls[0]! >= 5800, `slow_down adds 5 s to the 1 s interval: ${polls[1]! - polls[0]!} ms`);
  const file = path.join(dir, 'device.json');
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
  const stored = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.equal(stored.server, url);
  assert.equal(stored.device.id, 'dq7x2m4k5pa3bz5te');
  assert.equal(stored.credentials.password, 'secret-password-0123456789');
});

for (const [what, handler] of [
  ['an HTML page', (_req, _body, res) => { res.writeHead(200, { 'content-type': 'text/html' }); res.end('<html>hello</html>'); }],
  ['another JSON', (_req, _body, res) => json(res, 200, { hello: 'world' })],
  ['a 404', (_req, _body, res) => json(res, 404, { error: 'not found' })],
  ['access_denied', (req, _body, res) => req.url === '/api/v1/devices/pairing'
    ? json(res, 200, { device_code: 'd', user_code: 'AAAA-BBBB', verification_uri: 'https://x/p', verification_uri_complete: 'https://x/p?c=AAAA-BBBB', expires_in: 30, interval: 1 })
    : json(res, 400, { error: { code: 'access_denied', message: 'no' } })],
] as Array<[string, Handler]>) {
  test(`pair against a server answering ${what} exits 1 with one line and stores nothing`, async (t) => {
    const url = await server(t, handler);
    const dir = path.join(tempDir(t), 'state');
    const done = await runNode(pairArgs(url, dir), env(dir));
    assert.equal(done.code, 1);
    assert.equal(done.stderrLines.length, 1, done.stderrLines.join('\n'));
    assert.match(done.stderrLines[0]!, /^minaret-device: /);
    assert.equal(fs.existsSync(path.join(dir, 'device.json')), false);
  });
}

test('pair against an address where nothing listens exits 1 and stores nothing', async (t) => {
  const dir = path.join(tempDir(t), 'state');
  const port = await freePort();
  const done = await runNode(pairArgs(`http://127.0.0.1:${port}`, dir), env(dir));
  assert.equal(done.code, 1);
  assert.equal(done.stderrLines.length, 1, done.stderrLines.join('\n'));
  assert.match(done.stderrLines[0]!, new RegExp(`cannot reach http://127\\.0\\.0\\.1:${port}: ECONNREFUSED`));
  assert.equal(fs.existsSync(path.join(dir, 'device.json')), false);
});

test('run --server --kind pairs first when the folder holds no credentials, then runs in the same process: connecting as soon as the code is approved', async (t) => {
  const { startTestService } = await import('../support/service.ts');
  const { mosqueWithOwner, waitFor } = await import('../support/devices.ts');
  const { API, createMosque, joinMosque, member } = await import('../support/people.ts');
  const { startProcess } = await import('../support/process.ts');
  const { deviceLine } = await import('./support.ts');
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root } = await mosqueWithOwner(ts);
  const mosque = await createMosque(ts, root.token, null, { auto_approve_members: true, stream_url: 'https://radio.example/huda' });
  const amina = await member(ts, 'amina@run-pair.test');
  await joinMosque(ts, amina, mosque.id);
  const dir = path.join(tempDir(t), 'state');
  const run = startProcess(t, env(dir), process.execPath, [...nodeArgsFor('device/index.ts'), 'run', '--server', ts.url, '--kind', 'player', '--name', 'hall', '--state', dir, '--output', path.join(path.dirname(dir), 'out.wav')]);
  const code = (await deviceLine(run, /enter the code\s+([A-Z]{4}-[A-Z]{4})/, 30_000))[1]!;
  // Past the first held poll, so the approval lands on a poll held open (docs/api.md, "Pairing a device").
  await new Promise((r) => setTimeout(r, 1500));
  const approved = await ts.http.post(`${API}/devices/pairing/approve`, { user_code: code, mosque_id: mosque.id }, amina.token);
  assert.equal(approved.status, 200, JSON.stringify(approved.body));
  const approvedAt = Date.now();
  await deviceLine(run, /-> ONLINE \((connected|entitled)\)/, 15_000);
  const device = await waitFor('the player ONLINE', async () => {
    const res = await ts.http.get(`${API}/devices/${approved.body.device.id}`, amina.token);
    return res.body.status === 'ONLINE' ? res.body : null;
  }, 10_000);
  console.log(`# approval -> ONLINE in one process: ${((Date.now() - approvedAt) / 1000).toFixed(2)} s`);
  assert.equal(device.owner_user_id, amina.id);
  assert.equal(fs.statSync(path.join(dir, 'device.json')).mode & 0o777, 0o600);
  // Started again with the same flags, it is paired already: it runs without asking for a new code.
  run.child.kill('SIGTERM');
  await run.exited;
  const again = startProcess(t, env(dir), process.execPath, [...nodeArgsFor('device/index.ts'), 'run', '--server', ts.url, '--kind', 'player', '--state', dir, '--output', path.join(path.dirname(dir), 'out2.wav')]);
  await deviceLine(again, /-> ONLINE \((connected|entitled)\)/, 15_000);
  assert.doesNotMatch(again.stdout(), /enter the code/);
});
