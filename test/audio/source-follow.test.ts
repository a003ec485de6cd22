import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createManualClock, startTestService } from '../support/service.ts';
import { API, member, setStatus, signInSuperadmin, createMosque, joinMosque, type Person } from '../support/people.ts';
import { connectDevice, nextMessage, registerPlayer, registerTransmitter, subscribeCode, waitFor } from '../support/devices.ts';
import { freePort, ICECAST_ADMIN_PASSWORD, icecastEnv, listen, printedConfig, startIcecast, startSource } from './icecast.ts';
import { toneOnce } from './audio-files.ts';

/**
 * Broadcasts follow the mosque's source as the audio server sees it (docs/api.md, "Broadcasts and the audio
 * server"), with Debian's icecast2 and ffmpeg: a start waits for the source, the source's end stops it, the report
 * says who heard how long, and a missed slot plays the recorded azaan to entitled players only.
 */

const T = (hhmm: string) => Date.parse(`2026-06-10T${hhmm}:00Z`);
const SCHEDULE = {
  timezone: 'Europe/London', latitude: 51.5072, longitude: -0.1276,
  prayer_times: { method: 'muslim_world_league', madhab: 'shafi' }, azaan: { dhuhr: { fixed: '13:00' } },
};

async function world(t: TestContext, clockAt?: number) {
  const port = await freePort();
  const clock = clockAt === undefined ? undefined : createManualClock(clockAt);
  const ts = await startTestService(t, { logLevel: 'warn', env: icecastEnv(port), ...(clock && { clock }) });
  const xml = await printedConfig({ ...icecastEnv(port), PUBLIC_URL: ts.url, LOG_LEVEL: 'warn' }, ['--port', String(port), '--log-dir', '/tmp']);
  const icecast = await startIcecast(t, port, xml);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@follow.test');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true, ...(clock && SCHEDULE) });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  return { ts, clock, icecast, root, owner, mosque, tx };
}

/** A member's player, connected, holding its lease and subscribed to the mosque's broadcast topic. */
async function leasedPlayer(t: TestContext, w: Awaited<ReturnType<typeof world>>, email: string) {
  const person = await member(w.ts, email);
  await joinMosque(w.ts, person, w.mosque.id);
  const player = await registerPlayer(w.ts, person, w.mosque.id);
  const client = await connectDevice(t, player.credentials, { url: w.ts.service.mqttUrl });
  const config = nextMessage(client, `devices/${player.device.id}/config`, 3000, (c) => Boolean(c.lease));
  assert.equal(await subscribeCode(client, `devices/${player.device.id}/config`), 1);
  const { body } = await config;
  const events: any[] = [];
  client.on('message', (topic, payload) => topic === `mosques/${w.mosque.id}/broadcast` && payload.length > 0 && events.push(JSON.parse(payload.toString('utf8'))));
  assert.equal(await subscribeCode(client, `mosques/${w.mosque.id}/broadcast`), 1);
  return { person: person as Person, player, client, lease: body.lease.token as string, streamUrl: body.stream_url as string, events };
}

test('a start before the source is on air waits: players hear it when the source goes live, the source ending stops it, and the report says who heard how long', async (t) => {
  const w = await world(t);
  const p = await leasedPlayer(t, w, 'amina@follow.test');

  const started = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind: 'announcement' }, w.owner.token);
  assert.equal(started.status, 201);
  assert.equal(started.body.waiting_for_source, true, 'the answer says the source is not on air');
  await new Promise((r) => setTimeout(r, 700));
  assert.deepEqual(p.events.filter((e) => e.action === 'start'), [], 'no player is sent to silence');

  const source = startSource(t, w.icecast.port, `/m/${w.mosque.id}`, w.tx.credentials.username, w.tx.credentials.password);
  const start = await waitFor('the start event once the source is live', () => p.events.find((e) => e.action === 'start' && e.broadcast_id === started.body.id), 10_000);
  assert.equal(start.stream_url, `http://127.0.0.1:${w.icecast.port}/m/${w.mosque.id}`);
  const read = await w.ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts/${started.body.id}`, w.owner.token);
  assert.equal(read.body.waiting_for_source, false);

  // The console's event stream counts listeners as they come.
  const ticket = (await w.ts.http.post(`${API}/mosques/${w.mosque.id}/events/ticket`, {}, w.owner.token)).body.ticket;
  const stream = await fetch(`${w.ts.url}/api/v1/mosques/${w.mosque.id}/events/stream?ticket=${encodeURIComponent(ticket)}`);
  const reader = stream.body!.getReader();
  t.after(() => reader.cancel().catch(() => undefined));
  let sse = '';
  const counted = (async () => {
    while (!/event: listeners\ndata: \{[^\n]*"count":1/.test(sse)) {
      const { value, done } = await reader.read();
      if (done) break;
      sse += Buffer.from(value).toString('utf8');
    }
    return sse;
  })();

  // The player listens with its lease; a stranger without one is refused and counted.
  const heard = await listen(t, p.streamUrl);
  assert.match(await Promise.race([counted, new Promise<string>((r) => setTimeout(() => r(sse), 5000))]), /event: listeners/);
  assert.equal(heard.status, 200);
  const refused = await listen(t, `http://127.0.0.1:${w.icecast.port}/m/${w.mosque.id}`);
  assert.notEqual(refused.status, 200);
  await waitFor('audio bytes at the player', () => heard.bytes() > 4000, 8000);
  const air = (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/on-air`, w.owner.token)).body;
  assert.deepEqual([air.audio_server, air.on_air, air.listeners], [true, true, 1]);
  assert.equal((await w.ts.http.get(`${API}/devices/${p.player.device.id}/why`, p.person.token)).body.on_air, true);
  await new Promise((r) => setTimeout(r, 1500));

  await source.stop();
  await waitFor('the source off air', async () => (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/on-air`, w.owner.token)).body.on_air === false, 10_000);
  await waitFor('the broadcast stopped with its source', async () => (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts/${started.body.id}`, w.owner.token)).body.status === 'stopped', 10_000);
  const report = (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts/${started.body.id}`, w.owner.token)).body.report;
  assert.deepEqual(report.listeners.admitted, { devices: 1, members: 0 });
  assert.equal(report.listeners.heard[0].device_id, p.player.device.id);
  assert.ok(report.listeners.heard[0].seconds >= 1, JSON.stringify(report.listeners));
  assert.ok((report.listeners.refused.no_credential ?? 0) >= 1, JSON.stringify(report.listeners.refused));
});

