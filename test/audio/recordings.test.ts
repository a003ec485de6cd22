import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import zlib from 'node:zlib';
import { parseRange } from '../../api/audio/recordings.ts';
import { recordingUrl } from '../../src/audio/recordings.ts';
import { openDatabase } from '../../src/platform/db.ts';
import { createManualClock, type Clock } from '../../src/platform/clock.ts';
import { assertError } from '../support/api.ts';
import { configsOnConnect, mosqueWithOwner, registerPlayer } from '../support/devices.ts';
import { API, createMosque, joinMosque, makeAdmin, member, setStatus } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { audioFiles } from './audio-files.ts';

// docs/api.md, "Recorded azaan": a mosque's managers upload one recorded azaan (MP3, Ogg Vorbis or Ogg Opus, at
// most RECORDING_MAX_BYTES, read with music-metadata); its entitled players download it with their lease.

const sha256 = (data: Uint8Array) => crypto.createHash('sha256').update(data).digest('hex');
const DEFAULT_MAX_BYTES = 5 * 1024 * 1024;

function upload(ts: TestService, mosqueId: string, token: string | undefined, data: Uint8Array | string, type: string) {
  return ts.http.request('PUT', `${API}/mosques/${mosqueId}/recording`, { raw: data, headers: { 'content-type': type }, ...(token && { token }) });
}

/** The recordings rows as the database file holds them (mosque id and hash). */
function storedRows(ts: TestService): Array<{ mosque_id: string; sha256: string }> {
  const db = openDatabase(ts.config.databasePath);
  try {
    return db.prepare('SELECT mosque_id, sha256 FROM recordings ORDER BY mosque_id').all() as Array<{ mosque_id: string; sha256: string }>;
  } finally {
    db.close();
  }
}

/** A zip archive (PKZIP, one stored entry) holding `data`: an MP3 inside a zip is still no MP3. */
function zipOf(name: string, data: Buffer): Buffer {
  const crc = zlib.crc32(data);
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0);
  local.writeUInt16LE(20, 4);
  local.writeUInt32LE(crc, 14);
  local.writeUInt32LE(data.length, 18);
  local.writeUInt32LE(data.length, 22);
  local.writeUInt16LE(name.length, 26);
  const central = Buffer.alloc(46);
  central.writeUInt32LE(0x02014b50, 0);
  central.writeUInt16LE(20, 4);
  central.writeUInt16LE(20, 6);
  central.writeUInt32LE(crc, 16);
  central.writeUInt32LE(data.length, 20);
  central.writeUInt32LE(data.length, 24);
  central.writeUInt16LE(name.length, 28);
  const localPart = Buffer.concat([local, Buffer.from(name), data]);
  const centralPart = Buffer.concat([central, Buffer.from(name)]);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(1, 8);
  end.writeUInt16LE(1, 10);
  end.writeUInt32LE(centralPart.length, 12);
  end.writeUInt32LE(localPart.length, 16);
  return Buffer.concat([localPart, centralPart, end]);
}

