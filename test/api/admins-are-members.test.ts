import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestService } from '../support/service.ts';
import { API, createMosque, makeAdmin, member, mosqueActivity, ownMembership, setStatus, signInSuperadmin } from '../support/people.ts';
import { connectDevice, nextMessage, registerPlayer } from '../support/devices.ts';

/** Issue 10: a mosque's owner and admins are its members, so their own players are entitled like anyone's. */

test('creating a mosque enrols its owner as an approved member', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner);
  const membership = await ownMembership(ts, owner, mosque.id);
  assert.equal(membership?.status, 'approved');
  const kinds = (await mosqueActivity(ts, root.token, mosque.id)).map((e: { kind: string }) => e.kind);
  assert.ok(kinds.includes('membership.admin_admitted'), kinds.join(','));
});

test("the owner's own player is entitled at once: its first config carries the stream and a lease", async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, { stream_url: 'https://radio.example.org/live' });
  const player = await registerPlayer(ts, owner, mosque.id);
  const client = await connectDevice(t, player.credentials);
  const config = nextMessage(client, `devices/${player.device.id}/config`, 3000);
  client.subscribe(`devices/${player.device.id}/config`, { qos: 1 });
  const { body } = await config;
  assert.equal(body.stream_url, 'https://radio.example.org/live');
  assert.equal(typeof body.lease?.token, 'string');
});

test('adding an admin enrols them as approved; a pending membership is approved', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  const pendingOne = await member(ts, 'pending@example.com');
  const joined = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, pendingOne.token);
  assert.equal(joined.body.status, 'pending');
  const fresh = await member(ts, 'fresh@example.com');
  await makeAdmin(ts, root.token, mosque.id, pendingOne);
  await makeAdmin(ts, root.token, mosque.id, fresh);
  assert.equal((await ownMembership(ts, pendingOne, mosque.id))?.status, 'approved');
  assert.equal((await ownMembership(ts, fresh, mosque.id))?.status, 'approved');
});

test('adding a banned user as admin leaves the ban in place: only a status change lifts it', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  const person = await member(ts, 'banned@example.com');
  const joined = await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, person.token);
  await setStatus(ts, root.token, joined.body.id, 'banned');
  await makeAdmin(ts, root.token, mosque.id, person);
  assert.equal((await ownMembership(ts, person, mosque.id))?.status, 'banned');
});

test('removing an admin row leaves the membership as it is', async (t) => {
  const ts = await startTestService(t);
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  const person = await member(ts, 'helper@example.com');
  await makeAdmin(ts, root.token, mosque.id, person);
  const removed = await ts.http.delete(`${API}/mosques/${mosque.id}/admins/${person.id}`, root.token);
  assert.equal(removed.status, 204, JSON.stringify(removed.body));
  assert.equal((await ownMembership(ts, person, mosque.id))?.status, 'approved');
});
