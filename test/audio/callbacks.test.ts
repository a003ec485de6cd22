import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { openDatabase } from '../../src/platform/db.ts';
import { createLeaseSigner, loadOrCreateLeaseKey } from '../../src/devices/leases.ts';
import { API, createMosque, joinMosque, member, setStatus } from '../support/people.ts';
import { configsOnConnect, mosqueWithOwner, registerPlayer, registerTransmitter } from '../support/devices.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { HOOK_SECRET, icecastEnv } from './icecast.ts';

/**
 * Minaret's side of Icecast's URL authentication, called as Icecast calls it (form POSTs with the hook secret as
 * HTTP basic), against a service whose ICECAST_URL names a port nobody listens on: no Icecast is needed to
 * decide who may listen. test/audio/gate.test.ts runs the same path through a real icecast2.
 */
const basic = (user: string, pass: string) => `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}`;
const HOOK_AUTH = basic('icecast', HOOK_SECRET);

async function hook(ts: TestService, action: string, fields: Record<string, string>, opts: { auth?: string | null; type?: string; raw?: string } = {}) {
  const headers: Record<string, string> = { 'content-type': opts.type ?? 'application/x-www-form-urlencoded' };
  if (opts.auth !== null) headers.authorization = opts.auth ?? HOOK_AUTH;
  const res = await fetch(`${ts.url}/api/v1/audio/hooks/${action}`, { method: 'POST', headers, body: opts.raw ?? new URLSearchParams({ action, ...fields }).toString() });
  const text = await res.text();
  let body: any = text;
  try {
    body = JSON.parse(text);
  } catch { /* not JSON: asserted below where it matters */ }
  return { status: res.status, headers: res.headers, body };
}

async function gated(t: TestContext) {
  const ts = await startTestService(t, { logLevel: 'warn', env: icecastEnv(9) });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { auto_approve_members: true });
  const listener = await member(ts, 'listener@example.com');
  const player = await registerPlayer(ts, listener, mosque.id);
  const [config] = (await configsOnConnect(t, ts, player)).slice(-1);
  return { ts, root, owner, mosque, listener, player, streamUrl: config!.stream_url as string };
}

/** A second mosque with its own owner, created by the superadmin of the world. */
async function otherMosque(ts: TestService, rootToken: string, opts: Record<string, unknown> = {}) {
  const owner = await member(ts, 'owner-b@example.com');
  return { owner, mosque: await createMosque(ts, rootToken, owner, { name: 'Masjid B', ...opts }) };
}

const mountOf = (streamUrl: string) => new URL(streamUrl).pathname + new URL(streamUrl).search;

test('a player config carries its mount under ICECAST_URL with its lease, and listener_add admits it until the lease ends', async (t) => {
  const { ts, mosque, player, streamUrl } = await gated(t);
  assert.match(streamUrl, new RegExp(`^http://127\\.0\\.0\\.1:9/m/${mosque.id}\\?lease=`));
  const res = await hook(ts, 'listener_add', { mount: mountOf(streamUrl), client: '41', ip: '10.0.0.7', user: '', pass: '', agent: 'test' });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.headers.get('icecast-auth-user'), '1');
  const lease = new URLSearchParams(new URL(streamUrl).search).get('lease')!;
  const exp = JSON.parse(Buffer.from(lease.split('.')[1]!, 'base64url').toString()).exp as number;
  const limit = Number(res.headers.get('icecast-auth-timelimit'));
  assert.ok(Math.abs(limit - (exp - Math.floor(Date.now() / 1000))) <= 2, `time limit ${limit} is the lease's remaining life`);
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  const row = db.prepare('SELECT * FROM audio_listener_sessions WHERE client_id = 41').get() as Record<string, unknown>;
  assert.equal(row.device_id, player.device.id);
  assert.equal(row.mosque_id, mosque.id);
  assert.equal(row.ended_at, null);
  const left = await hook(ts, 'listener_remove', { mount: mountOf(streamUrl), client: '41', duration: '17' });
  assert.equal(left.status, 200);
  const ended = db.prepare('SELECT * FROM audio_listener_sessions WHERE client_id = 41').get() as Record<string, unknown>;
  assert.equal(ended.seconds, 17);
  assert.equal(ended.end_reason, 'left');
});

