/**
 * The audio gate's cost (docs/operator.md#audio-icecast), with Debian's icecast2 and ffmpeg, each figure beside its
 * baseline measured in the same run:
 * - 1,000 listeners connecting within 10 s to a gated mount (Icecast asks Minaret on each) against the same to an
 *   ungated Icecast: time to the response head, p50/p99, and the bench process's CPU per listener above the
 *   ungated run (Minaret runs in this process; the clients' own work is the same in both runs);
 * - Minaret's answer to listener_add alone (the hook, POSTed as Icecast does), p50/p99;
 * - source live -> the first player's start event (a broadcast started before the source went on air);
 * - ban -> the banned player's listener dropped by Icecast.
 *   npx tsx bench/audio/audio.ts [--listeners 1000] [--seconds 10]
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import mqtt from 'mqtt';
import { loadConfig } from '../../src/platform/config.ts';
import { createManualClock } from '../../src/platform/clock.ts';
import { openDatabase } from '../../src/platform/db.ts';
import { identifierHash } from '../../src/platform/identifiers.ts';
import { silentLogger } from '../../src/platform/log.ts';
import type { OutgoingMessage } from '../../src/platform/notify.ts';
import { createUserStore } from '../../src/people/users.ts';
import { sqliteStore } from '../../src/platform/store/store.ts';
import { startService } from '../../src/service.ts';
import { cli, cpuPerMessageUs, fmt, percentile, pool, processCpuSeconds, ratio } from '../support.ts';
import { gatedIcecast, plainIcecast, startSource, type Icecast } from './icecast.ts';

const { listeners: LISTENERS, seconds: SECONDS } = cli('usage: npx tsx bench/audio/audio.ts [--listeners 1000] [--seconds 10]', {
  listeners: { type: 'number', default: 1000, min: 1 },
  seconds: { type: 'number', default: 10, min: 1 },
});
const HOOK_SECRET = crypto.randomBytes(24).toString('base64url');
const ADMIN_PASSWORD = crypto.randomBytes(12).toString('hex');
const sha = (s: string) => crypto.createHash('sha256').update(s).digest('hex');
const ms = (v: number) => `${fmt(v, 1)} ms`;

async function json(base: string, method: string, p: string, body?: unknown, token?: string): Promise<any> {
  const res = await fetch(`${base}/api/v1${p}`, {
    method, headers: { 'content-type': 'application/json', ...(token && { authorization: `Bearer ${token}` }) },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** Opens a stream as a player does and resolves with the time to the response head; the socket stays open. */
function connect(url: string, agent: http.Agent, open: http.ClientRequest[]): Promise<{ ms: number; status: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    const req = http.get(url, { agent }, (res) => {
      res.resume();
      resolve({ ms: performance.now() - started, status: res.statusCode ?? 0 });
    });
    req.on('error', () => resolve({ ms: performance.now() - started, status: 0 }));
    open.push(req);
  });
}

