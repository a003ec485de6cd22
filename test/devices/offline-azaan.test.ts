import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { createManualClock, restartableService, startTestService, type TestService } from '../support/service.ts';
import { API, createMosque, joinMosque, member, ownMembership, setStatus, signInSuperadmin, type Person } from '../support/people.ts';
import { configListener, connectDevice, configsOnConnect, publish, registerPlayer, settle, statusPayload, waitFor, type Registered } from '../support/devices.ts';
import { audioFiles } from '../audio/audio-files.ts';

// docs/firmware.md, "The azaan without the network". Wednesday 10 June 2026 in London (BST): Dhuhr's azaan is
// fixed at 13:00 local = 12:00 UTC; the day's other azaans are computed.
const T = (hhmm: string) => Date.parse(`2026-06-10T${hhmm}Z`);
const SCHEDULE = {
  timezone: 'Europe/London', latitude: 51.5072, longitude: -0.1276,
  prayer_times: { method: 'muslim_world_league', madhab: 'shafi' }, azaan: { dhuhr: { fixed: '13:00' } },
};
const DHUHR_S = T('12:00:00') / 1000;

async function world(t: TestContext, ts: TestService) {
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@offline.test');
  const mosque = await createMosque(ts, root.token, owner, SCHEDULE);
  const recording = audioFiles(t).make('mp3', 2);
  const put = await ts.http.request('PUT', `${API}/mosques/${mosque.id}/recording`, { raw: recording, headers: { 'content-type': 'audio/mpeg' }, token: owner.token });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const approved = async (email: string): Promise<{ person: Person; reg: Registered; membershipId: string }> => {
    const person = await member(ts, email);
    const membership = await joinMosque(ts, person, mosque.id);
    await setStatus(ts, owner.token, membership.id, 'approved');
    return { person, reg: await registerPlayer(ts, person, mosque.id), membershipId: membership.id };
  };
  return { root, owner, mosque, recording, approved };
}

