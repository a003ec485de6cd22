import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { SimDevice } from '../../simulator/device.ts';
import { createManualClock, startTestService } from '../support/service.ts';
import { API, createMosque, joinMosque, member, setStatus, signInSuperadmin } from '../support/people.ts';
import { configsOnConnect, registerPlayer, registerTransmitter, waitFor, type Registered } from '../support/devices.ts';
import { freePort, icecastEnv, listedClients, listen, printedConfig, startIcecast } from './icecast.ts';

/**
 * The whole audio path (docs/operator.md#audio-icecast, docs/api.md "Broadcasts and the audio server"): the azaan
 * scheduled with auto_start starts, waits for the source; the simulated transmitter goes on air through the gate
 * with ffmpeg; three leased players hear real bytes; a listener without a lease and one with another mosque's are
 * refused; a ban cuts that member's player out of Icecast within a second; the transmitter stops, the broadcast
 * ends, and the report lists who heard how long.
 */

const MINUTE = 60_000;
const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
/**
 * The device simulator checks its lease against the real time, so the service's clock starts at now and the azaan
 * is fixed 20 minutes ahead (UTC; on a Friday Jumu'ah takes Dhuhr's place at the same time), the other prayers hours away.
 */
function scheduleAround(now: number) {
  const azaan = Math.ceil(now / MINUTE) * MINUTE + 20 * MINUTE;
  const later = (h: number) => ({ fixed: hhmm(azaan + h * 60 * MINUTE) });
  return {
    azaan,
    date: new Date(azaan).toISOString().slice(0, 10),
    settings: {
      timezone: 'UTC', latitude: 51.5072, longitude: -0.1276, auto_start: true, jumuah: [hhmm(azaan)],
      prayer_times: { method: 'muslim_world_league', madhab: 'shafi' },
      azaan: { dhuhr: { fixed: hhmm(azaan) }, fajr: later(4), asr: later(6), maghrib: later(8), isha: later(10) },
    },
  };
}
const TIMING = { stallMs: 3000, retryDelaysMs: [300, 300, 300, 600] };

function sim(t: TestContext, mqttUrl: string, reg: Registered, audio: { source?: true; listen?: true }) {
  const dev = new SimDevice({
    kind: reg.device.kind as 'transmitter' | 'stream_player', id: reg.device.id, password: reg.credentials.password, mqttUrl,
    startTimeoutMs: 5000, audioTiming: TIMING, ffmpegPath: '/usr/bin/ffmpeg',
    ...(audio.source && { source: { kind: 'tone', frequency: 440 } as const }),
    ...(audio.listen && { listen: true }),
  });
  t.after(() => dev.stop({ graceful: false }));
  return dev;
}

test('the scheduled azaan through the gate: on air, three players hear it, strangers refused, a ban cuts one, the report says who heard', async (t) => {
  const port = await freePort();
  const clock = createManualClock(Date.now());
  const plan = scheduleAround(clock());
  const ts = await startTestService(t, { logLevel: 'warn', clock, env: icecastEnv(port) });
  const xml = await printedConfig({ ...icecastEnv(port), PUBLIC_URL: ts.url, LOG_LEVEL: 'warn' }, ['--port', String(port), '--log-dir', '/tmp']);
  const icecast = await startIcecast(t, port, xml);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'imam@path.test');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true, ...plan.settings });
  const other = await createMosque(ts, root.token, null, { name: 'Masjid B', auto_approve_members: true });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const transmitter = sim(t, ts.service.mqttUrl, tx, { source: true });
  await transmitter.start();

  const people = await Promise.all(['amina', 'bilal', 'chen'].map((name) => member(ts, `${name}@path.test`)));
  const regs: Registered[] = [];
  for (const person of people) {
    await joinMosque(ts, person, mosque.id);
    regs.push(await registerPlayer(ts, person, mosque.id));
  }
  const players = regs.map((reg) => sim(t, ts.service.mqttUrl, reg, { listen: true }));
  await Promise.all(players.map((p) => p.start()));
  await waitFor('players entitled', () => players.every((p) => p.status === 'ONLINE'), 8000);

  // The scheduled azaan starts, waiting for the source; the transmitter goes on air.
  clock.set(plan.azaan);
  await ts.service.schedule.runDue();
  await waitFor('every player hears audio', () => players.every((p) => p.status === 'PLAYING' && (p.audio?.bytes ?? 0) > 2000), 20_000);
  const broadcasts = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts`, owner.token)).body;
  assert.equal(broadcasts.length, 1);
  assert.deepEqual([broadcasts[0].waiting_for_source, broadcasts[0].status], [false, 'live']);
  assert.ok(['dhuhr', 'jumuah'].includes(broadcasts[0].prayer), broadcasts[0].prayer);
  assert.equal(transmitter.status, 'PLAYING');

  // Strangers: no lease, and another mosque's player's lease, are refused by the gate.
  const outsider = await member(ts, 'outsider@path.test');
  await joinMosque(ts, outsider, other.id);
  const foreign = await registerPlayer(ts, outsider, other.id);
  const foreignLease = (await configsOnConnect(t, ts, foreign)).at(-1)!.lease.token as string;
  assert.notEqual((await listen(t, `http://127.0.0.1:${port}/m/${mosque.id}`)).status, 200);
  assert.notEqual((await listen(t, `http://127.0.0.1:${port}/m/${mosque.id}?lease=${encodeURIComponent(foreignLease)}`)).status, 200);

  // A ban cuts Bilal's player out of Icecast within a second.
  const mount = `/m/${mosque.id}`;
  assert.equal((await listedClients(port, mount)).length, 3);
  const bilalMembership = (await ts.http.get(`${API}/me/memberships`, people[1]!.token)).body[0];
  const banned = Date.now();
  await setStatus(ts, owner.token, bilalMembership.id, 'banned');
  await waitFor('two listeners left at Icecast', async () => (await listedClients(port, mount)).length === 2, 1000);
  assert.ok(Date.now() - banned <= 1000);

  // The azaan ends: stopped from the console, the transmitter stops sending, and the report says who heard it.
  clock.set(plan.azaan + 3 * MINUTE);
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${broadcasts[0].id}/stop`, {}, owner.token)).status, 200);
  await waitFor('the transmitter off air', () => transmitter.status === 'ONLINE', 10_000);
  clock.set(plan.azaan + 6 * MINUTE);
  await ts.service.schedule.runDue();
  const slot = (await ts.http.get(`${API}/mosques/${mosque.id}/schedule?date=${plan.date}`, owner.token)).body.find((s: { prayer: string }) => s.prayer === broadcasts[0].prayer);
  assert.notEqual(slot.status, 'missed', 'a source was on air in the slot');
  const report = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${broadcasts[0].id}`, owner.token)).body.report;
  assert.equal(report.listeners.admitted.devices, 3);
  assert.deepEqual(report.listeners.heard.map((h: { device_id: string }) => h.device_id).sort(), regs.map((r) => r.device.id).sort());
  assert.ok((report.listeners.refused.no_credential ?? 0) >= 1);
  assert.ok((report.listeners.refused.other_mosque ?? 0) >= 1);
  void icecast;
});
