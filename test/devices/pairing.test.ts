import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { storeOf } from '../support/database.ts';
import { connectDevice, getDevice, nextMessage, publish, statusPayload, subscribeCode, waitForStatus } from '../support/devices.ts';
import { API, createMosque, joinMosque, makeAdmin, member, signInSuperadmin } from '../support/people.ts';
import { createManualClock, startTestService, type TestService } from '../support/service.ts';

/** docs/api.md, "Pairing a device": RFC 8628 over real HTTP, then the device over real MQTT. */

const START = `${API}/devices/pairing`;
const TOKEN = `${API}/devices/pairing/token`;
const APPROVE = `${API}/devices/pairing/approve`;
const DENY = `${API}/devices/pairing/deny`;

/** Polls answered at once (PAIRING_POLL_HOLD_S 0), unless a test holds them: the manual clock does not move a hold. */
async function world(t: TestContext, env: Record<string, string> = {}) {
  const clock = createManualClock(Date.now());
  const ts = await startTestService(t, { clock, env: { PAIRING_POLL_HOLD_S: '0', ...env }, logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.com');
  const mosque = await createMosque(ts, root.token, owner, { auto_approve_members: true });
  return { ts, clock, root, owner, mosque };
}

async function startPairing(ts: TestService, kind = 'stream_player', headers: Record<string, string> = {}) {
  const res = await ts.http.request('POST', START, { body: { kind, name: 'from the device', fw: '1.0.0', hw_rev: 'B' }, headers });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body as { device_code: string; user_code: string; verification_uri: string; verification_uri_complete: string; expires_in: number; interval: number };
}

const poll = (ts: TestService, deviceCode: string) => ts.http.post(TOKEN, { device_code: deviceCode });
const pairingRows = async (ts: TestService) => {
  const { store, close } = await storeOf(ts);
  try {
    return await store.selectFrom('device_pairings').selectAll().execute();
  } finally {
    await close();
  }
};

test('a member pairs a player by its code: pending, slow_down, approve, credentials once, then the device connects', async (t) => {
  const { ts, clock, mosque } = await world(t);
  const alice = await member(ts, 'alice@example.com');
  await joinMosque(ts, alice, mosque.id);

  const started = await startPairing(ts);
  assert.match(started.user_code, /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
  assert.equal(Buffer.from(started.device_code, 'base64url').length, 32, '256 random bits');
  assert.equal(started.expires_in, 600);
  assert.equal(started.interval, 5);
  assert.equal(started.verification_uri, `${ts.url}/pair`);
  assert.equal(started.verification_uri_complete, `${ts.url}/pair?code=${started.user_code}`);

  const pending = await poll(ts, started.device_code);
  assert.deepEqual([pending.status, pending.body.error.code], [400, 'authorization_pending']);
  const fast = await poll(ts, started.device_code);
  assert.deepEqual([fast.status, fast.body.error.code], [400, 'slow_down'], 'polled again at once');
  clock.advance(5_000);
  assert.equal((await poll(ts, started.device_code)).body.error.code, 'slow_down', 'slow_down added 5 s: 10 s now, and 15 s after this one');
  clock.advance(15_000);
  assert.equal((await poll(ts, started.device_code)).body.error.code, 'authorization_pending');

  // Typed loosely: lower case, spaces, no dash.
  const typed = ` ${started.user_code.replace('-', ' ').toLowerCase()} `;
  const approved = await ts.http.post(APPROVE, { user_code: typed, mosque_id: mosque.id, name: 'kitchen' }, alice.token);
  assert.equal(approved.status, 200, JSON.stringify(approved.body));
  assert.equal(approved.body.device.kind, 'stream_player');
  assert.equal(approved.body.device.owner_user_id, alice.id);
  assert.equal(approved.body.device.mosque_id, mosque.id);
  assert.equal(approved.body.device.name, 'kitchen', "the approver's name wins");
  assert.equal(approved.body.credentials, undefined, 'the person never sees the password');

  clock.advance(15_000);
  const taken = await poll(ts, started.device_code);
  assert.equal(taken.status, 200, JSON.stringify(taken.body));
  assert.equal(taken.body.device.id, approved.body.device.id);
  assert.equal(taken.body.credentials.username, approved.body.device.id);
  assert.equal(taken.body.credentials.api_url, `${ts.url}/api/v1`);
  clock.advance(15_000);
  const again = await poll(ts, started.device_code);
  assert.deepEqual([again.status, again.body.error.code], [400, 'expired_token'], 'the credentials are answered once');
  assert.equal((await ts.http.post(APPROVE, { user_code: started.user_code, mosque_id: mosque.id }, alice.token)).status, 404, 'a used code approves nothing');
  assert.deepEqual(await pairingRows(ts), [], 'the pairing is gone with its answer');

  // The device connects with what its poll got, and is entitled: its config carries a lease.
  const client = await connectDevice(t, taken.body.credentials, { url: ts.service.mqttUrl });
  const topic = `devices/${taken.body.device.id}/config`;
  const config = nextMessage(client, topic);
  assert.equal(await subscribeCode(client, topic), 1);
  assert.ok((await config).body.lease, 'an entitled player gets a lease');
  await publish(client, `devices/${taken.body.device.id}/status`, statusPayload('ONLINE', { prev: 'UNBOUND', reason: 'entitled' }), { qos: 1, retain: true });
  const online = await waitForStatus(ts, alice.token, taken.body.device.id, 'ONLINE');
  assert.equal(online.connected, true);
});

test('a pending poll is held open and answered the moment the code is approved or denied; the next poll may follow at once', async (t) => {
  const { ts, clock, owner, mosque } = await world(t, { PAIRING_POLL_HOLD_S: '5' });
  const started = await startPairing(ts);
  let answeredAt = 0;
  const held = poll(ts, started.device_code).then((res) => ((answeredAt = Date.now()), res));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(answeredAt, 0, 'still held: nobody approved yet');
  const approved = await ts.http.post(APPROVE, { user_code: started.user_code, mosque_id: mosque.id }, owner.token);
  assert.equal(approved.status, 200, JSON.stringify(approved.body));
  const approvedAt = Date.now();
  const taken = await held;
  assert.equal(taken.status, 200, JSON.stringify(taken.body));
  assert.equal(taken.body.device.id, approved.body.device.id, 'the held poll carries the credentials');
  // Woken by the approval itself, not by the hold's end (5 s) nor by the store re-read (every 500 ms).
  assert.ok(answeredAt - approvedAt < 400, `answered ${answeredAt - approvedAt} ms after the approval`);

  // Unanswered, a hold ends with authorization_pending after the interval; a poll sent as it ends is no slow_down.
  const second = await startPairing(ts);
  const from = Date.now();
  const pending = await poll(ts, second.device_code);
  assert.deepEqual([pending.status, pending.body.error.code], [400, 'authorization_pending']);
  assert.ok(Date.now() - from >= 4_500, `held ${Date.now() - from} ms`);
  clock.advance(Date.now() - from); // the service's clock is the manual one: it moves as the hold did
  const denying = poll(ts, second.device_code);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await ts.http.post(DENY, { user_code: second.user_code }, owner.token)).status, 204);
  const denied = await denying;
  assert.deepEqual([denied.status, denied.body.error.code], [400, 'access_denied'], 'polled at once after a held answer, and woken by the denial');
});

test('a pending member pairs a player that connects UNBOUND; a can_manage admin pairs a transmitter', async (t) => {
  const { ts, root, mosque } = await world(t);
  const closed = await createMosque(ts, root.token, null, { name: 'Closed', auto_approve_members: false });
  const bob = await member(ts, 'bob@example.com');
  assert.equal((await joinMosque(ts, bob, closed.id)).status, 'pending');
  const player = await startPairing(ts);
  assert.equal((await ts.http.post(APPROVE, { user_code: player.user_code, mosque_id: closed.id }, bob.token)).status, 200);
  const creds = (await poll(ts, player.device_code)).body;
  const client = await connectDevice(t, creds.credentials, { url: ts.service.mqttUrl });
  const topic = `devices/${creds.device.id}/config`;
  const config = nextMessage(client, topic);
  await subscribeCode(client, topic);
  assert.equal((await config).body.lease ?? null, null, 'awaiting approval: no lease');
  await publish(client, `devices/${creds.device.id}/status`, statusPayload('UNBOUND', { detail: { reason: 'awaiting_approval' } }), { qos: 1, retain: true });
  await waitForStatus(ts, bob.token, creds.device.id, 'UNBOUND');

  const manager = await member(ts, 'manager@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  const tx = await startPairing(ts, 'transmitter');
  const approved = await ts.http.post(APPROVE, { user_code: tx.user_code, mosque_id: mosque.id }, manager.token);
  assert.equal(approved.status, 200, JSON.stringify(approved.body));
  assert.deepEqual([approved.body.device.kind, approved.body.device.mosque_id, approved.body.device.owner_user_id], ['transmitter', mosque.id, null]);
  const txCreds = (await poll(ts, tx.device_code)).body;
  await connectDevice(t, txCreds.credentials, { url: ts.service.mqttUrl });
  assert.equal((await getDevice(ts, manager.token, txCreds.device.id)).kind, 'transmitter');
});

test('refusals answer as an unknown code, store nothing, and leave the pairing to its rightful approver', async (t) => {
  const { ts, root, mosque } = await world(t);
  const other = await createMosque(ts, root.token, null, { name: 'Elsewhere', auto_approve_members: true });
  const stranger = await member(ts, 'stranger@example.com');
  await joinMosque(ts, stranger, other.id);
  const plainAdmin = await member(ts, 'plain@example.com');
  await makeAdmin(ts, root.token, mosque.id, plainAdmin, { can_trigger: true });
  const unproven = await member(ts, 'unproven@example.com', { unproven: true });

  const player = await startPairing(ts);
  const tx = await startPairing(ts, 'transmitter');
  const before = await pairingRows(ts);
  const refused = [
    ['a member of another mosque', player.user_code, stranger.token],
    ['an admin without can_manage, for a transmitter', tx.user_code, plainAdmin.token],
    ['a stranger, for a transmitter', tx.user_code, stranger.token],
    ['an unknown code', 'BCDF-GHJK', stranger.token],
    ['a malformed code', 'abcd-efgh', stranger.token],
  ] as const;
  for (const [who, code, token] of refused) {
    const res = await ts.http.post(APPROVE, { user_code: code, mosque_id: mosque.id }, token);
    assert.deepEqual([res.status, res.body.error.code], [404, 'not_found'], who);
  }
  const first = await ts.http.post(APPROVE, { user_code: 'BCDF-GHJK', mosque_id: mosque.id }, stranger.token);
  const second = await ts.http.post(APPROVE, { user_code: player.user_code, mosque_id: mosque.id }, stranger.token);
  assert.equal(second.body.error.message, first.body.error.message, 'one message whether the code exists or not');

  const blocked = await ts.http.post(APPROVE, { user_code: player.user_code, mosque_id: mosque.id }, unproven.token);
  assert.deepEqual([blocked.status, blocked.body.error.code], [403, 'address_unproven']);
  assert.deepEqual(await pairingRows(ts), before, 'no refusal changed a pairing');
  assert.equal((await ts.http.get(`${API}/devices`, root.token)).body.length, 0, 'no device was registered');

  // A poll for a made-up device code learns nothing; the real one is still pending.
  const guessed = await poll(ts, Buffer.alloc(32, 7).toString('base64url'));
  assert.deepEqual([guessed.status, guessed.body.error.code], [400, 'expired_token']);
  assert.equal((await poll(ts, player.device_code)).body.error.code, 'authorization_pending');
});

test('a code expires with the clock; a denied pairing answers access_denied', async (t) => {
  const { ts, clock, owner, mosque } = await world(t);
  const late = await startPairing(ts);
  clock.advance(600_000);
  assert.equal((await ts.http.post(APPROVE, { user_code: late.user_code, mosque_id: mosque.id }, owner.token)).status, 404);
  assert.equal((await poll(ts, late.device_code)).body.error.code, 'expired_token');

  const denied = await startPairing(ts);
  assert.equal((await ts.http.post(DENY, { user_code: denied.user_code.toLowerCase() }, owner.token)).status, 204);
  assert.equal((await ts.http.post(APPROVE, { user_code: denied.user_code, mosque_id: mosque.id }, owner.token)).status, 404, 'denied: no longer approvable');
  const answer = await poll(ts, denied.device_code);
  assert.deepEqual([answer.status, answer.body.error.code], [400, 'access_denied']);
});

test('a player deleted between approval and the poll makes the pairing void', async (t) => {
  const { ts, owner, mosque } = await world(t);
  const started = await startPairing(ts);
  const approved = await ts.http.post(APPROVE, { user_code: started.user_code, mosque_id: mosque.id }, owner.token);
  assert.equal((await ts.http.delete(`${API}/devices/${approved.body.device.id}`, owner.token)).status, 204);
  assert.equal((await poll(ts, started.device_code)).body.error.code, 'access_denied');
});

test('the codes are stored only as keyed hashes', async (t) => {
  const { ts } = await world(t);
  const started = await startPairing(ts);
  const rows = await pairingRows(ts);
  assert.equal(rows.length, 1);
  const stored = JSON.stringify(rows[0]);
  const letters = started.user_code.replace('-', '');
  for (const secret of [started.device_code, started.user_code, letters, letters.toLowerCase()]) assert.ok(!stored.includes(secret), `no ${secret} in ${stored}`);
  assert.match(rows[0]!.user_code_hash, /^[0-9a-f]{64}$/);
  assert.match(rows[0]!.device_code_hash, /^[0-9a-f]{64}$/);
});

test('pairings started from one address are limited, and so is the number pending', async (t) => {
  const { ts } = await world(t, { TRUST_PROXY: '1', PAIRING_STARTS_PER_ADDRESS: '3', PAIRING_MAX_PENDING: '5' });
  const from = (ip: string) => ({ 'x-forwarded-for': ip });
  for (let i = 0; i < 3; i++) await startPairing(ts, 'stream_player', from('203.0.113.1'));
  const flood = await ts.http.request('POST', START, { body: { kind: 'stream_player' }, headers: from('203.0.113.1') });
  assert.deepEqual([flood.status, flood.body.error.code], [429, 'rate_limited']);
  assert.ok(Number(flood.headers.get('retry-after')) > 0);
  await startPairing(ts, 'stream_player', from('203.0.113.2'));
  await startPairing(ts, 'stream_player', from('203.0.113.2'));
  const full = await ts.http.request('POST', START, { body: { kind: 'stream_player' }, headers: from('203.0.113.3') });
  assert.deepEqual([full.status, full.body.error.code], [503, 'service_busy']);
  assert.ok(Number(full.headers.get('retry-after')) > 0);
  assert.equal((await pairingRows(ts)).length, 5, 'nothing stored past the bound');
});

test('wrong codes are limited per person and per address; a right code after the limit is refused too', async (t) => {
  const { ts, owner, mosque } = await world(t, { TRUST_PROXY: '1', PAIRING_GUESSES_PER_PERSON: '3', PAIRING_GUESSES_PER_ADDRESS: '4' });
  const started = await startPairing(ts);
  const approveAs = (token: string, code: string, ip: string) =>
    ts.http.request('POST', APPROVE, { body: { user_code: code, mosque_id: mosque.id }, token, headers: { 'x-forwarded-for': ip } });
  for (let i = 0; i < 3; i++) assert.equal((await approveAs(owner.token, 'BCDF-GHJK', `198.51.100.${i}`)).status, 404);
  const limited = await approveAs(owner.token, started.user_code, '198.51.100.9');
  assert.deepEqual([limited.status, limited.body.error.code], [429, 'rate_limited'], 'the person is out of guesses');
  assert.ok(Number(limited.headers.get('retry-after')) > 0);

  // Per address: other people from one address share its budget.
  const guessers = await Promise.all(['g1', 'g2'].map((n) => member(ts, `${n}@example.com`)));
  for (let i = 0; i < 4; i++) assert.equal((await approveAs(guessers[i % 2]!.token, 'BCDF-GHJK', '192.0.2.1')).status, 404);
  assert.equal((await approveAs(guessers[0]!.token, 'BCDF-GHJK', '192.0.2.1')).status, 429);
  assert.equal((await poll(ts, started.device_code)).body.error.code, 'authorization_pending', 'the pairing was not approved');
});