test('a manager uploads an MP3, an Ogg Vorbis and an Ogg Opus file, each stored with its measured length, type, size and hash', async (t) => {
  const audio = audioFiles(t);
  const cases = [
    { kind: 'mp3', seconds: 3, type: 'audio/mpeg', stored: 'audio/mpeg' },
    { kind: 'ogg', seconds: 4, type: 'audio/ogg', stored: 'audio/ogg; codecs=vorbis' },
    { kind: 'opus', seconds: 5, type: 'audio/opus', stored: 'audio/ogg; codecs=opus' },
    // An Opus file a browser labels audio/ogg (its container): the same file, accepted as what it is.
    { kind: 'opus.ogg', seconds: 2, type: 'audio/ogg', stored: 'audio/ogg; codecs=opus' },
  ] as const;
  const made = cases.map((c) => audio.make(c.kind, c.seconds)); // before the service starts: see the next test
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  let first = true;
  for (const [i, c] of cases.entries()) {
    const data = made[i]!;
    const before = Math.floor(ts.clock() / 1000);
    const res = await upload(ts, mosque.id, owner.token, data, c.type);
    const after = Math.floor(ts.clock() / 1000);
    assert.equal(res.status, first ? 201 : 200, `${c.kind}: ${JSON.stringify(res.body)}`);
    first = false;
    assert.deepEqual(Object.keys(res.body).sort(), ['bytes', 'content_type', 'duration_s', 'sha256', 'uploaded_at']);
    assert.equal(res.body.content_type, c.stored, c.kind);
    assert.equal(res.body.bytes, data.length, c.kind);
    assert.equal(res.body.sha256, sha256(data), c.kind);
    assert.ok(Math.abs(res.body.duration_s - c.seconds) <= 0.2, `${c.kind}: ${res.body.duration_s} s for a ${c.seconds} s tone`);
    // The second the upload was stored: between the request's start and its answer (a busy host can cross a second).
    const uploaded = Date.parse(res.body.uploaded_at) / 1000;
    assert.ok(Number.isInteger(uploaded) && uploaded >= before && uploaded <= after, `${res.body.uploaded_at} within [${before}, ${after}]`);
    const read = await ts.http.get(`${API}/mosques/${mosque.id}/recording`, owner.token);
    assert.equal(read.status, 200);
    assert.deepEqual(read.body, res.body, 'GET answers what the upload stored');
  }
  assert.deepEqual(storedRows(ts).map((r) => r.mosque_id), [mosque.id], 'one recording per mosque: each upload replaced the last');
  const activity = await ts.http.get(`${API}/mosques/${mosque.id}/activity`, owner.token);
  assert.equal(activity.body.filter((a: { kind: string }) => a.kind === 'recording.uploaded').length, cases.length, 'each upload is in the activity feed');
});

