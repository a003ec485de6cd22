import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openDatabase } from '../../src/platform/db.ts';
import { API, createMosque, joinMosque, member, setStatus } from '../support/people.ts';
import { configsOnConnect, mosqueWithOwner, registerPlayer, registerTransmitter, waitFor } from '../support/devices.ts';
import { adminGet, audioWorld, HOOK_SECRET, ICECAST_ADMIN_PASSWORD, icecastEnv, listedClients, listen, printedConfig, startSource } from './icecast.ts';

/**
 * The audio gate end to end with Debian's icecast2 2.4.4, configured by `minaret icecast-config` as printed, and
 * ffmpeg as the transmitter's source client (docs/operator.md#audio-icecast).
 */

async function gatedMosque(t: Parameters<typeof audioWorld>[0]) {
  const w = await audioWorld(t);
  const { root, owner, mosque } = await mosqueWithOwner(w.ts, { auto_approve_members: true });
  const tx = await registerTransmitter(w.ts, owner.token, mosque.id);
  const source = startSource(t, w.icecast.port, `/m/${mosque.id}`, tx.credentials.username, tx.credentials.password);
  await waitFor('the mosque on air', async () => (await adminGet(w.icecast.port, '/admin/listmounts')).text.includes(`/m/${mosque.id}`), 8000);
  return { ...w, root, owner, mosque, tx, source };
}

async function leasedPlayer(t: Parameters<typeof audioWorld>[0], ts: Awaited<ReturnType<typeof audioWorld>>['ts'], mosqueId: string, email: string) {
  const person = await member(ts, email);
  const player = await registerPlayer(ts, person, mosqueId);
  const configs = await configsOnConnect(t, ts, player);
  return { person, player, streamUrl: configs.at(-1)!.stream_url as string };
}

test('the printed icecast.xml has no default password and boots icecast2, which then asks Minaret about every path', async (t) => {
  const { ts, icecast, icecastUrl } = await audioWorld(t);
  const xml = await printedConfig({ ...icecastEnv(icecast.port), PUBLIC_URL: ts.url }, ['--port', String(icecast.port)]);
  assert.doesNotMatch(xml, /hackme/);
  assert.match(xml, /<fileserve>0<\/fileserve>/);
  assert.match(xml, new RegExp(`<option name="listener_add" value="${ts.url}/api/v1/audio/hooks/listener_add"/>`));
  assert.match(xml, new RegExp(`<option name="password" value="${HOOK_SECRET}"/>`));
  assert.match(xml, new RegExp(`<admin-password>${ICECAST_ADMIN_PASSWORD}</admin-password>`));
  const sources = [...xml.matchAll(/<(source|relay)-password>([^<]+)</g)].map((m) => m[2]);
  assert.equal(sources.length, 2);
  assert.notEqual(sources[0], (await printedConfig({ ...icecastEnv(icecast.port), PUBLIC_URL: ts.url }, [])).match(/<source-password>([^<]+)</)![1], 'random each time');
  for (const p of ['/', '/m/nothing', '/status-json.xsl']) {
    const res = await fetch(`${icecastUrl}${p}`);
    assert.notEqual(res.status, 200, `${p} is not served`);
    await res.body?.cancel();
  }
  // Minaret started first: its probe (every 5 s) finds Icecast there now.
  await waitFor('/healthz names audio ok', async () => (await ts.http.get('/healthz')).body.audio === 'ok', 8000);
});

test("the mosque's transmitter goes on air; another mosque's transmitter, a wrong password and an admin request with a transmitter's password are refused", async (t) => {
  const { ts, icecast, root, mosque, tx } = await gatedMosque(t);
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  const onAir = await waitFor('the on-air interval', () => db.prepare('SELECT * FROM audio_on_air WHERE mosque_id = ? AND ended_at IS NULL').get(mosque.id) as Record<string, unknown> | undefined);
  assert.equal(onAir.device_id, tx.device.id);

  const ownerB = await member(ts, 'owner-b@example.com');
  const mosqueB = await createMosque(ts, root.token, ownerB, { name: 'Masjid B' });
  const txB = await registerTransmitter(ts, ownerB.token, mosqueB.id);
  // A second source on a live mount is Icecast's own refusal; the other mosque's transmitter tries a mount of its own name too.
  const foreign = startSource(t, icecast.port, `/m/${mosqueB.id}x`, txB.credentials.username, txB.credentials.password);
  const wrong = startSource(t, icecast.port, `/m/${mosqueB.id}`, txB.credentials.username, `${txB.credentials.password}x`);
  const hijack = startSource(t, icecast.port, `/m/${mosqueB.id}`, tx.credentials.username, tx.credentials.password);
  for (const [what, s] of [['an unknown mount', foreign], ['a wrong password', wrong], ["another mosque's transmitter", hijack]] as const) {
    assert.notEqual(await s.exited, 0, `${what}: ffmpeg is refused`);
  }
  assert.doesNotMatch((await adminGet(icecast.port, '/admin/listmounts')).text, new RegExp(mosqueB.id), 'mosque B never went on air');
  const asAdmin = await fetch(`http://127.0.0.1:${icecast.port}/admin/listclients?mount=/m/${mosque.id}`, {
    headers: { authorization: `Basic ${Buffer.from(`${tx.credentials.username}:${tx.credentials.password}`).toString('base64')}` },
  });
  assert.equal(asAdmin.status, 401, "a transmitter's password does not administer its mount");
  await asAdmin.body?.cancel();
  const reasons = (db.prepare("SELECT reason FROM audio_refusals WHERE kind = 'source'").all() as Array<{ reason: string }>).map((r) => r.reason).sort();
  assert.deepEqual(reasons, ['admin_request', 'bad_credentials', 'other_mosque', 'unknown_mosque']);
});

