import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { recordingUrl } from '../../src/audio/recordings.ts';
import { createManualClock } from '../../src/platform/clock.ts';
import { configsOnConnect, connectDevice, mosqueWithOwner, nextMessage, registerPlayer, type Credentials } from '../support/devices.ts';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { audioFiles } from '../audio/audio-files.ts';
import { icecastEnv, listenerAdd } from '../audio/icecast.ts';

/**
 * One admission rule for every door that takes a lease (src/audio/lease-admission.ts): Icecast's listener_add
 * callback and the recorded azaan's download admit and refuse the same leases, for the same reason. Both are
 * called as their clients call them: the callback as Icecast posts it (no Icecast needed, as in
 * test/audio/callbacks.test.ts), the download as a player fetches a fallback broadcast's address.
 */

/** What each door answered for one lease: null when it admitted it, else the reason it named. */
async function bothGates(ts: TestService, w: World, lease: string, client: number): Promise<{ listener: string | null; recording: string | null }> {
  const heard = await listenerAdd(ts, `http://127.0.0.1:9/m/${w.mosqueId}?lease=${encodeURIComponent(lease)}`, client);
  const res = await fetch(recordingUrl(ts.url, w.mosqueId, lease));
  let recording: string | null = null;
  if (res.status === 200) assert.ok(Buffer.from(await res.arrayBuffer()).equals(w.recording), 'the admitted player gets the exact recording');
  else {
    assert.equal(res.status, 403, `a refused download is 403, got ${res.status}`);
    const body = (await res.json()) as { error: { code: string; details: Array<{ path: string; message: string }> } };
    assert.equal(body.error.details[0]!.path, 'lease');
    recording = body.error.details[0]!.message;
  }
  assert.equal(heard.admitted, heard.status === 200, 'listener_add admits exactly when it answers 200');
  return { listener: heard.admitted ? null : heard.reason, recording };
}

interface World {
  mosqueId: string;
  recording: Buffer;
  owner: { token: string };
  /** A player of a newly approved member, connected once: its registration, its member and the lease it was given. */
  player(email: string): Promise<{ reg: Awaited<ReturnType<typeof registerPlayer>>; person: { token: string }; membershipId: string; lease: string }>;
}

async function world(t: TestContext, ts: TestService, recording: Buffer): Promise<World> {
  const { owner, mosque } = await mosqueWithOwner(ts);
  const res = await ts.http.request('PUT', `${API}/mosques/${mosque.id}/recording`, { raw: recording, headers: { 'content-type': 'audio/mpeg' }, token: owner.token });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return {
    mosqueId: mosque.id, recording, owner,
    async player(email) {
      const person = await member(ts, email);
      const membership = await joinMosque(ts, person, mosque.id);
      await setStatus(ts, owner.token, membership.id, 'approved');
      const reg = await registerPlayer(ts, person, mosque.id);
      const lease = (await configsOnConnect(t, ts, reg)).at(-1)!.lease?.token as string;
      assert.ok(lease, `${email}'s approved player holds a lease`);
      return { reg, person, membershipId: membership.id, lease };
    },
  };
}

test('a fresh lease opens both gates; a superseded, a banned owner\'s and an expired lease are refused by both, for the same reason', async (t) => {
  const recording = audioFiles(t).make('mp3', 2); // before the service starts (test/audio/recordings.test.ts)
  const clock = createManualClock(Date.now());
  const ts = await startTestService(t, { logLevel: 'warn', clock, env: { ...icecastEnv(9), LEASE_TTL_HOURS: '1' } });
  const w = await world(t, ts, recording);
  let client = 0;

  const fresh = await w.player('fresh@listen.test');
  assert.deepEqual(await bothGates(ts, w, fresh.lease, ++client), { listener: null, recording: null }, 'a fresh lease is admitted by both');

  // Rotated: the lease signed under the old password is superseded, before the player reconnects and after.
  const rotated = await w.player('rotated@listen.test');
  const res = await ts.http.post(`${API}/devices/${rotated.reg.device.id}/credentials`, {}, rotated.person.token);
  assert.equal(res.status, 200);
  assert.deepEqual(await bothGates(ts, w, rotated.lease, ++client), { listener: 'lease_superseded', recording: 'lease_superseded' });
  const again = await connectDevice(t, { ...(res.body.credentials as Credentials), mqtt_url: ts.service.mqttUrl });
  const config = nextMessage(again, `devices/${rotated.reg.device.id}/config`);
  again.subscribe(`devices/${rotated.reg.device.id}/config`, { qos: 1 });
  const renewed = (await config).body.lease.token as string;
  assert.deepEqual(await bothGates(ts, w, rotated.lease, ++client), { listener: 'lease_superseded', recording: 'lease_superseded' }, 'the old lease stays superseded once a new one is issued');
  assert.deepEqual(await bothGates(ts, w, renewed, ++client), { listener: null, recording: null }, 'the new lease is admitted by both');

  // Banned: its lease has not expired and was not yet replaced, but its owner no longer stands.
  const banned = await w.player('banned@listen.test');
  await setStatus(ts, w.owner.token, banned.membershipId, 'banned');
  assert.deepEqual(await bothGates(ts, w, banned.lease, ++client), { listener: 'membership_not_approved', recording: 'membership_not_approved' });

  // An hour later every lease issued above has run out (LEASE_TTL_HOURS=1), the fresh one too.
  clock.advance(3600_000 + 1000);
  assert.deepEqual(await bothGates(ts, w, fresh.lease, ++client), { listener: 'lease_expired', recording: 'lease_expired' });
});

test('a forged lease is refused by both gates alike', async (t) => {
  const recording = audioFiles(t).make('mp3', 2);
  const ts = await startTestService(t, { logLevel: 'warn', env: icecastEnv(9) });
  const w = await world(t, ts, recording);
  const { lease } = await w.player('amina@listen.test');
  const [header, payload] = lease.split('.');
  assert.deepEqual(await bothGates(ts, w, `${header}.${payload}.${'A'.repeat(86)}`, 1), { listener: 'bad_lease', recording: 'bad_lease' });
  assert.deepEqual(await bothGates(ts, w, lease, 2), { listener: null, recording: null }, 'the genuine lease beside it is admitted');
});