test('anything but a whole MP3, Ogg Vorbis or Ogg Opus file within the limits is refused with a message, and nothing is stored', async (t) => {
  // Every file is made (ffmpeg, synchronously) before the service starts: a make between two requests blocks this
  // process, the service's too, past its keep-alive timeout, and the client's next request on that socket is reset.
  const audio = audioFiles(t);
  const mp3 = audio.make('mp3', 3);
  const refusals: Array<{ what: string; data: Uint8Array | string; type: string; message: RegExp }> = [
    { what: 'a WAV sent as MP3', data: audio.make('wav', 1), type: 'audio/mpeg', message: /^The file is WAVE PCM audio; a recorded azaan must be MP3, Ogg Vorbis or Ogg Opus\.$/ },
    { what: 'a FLAC sent as Ogg', data: audio.make('flac', 1), type: 'audio/ogg', message: /^The file is FLAC/ },
    { what: 'MPEG layer II sent as MP3', data: audio.make('mp2', 1), type: 'audio/mpeg', message: /^The file is MPEG MPEG 1 Layer 2 audio/ },
    { what: 'a text file renamed .mp3', data: 'This is not an azaan, only a text file with an .mp3 name.\n'.repeat(20), type: 'audio/mpeg', message: /^The file is not audio Minaret can read/ },
    { what: 'the first half of an MP3', data: mp3.subarray(0, Math.floor(mp3.length / 2)), type: 'audio/mpeg', message: /cut short/ },
    { what: 'the first 1,000 bytes of an MP3', data: mp3.subarray(0, 1000), type: 'audio/mpeg', message: /cut short/ },
    { what: 'the first half of an Ogg Vorbis file', data: ((b) => b.subarray(0, Math.floor(b.length / 2)))(audio.make('ogg', 3)), type: 'audio/ogg', message: /cut short/ },
    { what: 'a zip holding an MP3', data: zipOf('azaan.mp3', mp3), type: 'audio/mpeg', message: /^The file is not audio Minaret can read/ },
    { what: 'an Ogg Vorbis file sent as MP3', data: audio.make('ogg', 1), type: 'audio/mpeg', message: /^The file is Ogg Vorbis but was sent as audio\/mpeg\.$/ },
    { what: 'an MP3 sent as Opus', data: mp3, type: 'audio/opus', message: /^The file is MP3 but was sent as audio\/opus\.$/ },
    { what: 'an MP3 of 10 minutes and 5 seconds', data: audio.make('mp3', 605, ['-b:a', '8k']), type: 'audio/mpeg', message: /^The recording lasts 605 s; at most 600 s/ },
    { what: 'an empty body', data: '', type: 'audio/mpeg', message: /^The file is empty\.$/ },
  ];
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  for (const r of refusals) {
    const res = await upload(ts, mosque.id, owner.token, r.data, r.type);
    assertError(res, 400, 'validation_failed');
    assert.match(res.body.error.message, r.message, r.what);
  }
  assert.deepEqual(storedRows(ts), [], 'nothing was stored');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/recording`, owner.token), 404, 'not_found');

  // A stored recording stays as it was when a replacement is refused.
  assert.equal((await upload(ts, mosque.id, owner.token, mp3, 'audio/mpeg')).status, 201);
  for (const r of refusals.slice(0, 5)) assertError(await upload(ts, mosque.id, owner.token, r.data, r.type), 400, 'validation_failed');
  assert.deepEqual(storedRows(ts), [{ mosque_id: mosque.id, sha256: sha256(mp3) }]);
});

test('the upload takes RECORDING_MAX_BYTES and not a byte more, audio types only; every other body keeps the 64 KiB JSON limit', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const mp3 = audioFiles(t).make('mp3', 3);
  assert.equal(ts.config.recordingMaxBytes, DEFAULT_MAX_BYTES, 'the default is 5 MiB');
  // A real MP3 padded to the limit plus one (an ID3v1-sized tail would not matter: the size is refused first).
  const over = Buffer.concat([mp3, Buffer.alloc(DEFAULT_MAX_BYTES + 1 - mp3.length)]);
  const tooLarge = await upload(ts, mosque.id, owner.token, over, 'audio/mpeg');
  assertError(tooLarge, 413, 'payload_too_large');
  assert.match(tooLarge.body.error.message, /larger than 5242880 bytes \(RECORDING_MAX_BYTES\)/);
  // Sent without a Content-Length (chunked): counted as it arrives, refused the same way.
  const chunks = [over.subarray(0, 3_000_000), over.subarray(3_000_000)];
  const streamed = await fetch(`${ts.url}${API}/mosques/${mosque.id}/recording`, {
    method: 'PUT', headers: { 'content-type': 'audio/mpeg', authorization: `Bearer ${owner.token}` }, duplex: 'half',
    body: new ReadableStream({ pull(c) { const next = chunks.shift(); if (next) c.enqueue(next); else c.close(); } }),
  } as RequestInit);
  assert.equal(streamed.status, 413);
  assert.equal(((await streamed.json()) as { error: { code: string } }).error.code, 'payload_too_large');
  assert.deepEqual(storedRows(ts), []);

  // 100 KiB of audio passes the route's own limit (it is over the API's 64 KiB).
  const longer = audioFiles(t).make('mp3', 14);
  assert.ok(longer.length > 64 * 1024, `${longer.length} bytes`);
  assert.equal((await upload(ts, mosque.id, owner.token, longer, 'audio/mpeg')).status, 201);

  // Other types are 415 before the body is read, whatever its size.
  for (const type of ['application/json', 'text/plain', 'audio/wav', 'application/octet-stream', 'multipart/form-data; boundary=x']) {
    assertError(await upload(ts, mosque.id, owner.token, mp3, type), 415, 'unsupported_media_type');
  }
  assertError(await upload(ts, mosque.id, owner.token, 'x'.repeat(70 * 1024), 'application/json'), 415, 'unsupported_media_type');
  // The exception is this one route: a JSON body of 70 KiB elsewhere, and a POST to this path, are still 413.
  assertError(await ts.http.request('PUT', `${API}/mosques/${mosque.id}/timetable/4`, { raw: JSON.stringify([{ pad: 'x'.repeat(70 * 1024) }]), token: owner.token, headers: { 'content-type': 'application/json' } }), 413, 'payload_too_large');
  assertError(await ts.http.request('POST', `${API}/mosques/${mosque.id}/recording`, { raw: 'x'.repeat(70 * 1024), token: owner.token, headers: { 'content-type': 'audio/mpeg' } }), 413, 'payload_too_large');
});

test('RECORDING_MAX_BYTES sets the limit, and is refused outside 64K..20M', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: { RECORDING_MAX_BYTES: '64K' } });
  const { owner, mosque } = await mosqueWithOwner(ts);
  const audio = audioFiles(t);
  const small = audio.make('mp3', 3);
  const big = audio.make('mp3', 14);
  assert.ok(small.length < 65536 && big.length > 65536);
  assert.equal((await upload(ts, mosque.id, owner.token, small, 'audio/mpeg')).status, 201);
  assertError(await upload(ts, mosque.id, owner.token, big, 'audio/mpeg'), 413, 'payload_too_large');
  await assert.rejects(startTestService(t, { env: { RECORDING_MAX_BYTES: '21M' } }), /RECORDING_MAX_BYTES: must be a number of bytes/);
  await assert.rejects(startTestService(t, { env: { RECORDING_MAX_BYTES: '1000' } }), /RECORDING_MAX_BYTES/);
});

test('only a manager uploads and deletes the recording; an admin without can_manage is refused, a stranger is told 404', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts);
  const [plainAdmin, manager, stranger, amina] = await Promise.all(['plain@r.test', 'manager@r.test', 'stranger@r.test', 'amina@r.test'].map((e) => member(ts, e)));
  await makeAdmin(ts, root.token, mosque.id, plainAdmin!, { can_trigger: true });
  await makeAdmin(ts, root.token, mosque.id, manager!, { can_manage: true });
  await setStatus(ts, owner.token, (await joinMosque(ts, amina!, mosque.id)).id, 'approved');
  const mp3 = audioFiles(t).make('mp3', 2);

  assertError(await upload(ts, mosque.id, plainAdmin!.token, mp3, 'audio/mpeg'), 403, 'forbidden');
  assertError(await upload(ts, mosque.id, amina!.token, mp3, 'audio/mpeg'), 403, 'forbidden');
  assertError(await upload(ts, mosque.id, stranger!.token, mp3, 'audio/mpeg'), 404, 'not_found');
  assertError(await upload(ts, mosque.id, undefined, mp3, 'audio/mpeg'), 401, 'unauthorized');
  assert.deepEqual(storedRows(ts), []);
  assert.equal((await upload(ts, mosque.id, manager!.token, mp3, 'audio/mpeg')).status, 201);

  // Every admin reads it; a member and a stranger do not.
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}/recording`, plainAdmin!.token)).body.sha256, sha256(mp3));
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/recording`, amina!.token), 403, 'forbidden');
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/recording`, stranger!.token), 404, 'not_found');

  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}/recording`, plainAdmin!.token), 403, 'forbidden');
  assert.equal(storedRows(ts).length, 1);
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}/recording`, manager!.token)).status, 204);
  assertError(await ts.http.get(`${API}/mosques/${mosque.id}/recording`, owner.token), 404, 'not_found');
  assertError(await ts.http.delete(`${API}/mosques/${mosque.id}/recording`, manager!.token), 404, 'not_found');
  assert.deepEqual(storedRows(ts), []);
  const feed = (await ts.http.get(`${API}/mosques/${mosque.id}/activity`, owner.token)).body as Array<{ kind: string; actor_user_id: string }>;
  assert.deepEqual(feed.filter((a) => a.kind.startsWith('recording.')).map((a) => [a.kind, a.actor_user_id]), [['recording.deleted', manager!.id], ['recording.uploaded', manager!.id]]);

  // Deleting the mosque takes its recording with it (ON DELETE CASCADE).
  assert.equal((await upload(ts, mosque.id, owner.token, mp3, 'audio/mpeg')).status, 201);
  const other = await createMosque(ts, root.token, null, { name: 'Masjid Two' });
  assert.equal((await upload(ts, other.id, root.token, mp3, 'audio/mpeg')).status, 201, 'a superadmin uploads anywhere');
  assert.equal((await ts.http.delete(`${API}/mosques/${mosque.id}`, owner.token)).status, 204);
  assert.deepEqual(storedRows(ts), [{ mosque_id: other.id, sha256: sha256(mp3) }]);
});