test('a leased player receives audio bytes; no lease, a forged one and another mosque\'s lease are refused', async (t) => {
  const { ts, icecast, icecastUrl, root, mosque } = await gatedMosque(t);
  const { player, streamUrl } = await leasedPlayer(t, ts, mosque.id, 'listener@example.com');
  assert.ok(streamUrl.startsWith(`${icecastUrl}/m/${mosque.id}?lease=`), streamUrl);
  const heard = await listen(t, streamUrl);
  assert.equal(heard.status, 200);
  await waitFor('audio bytes', () => heard.bytes() > 4096, 5000);
  const listed = await listedClients(icecast.port, `/m/${mosque.id}`);
  assert.equal(listed.length, 1);
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  const session = db.prepare('SELECT * FROM audio_listener_sessions WHERE ended_at IS NULL').get() as Record<string, unknown>;
  assert.equal(session.device_id, player.device.id);
  assert.equal(session.client_id, listed[0], 'the session names the client Icecast lists');

  const ownerB = await member(ts, 'owner-b@example.com');
  const mosqueB = await createMosque(ts, root.token, ownerB, { name: 'Masjid B', auto_approve_members: true });
  const b = await leasedPlayer(t, ts, mosqueB.id, 'b@example.com');
  const leaseB = new URL(b.streamUrl).searchParams.get('lease')!;
  const refusedUrls: Array<[string, string]> = [
    ['no lease', `${icecastUrl}/m/${mosque.id}`],
    ["another mosque's lease", `${icecastUrl}/m/${mosque.id}?lease=${leaseB}`],
    ['a lease that is not one', `${icecastUrl}/m/${mosque.id}?lease=abc.def.ghi`],
  ];
  for (const [what, url] of refusedUrls) {
    const refused = await listen(t, url);
    assert.notEqual(refused.status, 200, what);
    refused.close();
  }
  heard.close();
  await waitFor('listener_remove closes the session', () => (db.prepare('SELECT ended_at, end_reason FROM audio_listener_sessions WHERE id = ?').get(session.id) as { end_reason: string | null }).end_reason === 'left', 5000);
});

test("a ban cuts that member's live player out of Icecast within 1 s; a deleted player too", async (t) => {
  const { ts, icecast, owner, mosque } = await gatedMosque(t);
  const banned = await leasedPlayer(t, ts, mosque.id, 'banned@example.com');
  const deleted = await leasedPlayer(t, ts, mosque.id, 'deleted@example.com');
  const kept = await leasedPlayer(t, ts, mosque.id, 'kept@example.com');
  const streams = await Promise.all([banned, deleted, kept].map((p) => listen(t, p.streamUrl)));
  for (const s of streams) assert.equal(s.status, 200);
  await waitFor('three listeners', async () => (await listedClients(icecast.port, `/m/${mosque.id}`)).length === 3, 5000);

  const membership = await joinMosque(ts, banned.person, mosque.id);
  const started = performance.now();
  await setStatus(ts, owner.token, membership.id, 'banned');
  await streams[0]!.ended;
  const tookMs = performance.now() - started;
  assert.ok(tookMs < 1000, `cut after ${Math.round(tookMs)} ms`);

  const before = performance.now();
  assert.equal((await ts.http.delete(`${API}/devices/${deleted.player.device.id}`, deleted.person.token)).status, 204);
  await streams[1]!.ended;
  assert.ok(performance.now() - before < 1000, 'the deleted player is cut within 1 s');

  const listed = await listedClients(icecast.port, `/m/${mosque.id}`);
  assert.equal(listed.length, 1, 'the third player still listens');
  const bytes = streams[2]!.bytes();
  await waitFor('the kept player still receives audio', () => streams[2]!.bytes() > bytes + 1000, 3000);
  const db = openDatabase(ts.config.databasePath);
  t.after(() => db.close());
  const ends = db.prepare('SELECT device_id, end_reason FROM audio_listener_sessions WHERE ended_at IS NOT NULL ORDER BY device_id').all() as Array<{ device_id: string; end_reason: string }>;
  assert.deepEqual(ends.map((e) => e.end_reason), ['revoked', 'revoked']);
  assert.deepEqual(ends.map((e) => e.device_id).sort(), [banned.player.device.id, deleted.player.device.id].sort());
});
