import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openDatabase } from '../../src/platform/db.ts';
import { member } from '../support/people.ts';
import { connectDevice, configsOnConnect, mosqueWithOwner, publish, registerPlayer, registerTransmitter, statusPayload, waitFor, waitForStatus } from '../support/devices.ts';
import { adminGet, audioWorld, listedClients, listen, startSource } from './icecast.ts';

/**
 * Icecast down or restarted mid-broadcast (docs/operator.md#audio-icecast, "When a part is down"): /healthz names
 * audio, devices keep their MQTT state, and when Icecast is back the store is reconciled with it and listening
 * resumes. And the other way round: with Minaret down, Icecast admits nobody (it fails closed).
 */
test('Icecast killed mid-stream: /healthz 200 naming audio down (the node still serves), players keep their MQTT state; restarted: reconciled, on air and heard again', async (t) => {
  const { ts, icecast } = await audioWorld(t);
  const { owner, mosque } = await mosqueWithOwner(ts, { auto_approve_members: true });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const person = await member(ts, 'listener@example.com');
  const player = await registerPlayer(ts, person, mosque.id);
  const streamUrl = (await configsOnConnect(t, ts, player)).at(-1)!.stream_url as string;
  const mqttPlayer = await connectDevice(t, player.credentials, { url: ts.service.mqttUrl });
  await publish(mqttPlayer, `devices/${player.device.id}/status`, statusPayload('PLAYING'), { qos: 1 });
  await waitForStatus(ts, owner.token, player.device.id, 'PLAYING');

  const mount = `/m/${mosque.id}`;
  let source = startSource(t, icecast.port, mount, tx.credentials.username, tx.credentials.password);
  await waitFor('on air', async () => (await adminGet(icecast.port, '/admin/listmounts')).text.includes(mount), 8000);
  const heard = await listen(t, streamUrl);
  assert.equal(heard.status, 200);
  await waitFor('audio', () => heard.bytes() > 2048, 5000);
  await waitFor('/healthz ok', async () => (await ts.http.get('/healthz')).body.status === 'ok', 8000);

  await icecast.stop('SIGKILL');
  await heard.ended;
  await source.exited;
  const degraded = await waitFor('/healthz degraded', async () => {
    const res = await ts.http.get('/healthz');
    return res.body.audio === 'down' ? res : null;
  }, 8000);
  assert.equal(degraded.status, 200, 'an optional part down does not take the node out of a load balancer');
  assert.deepEqual(degraded.body, { status: 'degraded', db: 'ok', broker: 'ok', audio: 'down' });
  const device = (await ts.http.get(`/api/v1/devices/${player.device.id}`, owner.token)).body;
  assert.equal(device.status, 'PLAYING', 'the device keeps its MQTT state');
  assert.equal(device.connected, true);
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  assert.equal((db.prepare('SELECT count(*) AS n FROM audio_listener_sessions WHERE ended_at IS NULL').get() as { n: number }).n, 1, 'no callback told Minaret yet');

  await icecast.start();
  await waitFor('/healthz ok again', async () => (await ts.http.get('/healthz')).body.status === 'ok', 8000);
  await waitFor('the ghost session and interval reconciled', () => {
    const open = (db.prepare('SELECT count(*) AS n FROM audio_listener_sessions WHERE ended_at IS NULL').get() as { n: number }).n;
    const live = (db.prepare('SELECT count(*) AS n FROM audio_on_air WHERE ended_at IS NULL').get() as { n: number }).n;
    return open === 0 && live === 0;
  }, 3000);
  const ended = db.prepare('SELECT end_reason FROM audio_listener_sessions').get() as { end_reason: string };
  assert.equal(ended.end_reason, 'reconciled');

  source = startSource(t, icecast.port, mount, tx.credentials.username, tx.credentials.password);
  await waitFor('on air again', async () => (await adminGet(icecast.port, '/admin/listmounts')).text.includes(mount), 8000);
  const again = await listen(t, streamUrl);
  assert.equal(again.status, 200, 'the same lease opens the stream again');
  await waitFor('audio again', () => again.bytes() > 2048, 5000);
  assert.equal((await listedClients(icecast.port, mount)).length, 1);
  const intervals = db.prepare('SELECT end_reason FROM audio_on_air ORDER BY started_at, rowid').all() as Array<{ end_reason: string | null }>;
  assert.deepEqual(intervals.map((i) => i.end_reason), ['reconciled', null], 'the first interval ended by reconciliation, the second is live');
  again.close();
  await source.stop();
});

test('with Minaret down, Icecast admits no source and no listener (it fails closed)', async (t) => {
  const { ts, icecast } = await audioWorld(t);
  const { owner, mosque } = await mosqueWithOwner(ts, { auto_approve_members: true });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const person = await member(ts, 'listener@example.com');
  const player = await registerPlayer(ts, person, mosque.id);
  const streamUrl = (await configsOnConnect(t, ts, player)).at(-1)!.stream_url as string;
  await ts.service.close();
  const source = startSource(t, icecast.port, `/m/${mosque.id}`, tx.credentials.username, tx.credentials.password);
  assert.notEqual(await source.exited, 0, 'the source is refused');
  const refused = await listen(t, streamUrl);
  assert.notEqual(refused.status, 200, 'the listener is refused');
  refused.close();
});