// ---- the gated download ----

/** A mosque with a recording, and an approved member's player bound to it with the lease its config carries. */
async function leasedPlayer(ts: TestService, t: TestContext, email = 'amina@listen.test') {
  const { root, owner, mosque } = await mosqueWithOwner(ts, { stream_url: 'https://radio.example/noor' });
  const person = await member(ts, email);
  const membership = await joinMosque(ts, person, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  const player = await registerPlayer(ts, person, mosque.id);
  const lease = (await configsOnConnect(t, ts, player)).at(-1)!.lease as { token: string; expires_at: number };
  assert.ok(lease?.token, 'the approved player holds a lease');
  const recording = audioFiles(t).make('mp3', 3);
  assert.equal((await upload(ts, mosque.id, owner.token, recording, 'audio/mpeg')).status, 201);
  return { root, owner, mosque, person, membership, player, lease, recording };
}

/** The address a fallback broadcast hands a player (recordingUrl), fetched as the player would. */
const download = (ts: TestService, mosqueId: string, lease: string | null, headers: Record<string, string> = {}) =>
  fetch(lease === '' ? `${recordingUrl(`${ts.url}/`, mosqueId)}?lease=` : recordingUrl(`${ts.url}/`, mosqueId, lease), { headers });

async function assertRefused(res: Response, reason: string) {
  assert.equal(res.status, 403, reason);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/, 'an error, never the audio');
  const body = (await res.json()) as { error: { code: string; details: Array<{ path: string; message: string }> } };
  assert.equal(body.error.code, 'forbidden');
  assert.deepEqual(body.error.details, [{ path: 'lease', message: reason }]);
}

