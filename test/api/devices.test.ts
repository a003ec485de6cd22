import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API, makeAdmin, member, type Person } from '../support/people.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { deviceEvents, mosqueWithOwner, registerPlayer, registerTransmitter, wsUrlOf } from '../support/devices.ts';
import { assertError } from '../support/api.ts';

// docs/api.md, "Devices, from the app's side": the device registry over HTTP, its gates and its shapes.

const DEVICE_FIELDS = ['id', 'kind', 'name', 'mosque_id', 'owner_user_id', 'status', 'status_detail', 'last_seen_at', 'fw', 'mac', 'ssid', 'ip', 'rssi', 'temp_c', 'uptime_s', 'config_version', 'config', 'entitlement'];

/** A mosque with its owner, a manager, a plain admin, a trigger-only admin, a member of it and a stranger. */
async function cast(ts: TestService) {
  const { root, owner, mosque } = await mosqueWithOwner(ts);
  const manager = await member(ts, 'manager@example.com');
  const plain = await member(ts, 'plain@example.com');
  const trigger = await member(ts, 'trigger@example.com');
  const regular = await member(ts, 'regular@example.com');
  const stranger = await member(ts, 'stranger@example.com');
  await makeAdmin(ts, root.token, mosque.id, manager, { can_manage: true });
  await makeAdmin(ts, root.token, mosque.id, plain);
  await makeAdmin(ts, root.token, mosque.id, trigger, { can_trigger: true });
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: regular.id }, root.token)).status, 201);
  return { root, owner, mosque, manager, plain, trigger, regular, stranger };
}

test('a manager registers a transmitter: 201 {device, credentials}; plain and trigger-only admins 403, a member 403, a stranger 404', async (t) => {
  const ts = await startTestService(t);
  const { root, owner, mosque, manager, plain, trigger, regular, stranger } = await cast(ts);
  const path = `${API}/mosques/${mosque.id}/devices`;

  const res = await ts.http.post(path, { kind: 'transmitter', name: 'Minbar' }, manager.token);
  assert.equal(res.status, 201);
  assert.deepEqual(Object.keys(res.body).sort(), ['credentials', 'device']);
  const { device, credentials } = res.body;
  for (const field of DEVICE_FIELDS) assert.ok(field in device, `device.${field}`);
  assert.equal(device.kind, 'transmitter');
  assert.equal(device.name, 'Minbar');
  assert.equal(device.mosque_id, mosque.id);
  assert.equal(device.owner_user_id, null);
  assert.equal(device.status, 'UNKNOWN');
  assert.equal(device.last_seen_at, null);
  assert.equal(device.entitlement, null);
  assert.equal(typeof device.config_version, 'number');
  assert.deepEqual(device.config, { heartbeat_secs: 60, log_enabled: false, volume: null, quiet_hours: null });
  assert.deepEqual(Object.keys(credentials).sort(), ['api_url', 'client_id', 'mqtt_url', 'mqtts_url', 'password', 'username', 'ws_url']);
  assert.equal(credentials.client_id, device.id);
  assert.equal(credentials.username, device.id);
  assert.ok(credentials.password.length >= 32);
  assert.equal(credentials.mqtt_url, ts.service.mqttUrl);
  assert.equal(credentials.ws_url, wsUrlOf(ts));
  assert.equal(credentials.api_url, `${ts.url}/api/v1`);
  assert.equal(credentials.mqtts_url, null, 'no TLS door unless MQTTS_PORT is set');
  assert.ok(device.id.length <= 23, 'MQTT 3.1 clientId limit');
  // The password is shown only at registration.
  assert.equal(JSON.stringify((await ts.http.get(`${API}/devices/${device.id}`, manager.token)).body).includes(credentials.password), false);

  assert.equal((await ts.http.post(path, { kind: 'transmitter' }, owner.token)).status, 201);
  assert.equal((await ts.http.post(path, { kind: 'transmitter' }, root.token)).status, 201);
  assertError(await ts.http.post(path, { kind: 'transmitter' }, plain.token), 403, 'forbidden');
  assertError(await ts.http.post(path, { kind: 'transmitter' }, trigger.token), 403, 'forbidden');
  assertError(await ts.http.post(path, { kind: 'transmitter' }, regular.token), 403, 'forbidden');
  assertError(await ts.http.post(path, { kind: 'transmitter' }, stranger.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/mosques/no-such-mosque/devices`, { kind: 'transmitter' }, root.token), 404, 'not_found');
  assertError(await ts.http.post(path, { kind: 'transmitter' }), 401, 'unauthorized');
});

test('any member registers a stream player of their own, with or without a mosque', async (t) => {
  const ts = await startTestService(t);
  const { mosque, stranger } = await cast(ts);
  const loose = await registerPlayer(ts, stranger);
  assert.equal(loose.device.kind, 'stream_player');
  assert.equal(loose.device.owner_user_id, stranger.id);
  assert.equal(loose.device.mosque_id, null);
  assert.equal(loose.device.config.heartbeat_secs, 300);
  assert.equal(loose.device.entitlement.entitled, false);
  assert.equal(loose.device.entitlement.reason, 'no_mosque');
  assert.equal(loose.credentials.client_id, loose.device.id);

  // Binding takes a place in the mosque (docs/api.md, "Devices"): a stranger to it is told it does not exist.
  assertError(await ts.http.post(`${API}/devices`, { kind: 'stream_player', mosque_id: mosque.id }, stranger.token), 404, 'not_found');
  assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/join`, {}, stranger.token)).status, 201);
  const bound = await registerPlayer(ts, stranger, mosque.id);
  assert.equal(bound.device.mosque_id, mosque.id);
  assert.equal(bound.device.entitlement.entitled, false, 'not approved yet');

  assertError(await ts.http.post(`${API}/devices`, { kind: 'stream_player', mosque_id: 'no-such-mosque' }, stranger.token), 404, 'not_found');
  assertError(await ts.http.post(`${API}/devices`, { kind: 'transmitter' }, stranger.token), 400, 'validation_failed');
});