test('listener_add refuses no lease, a forged or expired lease, and another mosque\'s lease, and counts each reason', async (t) => {
  const { ts, root, mosque, streamUrl, player } = await gated(t);
  const other = await otherMosque(ts, root.token, { auto_approve_members: true });
  const strangerB = await member(ts, 'b-listener@example.com');
  const playerB = await registerPlayer(ts, strangerB, other.mosque.id);
  const [configB] = (await configsOnConnect(t, ts, playerB)).slice(-1);
  const leaseB = new URLSearchParams(new URL(configB!.stream_url).search).get('lease')!;
  const signer = createLeaseSigner(loadOrCreateLeaseKey(ts.config.dataDir));
  const past = Math.floor(Date.now() / 1000) - 60;
  const expired = signer.issue(player.device.id, mosque.id, past, past - 3600);
  const lease = new URLSearchParams(new URL(streamUrl).search).get('lease')!;
  const forged = `${lease.slice(0, -4)}AAAA`;
  const cases: Array<[string, string, string]> = [
    ['no lease', `/m/${mosque.id}`, 'no_credential'],
    ['a forged lease', `/m/${mosque.id}?lease=${forged}`, 'bad_lease'],
    ['an expired lease', `/m/${mosque.id}?lease=${expired}`, 'lease_expired'],
    ["another mosque's lease", `/m/${mosque.id}?lease=${leaseB}`, 'other_mosque'],
    ['a path that is no mosque', '/', 'not_a_mosque_mount'],
    ['an unknown mosque', `/m/00000000-0000-0000-0000-000000000000?lease=${lease}`, 'unknown_mosque'],
  ];
  for (const [what, mount, reason] of cases) {
    const res = await hook(ts, 'listener_add', { mount, client: '7' });
    assert.equal(res.status, 403, `${what}: ${JSON.stringify(res.body)}`);
    assert.equal(res.headers.get('icecast-auth-user'), null, `${what} is not admitted`);
    assert.equal(res.headers.get('icecast-auth-message'), reason, what);
    assert.equal(res.body.error.code, 'forbidden');
  }
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  const reasons = (db.prepare("SELECT reason FROM audio_refusals WHERE kind = 'listener'").all() as Array<{ reason: string }>).map((r) => r.reason).sort();
  assert.deepEqual(reasons, cases.map((c) => c[2]).sort());
});

test('a rotated password ends the lease signed under the old one: the same stream address is refused', async (t) => {
  const { ts, listener, player, streamUrl } = await gated(t);
  const rotated = await ts.http.post(`${API}/devices/${player.device.id}/credentials`, {}, listener.token);
  assert.equal(rotated.status, 200);
  const res = await hook(ts, 'listener_add', { mount: mountOf(streamUrl), client: '8' });
  assert.equal(res.status, 403);
  assert.equal(res.headers.get('icecast-auth-message'), 'lease_superseded');
});

test('a banned owner\'s player is refused at once, though its lease has not expired', async (t) => {
  const { ts, owner, mosque, listener, streamUrl } = await gated(t);
  const membership = await joinMosque(ts, listener, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'banned');
  const res = await hook(ts, 'listener_add', { mount: mountOf(streamUrl), client: '9' });
  assert.equal(res.status, 403);
  assert.ok(['membership_not_approved', 'lease_superseded'].includes(res.headers.get('icecast-auth-message')!), res.headers.get('icecast-auth-message')!);
});