test("an approved member's player downloads the exact bytes with its lease, and any range of them", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const w = await leasedPlayer(ts, t);
  const size = w.recording.length;

  const whole = await download(ts, w.mosque.id, w.lease.token);
  assert.equal(whole.status, 200);
  assert.equal(whole.headers.get('content-type'), 'audio/mpeg');
  assert.equal(whole.headers.get('cache-control'), 'no-store');
  assert.equal(whole.headers.get('accept-ranges'), 'bytes');
  assert.equal(whole.headers.get('etag'), `"${sha256(w.recording)}"`);
  assert.equal(whole.headers.get('content-length'), String(size));
  assert.ok(Buffer.from(await whole.arrayBuffer()).equals(w.recording), 'the very bytes uploaded');
  // HEAD (a player asking the length first): the same gate and headers, no body.
  const head = await fetch(recordingUrl(ts.url, w.mosque.id, w.lease.token), { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-length'), String(size));
  assert.equal((await head.arrayBuffer()).byteLength, 0);
  assert.equal((await fetch(recordingUrl(ts.url, w.mosque.id), { method: 'HEAD' })).status, 403);

  const cases: Array<{ range: string; start: number; end: number }> = [
    { range: 'bytes=100-1099', start: 100, end: 1099 },
    { range: `bytes=${size - 10}-`, start: size - 10, end: size - 1 },
    { range: 'bytes=-500', start: size - 500, end: size - 1 },
    { range: `bytes=0-${size + 1000}`, start: 0, end: size - 1 },
  ];
  for (const c of cases) {
    const part = await download(ts, w.mosque.id, w.lease.token, { range: c.range });
    assert.equal(part.status, 206, c.range);
    assert.equal(part.headers.get('content-range'), `bytes ${c.start}-${c.end}/${size}`, c.range);
    assert.equal(part.headers.get('cache-control'), 'no-store');
    assert.ok(Buffer.from(await part.arrayBuffer()).equals(w.recording.subarray(c.start, c.end + 1)), `${c.range}: the slice`);
  }
  // Past the end: 416 with the size (RFC 9110 §15.5.17), in the error shape.
  const past = await download(ts, w.mosque.id, w.lease.token, { range: `bytes=${size}-` });
  assert.equal(past.status, 416);
  assert.equal(past.headers.get('content-range'), `bytes */${size}`);
  assert.equal(((await past.json()) as { error: { code: string } }).error.code, 'range_not_satisfiable');
  // A range for another version of the file (If-Range names an old ETag) gets the whole current one.
  const stale = await download(ts, w.mosque.id, w.lease.token, { range: 'bytes=0-9', 'if-range': '"0000"' });
  assert.equal(stale.status, 200);
  assert.equal((await stale.arrayBuffer()).byteLength, size);
  const fresh = await download(ts, w.mosque.id, w.lease.token, { range: 'bytes=0-9', 'if-range': `"${sha256(w.recording)}"` });
  assert.equal(fresh.status, 206);
  assert.equal((await fresh.arrayBuffer()).byteLength, 10);

  // A recording replaced is served new at once; deleted, the entitled player is told 404.
  const replacement = audioFiles(t).make('ogg', 2);
  assert.equal((await upload(ts, w.mosque.id, w.owner.token, replacement, 'audio/ogg')).status, 200);
  const replaced = await download(ts, w.mosque.id, w.lease.token);
  assert.equal(replaced.headers.get('content-type'), 'audio/ogg; codecs=vorbis');
  assert.ok(Buffer.from(await replaced.arrayBuffer()).equals(replacement));
  assert.equal((await ts.http.delete(`${API}/mosques/${w.mosque.id}/recording`, w.owner.token)).status, 204);
  assert.equal((await download(ts, w.mosque.id, w.lease.token)).status, 404);
});

test('the download is refused without a lease, with a forged, foreign or expired one, and with a bearer token alone', async (t) => {
  const clock = createManualClock(Date.now());
  const ts = await startTestService(t, { logLevel: 'warn', clock, env: { LEASE_TTL_HOURS: '1' } });
  const w = await leasedPlayer(ts, t);
  assert.equal((await download(ts, w.mosque.id, w.lease.token)).status, 200, 'the lease opens it');

  await assertRefused(await download(ts, w.mosque.id, null), 'no_lease');
  await assertRefused(await download(ts, w.mosque.id, ''), 'no_lease');
  await assertRefused(await download(ts, w.mosque.id, null, { authorization: `Bearer ${w.owner.token}` }), 'no_lease');
  await assertRefused(await download(ts, w.mosque.id, 'not-a-lease'), 'bad_lease');
  await assertRefused(await download(ts, w.mosque.id, w.owner.token), 'bad_lease'); // an access token is no lease
  // The same claims signed with another Ed25519 key, under the real key's id.
  const [header, payload] = w.lease.token.split('.') as [string, string];
  const { privateKey } = crypto.generateKeyPairSync('ed25519');
  const forged = `${header}.${payload}.${crypto.sign(null, Buffer.from(`${header}.${payload}`), privateKey).toString('base64url')}`;
  await assertRefused(await download(ts, w.mosque.id, forged), 'bad_lease');
  // A changed claim breaks the signature.
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  const stretched = Buffer.from(JSON.stringify({ ...claims, exp: claims.exp + 86_400 })).toString('base64url');
  await assertRefused(await download(ts, w.mosque.id, `${header}.${stretched}.${w.lease.token.split('.')[2]}`), 'bad_lease');

  // Another mosque's entitled player: its lease is good, for its own mosque only.
  const other = await createMosque(ts, w.root.token, null, { name: 'Masjid Two' });
  const yusuf = await member(ts, 'yusuf@listen.test');
  await setStatus(ts, w.root.token, (await joinMosque(ts, yusuf, other.id)).id, 'approved');
  const foreign = (await configsOnConnect(t, ts, await registerPlayer(ts, yusuf, other.id))).at(-1)!.lease.token as string;
  await assertRefused(await download(ts, w.mosque.id, foreign), 'other_mosque');

  // An hour later the lease has run out, whatever else holds.
  (clock as Clock & { advance(ms: number): void }).advance(3600_000 + 1000);
  await assertRefused(await download(ts, w.mosque.id, w.lease.token), 'lease_expired');
});

test("a lease stops opening the recording the moment its owner is banned, or its player deleted, though it has not run out", async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const w = await leasedPlayer(ts, t);
  const part = await download(ts, w.mosque.id, w.lease.token, { range: 'bytes=0-999' });
  assert.equal(part.status, 206, 'a player part-way through the file');
  await setStatus(ts, w.owner.token, w.membership.id, 'banned');
  await assertRefused(await download(ts, w.mosque.id, w.lease.token, { range: 'bytes=1000-' }), 'membership_not_approved');
  assert.ok(w.lease.expires_at > Date.now() / 1000, 'the lease itself has not expired');
  // Approved again, the player is entitled now, by the lease it is given now: the ban dropped the old one, which
  // stays refused, as the audio gate refuses it (src/audio/lease-admission.ts).
  await setStatus(ts, w.owner.token, w.membership.id, 'approved');
  await assertRefused(await download(ts, w.mosque.id, w.lease.token), 'lease_superseded');
  const renewed = (await configsOnConnect(t, ts, w.player)).at(-1)!.lease.token as string;
  assert.equal((await download(ts, w.mosque.id, renewed)).status, 200);

  // A second member's player, deleted by its owner: its lease names a device that is gone.
  const bilal = await member(ts, 'bilal@listen.test');
  await setStatus(ts, w.owner.token, (await joinMosque(ts, bilal, w.mosque.id)).id, 'approved');
  const player = await registerPlayer(ts, bilal, w.mosque.id);
  const lease = (await configsOnConnect(t, ts, player)).at(-1)!.lease.token as string;
  assert.equal((await download(ts, w.mosque.id, lease)).status, 200);
  assert.equal((await ts.http.delete(`${API}/devices/${player.device.id}`, bilal.token)).status, 204);
  await assertRefused(await download(ts, w.mosque.id, lease), 'unknown_device');
});

test('Range headers are read as RFC 9110 §14 says: one range served, anything else the whole file or 416', () => {
  const size = 1000;
  const table: Array<[string | undefined, ReturnType<typeof parseRange>]> = [
    [undefined, null],
    ['', null],
    ['bytes=0-0', { start: 0, end: 0 }],
    ['bytes=0-499', { start: 0, end: 499 }],
    ['bytes=500-', { start: 500, end: 999 }],
    ['bytes=-1', { start: 999, end: 999 }],
    ['bytes=-5000', { start: 0, end: 999 }],
    ['bytes=900-5000', { start: 900, end: 999 }],
    ['bytes=999-999', { start: 999, end: 999 }],
    ['bytes=1000-', 'unsatisfiable'],
    ['bytes=1000-1001', 'unsatisfiable'],
    ['bytes=-0', 'unsatisfiable'],
    ['bytes=5-1', null], // invalid: ignored
    ['bytes=-', null],
    ['bytes=0-1,5-9', null], // several ranges: the whole file
    ['items=0-1', null],
    ['bytes=a-b', null],
  ];
  for (const [header, expected] of table) assert.deepEqual(parseRange(header, size), expected, String(header));
});
