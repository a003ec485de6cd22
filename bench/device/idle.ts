/**
 * minaret-device's idle cost as a player (docs/devices/raspberry-pi.md: a Raspberry Pi Zero 2 must carry it; goal
 * ≤ 60 MiB RSS and ≤ 1 % of a core while idle), beside a baseline measured in the same run: a bare mqtt.js client
 * process (the library the device is built on) connected to the same broker with the same credentials' kind, doing
 * nothing. Each round starts both processes, lets them settle, then reads their CPU time (utime + stime from
 * /proc/<pid>/stat) over `--window` seconds and their RSS (VmRSS) at its end.
 *
 *   npm run bench:device-idle -- [--rounds 3] [--window 30] [--settle 5]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../src/platform/config.ts';
import { silentLogger } from '../../src/platform/log.ts';
import { startService } from '../../src/service.ts';
import type { OutgoingMessage } from '../../src/platform/notify.ts';
import { cli, fmt } from '../support.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { rounds, window: windowS, settle } = cli('usage: npm run bench:device-idle -- [--rounds 3] [--window 30] [--settle 5]', {
  rounds: { type: 'number', default: 3, min: 1 },
  window: { type: 'number', default: 30, min: 5 },
  settle: { type: 'number', default: 5, min: 1 },
});
const CLOCK_TICKS = 100; // USER_HZ on Linux

const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function cpuSeconds(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}
function rssMiB(pid: number): number {
  const line = fs.readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'))!;
  return Number(line.split(/\s+/)[1]) / 1024;
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-device-idle-'));
  const loaded = loadConfig({
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'db.sqlite'), DATA_DIR: dir,
    JWT_SECRET: 'bench-device-idle-secret-0123456789-abcdefghijklmnop', BCRYPT_COST: '4', LOG_LEVEL: 'silent',
  });
  if (!loaded.ok) throw new Error(loaded.error);
  const sent: OutgoingMessage[] = [];
  const service = await startService(loaded.config, { logger: silentLogger, transport: { name: 'bench', deliver: async (m) => void sent.push(m) } });
  const post = async (route: string, body: unknown, token?: string) => {
    const res = await fetch(`${service.httpUrl}/api/v1${route}`, { method: 'POST', headers: { 'content-type': 'application/json', ...(token && { authorization: `Bearer ${token}` }) }, body: JSON.stringify(body) });
    return { status: res.status, body: await res.json() as any };
  };
  const procs: ChildProcess[] = [];
  try {
    // A member who confirmed the address (an unproven account holds no device) registers a player.
    const token = (await post('/auth/signup', { email: 'idle@bench.test', password_hash: sha('bench password') })).body.access_token as string;
    await post('/me/addresses/confirm', { channel: 'email' }, token);
    await service.notifier.idle();
    await post('/me/addresses/verify', { code: sent.find((m) => m.purpose === 'confirm_address')!.code }, token);
    const reg = (await post('/devices', { kind: 'stream_player', name: 'idle' }, token)).body;
    fs.writeFileSync(path.join(dir, 'device.json'), JSON.stringify({ server: service.httpUrl, device: reg.device, credentials: reg.credentials }), { mode: 0o600 });
    const env = { PATH: process.env.PATH ?? '', HOME: dir };
    const bare = `const m=require('mqtt');m.connect(${JSON.stringify(reg.credentials.mqtt_url)},{clientId:'bare-${crypto.randomUUID()}',username:${JSON.stringify(reg.credentials.username)},password:${JSON.stringify(reg.credentials.password)}});`;

    const rows: Array<{ deviceCpu: number; bareCpu: number; deviceRss: number; bareRss: number }> = [];
    for (let round = 0; round < rounds; round++) {
      const device = spawn(process.execPath, [path.join(ROOT, 'dist/device/index.js'), 'run', '--state', dir, '--output', path.join(dir, 'out.wav')], { env, stdio: 'ignore' });
      const baseline = spawn(process.execPath, ['-e', `${bare}setInterval(()=>{},1<<30)`], { cwd: ROOT, env, stdio: 'ignore' });
      procs.push(device, baseline);
      await sleep(settle * 1000);
      const before = [cpuSeconds(device.pid!), cpuSeconds(baseline.pid!)];
      await sleep(windowS * 1000);
      const after = [cpuSeconds(device.pid!), cpuSeconds(baseline.pid!)];
      rows.push({
        deviceCpu: (after[0]! - before[0]!) / windowS * 100, bareCpu: (after[1]! - before[1]!) / windowS * 100,
        deviceRss: rssMiB(device.pid!), bareRss: rssMiB(baseline.pid!),
      });
      device.kill('SIGTERM');
      baseline.kill('SIGTERM');
      await sleep(500);
    }
    const range = (xs: number[], digits = 2) => `${fmt(Math.min(...xs), digits)}-${fmt(Math.max(...xs), digits)}`;
    console.log(`minaret-device run (player, idle, connected) beside a bare mqtt.js client; ${rounds} rounds of ${windowS} s (load ${os.loadavg()[0]!.toFixed(1)})\n`);
    console.log('| | minaret-device | bare mqtt.js client | ratio |');
    console.log('|---|---:|---:|---:|');
    console.log(`| RSS, MiB | ${range(rows.map((r) => r.deviceRss), 1)} | ${range(rows.map((r) => r.bareRss), 1)} | ${range(rows.map((r) => r.deviceRss / r.bareRss))} |`);
    console.log(`| CPU, % of a core | ${range(rows.map((r) => r.deviceCpu), 3)} | ${range(rows.map((r) => r.bareCpu), 3)} | |`);
    console.log('\ngoal: ≤ 60 MiB RSS and ≤ 1 % of a core');
  } finally {
    for (const p of procs) p.kill('SIGKILL');
    await service.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  console.error(`bench/device-idle: ${err.message}`);
  process.exit(1);
});