test('GET /devices lists per caller: own players; an admin also the mosque\'s devices; the superadmin all', async (t) => {
  const ts = await startTestService(t);
  const { root, owner, mosque, plain, regular, stranger } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const regularsPlayer = await registerPlayer(ts, regular, mosque.id);
  const strangersPlayer = await registerPlayer(ts, stranger);
  const plainsOwn = await registerPlayer(ts, plain);
  const ids = async (p: Person | { token: string }, query = '') => {
    const res = await ts.http.get(`${API}/devices${query}`, p.token);
    assert.equal(res.status, 200);
    return (res.body as Array<{ id: string }>).map((d) => d.id).sort();
  };

  assert.deepEqual(await ids(stranger), [strangersPlayer.device.id]);
  assert.deepEqual(await ids(regular), [regularsPlayer.device.id]);
  assert.deepEqual(await ids(plain), [tx.device.id, regularsPlayer.device.id, plainsOwn.device.id].sort());
  assert.deepEqual(await ids(owner), [tx.device.id, regularsPlayer.device.id].sort());
  assert.deepEqual(await ids(root), [tx.device.id, regularsPlayer.device.id, strangersPlayer.device.id, plainsOwn.device.id].sort());
  assert.deepEqual(await ids(root, `?mosque_id=${mosque.id}`), [tx.device.id, regularsPlayer.device.id].sort());
  assert.deepEqual(await ids(regular, `?mosque_id=${mosque.id}`), [regularsPlayer.device.id]);
  assert.deepEqual(await ids(stranger, `?mosque_id=${mosque.id}`), []);
  const list = await ts.http.get(`${API}/devices`, owner.token);
  for (const field of DEVICE_FIELDS) assert.ok(field in list.body[0], `listed device.${field}`);
});

test('GET /devices/{id}: the owner, admins of its mosque and the superadmin 200; anyone else 404', async (t) => {
  const ts = await startTestService(t);
  const { root, owner, mosque, plain, trigger, regular, stranger } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const player = await registerPlayer(ts, regular, mosque.id);
  const loose = await registerPlayer(ts, regular);
  const get = (id: string, p: { token: string }) => ts.http.get(`${API}/devices/${id}`, p.token);

  for (const p of [owner, plain, trigger, root]) assert.equal((await get(tx.device.id, p)).status, 200);
  for (const p of [regular, stranger]) assertError(await get(tx.device.id, p), 404, 'not_found');
  for (const p of [regular, owner, plain, root]) assert.equal((await get(player.device.id, p)).status, 200);
  assertError(await get(player.device.id, stranger), 404, 'not_found');
  // A player bound to no mosque: its owner and the superadmin only.
  for (const p of [regular, root]) assert.equal((await get(loose.device.id, p)).status, 200);
  for (const p of [owner, plain, stranger]) assertError(await get(loose.device.id, p), 404, 'not_found');
  assertError(await get('dnosuchdevice0000', root), 404, 'not_found');
  assertError(await ts.http.get(`${API}/devices/${tx.device.id}`), 401, 'unauthorized');
});