test('a slot missed with a recorded azaan plays the recording to entitled players only, named in the slot and the feed', async (t) => {
  const w = await world(t, T('11:40'));
  const recording = toneOnce('mp3', 3);
  const put = await w.ts.http.request('PUT', `${API}/mosques/${w.mosque.id}/recording`, { headers: { authorization: `Bearer ${w.owner.token}`, 'content-type': 'audio/mpeg' }, raw: recording });
  assert.equal(put.status, 201, JSON.stringify(put.body));
  const p = await leasedPlayer(t, w, 'amina@follow.test');
  const banned = await leasedPlayer(t, w, 'bilal@follow.test');
  const bannedMembership = (await w.ts.http.get(`${API}/me/memberships`, banned.person.token)).body[0];
  await setStatus(w.ts, w.owner.token, bannedMembership.id, 'banned');

  // No transmitter sent anything: at 12:06 (dhuhr at 13:00 London, 12:00Z, 5 minutes' grace) the slot is missed.
  w.clock!.set(T('12:06'));
  await w.ts.service.schedule.runDue();
  const start = await waitFor('the fallback start', () => p.events.find((e) => e.action === 'start'), 5000);
  assert.equal(start.stream_url, `${w.ts.url}/api/v1/audio/recordings/${w.mosque.id}`);
  const slot = (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/schedule?date=2026-06-10`, w.owner.token)).body.find((s: { prayer: string }) => s.prayer === 'dhuhr');
  assert.equal(slot.status, 'missed');
  assert.equal(slot.reason, 'transmitter_offline');
  const missed = (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/activity`, w.owner.token)).body.find((e: { kind: string }) => e.kind === 'schedule.azaan_missed');
  assert.equal(missed.data.fallback_broadcast_id, start.broadcast_id);
  const cast = (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts/${start.broadcast_id}`, w.owner.token)).body;
  assert.deepEqual([cast.kind, cast.prayer, cast.fallback, cast.status], ['azaan', 'dhuhr', true, 'live']);

  // The entitled player fetches it with its lease; the banned member's lease no longer opens it.
  const fetched = await fetch(`${start.stream_url}?lease=${encodeURIComponent(p.lease)}`);
  assert.equal(fetched.status, 200);
  assert.deepEqual(Buffer.from(await fetched.arrayBuffer()), recording);
  const refused = await fetch(`${start.stream_url}?lease=${encodeURIComponent(banned.lease)}`);
  assert.equal(refused.status, 403);
  await refused.body?.cancel();
  assert.deepEqual(banned.events.filter((e) => e.action === 'start'), [], 'an unleased player does not even hear the start');
});

test("a transmitter deleted while on air is no longer its mosque's source: Icecast drops it at once", async (t) => {
  const w = await world(t);
  startSource(t, w.icecast.port, `/m/${w.mosque.id}`, w.tx.credentials.username, w.tx.credentials.password);
  const onAir = async () => (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/on-air`, w.owner.token)).body.on_air as boolean;
  await waitFor('on air', onAir, 10_000);
  const deleted = Date.now();
  assert.equal((await w.ts.http.delete(`${API}/devices/${w.tx.device.id}`, w.owner.token)).status, 204);
  await waitFor('off air', async () => !(await onAir()), 5000);
  assert.ok(Date.now() - deleted < 5000);
  const mounts = await fetch(`http://127.0.0.1:${w.icecast.port}/admin/listmounts`, { headers: { authorization: `Basic ${Buffer.from(`admin:${ICECAST_ADMIN_PASSWORD}`).toString('base64')}` } });
  assert.doesNotMatch(await mounts.text(), new RegExp(`/m/${w.mosque.id}`));
});
