import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../support/redis.ts';

// Issue 10: the README's walk-through is scripts/walkthrough.sh, and it runs, end to end, against a fresh
// service started as an operator starts it (the real process, console transport, a new database).
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TOOLS = ['curl', 'jq', 'openssl', 'sha256sum', 'mosquitto_sub'];

test('the walk-through script takes a fresh service from nothing to a member hearing the azaan and a diagnosed player', { timeout: 180_000 }, async (t) => {
  const missing = TOOLS.filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0);
  assert.deepEqual(missing, [], `the walk-through needs these tools (.ci/run installs them): ${missing.join(', ')}`);

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-walkthrough-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const [httpPort, mqttPort] = [await freePort(), await freePort()];
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? dir,
    HOST: '127.0.0.1', HTTP_PORT: String(httpPort), MQTT_PORT: String(mqttPort),
    DATABASE_PATH: path.join(dir, 'minaret.db'), BCRYPT_COST: '10', LOG_LEVEL: 'info',
  };
  const log = path.join(dir, 'minaret.log');
  const logFd = fs.openSync(log, 'a');
  const service = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: ROOT, env, stdio: ['ignore', logFd, logFd] });
  const exited = new Promise((resolve) => service.on('exit', resolve));
  t.after(async () => {
    if (service.exitCode === null) service.kill('SIGKILL');
    await exited;
    fs.closeSync(logFd);
  });

  const script = spawn('bash', ['scripts/walkthrough.sh'], {
    cwd: ROOT,
    env: { ...env, MINARET_URL: `http://127.0.0.1:${httpPort}`, MINARET_LOG: log, WORK_DIR: path.join(dir, 'work') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  script.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
  script.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
  const code = await new Promise<number | null>((resolve) => script.on('exit', resolve));

  assert.equal(code, 0, `walk-through failed:\n${out}`);
  for (const line of [
    'ok: superadmin token', 'ok: the transmitter is ONLINE', 'ok: why: unbound, membership.status, awaiting_approval',
    'ok: the player is ONLINE (entitled)', 'ok: the player is PLAYING at home',
    'ok: the report counts the transmitter and the player as playing', 'ok: ping, diag bundle and a test tone answered',
    'ok: the player is UNBOUND (membership_lapsed)', 'walk-through complete',
  ]) assert.ok(out.includes(line), `missing "${line}" in:\n${out}`);
  // The credentials the script kept are readable by their owner only.
  const mode = fs.statSync(path.join(dir, 'work', 'player.json')).mode & 0o777;
  assert.equal(mode, 0o600);
});