test('stream_auth admits only the mosque\'s own transmitter, and never an admin request', async (t) => {
  const { ts, root, owner, mosque, player } = await gated(t);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const other = await otherMosque(ts, root.token);
  const txB = await registerTransmitter(ts, other.owner.token, other.mosque.id);
  const mount = `/m/${mosque.id}`;
  const ask = (user: string, pass: string, extra: Record<string, string> = {}) => hook(ts, 'stream_auth', { mount, user, pass, ip: '10.0.0.2', server: '127.0.0.1', port: '8000', ...extra });
  const own = await ask(tx.credentials.username, tx.credentials.password);
  assert.equal(own.status, 200);
  assert.equal(own.headers.get('icecast-auth-user'), '1');
  const refusals: Array<[string, Awaited<ReturnType<typeof ask>>, string]> = [
    ['the same credentials asking for admin', await ask(tx.credentials.username, tx.credentials.password, { admin: '1' }), 'admin_request'],
    ["another mosque's transmitter", await ask(txB.credentials.username, txB.credentials.password), 'other_mosque'],
    ['a wrong password', await ask(tx.credentials.username, `${tx.credentials.password}x`), 'bad_credentials'],
    ['a stream player', await ask(player.credentials.username, player.credentials.password), 'not_a_transmitter'],
    ['no credentials', await ask('', ''), 'no_credentials'],
  ];
  for (const [what, res, reason] of refusals) {
    assert.equal(res.status, 403, what);
    assert.equal(res.headers.get('icecast-auth-user'), null, what);
    assert.equal(res.headers.get('icecast-auth-message'), reason, what);
  }
  const deleted = await ts.http.delete(`${API}/devices/${tx.device.id}`, owner.token);
  assert.equal(deleted.status, 204);
  assert.equal((await ask(tx.credentials.username, tx.credentials.password)).headers.get('icecast-auth-message'), 'bad_credentials', 'a deleted transmitter');
});

test('mount_add and mount_remove record the mosque on air and off air, with the admitted transmitter', async (t) => {
  const { ts, owner, mosque } = await gated(t);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const mount = `/m/${mosque.id}`;
  assert.equal((await hook(ts, 'stream_auth', { mount, user: tx.credentials.username, pass: tx.credentials.password })).status, 200);
  assert.equal((await hook(ts, 'mount_add', { mount, server: '127.0.0.1', port: '8000' })).status, 200);
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  const live = db.prepare('SELECT * FROM audio_on_air WHERE mosque_id = ?').all(mosque.id) as Array<Record<string, unknown>>;
  assert.equal(live.length, 1);
  assert.equal(live[0]!.device_id, tx.device.id);
  assert.equal(live[0]!.ended_at, null);
  assert.equal((await hook(ts, 'mount_remove', { mount })).status, 200);
  const ended = db.prepare('SELECT * FROM audio_on_air WHERE mosque_id = ?').get(mosque.id) as Record<string, unknown>;
  assert.notEqual(ended.ended_at, null);
  assert.equal(ended.end_reason, 'source_left');
});