test('PATCH /devices/{id}: the player\'s owner and managers may; plain admins 403; strangers 404', async (t) => {
  const ts = await startTestService(t);
  const { root, owner, mosque, manager, plain, trigger, regular, stranger } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const player = await registerPlayer(ts, regular, mosque.id);
  const patch = (id: string, body: unknown, p: { token: string }) => ts.http.patch(`${API}/devices/${id}`, body, p.token);

  const renamed = await patch(player.device.id, { name: 'Bedroom', config: { volume: 40 } }, regular);
  assert.equal(renamed.status, 200);
  assert.equal(renamed.body.name, 'Bedroom');
  assert.equal(renamed.body.config.volume, 40);
  assert.equal(renamed.body.config_version, player.device.config_version + 1);

  assert.equal((await patch(tx.device.id, { config: { log_enabled: true } }, manager)).status, 200);
  assert.equal((await patch(tx.device.id, { name: 'Root named' }, root)).status, 200);
  assert.equal((await patch(player.device.id, { config: { volume: 10 } }, manager)).status, 200);
  for (const p of [plain, trigger]) {
    assertError(await patch(tx.device.id, { name: 'x' }, p), 403, 'forbidden');
    assertError(await patch(player.device.id, { name: 'x' }, p), 403, 'forbidden');
  }
  assertError(await patch(tx.device.id, { name: 'x' }, regular), 404, 'not_found');
  assertError(await patch(player.device.id, { name: 'x' }, stranger), 404, 'not_found');
  // Moving a transmitter to another mosque is the superadmin's alone.
  assertError(await patch(tx.device.id, { mosque_id: null }, owner), 403, 'forbidden');
  assert.equal((await ts.http.get(`${API}/devices/${tx.device.id}`, owner.token)).body.name, 'Root named');
});

test('DELETE /devices/{id}: plain admins 403; the owner 204; then 404', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque, plain, regular, stranger } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const player = await registerPlayer(ts, regular, mosque.id);

  assertError(await ts.http.delete(`${API}/devices/${tx.device.id}`, plain.token), 403, 'forbidden');
  assertError(await ts.http.delete(`${API}/devices/${player.device.id}`, plain.token), 403, 'forbidden');
  assertError(await ts.http.delete(`${API}/devices/${player.device.id}`, stranger.token), 404, 'not_found');
  assert.equal((await ts.http.delete(`${API}/devices/${player.device.id}`, regular.token)).status, 204);
  assert.equal((await ts.http.delete(`${API}/devices/${tx.device.id}`, owner.token)).status, 204);
  assertError(await ts.http.get(`${API}/devices/${player.device.id}`, regular.token), 404, 'not_found');
  assertError(await ts.http.delete(`${API}/devices/${tx.device.id}`, owner.token), 404, 'not_found');
  assertError(await ts.http.get(`${API}/devices/${tx.device.id}/events`, owner.token), 404, 'not_found');
});

test('POST /devices/{id}/credentials: owner or manager get a new password; plain admins 403', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque, plain, regular } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const player = await registerPlayer(ts, regular, mosque.id);
  assertError(await ts.http.post(`${API}/devices/${tx.device.id}/credentials`, {}, plain.token), 403, 'forbidden');
  const rotated = await ts.http.post(`${API}/devices/${player.device.id}/credentials`, {}, regular.token);
  assert.equal(rotated.status, 200);
  assert.deepEqual(Object.keys(rotated.body.credentials).sort(), ['api_url', 'client_id', 'mqtt_url', 'mqtts_url', 'password', 'username', 'ws_url']);
  assert.notEqual(rotated.body.credentials.password, player.credentials.password);
  assert.equal(rotated.body.credentials.username, player.device.id);
});

test('GET /devices/{id}/events pages newest first with limit and before', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque, plain, stranger } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const id = tx.device.id;
  for (let i = 1; i <= 4; i++) assert.equal((await ts.http.patch(`${API}/devices/${id}`, { config: { volume: i * 10 } }, owner.token)).status, 200);

  const all = await deviceEvents(ts, plain.token, id);
  assert.equal(all.length, 5);
  assert.deepEqual(all.map((e) => e.kind), ['config_changed', 'config_changed', 'config_changed', 'config_changed', 'registered']);
  const numeric = all.map((e) => Number(e.id));
  assert.deepEqual(numeric, [...numeric].sort((a, b) => b - a), 'newest first');
  for (const e of all) {
    assert.deepEqual(['at', 'detail', 'device_id', 'from', 'id', 'kind', 'mosque_id', 'reason', 'to'].filter((k) => !(k in e)), []);
    assert.equal(typeof e.id, 'string');
    assert.match(e.at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    assert.equal(e.device_id, id);
    assert.equal(e.mosque_id, mosque.id);
  }

  const page1 = await deviceEvents(ts, plain.token, id, '?limit=2');
  assert.deepEqual(page1.map((e) => e.id), all.slice(0, 2).map((e) => e.id));
  const page2 = await deviceEvents(ts, plain.token, id, `?limit=2&before=${page1[1]!.id}`);
  assert.deepEqual(page2.map((e) => e.id), all.slice(2, 4).map((e) => e.id));
  const page3 = await deviceEvents(ts, plain.token, id, `?limit=2&before=${page2[1]!.id}`);
  assert.deepEqual(page3.map((e) => e.id), all.slice(4).map((e) => e.id));
  assert.deepEqual(await deviceEvents(ts, plain.token, id, `?before=${page3[0]!.id}`), []);

  for (const query of ['?limit=0', '?limit=501', '?limit=abc', '?limit=-1', '?before=abc', '?before=1.5']) {
    assertError(await ts.http.get(`${API}/devices/${id}/events${query}`, owner.token), 400, 'validation_failed');
  }
  assertError(await ts.http.get(`${API}/devices/${id}/events`, stranger.token), 404, 'not_found');
});