/** `count` listeners spread over `seconds`: the head times, the statuses, and this process's CPU meanwhile. */
async function crowd(urls: string[], seconds: number) {
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const open: http.ClientRequest[] = [];
  const cpu = process.cpuUsage();
  const gap = (seconds * 1000) / urls.length;
  const started = performance.now();
  const results = await Promise.all(urls.map(async (url, i) => {
    const wait = started + i * gap - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    return connect(url, agent, open);
  }));
  const cpuS = processCpuSeconds(cpu);
  for (const req of open) req.destroy();
  agent.destroy();
  const times = results.map((r) => r.ms);
  return { p50: percentile(times, 50), p99: percentile(times, 99), admitted: results.filter((r) => r.status === 200).length, cpuS };
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-bench-audio-'));
  fs.chmodSync(dir, 0o755); // icecast2 runs as its own user and reads its folder inside this one
  const plain = await plainIcecast(dir);
  const gatedPort = await plain.freePort();
  const messages: OutgoingMessage[] = [];
  const env = {
    NODE_ENV: 'test', HOST: '127.0.0.1', HTTP_PORT: '0', MQTT_PORT: '0', DATABASE_PATH: path.join(dir, 'db.sqlite'), DATA_DIR: dir,
    JWT_SECRET: 'bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz', BCRYPT_COST: '4', LOG_LEVEL: 'silent',
    AUTH_RATE_LIMIT: '1000000', AUTH_IDENTIFIER_RATE_LIMIT: '1000000', MAX_PLAYERS_PER_USER: String(LISTENERS + 10),
    ICECAST_URL: `http://127.0.0.1:${gatedPort}`, ICECAST_ADMIN_PASSWORD: ADMIN_PASSWORD, ICECAST_HOOK_SECRET: HOOK_SECRET,
  };
  const loaded = loadConfig(env);
  if (!loaded.ok) throw new Error(loaded.error);
  const clock = createManualClock(Date.now());
  setInterval(() => clock.set(Date.now()), 50).unref(); // real time, settable from here for nothing else
  const service = await startService(loaded.config, { logger: silentLogger, clock, transport: { name: 'bench', deliver: async (m) => void messages.push(m) } });
  const icecasts: Icecast[] = [plain];
  try {
    const base = service.httpUrl;
    const gated = await gatedIcecast(dir, gatedPort, { ...env, PUBLIC_URL: base });
    icecasts.push(gated);

    // A superadmin (made in the store, as the operator's CLI does), a mosque, its transmitter, a member and the players.
    const db = openDatabase(loaded.config.databasePath);
    await (await createUserStore(sqliteStore(db), clock)).create({ email: 'root@bench.test', emailHash: identifierHash('root@bench.test'), phone: null, phoneHash: null, passwordBcrypt: (await import('bcryptjs')).default.hashSync(sha('root password'), 4), role: 'superadmin', proven: { email: true } });
    const step1 = await json(base, 'POST', '/auth/superadmin-2fa', { identifier_hash: sha('root@bench.test'), password_hash: sha('root password') });
    await service.notifier.idle();
    const otp = messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!;
    const ts = Math.floor(Date.now() / 1000);
    const root = (await json(base, 'POST', '/auth/superadmin-2fa/verify', { session_token: step1.session_token, timestamp: ts, hmac: crypto.createHmac('sha256', step1.session_token).update(`${otp}|${ts}`).digest('hex') })).access_token;
    const mosque = await json(base, 'POST', '/mosques', { name: 'Bench Masjid', auto_approve_members: true }, root);
    const tx = await json(base, 'POST', `/mosques/${mosque.id}/devices`, { kind: 'transmitter' }, root);
    const person = await json(base, 'POST', '/auth/signup', { email: 'member@bench.test', password_hash: sha('member password') });
    await json(base, 'POST', `/mosques/${mosque.id}/join`, {}, person.access_token);
    const players: string[] = [];
    const watcherReg = await json(base, 'POST', '/devices', { kind: 'stream_player', mosque_id: mosque.id }, person.access_token);
    await pool(LISTENERS, 8, async () => {
      players.push((await json(base, 'POST', '/devices', { kind: 'stream_player', mosque_id: mosque.id }, person.access_token)).device.id);
    });
    const leaseOf = db.prepare<[string], { lease_token: string | null }>('SELECT lease_token FROM devices WHERE id = ?');
    const leases = players.map((id) => leaseOf.get(id)?.lease_token ?? '');
    if (leases.some((l) => !l)) throw new Error('a player holds no lease');

    // Source live -> first player's start: a player subscribed to the mosque's broadcast topic, a broadcast waiting.
    const watcher = watcherReg.device.id as string;
    const watcherLease = leaseOf.get(watcher)?.lease_token ?? '';
    const creds = watcherReg.credentials.password as string;
    const client = await mqtt.connectAsync(`mqtt://127.0.0.1:${service.mqttPort}`, { clientId: watcher, username: watcher, password: creds, protocolVersion: 4, reconnectPeriod: 0 });
    await client.subscribeAsync(`devices/${watcher}/config`, { qos: 1 });
    await client.subscribeAsync(`mosques/${mosque.id}/broadcast`, { qos: 1 });
    let heardStart = 0;
    client.on('message', (topic, payload) => {
      if (topic.endsWith('/broadcast') && payload.length > 0 && JSON.parse(payload.toString()).action === 'start' && !heardStart) heardStart = performance.now();
    });
    await json(base, 'POST', `/mosques/${mosque.id}/broadcasts`, { kind: 'announcement' }, root);
    const sourceStarted = performance.now();
    const source = startSource(gatedPort, `/m/${mosque.id}`, tx.credentials.username, tx.credentials.password);
    let mountSeen = 0;
    while (!mountSeen && performance.now() - sourceStarted < 15_000) {
      if ((await gated.admin('/admin/listmounts')).includes(`/m/${mosque.id}`)) mountSeen = performance.now();
      else await new Promise((r) => setTimeout(r, 5));
    }
    while (!heardStart && performance.now() - sourceStarted < 15_000) await new Promise((r) => setTimeout(r, 5));
    const plainSource = startSource(plain.port, '/m/plain', 'source', plain.sourcePassword);
    await plain.waitForMount('/m/plain');

    // The crowd: ungated first (the baseline), then gated, then the ungated again to bracket the noise.
    const ungatedUrls = players.map(() => `http://127.0.0.1:${plain.port}/m/plain`);
    const gatedUrls = players.map((_, i) => `http://127.0.0.1:${gatedPort}/m/${mosque.id}?lease=${encodeURIComponent(leases[i]!)}`);
    const base1 = await crowd(ungatedUrls, SECONDS);
    const gatedRun = await crowd(gatedUrls, SECONDS);
    const base2 = await crowd(ungatedUrls, SECONDS);
    await new Promise((r) => setTimeout(r, 2000)); // listener_remove callbacks settle

    // Minaret's answer alone: listener_add as Icecast POSTs it, one connection at a time.
    const hookTimes: number[] = [];
    const auth = `Basic ${Buffer.from(`icecast:${HOOK_SECRET}`).toString('base64')}`;
    for (let i = 0; i < Math.min(players.length, 1000); i++) {
      const body = new URLSearchParams({ action: 'listener_add', server: '127.0.0.1', port: String(gatedPort), client: String(900_000 + i), mount: `/m/${mosque.id}?lease=${leases[i]}`, user: '', pass: '', ip: '127.0.0.1', agent: 'bench' });
      const started = performance.now();
      const res = await fetch(`${base}/api/v1/audio/hooks/listener_add`, { method: 'POST', headers: { authorization: auth, 'content-type': 'application/x-www-form-urlencoded' }, body });
      await res.text();
      hookTimes.push(performance.now() - started);
      await fetch(`${base}/api/v1/audio/hooks/listener_remove`, { method: 'POST', headers: { authorization: auth, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ action: 'listener_remove', client: String(900_000 + i), mount: `/m/${mosque.id}`, duration: '0' }) }).then((r) => r.text());
    }

    // Ban -> listener dropped: the watcher's owner's membership banned while it listens.
    const victim = await new Promise<http.IncomingMessage>((resolve) => http.get(`http://127.0.0.1:${gatedPort}/m/${mosque.id}?lease=${encodeURIComponent(watcherLease)}`, resolve));
    victim.resume();
    const membership = (await json(base, 'GET', `/mosques/${mosque.id}/memberships`, undefined, root)).find((m: { user_email: string }) => m.user_email === 'member@bench.test');
    const dropped = new Promise<number>((resolve) => victim.once('close', () => resolve(performance.now())));
    const banAt = performance.now();
    await json(base, 'PATCH', `/memberships/${membership.id}`, { status: 'banned' }, root);
    const banToDrop = (await Promise.race([dropped, new Promise<number>((r) => setTimeout(() => r(Number.NaN), 10_000))])) - banAt;

    const baseCpu = Math.min(base1.cpuS, base2.cpuS);
    console.log(`audio gate, ${players.length} listeners over ${SECONDS} s (${os.cpus().length} cores, node ${process.version}, icecast2 ${gated.version})\n`);
    console.log('| measure | gated (Minaret asked) | ungated baseline (two runs) | ratio |');
    console.log('|---|---|---|---|');
    console.log(`| admitted | ${gatedRun.admitted} | ${base1.admitted}, ${base2.admitted} | |`);
    const us = (cpuS: number) => fmt(cpuPerMessageUs(cpuS, players.length), 0);
    console.log(`| connect, response head p50 | ${ms(gatedRun.p50)} | ${ms(base1.p50)}, ${ms(base2.p50)} | ${ratio(gatedRun.p50, Math.min(base1.p50, base2.p50))} |`);
    console.log(`| connect, response head p99 | ${ms(gatedRun.p99)} | ${ms(base1.p99)}, ${ms(base2.p99)} | ${ratio(gatedRun.p99, Math.min(base1.p99, base2.p99))} |`);
    console.log(`| this process's CPU per listener | ${us(gatedRun.cpuS)} µs | ${us(base1.cpuS)}, ${us(base2.cpuS)} µs | Minaret: ${us(gatedRun.cpuS - baseCpu)} µs per admitted listener |`);
    console.log(`\n| Minaret's listener_add answer (hook alone, ${hookTimes.length} calls) | p50 ${ms(percentile(hookTimes, 50))} | p99 ${ms(percentile(hookTimes, 99))} |`);
    console.log(`| source live (mount listed) -> first player's start event | ${ms(heardStart - mountSeen)} | (ffmpeg spawn -> mount listed ${ms(mountSeen - sourceStarted)}) |`);
    console.log(`| ban -> listener dropped by Icecast | ${ms(banToDrop)} | |`);
    client.end(true);
    await source.stop();
    await plainSource.stop();
    db.close();
  } finally {
    await service.close();
    for (const ice of icecasts) await ice.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().then(() => process.exit(0), (err: Error) => {
  console.error(`bench/audio: ${err.stack ?? err.message}`);
  process.exit(1);
});