/** The slots the schedule API shows from `fromMs` for 48 hours, as the config names them. */
async function slotsAhead(ts: TestService, token: string, mosqueId: string, fromMs: number) {
  const res = await ts.http.get(`${API}/mosques/${mosqueId}/schedule?date=2026-06-10&days=3`, token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return (res.body as Array<{ prayer: string; azaan_at: string }>)
    .map((s) => ({ prayer: s.prayer, at: Math.floor(Date.parse(s.azaan_at) / 1000) }))
    .filter((s) => s.at >= fromMs / 1000 && s.at < fromMs / 1000 + 48 * 3600);
}

const localPlaying = (client: mqtt.MqttClient, id: string, slotAt?: number) =>
  publish(client, `devices/${id}/status`, statusPayload('PLAYING', { reason: 'offline_fallback', detail: { source: 'local', ...(slotAt !== undefined && { slot_at: slotAt }) } }), { qos: 1 });

async function dhuhrOf(ts: TestService, token: string, mosqueId: string) {
  const res = await ts.http.get(`${API}/mosques/${mosqueId}/schedule?date=2026-06-10`, token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return (res.body as Array<Record<string, any>>).find((s) => s.prayer === 'dhuhr')!;
}

test("an entitled player's config carries the next 48 hours of its mosque's azaans and the recording it can fetch and check", async (t) => {
  const clock = createManualClock(T('11:40:00'));
  const ts = await startTestService(t, { clock, logLevel: 'warn' });
  const w = await world(t, ts);
  const { reg } = await w.approved('member@offline.test');
  const config = (await configsOnConnect(t, ts, reg)).at(-1)!;
  assert.ok(config.lease, 'entitled: it holds a lease');
  const expected = await slotsAhead(ts, w.owner.token, w.mosque.id, clock());
  assert.ok(expected.length >= 9 && expected.length <= 12, `two days of azaans: ${expected.length}`);
  assert.deepEqual(config.offline.slots, expected, 'the same azaans the schedule shows, in time order, within 48 hours');
  assert.equal(config.offline.slots[0].prayer, 'dhuhr');
  assert.equal(config.offline.slots[0].at, DHUHR_S);
  assert.equal(config.offline.grace_s, 10, 'OFFLINE_GRACE_S by default');
  const rec = config.offline.recording;
  assert.equal(rec.sha256, crypto.createHash('sha256').update(w.recording).digest('hex'), 'the SHA-256 of the uploaded bytes');
  assert.equal(rec.size, w.recording.length);
  assert.ok(rec.url.endsWith(`/api/v1/audio/recordings/${w.mosque.id}`), rec.url);
  // The player fetches it with its lease, as it fetches the fallback.
  const got = await fetch(`${ts.url}/api/v1/audio/recordings/${w.mosque.id}?lease=${encodeURIComponent(config.lease.token)}`);
  assert.equal(got.status, 200);
  assert.ok(Buffer.from(await got.arrayBuffer()).equals(w.recording), 'the bytes the hash names');
  // Without a lease the same address refuses: the config gives no way around the gate.
  assert.equal((await fetch(rec.url)).status, 403);
});

test('a member who turned notify_azaan off gets no daily slots; the toggle change re-pushes the config', async (t) => {
  const clock = createManualClock(T('11:40:00'));
  const ts = await startTestService(t, { clock, logLevel: 'warn' });
  const w = await world(t, ts);
  const { person, reg } = await w.approved('quiet@offline.test');
  const player = await configListener(t, ts, reg);
  assert.ok(player.latest().offline.slots.length > 0);
  const mine = await ownMembership(ts, person, w.mosque.id);
  const res = await ts.http.patch(`${API}/memberships/${mine!.id}`, { notify_azaan: false }, person.token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const pushed = await waitFor('a config without slots', () => player.configs.find((c) => c.offline && c.offline.slots.length === 0));
  assert.ok(pushed.lease, 'still entitled: the lease stays');
  assert.ok(pushed.offline.recording, 'the recording stays (a broadcast fallback still plays it)');
});

test('a ban takes the offline plan away with the lease', async (t) => {
  const clock = createManualClock(T('11:40:00'));
  const ts = await startTestService(t, { clock, logLevel: 'warn' });
  const w = await world(t, ts);
  const { reg, membershipId } = await w.approved('banned@offline.test');
  const player = await configListener(t, ts, reg);
  assert.ok(player.latest().offline);
  await setStatus(ts, w.owner.token, membershipId, 'banned');
  const after = await waitFor('the unbound config', () => player.configs.find((c) => c.unbound_reason === 'membership_lapsed'));
  assert.equal(after.lease, undefined);
  assert.equal(after.offline, undefined, 'no slots and no recording address once not entitled');
});

test("a change of the mosque's times, or of its recording, re-pushes the plan", async (t) => {
  const clock = createManualClock(T('11:40:00'));
  const ts = await startTestService(t, { clock, logLevel: 'warn' });
  const w = await world(t, ts);
  const { reg } = await w.approved('moved@offline.test');
  const player = await configListener(t, ts, reg);
  const res = await ts.http.patch(`${API}/mosques/${w.mosque.id}`, { azaan: { dhuhr: { fixed: '13:15' } } }, w.owner.token);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const moved = await waitFor('the moved Dhuhr', () => player.configs.find((c) => c.offline?.slots[0]?.at === DHUHR_S + 15 * 60));
  assert.equal(moved.offline.slots[0].prayer, 'dhuhr');
  assert.equal((await ts.http.request('DELETE', `${API}/mosques/${w.mosque.id}/recording`, { token: w.owner.token })).status, 204);
  await waitFor('the plan without a recording', () => player.latest().offline?.recording === null);
  // A rename changes no time: no new config.
  const count = player.configs.length;
  assert.equal((await ts.http.patch(`${API}/mosques/${w.mosque.id}`, { name: 'Renamed' }, w.owner.token)).status, 200);
  await settle(200);
  assert.equal(player.configs.length, count, 'a change that moves no azaan pushes nothing');
});

test("a player's local play at a slot's time counts as covered locally in the slot's outcome and in the broadcast's report", async (t) => {
  const clock = createManualClock(T('11:40:00'));
  const ts = await startTestService(t, { clock, logLevel: 'warn' });
  const w = await world(t, ts);
  const a = await w.approved('a@offline.test');
  const b = await w.approved('b@offline.test');
  const c = await w.approved('c@offline.test');
  const pa = await configListener(t, ts, a.reg);
  const pb = await configListener(t, ts, b.reg);
  const pc = await configListener(t, ts, c.reg);
  clock.set(T('12:00:10'));
  await localPlaying(pa.client, a.reg.device.id, DHUHR_S); // names its slot
  await localPlaying(pb.client, b.reg.device.id); // names none: the arrival time is nearest Dhuhr
  await settle(200);
  const upcoming = await ts.http.get(`${API}/mosques/${w.mosque.id}/schedule?date=2026-06-11`, w.owner.token);
  assert.ok((upcoming.body as Array<{ covered_locally: unknown }>).every((s) => s.covered_locally === null), 'slots to come count nothing');
  // The broadcast comes late, within the grace: the third player hears it; the two that played their copy are counted apart.
  clock.set(T('12:02:00'));
  const started = await ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'dhuhr' }, w.owner.token);
  assert.equal(started.status, 201, JSON.stringify(started.body));
  await publish(pc.client, `devices/${c.reg.device.id}/status`, statusPayload('PLAYING', { reason: 'broadcast' }), { qos: 1 });
  // The attacker's report: a local source without offline_fallback (it heard the broadcast) is not a local play.
  await publish(pa.client, `devices/${a.reg.device.id}/status`, statusPayload('ONLINE'), { qos: 1 });
  await publish(pa.client, `devices/${a.reg.device.id}/status`, statusPayload('PLAYING', { reason: 'broadcast', detail: { source: 'local' } }), { qos: 1 });
  await settle(300);
  const report = (await ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts/${started.body.id}`, w.owner.token)).body.report;
  assert.equal(report.covered_locally, 2, JSON.stringify(report));
  assert.equal(report.playing, 1, 'the third player heard the broadcast; the two covered locally are not counted twice');
  clock.set(T('12:06:00'));
  await ts.service.schedule.runDue();
  const dhuhr = await dhuhrOf(ts, w.owner.token, w.mosque.id);
  assert.equal(dhuhr.status, 'live');
  assert.equal(dhuhr.covered_locally, 2, 'the slot counts the same two homes');
  assert.equal(dhuhr.report.covered_locally, 2);
});

test('a local play reported after a restart counts for the slot the service missed while it was down', async (t) => {
  const clock = createManualClock(T('11:40:00'));
  const svc = await restartableService(t, 'offline-restart', { clock });
  let ts = svc.current();
  const w = await world(t, ts);
  const { reg } = await w.approved('late@offline.test');
  const config = (await configsOnConnect(t, ts, reg)).at(-1)!;
  assert.equal(config.offline.slots[0].at, DHUHR_S);
  await svc.stop();
  clock.set(T('12:40:00')); // Dhuhr passed while the service was down; the player played its copy
  ts = await svc.start();
  const player = await connectDevice(t, reg.credentials, { url: ts.service.mqttUrl });
  await localPlaying(player, reg.device.id, DHUHR_S);
  const dhuhr = await waitFor('the late report counted', async () => {
    const s = await dhuhrOf(ts, w.owner.token, w.mosque.id);
    return s.covered_locally === 1 ? s : null;
  });
  assert.equal(dhuhr.status, 'missed', 'no broadcast: the service was down at its time');
  const asr = (await ts.http.get(`${API}/mosques/${w.mosque.id}/schedule?date=2026-06-10`, w.owner.token)).body.find((s: { prayer: string }) => s.prayer === 'asr');
  assert.equal(asr.covered_locally, null, 'Asr is still to come');
});