test('a callback without the hook secret is refused with 401, and bad input is a 4xx in the error shape, never a 5xx', async (t) => {
  const { ts, streamUrl } = await gated(t);
  const fields = { mount: mountOf(streamUrl), client: '5' };
  for (const auth of [null, basic('icecast', 'wrong-secret-wrong-secret-wrong-secret'), basic('other', HOOK_SECRET), 'Bearer x', 'Basic !!!']) {
    const res = await hook(ts, 'listener_add', fields, { auth });
    assert.equal(res.status, 401, String(auth));
    assert.equal(res.body.error.code, 'unauthorized');
    assert.equal(res.headers.get('icecast-auth-user'), null);
  }
  const bad: Array<[string, Awaited<ReturnType<typeof hook>>, number]> = [
    ['JSON instead of a form', await hook(ts, 'listener_add', {}, { type: 'application/json', raw: JSON.stringify({ action: 'listener_add', ...fields }) }), 415],
    ['an unknown action', await hook(ts, 'listener_explode', fields), 400],
    ['no mount', await hook(ts, 'listener_add', { client: '5' }), 400],
    ['a client id that is not a number', await hook(ts, 'listener_add', { ...fields, client: 'x' }), 400],
    ['an action differing from the path', await hook(ts, 'listener_add', {}, { raw: new URLSearchParams({ action: 'mount_add', ...fields }).toString() }), 400],
    ['a body over 8 KiB', await hook(ts, 'listener_add', {}, { raw: `action=listener_add&mount=${'a'.repeat(9000)}` }), 413],
    ['broken percent-encoding', await hook(ts, 'listener_add', {}, { raw: 'action=listener_add&mount=%E0%A4%A&client=1' }), 403],
    ['a mount with a query of garbage', await hook(ts, 'listener_add', { mount: '/m/../../etc?lease=%00', client: '1' }), 403],
  ];
  for (const [what, res, status] of bad) {
    assert.equal(res.status, status, `${what}: ${JSON.stringify(res.body)}`);
    assert.equal(typeof res.body?.error?.code, 'string', `${what}: the error shape`);
  }
  const log = ts.logs.join('\n');
  assert.doesNotMatch(log, new RegExp(HOOK_SECRET), 'the secret never lands in the log');
  assert.doesNotMatch(log, /lease=/, 'nor a lease');
});

test('POST /mosques/{id}/listen gives an approved member a ticket address that listener_add admits; a pending one is told 403', async (t) => {
  const { ts, root, owner, mosque, listener } = await gated(t);
  const res = await ts.http.post(`${API}/mosques/${mosque.id}/listen`, {}, listener.token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  assert.match(res.body.url, new RegExp(`^http://127\\.0\\.0\\.1:9/m/${mosque.id}\\?ticket=`));
  const expiresIn = Date.parse(res.body.expires_at) - Date.now();
  assert.ok(expiresIn > 9 * 60_000 && expiresIn <= 10 * 60_000, 'ten minutes');
  const admitted = await hook(ts, 'listener_add', { mount: mountOf(res.body.url), client: '12' });
  assert.equal(admitted.status, 200);
  assert.equal(admitted.headers.get('icecast-auth-user'), '1');
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  assert.equal((db.prepare('SELECT user_id FROM audio_listener_sessions WHERE client_id = 12').get() as { user_id: string }).user_id, listener.id);

  const other = await otherMosque(ts, root.token);
  const ticketOfB = await ts.http.post(`${API}/mosques/${other.mosque.id}/listen`, {}, other.owner.token);
  assert.equal(ticketOfB.status, 201);
  const foreign = await hook(ts, 'listener_add', { mount: `/m/${mosque.id}?ticket=${new URL(ticketOfB.body.url).searchParams.get('ticket')}`, client: '13' });
  assert.equal(foreign.headers.get('icecast-auth-message'), 'other_mosque');

  const pending = await member(ts, 'pending@example.com');
  await ts.http.patch(`${API}/mosques/${mosque.id}`, { auto_approve_members: false }, owner.token);
  await joinMosque(ts, pending, mosque.id);
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/listen`, {}, pending.token)).status, 403);
});

test('without ICECAST_URL the hooks answer 404 and the listen route 409: the mosque streams from its own stream_url', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { mosque } = await mosqueWithOwner(ts, { auto_approve_members: true, stream_url: 'https://stream.example.org/live' });
  const listener = await member(ts, 'l@example.com');
  const player = await registerPlayer(ts, listener, mosque.id);
  const [config] = (await configsOnConnect(t, ts, player)).slice(-1);
  assert.equal(config!.stream_url, 'https://stream.example.org/live');
  assert.equal((await hook(ts, 'listener_add', { mount: `/m/${mosque.id}`, client: '1' })).status, 404);
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/listen`, {}, listener.token)).status, 409);
  assert.equal((await ts.http.get('/healthz')).body.audio, undefined, '/healthz names no audio part');
});