test('GET /devices/{id}/logs: empty at first and says logging is off, limit validated, same gate as GET', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque, plain, stranger } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const res = await ts.http.get(`${API}/devices/${tx.device.id}/logs?limit=5`, plain.token);
  assert.equal(res.status, 200);
  assert.deepEqual(res.body.lines, []);
  assert.equal(res.body.device_id, tx.device.id);
  assert.deepEqual(res.body.logging, { enabled: false, until: null, source: null });
  assert.match(res.body.note, /Logging is off.*log_enabled/);
  for (const query of ['?limit=0', '?limit=501', '?limit=x']) {
    assertError(await ts.http.get(`${API}/devices/${tx.device.id}/logs${query}`, owner.token), 400, 'validation_failed');
  }
  assertError(await ts.http.get(`${API}/devices/${tx.device.id}/logs`, stranger.token), 404, 'not_found');
});

test('validation: bad bodies are 400 with details, and nothing changes', async (t) => {
  const ts = await startTestService(t);
  const { owner, mosque, regular } = await cast(ts);
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const player = await registerPlayer(ts, regular);
  const bad: Array<[string, string, unknown, string]> = [
    ['POST', `${API}/mosques/${mosque.id}/devices`, { kind: 'stream_player' }, owner.token],
    ['POST', `${API}/mosques/${mosque.id}/devices`, {}, owner.token],
    ['POST', `${API}/mosques/${mosque.id}/devices`, { kind: 'transmitter', name: 'n'.repeat(101) }, owner.token],
    ['POST', `${API}/mosques/${mosque.id}/devices`, { kind: 'transmitter', name: 42 }, owner.token],
    ['POST', `${API}/devices`, { kind: 'toaster' }, regular.token],
    ['POST', `${API}/devices`, { kind: 'stream_player', mosque_id: 7 }, regular.token],
    ['PATCH', `${API}/devices/${tx.device.id}`, { config: { volume: 101 } }, owner.token],
    ['PATCH', `${API}/devices/${tx.device.id}`, { config: { volume: -1 } }, owner.token],
    ['PATCH', `${API}/devices/${tx.device.id}`, { config: { log_enabled: 'yes' } }, owner.token],
    ['PATCH', `${API}/devices/${tx.device.id}`, { config: { quiet_hours: { start: '25:00', end: '05:00' } } }, owner.token],
    ['PATCH', `${API}/devices/${tx.device.id}`, { config: { quiet_hours: { start: '23:00' } } }, owner.token],
    ['PATCH', `${API}/devices/${tx.device.id}`, { config: { heartbeat_secs: '60' } }, owner.token],
    ['PATCH', `${API}/devices/${player.device.id}`, { config: { heartbeat_secs: 30 } }, regular.token],
    ['PATCH', `${API}/devices/${player.device.id}`, { config: 'loud' }, regular.token],
  ];
  for (const [method, path, body, token] of bad) {
    const res = await ts.http.request(method, path, { body, token });
    const error = assertError(res, 400, 'validation_failed').error;
    assert.ok(Array.isArray(error.details) && error.details.length > 0, `${method} ${path} ${JSON.stringify(body)}: details`);
  }
  const notJson = await ts.http.request('POST', `${API}/devices`, { raw: 'kind=stream_player', token: regular.token, headers: { 'content-type': 'text/plain' } });
  assertError(notJson, 415, 'unsupported_media_type');

  const after = (await ts.http.get(`${API}/devices/${tx.device.id}`, owner.token)).body;
  assert.equal(after.config_version, tx.device.config_version);
  assert.deepEqual(after.config, tx.device.config);
  assert.equal((await ts.http.get(`${API}/devices`, regular.token)).body.length, 1);
});
