import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type mqtt from 'mqtt';
import { FIRST_SLICE } from '../../broker/delivery/sliced-delivery.ts';
import { API, joinMosque, member, setStatus, type Person } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { connectDevice, mosqueWithOwner, nextMessage, registerPlayer, registerTransmitter, settle, subscribeCode, waitFor } from '../support/devices.ts';

// The broker delivers a publish to many subscribers in slices (broker/delivery/sliced-delivery.ts).
// A mosque with more leased players than one slice holds: who hears a broadcast, and in what order, is as
// docs/firmware.md, "4.3 Broadcast events" says, with authorizeForward asked for each player in whichever slice it falls.

const STREAM = 'https://radio.example/noor/live';
const PLAYERS = FIRST_SLICE * 2 + 8; // more in the second slice than in the first

interface Player {
  id: string;
  client: mqtt.MqttClient;
  heard: { action: string; broadcast_id: string }[];
}

/** A member owns at most 20 stream players. */
const PLAYERS_PER_MEMBER = 16;

/**
 * `n` players owned by `people` (16 each), connected, each subscribed to the broadcast topic with the SUBACK
 * code expected.
 */
async function players(t: TestContext, ts: TestService, people: Person[], mosqueId: string, n: number, expectCode: number): Promise<Player[]> {
  const out: Player[] = [];
  // In order, so that the broker walks them in this order and the last ones fall in the last slice.
  for (let i = 0; i < n; i++) {
    const person = people[Math.floor(i / PLAYERS_PER_MEMBER)]!;
    const reg = await registerPlayer(ts, person, mosqueId, `room ${i}`);
    const client = await connectDevice(t, reg.credentials);
    assert.equal(await subscribeCode(client, `mosques/${mosqueId}/broadcast`), expectCode, `SUBACK for ${person.email}'s player ${i}`);
    const p: Player = { id: reg.device.id, client, heard: [] };
    client.on('message', (topic, payload) => {
      if (topic === `mosques/${mosqueId}/broadcast`) p.heard.push(JSON.parse(payload.toString()));
    });
    out.push(p);
  }
  return out;
}

async function approvedMember(ts: TestService, ownerToken: string, mosqueId: string, email: string) {
  const person = await member(ts, email);
  const membership = await joinMosque(ts, person, mosqueId);
  await setStatus(ts, ownerToken, membership.id, 'approved');
  return { person, membership };
}

/** Enough approved members to own `n` players. */
async function listeners(ts: TestService, ownerToken: string, mosqueId: string, n: number): Promise<Person[]> {
  const people: Person[] = [];
  for (let i = 0; i * PLAYERS_PER_MEMBER < n; i++) people.push((await approvedMember(ts, ownerToken, mosqueId, `listener${i}@example.com`)).person);
  return people;
}

test('a broadcast to more leased players than one slice reaches each of them once, start before stop, and no player without a lease; the transmitter gets broadcast_start', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM });
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const txClient = await connectDevice(t, tx.credentials);
  assert.equal(await subscribeCode(txClient, `devices/${tx.device.id}/cmd`), 1);
  const leased = await players(t, ts, await listeners(ts, owner.token, mosque.id, PLAYERS), mosque.id, PLAYERS, 1);
  // Subscribed while leased, then the member is banned: the subscriptions stay with aedes, last in its walk,
  // and only authorizeForward (asked in the last slice) keeps the broadcast from them.
  const lapsed = await approvedMember(ts, owner.token, mosque.id, 'lapsed@example.com');
  const lapsedPlayers = await players(t, ts, [lapsed.person], mosque.id, 2, 1);
  await setStatus(ts, owner.token, lapsed.membership.id, 'banned');
  // A pending member's player has no lease: its SUBSCRIBE is refused.
  const pending = await member(ts, 'pending@example.com');
  await joinMosque(ts, pending, mosque.id);
  const unleased = await players(t, ts, [pending], mosque.id, 1, 128);

  // Sent once the fan-out's last slice is written (broadcast-fanout.ts, afterStart).
  const command = nextMessage(txClient, `devices/${tx.device.id}/cmd`, 10_000, (m) => m.name === 'broadcast_start');
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'maghrib' }, owner.token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const id = (res.body as { id: string }).id;
  await waitFor('every leased player has the start', () => leased.every((p) => p.heard.length >= 1), 10_000);
  assert.equal((await command).body.args.broadcast_id, id);

  const stop = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${id}/stop`, undefined, owner.token);
  assert.equal(stop.status, 200, JSON.stringify(stop.body));
  await waitFor('every leased player has the stop', () => leased.every((p) => p.heard.length >= 2), 10_000);
  await settle(300);

  for (const p of leased) {
    assert.deepEqual(p.heard.map((e) => `${e.action} ${e.broadcast_id}`), [`start ${id}`, `stop ${id}`], `player ${p.id}`);
  }
  for (const p of [...lapsedPlayers, ...unleased]) assert.deepEqual(p.heard, [], `player ${p.id} has no lease but heard the broadcast`);
});

test('a leased player that subscribes after a sliced fan-out gets the retained start, once', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM });
  const people = await listeners(ts, owner.token, mosque.id, FIRST_SLICE + 8);
  const early = await players(t, ts, people, mosque.id, FIRST_SLICE + 8, 1);

  const res = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'isha' }, owner.token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const id = (res.body as { id: string }).id;
  await waitFor('every early player has the start', () => early.every((p) => p.heard.length === 1), 10_000);

  const late = await registerPlayer(ts, people.at(-1)!, mosque.id, 'late');
  const client = await connectDevice(t, late.credentials);
  const retained = nextMessage(client, `mosques/${mosque.id}/broadcast`, 3000);
  assert.equal(await subscribeCode(client, `mosques/${mosque.id}/broadcast`), 1);
  const got = await retained;
  assert.equal(got.retain, true);
  assert.equal(got.body.action, 'start');
  assert.equal(got.body.broadcast_id, id);
  assert.equal(got.body.stream_url, STREAM);
  await settle(300);
  assert.ok(early.every((p) => p.heard.length === 1), 'an early player heard the start twice');
});
