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

// Issue 12: the same story in the browser (scripts/screenshots.ts, `npm run screenshots`), which also makes
// the README's pictures: every step passes, and each main page is pictured at phone and desktop width.
const PAGES = ['signin', 'signin-arabic', 'superadmin-step2', 'superadmin-mosques', 'member-player-credentials', 'admin-member-waiting', 'member-player-online', 'admin-broadcast-live'];

/** Width and height from a PNG's IHDR chunk; throws when the file is no PNG. */
function pngSize(file: string): { width: number; height: number; bytes: number } {
  const data = fs.readFileSync(file);
  assert.deepEqual([...data.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], `${file} is not a PNG`);
  assert.equal(data.toString('latin1', 12, 16), 'IHDR');
  return { width: data.readUInt32BE(16), height: data.readUInt32BE(20), bytes: data.length };
}

test('the walk-through in the browser takes a fresh service to a broadcast and leaves a picture of each main page', { timeout: 240_000 }, async (t) => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-screenshots-test-'));
  t.after(() => fs.rmSync(out, { recursive: true, force: true }));
  const script = spawn(process.execPath, ['--import', 'tsx', 'scripts/screenshots.ts', '--out', out], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  script.stdout.on('data', (c: Buffer) => (log += c.toString('utf8')));
  script.stderr.on('data', (c: Buffer) => (log += c.toString('utf8')));
  const code = await new Promise<number | null>((resolve) => script.on('exit', resolve));
  assert.equal(code, 0, `the browser walk-through failed:\n${log}`);
  for (const step of [
    'ok: the superadmin signs in at /superadmin in two steps', 'ok: the superadmin creates the mosque with the imam as its owner',
    'ok: a member opens the join link, signs up and joins', 'ok: the member adds a stream player and sees its credentials once',
    'ok: the imam sees the member waiting and approves them', "ok: the simulator plays the player with those credentials: ONLINE on the member's and the imam's pages",
    'ok: the imam starts the Maghrib azaan and sees the delivery report count the player', 'walk-through complete',
  ]) assert.ok(log.includes(step), `missing "${step}" in:\n${log}`);

  for (const name of PAGES) {
    const phone = pngSize(path.join(out, `${name}.png`));
    assert.equal(phone.width, 390, `${name}.png is phone width`);
    assert.ok(phone.height >= 600, `${name}.png shows a page (${phone.height} px tall)`);
    // A blank or one-colour page compresses to a few hundred bytes; a rendered page with text does not.
    assert.ok(phone.bytes > 10_000 && phone.bytes < 400_000, `${name}.png is ${phone.bytes} bytes`);
    const desktop = pngSize(path.join(out, 'desktop', `${name}.png`));
    assert.equal(desktop.width, 1280, `desktop/${name}.png is desktop width`);
    assert.ok(desktop.bytes > 10_000, `desktop/${name}.png is ${desktop.bytes} bytes`);
  }
});
