import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type mqtt from 'mqtt';
import { SimDevice, type DeviceConfig, type DeviceKind } from '../../simulator/device.ts';
import { API, makeAdmin, member, type Person } from '../support/people.ts';
import { createManualClock, startTestService, type HttpResult, type TestService } from '../support/service.ts';
import {
  connectDevice, deviceEvents, getDevice, logPayload, mosqueWithOwner, nextMessage, publish, registerPlayer, registerTransmitter,
  settle, subscribeCode, waitFor, type Registered, type TimelineEntry,
} from '../support/devices.ts';

// Remote diagnostics: POST /devices/{id}/commands (docs/api.md, "Devices, from the app's side") and the cmd/ack
// topics (docs/firmware.md, "4.2 Commands" and "3.4 Ack"),
// end to end: HTTP in, MQTT out to a firmware simulator (or a raw client playing a device), ack back, HTTP answer.

const STREAM_URL = 'https://radio.example.test/live';
const DIAGNOSTICS = ['get_state', 'ping', 'play_test', 'identify', 'diag_bundle'] as const;

interface World {
  ts: TestService;
  root: { token: string; id: string };
  /** Owner of mosque M (manager by ownership). */
  owner: Person;
  /** Approved member of M who owns the stream player. */
  playerOwner: Person;
  /** Another approved member of M, owns nothing. */
  fellow: Person;
  /** Admin of M without flags. */
  plainAdmin: Person;
  /** Admin of M with can_manage. */
  manager: Person;
  mosqueId: string;
  player: Registered;
  transmitter: Registered;
}

async function buildWorld(t: TestContext, opts: { clock?: ReturnType<typeof createManualClock> } = {}): Promise<World> {
  const ts = await startTestService(t, { logLevel: 'warn', ...(opts.clock && { clock: opts.clock }) });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { stream_url: STREAM_URL });
  const [playerOwner, fellow, plainAdmin, manager] = await Promise.all(['listener', 'fellow', 'plain-admin', 'manager'].map((n) => member(ts, `${n}@example.com`)));
  for (const p of [playerOwner!, fellow!]) {
    const res = await ts.http.post(`${API}/mosques/${mosque.id}/memberships`, { user_id: p.id }, root.token);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    assert.equal(res.body.status, 'approved');
  }
  await makeAdmin(ts, root.token, mosque.id, plainAdmin!);
  await makeAdmin(ts, root.token, mosque.id, manager!, { can_manage: true });
  const player = await registerPlayer(ts, playerOwner!, mosque.id);
  const transmitter = await registerTransmitter(ts, owner.token, mosque.id);
  return { ts, root, owner, playerOwner: playerOwner!, fellow: fellow!, plainAdmin: plainAdmin!, manager: manager!, mosqueId: mosque.id, player, transmitter };
}

/** A SimDevice (real MQTT) for a registration, stopped when the test ends. */
async function startSim(t: TestContext, reg: Registered, kind: DeviceKind): Promise<SimDevice> {
  const sim = new SimDevice({ kind, id: reg.device.id, password: reg.credentials.password, mqttUrl: reg.credentials.mqtt_url, startTimeoutMs: 5000 });
  t.after(() => sim.stop({ graceful: false }));
  await sim.start();
  return sim;
}

async function simInState(sim: SimDevice, status: string, timeoutMs = 3000) {
  await waitFor(`sim ${sim.id} ${status}`, () => sim.status === status, timeoutMs);
}

/** Waits until the backend sees the device connected (the API's connected flag). */
async function backendSees(w: World, id: string, connected: boolean) {
  await waitFor(`backend sees ${id} connected=${connected}`, async () => (await getDevice(w.ts, w.root.token, id)).connected === connected);
}

function command(w: World, id: string, body: Record<string, unknown>, token: string): Promise<HttpResult> {
  return w.ts.http.post(`${API}/devices/${id}/commands`, body, token);
}

async function commandOk(w: World, id: string, body: Record<string, unknown>, token: string) {
  const res = await command(w, id, body, token);
  assert.equal(res.status, 200, `${String(body.name)}: ${res.status} ${JSON.stringify(res.body)}`);
  assert.deepEqual(Object.keys(res.body).sort(), ['command_id', 'name', 'ok', 'result', 'rtt_ms']);
  assert.equal(typeof res.body.command_id, 'string');
  assert.equal(res.body.name, body.name);
  assert.equal(typeof res.body.rtt_ms, 'number');
  assert.ok(Number.isInteger(res.body.rtt_ms) && res.body.rtt_ms >= 0, `rtt_ms ${res.body.rtt_ms}`);
  return res.body as { command_id: string; name: string; ok: boolean; result: any; rtt_ms: number };
}

function assertError(res: HttpResult, status: number, code: string) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body?.error?.code, code, JSON.stringify(res.body));
}

const ofCommand = (events: TimelineEntry[], commandId: string) => events.filter((e) => e.detail?.command_id === commandId);

/** What each diagnostic command's result must carry. */
function checkResult(name: (typeof DIAGNOSTICS)[number], result: any, kind: DeviceKind, sim: SimDevice) {
  switch (name) {
    case 'ping':
      assert.equal(result.pong, true);
      assert.equal(typeof result.uptime_s, 'number');
      break;
    case 'get_state':
      assert.equal(result.v, '1.0');
      assert.equal(result.status, sim.status);
      assert.ok(Array.isArray(result.capabilities) && result.capabilities.length > 0, 'capabilities');
      if (kind === 'stream_player') assert.ok(result.capabilities.includes('bluetooth'));
      assert.equal(typeof result.config_schema, 'object');
      assert.ok(result.config_schema.heartbeat_secs, 'config_schema describes heartbeat_secs');
      assert.equal(typeof result.hw_rev, 'string');
      for (const key of ['fw', 'mac', 'ssid', 'ip']) assert.equal(typeof result[key], 'string', key);
      assert.ok(Number.isInteger(result.rssi) && result.rssi < 0, 'rssi');
      assert.equal(typeof result.config_version, 'number');
      if (kind === 'transmitter') assert.equal(typeof result.temp_c, 'number');
      break;
    case 'play_test':
      assert.equal(result.played, 'tone');
      assert.equal(typeof result.duration_ms, 'number');
      break;
    case 'identify':
      assert.equal(typeof result.method, 'string');
      break;
    case 'diag_bundle':
      assert.ok(Array.isArray(result.transitions) && result.transitions.length > 0, 'transitions');
      for (const tr of result.transitions) for (const key of ['ts', 'from', 'to', 'reason']) assert.ok(key in tr, `transition.${key}`);
      assert.equal(result.transitions.at(-1).to, sim.status);
      assert.equal(result.config_version, sim.configVersion);
      assert.ok(result.config_version >= 1, 'the pushed config was applied');
      assert.equal(typeof result.uptime_s, 'number');
      assert.equal(typeof result.reset_reason, 'string');
      assert.ok(Number.isInteger(result.free_heap) && result.free_heap > 0);
      assert.equal(typeof result.wifi.ssid, 'string');
      assert.equal(typeof result.wifi.rssi, 'number');
      assert.ok(result.broker.connects >= 1, 'broker counters');
      assert.equal(typeof result.broker.disconnects, 'number');
      assert.equal(typeof result.broker.publishes, 'number');
      assert.ok('last_error' in result, 'last_error');
      break;
  }
}

/** Runs every diagnostic command against `id` as `caller` and checks result shapes and the timeline. */
async function runDiagnostics(w: World, id: string, kind: DeviceKind, sim: SimDevice, caller: Person) {
  const before = sim.counters.commands;
  const ids: string[] = [];
  for (const name of DIAGNOSTICS) {
    const res = await commandOk(w, id, { name }, caller.token);
    assert.equal(res.ok, true, `${name}: ${JSON.stringify(res.result)}`);
    checkResult(name, res.result, kind, sim);
    ids.push(res.command_id);
  }
  assert.equal(new Set(ids).size, ids.length, 'every command has its own id');
  assert.equal(sim.counters.commands - before, DIAGNOSTICS.length, 'each command reached the device exactly once');

  const events = await deviceEvents(w.ts, caller.token, id, '?limit=200');
  DIAGNOSTICS.forEach((name, i) => {
    const mine = ofCommand(events, ids[i]!);
    const sent = mine.filter((e) => e.kind === 'command_sent');
    const acked = mine.filter((e) => e.kind === 'command_acked');
    assert.equal(sent.length, 1, `${name}: one command_sent`);
    assert.equal(acked.length, 1, `${name}: one command_acked`);
    for (const e of [...sent, ...acked]) {
      assert.equal((e as TimelineEntry & { actor_user_id: string | null }).actor_user_id, caller.id, `${name}: ${e.kind} names the actor`);
      assert.equal(e.detail.name, name);
      assert.equal(e.device_id, id);
    }
    assert.equal(acked[0]!.detail.ok, true);
    assert.equal(typeof acked[0]!.detail.rtt_ms, 'number');
    assert.ok(Number(acked[0]!.id) > Number(sent[0]!.id), 'acked after sent');
  });
}

// ---------------------------------------------------------------------------------------------------

test('every diagnostic command reaches a bound stream player (ONLINE) over MQTT and its ack comes back', async (t) => {
  const w = await buildWorld(t);
  const sim = await startSim(t, w.player, 'stream_player');
  await simInState(sim, 'ONLINE');
  await runDiagnostics(w, w.player.device.id, 'stream_player', sim, w.playerOwner);
});

test('every diagnostic command reaches a transmitter over MQTT; a manager of its mosque sends them', async (t) => {
  const w = await buildWorld(t);
  const sim = await startSim(t, w.transmitter, 'transmitter');
  await simInState(sim, 'ONLINE');
  await runDiagnostics(w, w.transmitter.device.id, 'transmitter', sim, w.manager);
});

test('a stream player is diagnosable while UNBOUND (no mosque): every command, and why', async (t) => {
  const w = await buildWorld(t);
  const loose = await registerPlayer(w.ts, w.playerOwner, undefined, 'loose');
  const id = loose.device.id;
  const sim = await startSim(t, loose, 'stream_player');
  await simInState(sim, 'UNBOUND');
  await waitFor('backend sees UNBOUND', async () => (await getDevice(w.ts, w.playerOwner.token, id)).status === 'UNBOUND');
  await runDiagnostics(w, id, 'stream_player', sim, w.playerOwner);
  const state = await commandOk(w, id, { name: 'get_state' }, w.playerOwner.token);
  assert.equal(state.result.status, 'UNBOUND');
  assert.equal(state.result.detail.reason, 'no_mosque');
  const why = await w.ts.http.get(`${API}/devices/${id}/why`, w.playerOwner.token);
  assert.equal(why.status, 200);
  assert.equal(why.body.effective_playback_state, 'unbound');
});

test('a stream player awaiting approval (UNBOUND while bound) answers commands too', async (t) => {
  const w = await buildWorld(t);
  const newcomer = await member(w.ts, 'newcomer@example.com');
  const joined = await w.ts.http.post(`${API}/mosques/${w.mosqueId}/join`, {}, newcomer.token);
  assert.equal(joined.body.status, 'pending');
  const reg = await registerPlayer(w.ts, newcomer, w.mosqueId, 'pending');
  const sim = await startSim(t, reg, 'stream_player');
  await simInState(sim, 'UNBOUND');
  const state = await commandOk(w, reg.device.id, { name: 'get_state' }, newcomer.token);
  assert.equal(state.ok, true);
  assert.equal(state.result.status, 'UNBOUND');
  const ping = await commandOk(w, reg.device.id, { name: 'ping' }, newcomer.token);
  assert.equal(ping.result.pong, true);
});

test('409 device_offline at once: never connected, disconnected gracefully, or crashed (will fired)', async (t) => {
  const w = await buildWorld(t);
  const quick = async (id: string, token: string) => {
    const started = performance.now();
    const res = await command(w, id, { name: 'ping', timeout_ms: 30_000 }, token);
    assertError(res, 409, 'device_offline');
    assert.ok(performance.now() - started < 1000, 'answered at once, not after the timeout');
  };
  // Never connected.
  await quick(w.player.device.id, w.playerOwner.token);
  await quick(w.transmitter.device.id, w.owner.token);
  // Every command name, not only ping.
  for (const name of [...DIAGNOSTICS, 'unbind_mosque']) assertError(await command(w, w.player.device.id, { name }, w.playerOwner.token), 409, 'device_offline');
  assertError(await command(w, w.player.device.id, { name: 'set_log_level', args: { level: 'debug', ttl_s: 60 } }, w.playerOwner.token), 409, 'device_offline');
  // An offline attempt sends nothing, so the timeline has no command in it.
  assert.deepEqual((await deviceEvents(w.ts, w.root.token, w.player.device.id)).filter((e) => e.kind.startsWith('command_')), []);

  // Connected, then gone gracefully.
  const sim = await startSim(t, w.player, 'stream_player');
  await simInState(sim, 'ONLINE');
  await commandOk(w, w.player.device.id, { name: 'ping' }, w.playerOwner.token);
  await sim.stop({ graceful: true });
  await backendSees(w, w.player.device.id, false);
  await quick(w.player.device.id, w.playerOwner.token);

  // Connected, then crashed: the socket dies without DISCONNECT.
  const txSim = await startSim(t, w.transmitter, 'transmitter');
  await simInState(txSim, 'ONLINE');
  await commandOk(w, w.transmitter.device.id, { name: 'identify' }, w.owner.token);
  await txSim.crash();
  await backendSees(w, w.transmitter.device.id, false);
  await quick(w.transmitter.device.id, w.owner.token);
});

// --- a raw client playing the device, to control the acks exactly -----------------------------------

/** A raw MQTT client as the device, subscribed to its cmd topic; it answers nothing by itself. */
async function rawDevice(t: TestContext, reg: Registered) {
  const client = await connectDevice(t, reg.credentials);
  assert.equal(await subscribeCode(client, `devices/${reg.device.id}/cmd`), 1);
  return client;
}

const ackPayload = (cmd: { id: string; name: string }, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ v: '1.0', id: cmd.id, name: cmd.name, ok: true, result: { answered_by: 'raw' }, ts: Math.floor(Date.now() / 1000), ...extra });

/** Starts a command over HTTP and waits for it to arrive on the raw client; returns both. */
async function sendAndReceive(w: World, client: mqtt.MqttClient, id: string, body: Record<string, unknown>, token: string) {
  const arriving = nextMessage(client, `devices/${id}/cmd`, 3000);
  const started = performance.now();
  const pending = command(w, id, body, token);
  const cmd = (await arriving).body as { v: string; id: string; name: string; args: Record<string, unknown>; ts: number; expires_at: number };
  return { cmd, pending, started };
}

test('504 device_timeout when the device never acks; the cmd carries {v, id, name, args, ts, expires_at}; a late ack is ignored', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const client = await rawDevice(t, w.player);
  await backendSees(w, id, true);

  const { cmd, pending, started } = await sendAndReceive(w, client, id, { name: 'play_test', args: { duration_ms: 500 }, timeout_ms: 300 }, w.playerOwner.token);
  assert.deepEqual(Object.keys(cmd).sort(), ['args', 'expires_at', 'id', 'name', 'ts', 'v']);
  assert.equal(cmd.v, '1.0');
  assert.equal(cmd.name, 'play_test');
  assert.deepEqual(cmd.args, { duration_ms: 500 });
  assert.ok(Number.isInteger(cmd.ts) && Math.abs(cmd.ts - Date.now() / 1000) < 5, 'ts is Unix seconds');
  assert.ok(Number.isInteger(cmd.expires_at) && cmd.expires_at > cmd.ts, 'expires_at after ts');
  const res = await pending;
  const elapsed = performance.now() - started;
  assertError(res, 504, 'device_timeout');
  assert.ok(elapsed >= 290 && elapsed < 2500, `timed out after ${Math.round(elapsed)} ms for timeout_ms 300`);

  let events = await deviceEvents(w.ts, w.playerOwner.token, id, '?limit=100');
  const mine = ofCommand(events, cmd.id);
  assert.deepEqual(mine.map((e) => e.kind).sort(), ['command_sent', 'command_timeout']);
  for (const e of mine) assert.equal((e as any).actor_user_id, w.playerOwner.id);
  assert.equal(mine.find((e) => e.kind === 'command_timeout')!.detail.timeout_ms, 300);

  // The device answers after all: too late, ignored; the connection stays up and nothing is recorded.
  await publish(client, `devices/${id}/ack`, ackPayload(cmd));
  await settle();
  events = await deviceEvents(w.ts, w.playerOwner.token, id, '?limit=100');
  assert.deepEqual(ofCommand(events, cmd.id).map((e) => e.kind).sort(), ['command_sent', 'command_timeout'], 'a late ack changes nothing');
  assert.equal(client.connected, true);

  // The next command is answered normally.
  const next = await sendAndReceive(w, client, id, { name: 'ping', timeout_ms: 3000 }, w.playerOwner.token);
  await publish(client, `devices/${id}/ack`, ackPayload(next.cmd, { result: { pong: true } }));
  const ok = await next.pending;
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.deepEqual([ok.body.command_id, ok.body.ok, ok.body.result], [next.cmd.id, true, { pong: true }]);
});

test('a foreign ack (another id, another name, or the right id from another device) is ignored; the command still completes or times out', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const client = await rawDevice(t, w.player);
  // Another device that knows the command id: it may publish only on its own ack topic.
  const other = await registerPlayer(w.ts, w.fellow, w.mosqueId, 'other');
  const otherClient = await connectDevice(t, other.credentials);
  await backendSees(w, id, true);
  await backendSees(w, other.device.id, true);

  // 1. Foreign acks first, then the right one: the command completes with the right result.
  {
    const { cmd, pending } = await sendAndReceive(w, client, id, { name: 'identify', timeout_ms: 3000 }, w.playerOwner.token);
    await publish(client, `devices/${id}/ack`, ackPayload({ id: 'not-a-command-id', name: cmd.name }, { result: { wrong: 'id' } }));
    await publish(client, `devices/${id}/ack`, ackPayload({ id: cmd.id, name: 'ping' }, { result: { wrong: 'name' } }));
    await publish(otherClient, `devices/${other.device.id}/ack`, ackPayload(cmd, { result: { wrong: 'device' } }));
    await settle();
    await publish(client, `devices/${id}/ack`, ackPayload(cmd, { result: { method: 'led_blink' } }));
    const res = await pending;
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual([res.body.command_id, res.body.ok, res.body.result], [cmd.id, true, { method: 'led_blink' }]);
  }

  // 2. Only foreign acks: the command still times out.
  {
    const { cmd, pending } = await sendAndReceive(w, client, id, { name: 'ping', timeout_ms: 400 }, w.playerOwner.token);
    await publish(client, `devices/${id}/ack`, ackPayload({ id: 'another-id', name: 'ping' }));
    await publish(otherClient, `devices/${other.device.id}/ack`, ackPayload(cmd));
    assertError(await pending, 504, 'device_timeout');
    const events = await deviceEvents(w.ts, w.playerOwner.token, id, '?limit=100');
    assert.deepEqual(ofCommand(events, cmd.id).map((e) => e.kind).sort(), ['command_sent', 'command_timeout']);
  }

  // The other device's timeline got nothing from acks it sent for a command that was never its own.
  const otherEvents = await deviceEvents(w.ts, w.fellow.token, other.device.id, '?limit=100');
  assert.deepEqual(otherEvents.filter((e) => e.kind.startsWith('command_')), []);
  // Both devices are still connected: a foreign ack on one's own topic is not a protocol violation.
  assert.equal(client.connected, true);
  assert.equal(otherClient.connected, true);
});

test('a duplicate ack is harmless: one answer, one command_acked, the next command works', async (t) => {
  const w = await buildWorld(t);
  const id = w.transmitter.device.id;
  const client = await rawDevice(t, w.transmitter);
  await backendSees(w, id, true);

  const { cmd, pending } = await sendAndReceive(w, client, id, { name: 'diag_bundle', timeout_ms: 3000 }, w.owner.token);
  const ack = ackPayload(cmd, { result: { uptime_s: 12 } });
  await publish(client, `devices/${id}/ack`, ack);
  await publish(client, `devices/${id}/ack`, ack);
  const res = await pending;
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.deepEqual(res.body.result, { uptime_s: 12 });
  await publish(client, `devices/${id}/ack`, ack); // and once more, after the answer
  await settle();
  const events = await deviceEvents(w.ts, w.owner.token, id, '?limit=100');
  assert.deepEqual(ofCommand(events, cmd.id).map((e) => e.kind).sort(), ['command_acked', 'command_sent']);

  // A device that reports failure: 200 with ok false and the error; recorded as acked with the reason.
  const failing = await sendAndReceive(w, client, id, { name: 'play_test', timeout_ms: 3000 }, w.owner.token);
  await publish(client, `devices/${id}/ack`, ackPayload(failing.cmd, { ok: false, result: undefined, error: 'amp_fault' }));
  const failed = await failing.pending;
  assert.equal(failed.status, 200, JSON.stringify(failed.body));
  assert.deepEqual([failed.body.ok, failed.body.result], [false, { error: 'amp_fault' }]);
  const acked = ofCommand(await deviceEvents(w.ts, w.owner.token, id, '?limit=100'), failing.cmd.id).find((e) => e.kind === 'command_acked')!;
  assert.equal(acked.reason, 'amp_fault');
  assert.equal(acked.detail.ok, false);
  assert.equal(client.connected, true);
});

test('two commands in flight to one device are told apart by id, whatever order the acks come in', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const client = await rawDevice(t, w.player);
  await backendSees(w, id, true);
  const received: Array<{ id: string; name: string }> = [];
  client.on('message', (topic, payload) => {
    if (topic === `devices/${id}/cmd`) received.push(JSON.parse(payload.toString('utf8')));
  });
  const a = command(w, id, { name: 'ping', timeout_ms: 3000 }, w.playerOwner.token);
  const b = command(w, id, { name: 'identify', timeout_ms: 3000 }, w.playerOwner.token);
  await waitFor('two commands arrive', () => received.length === 2);
  const [first, second] = received as [{ id: string; name: string }, { id: string; name: string }];
  await publish(client, `devices/${id}/ack`, ackPayload(second, { result: { n: second.name } }));
  await publish(client, `devices/${id}/ack`, ackPayload(first, { result: { n: first.name } }));
  const [ra, rb] = await Promise.all([a, b]);
  assert.deepEqual([ra.status, ra.body.name, ra.body.result], [200, 'ping', { n: 'ping' }]);
  assert.deepEqual([rb.status, rb.body.name, rb.body.result], [200, 'identify', { n: 'identify' }]);
});

test('400 for unknown names, names not valid for the kind, and bad set_log_level args; nothing is sent', async (t) => {
  const w = await buildWorld(t);
  const player = await startSim(t, w.player, 'stream_player');
  const tx = await startSim(t, w.transmitter, 'transmitter');
  await simInState(player, 'ONLINE');
  await simInState(tx, 'ONLINE');
  const pid = w.player.device.id;
  const tid = w.transmitter.device.id;
  const before = { player: player.counters.commands, tx: tx.counters.commands };

  const bad: Array<[string, string, Record<string, unknown>, string]> = [
    ['reboot on a player', pid, { name: 'reboot' }, 'name'],
    ['reboot on a transmitter', tid, { name: 'reboot' }, 'name'],
    ['broadcast_start over HTTP', tid, { name: 'broadcast_start' }, 'name'],
    ['no name', pid, {}, 'name'],
    ['set_log_level on a transmitter', tid, { name: 'set_log_level', args: { level: 'debug', ttl_s: 60 } }, 'name'],
    ['unbind_mosque on a transmitter', tid, { name: 'unbind_mosque' }, 'name'],
    ['ttl_s 3601', pid, { name: 'set_log_level', args: { level: 'debug', ttl_s: 3601 } }, 'args.ttl_s'],
    ['ttl_s 0', pid, { name: 'set_log_level', args: { level: 'debug', ttl_s: 0 } }, 'args.ttl_s'],
    ['ttl_s not whole', pid, { name: 'set_log_level', args: { level: 'debug', ttl_s: 1.5 } }, 'args.ttl_s'],
    ['missing level', pid, { name: 'set_log_level', args: { ttl_s: 60 } }, 'args.level'],
    ['unknown level', pid, { name: 'set_log_level', args: { level: 'verbose', ttl_s: 60 } }, 'args.level'],
    ['missing args', pid, { name: 'set_log_level' }, 'args'],
    ['timeout_ms 99', pid, { name: 'ping', timeout_ms: 99 }, 'timeout_ms'],
    ['timeout_ms 30001', pid, { name: 'ping', timeout_ms: 30_001 }, 'timeout_ms'],
    ['args not an object', pid, { name: 'ping', args: [1, 2] }, 'args'],
  ];
  for (const [what, id, body, path] of bad) {
    const res = await command(w, id, body, w.root.token);
    assert.equal(res.status, 400, `${what}: ${res.status} ${JSON.stringify(res.body)}`);
    assert.equal(res.body.error.code, 'validation_failed', what);
    const paths = (res.body.error.details ?? []).map((d: { path: string }) => d.path);
    assert.ok(paths.some((p: string) => p === path || p.startsWith(`${path}.`)), `${what}: details name ${path} (got ${JSON.stringify(paths)})`);
  }
  await settle();
  assert.deepEqual({ player: player.counters.commands, tx: tx.counters.commands }, before, 'no refused command reached a device');
  for (const id of [pid, tid]) {
    assert.deepEqual((await deviceEvents(w.ts, w.root.token, id)).filter((e) => e.kind.startsWith('command_')), [], 'nothing in the timeline');
  }
  // The edges of the ranges are accepted.
  assert.equal((await commandOk(w, pid, { name: 'ping', timeout_ms: 100 }, w.root.token)).ok, true);
  assert.equal((await commandOk(w, pid, { name: 'set_log_level', args: { level: 'warn', ttl_s: 3600 } }, w.root.token)).ok, true);
  assert.equal((await commandOk(w, pid, { name: 'set_log_level', args: { level: 'info', ttl_s: 1 } }, w.root.token)).ok, true);
});

test('gates: the player owner, a manager and the superadmin may; a member 404, a plain admin 403, a stranger 404, anonymous 401', async (t) => {
  const w = await buildWorld(t);
  const stranger = await member(w.ts, 'stranger@example.com');
  const player = await startSim(t, w.player, 'stream_player');
  const tx = await startSim(t, w.transmitter, 'transmitter');
  await simInState(player, 'ONLINE');
  await simInState(tx, 'ONLINE');
  const pid = w.player.device.id;
  const tid = w.transmitter.device.id;

  const refused: Array<[string, string, Person | null, number, string]> = [
    ['fellow member on the player', pid, w.fellow, 404, 'not_found'],
    ['fellow member on the transmitter', tid, w.fellow, 404, 'not_found'],
    ['player owner on the transmitter', tid, w.playerOwner, 404, 'not_found'],
    ['plain admin on the transmitter', tid, w.plainAdmin, 403, 'forbidden'],
    ['plain admin on the player', pid, w.plainAdmin, 403, 'forbidden'],
    ['stranger on the player', pid, stranger, 404, 'not_found'],
    ['stranger on the transmitter', tid, stranger, 404, 'not_found'],
  ];
  const before = { player: player.counters.commands, tx: tx.counters.commands };
  for (const [what, id, who, status, code] of refused) {
    const res = await command(w, id, { name: 'ping' }, who!.token);
    assert.equal(res.status, status, `${what}: ${res.status} ${JSON.stringify(res.body)}`);
    assert.equal(res.body.error.code, code, what);
  }
  const anon = await w.ts.http.request('POST', `${API}/devices/${pid}/commands`, { body: { name: 'ping' } });
  assertError(anon, 401, 'unauthorized');
  // A refused caller learns nothing either from the body validation: a bad body still gets 403/404 first.
  assert.equal((await command(w, tid, { name: 'reboot' }, w.plainAdmin.token)).status, 403);
  assert.equal((await command(w, pid, { name: 'reboot' }, w.fellow.token)).status, 404);
  await settle();
  assert.deepEqual({ player: player.counters.commands, tx: tx.counters.commands }, before, 'no refused command reached a device');

  const allowed: Array<[string, string, { token: string; id: string }]> = [
    ['player owner on the player', pid, w.playerOwner],
    ['manager on the player', pid, w.manager],
    ['manager on the transmitter', tid, w.manager],
    ['mosque owner on the transmitter', tid, w.owner],
    ['superadmin on the player', pid, w.root],
    ['superadmin on the transmitter', tid, w.root],
  ];
  for (const [what, id, who] of allowed) {
    const res = await command(w, id, { name: 'ping' }, who.token);
    assert.equal(res.status, 200, `${what}: ${res.status} ${JSON.stringify(res.body)}`);
    assert.equal(res.body.ok, true, what);
    const sent = ofCommand(await deviceEvents(w.ts, w.root.token, id, '?limit=200'), res.body.command_id);
    assert.ok(sent.every((e) => (e as any).actor_user_id === who.id), `${what}: the timeline names the caller`);
  }
});

test('set_log_level: a player\'s logs are dropped before, accepted during, and dropped after the escalation (manual clock)', async (t) => {
  const clock = createManualClock(Date.now());
  const w = await buildWorld(t, { clock });
  const id = w.player.device.id;
  const client = await rawDevice(t, w.player);
  await backendSees(w, id, true);
  const counters = async () => (await getDevice(w.ts, w.playerOwner.token, id)).counters as { logs_accepted: number; logs_dropped: number };
  const logs = async () => {
    const res = await w.ts.http.get(`${API}/devices/${id}/logs`, w.playerOwner.token);
    assert.equal(res.status, 200);
    return res.body.lines as Array<{ at: string; ts: number; level: string; msg: string }>;
  };
  /** One log line, a second (of the service's clock) after the last, so the 1-per-second limit never decides. */
  const sendLog = async (msg: string) => {
    clock.advance(1_100);
    await publish(client, `devices/${id}/log`, logPayload(msg, 'info'), { qos: 1 });
  };

  // Before: logging is off for a player.
  await sendLog('before escalation');
  let c = await counters();
  assert.deepEqual([c.logs_accepted, c.logs_dropped], [0, 1]);
  assert.deepEqual(await logs(), []);

  // The escalation: the device acks, the backend records the expiry.
  const { cmd, pending } = await sendAndReceive(w, client, id, { name: 'set_log_level', args: { level: 'debug', ttl_s: 60 }, timeout_ms: 3000 }, w.playerOwner.token);
  assert.deepEqual(cmd.args, { level: 'debug', ttl_s: 60 });
  await publish(client, `devices/${id}/ack`, ackPayload(cmd, { result: { level: 'debug', expires_at: Math.floor(clock() / 1000) + 60 } }));
  const res = await pending;
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.ok, true);
  const set = (await deviceEvents(w.ts, w.playerOwner.token, id)).find((e) => e.kind === 'log_level_set');
  assert.ok(set, 'log_level_set in the timeline');
  assert.equal(set.detail.level, 'debug');

  // Right after the escalation, before any line: the answer explains that it is waiting (docs/decisions.md, "`GET /devices/{id}/logs`").
  const waiting = await w.ts.http.get(`${API}/devices/${id}/logs`, w.playerOwner.token);
  assert.deepEqual(waiting.body.lines, []);
  assert.equal(waiting.body.logging.enabled, true);
  assert.equal(waiting.body.logging.source, 'set_log_level');
  assert.equal(waiting.body.logging.until, new Date((Math.floor(clock() / 1000) + 60) * 1000).toISOString());
  assert.match(waiting.body.note, /waiting for the device's first line/);

  // During: accepted and readable.
  await sendLog('during escalation 1');
  await sendLog('during escalation 2');
  c = await counters();
  assert.equal(c.logs_accepted, 2);
  assert.equal(c.logs_dropped, 1);
  assert.deepEqual((await logs()).map((l) => l.msg), ['during escalation 2', 'during escalation 1']);

  // After the ttl (the service's clock moved past it): dropped again.
  clock.advance(60_000);
  await sendLog('after escalation');
  c = await counters();
  assert.equal(c.logs_accepted, 2);
  assert.equal(c.logs_dropped, 2);
  assert.deepEqual((await logs()).map((l) => l.msg), ['during escalation 2', 'during escalation 1']);
});

test('set_log_level with a failing ack records nothing: logs stay dropped', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const client = await rawDevice(t, w.player);
  await backendSees(w, id, true);
  const { cmd, pending } = await sendAndReceive(w, client, id, { name: 'set_log_level', args: { level: 'info', ttl_s: 600 }, timeout_ms: 3000 }, w.playerOwner.token);
  await publish(client, `devices/${id}/ack`, ackPayload(cmd, { ok: false, result: undefined, error: 'invalid_args' }));
  const res = await pending;
  assert.equal(res.status, 200);
  assert.equal(res.body.ok, false);
  assert.equal((await deviceEvents(w.ts, w.playerOwner.token, id)).some((e) => e.kind === 'log_level_set'), false);
  await publish(client, `devices/${id}/log`, logPayload('not escalated', 'info'), { qos: 1 });
  const counters = (await getDevice(w.ts, w.playerOwner.token, id)).counters;
  assert.deepEqual([counters.logs_accepted, counters.logs_dropped], [0, 1]);
});

test('set_log_level on a SimDevice: the firmware starts logging and the backend keeps its lines', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const sim = await startSim(t, w.player, 'stream_player');
  await simInState(sim, 'ONLINE');
  for (const level of ['error', 'warn', 'info', 'debug'] as const) {
    const res = await commandOk(w, id, { name: 'set_log_level', args: { level, ttl_s: 120 } }, w.playerOwner.token);
    assert.equal(res.ok, true, `${level}: ${JSON.stringify(res.result)}`);
    assert.equal(res.result.level, level);
    assert.equal(typeof res.result.expires_at, 'number');
  }
  assert.equal(sim.logLevel, 'debug');
  // Past the 1-per-second limit of both sides, a command makes the firmware log a line about it.
  await settle(1_100);
  const ping = await commandOk(w, id, { name: 'ping' }, w.playerOwner.token);
  const lines = await waitFor('the firmware log line is kept', async () => {
    const res = await w.ts.http.get(`${API}/devices/${id}/logs`, w.playerOwner.token);
    const found = (res.body.lines as Array<{ msg: string; level: string }>).filter((l) => l.msg.includes(ping.command_id));
    return found.length ? found : null;
  }, 4000);
  assert.equal(lines[0]!.level, 'info');
  assert.ok((await getDevice(w.ts, w.playerOwner.token, id)).counters.logs_accepted >= 1);
});

test('unbind_mosque: the player goes UNBOUND, the binding is cleared and the next config has no mosque_id', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const sim = await startSim(t, w.player, 'stream_player');
  await simInState(sim, 'ONLINE');
  assert.equal(sim.config?.mosque_id, w.mosqueId);
  assert.equal(sim.config?.stream_url, STREAM_URL);
  const versionBefore = sim.configVersion;
  const configs: DeviceConfig[] = [];
  sim.on('config', (c: DeviceConfig) => configs.push(c));

  const res = await commandOk(w, id, { name: 'unbind_mosque' }, w.playerOwner.token);
  assert.equal(res.ok, true);
  assert.deepEqual(res.result, { status: 'UNBOUND', reason: 'no_mosque' });
  await simInState(sim, 'UNBOUND');

  const device = await getDevice(w.ts, w.playerOwner.token, id);
  assert.equal(device.mosque_id, null);
  assert.equal(device.entitlement.entitled, false);
  assert.equal(device.entitlement.reason, 'no_mosque');

  const next = await waitFor('the next config', () => configs.find((c) => c.config_version > versionBefore));
  assert.equal('mosque_id' in next && next.mosque_id !== null, false, `no mosque_id: ${JSON.stringify(next)}`);
  assert.equal(next.stream_url ?? null, null, 'no stream_url');
  assert.equal(next.lease ?? null, null, 'no lease');
  assert.equal(sim.status, 'UNBOUND', 'the new config keeps it UNBOUND');
  await waitFor('backend sees UNBOUND', async () => (await getDevice(w.ts, w.playerOwner.token, id)).status === 'UNBOUND');

  const why = await w.ts.http.get(`${API}/devices/${id}/why`, w.playerOwner.token);
  assert.equal(why.body.effective_playback_state, 'unbound');
  const events = await deviceEvents(w.ts, w.playerOwner.token, id, '?limit=100');
  assert.deepEqual(ofCommand(events, res.command_id).map((e) => e.kind).sort(), ['command_acked', 'command_sent']);

  // Still diagnosable, and a second unbind is a no-op that still answers.
  assert.equal((await commandOk(w, id, { name: 'diag_bundle' }, w.playerOwner.token)).ok, true);
  assert.equal((await commandOk(w, id, { name: 'unbind_mosque' }, w.playerOwner.token)).ok, true);
  assert.equal((await getDevice(w.ts, w.playerOwner.token, id)).mosque_id, null);
});

test('unbind_mosque by a manager of the mosque; the device left is no longer theirs to see', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const sim = await startSim(t, w.player, 'stream_player');
  await simInState(sim, 'ONLINE');
  const res = await commandOk(w, id, { name: 'unbind_mosque' }, w.manager.token);
  assert.equal(res.ok, true);
  await simInState(sim, 'UNBOUND');
  assert.equal((await getDevice(w.ts, w.playerOwner.token, id)).mosque_id, null);
  // Unbound from M, the player is the owner's alone: the manager of M no longer sees it.
  assertError(await command(w, id, { name: 'ping' }, w.manager.token), 404, 'not_found');
  assert.equal((await commandOk(w, id, { name: 'ping' }, w.playerOwner.token)).ok, true);
});

test('unbind_mosque on a player deleted while the command waits for its ack answers 404 not_found (never 500), and the service goes on', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const client = await rawDevice(t, w.player);
  await backendSees(w, id, true);
  const { pending } = await sendAndReceive(w, client, id, { name: 'unbind_mosque', timeout_ms: 10_000 }, w.playerOwner.token);
  const started = performance.now();
  assert.equal((await w.ts.http.delete(`${API}/devices/${id}`, w.playerOwner.token)).status, 204);
  const res = await pending;
  assertError(res, 404, 'not_found');
  assert.ok(performance.now() - started < 5000, 'answered when the device went, not at the timeout');
  assertError(await w.ts.http.get(`${API}/devices/${id}`, w.playerOwner.token), 404, 'not_found');
  // Another device's command still works, and its timeline has the command.
  const sim = await startSim(t, w.transmitter, 'transmitter');
  await simInState(sim, 'ONLINE');
  assert.equal((await commandOk(w, w.transmitter.device.id, { name: 'ping' }, w.owner.token)).ok, true);
});

test('any command to a device deleted while it waits ends with 404 at once, also after a late ack', async (t) => {
  const w = await buildWorld(t);
  const id = w.player.device.id;
  const client = await rawDevice(t, w.player);
  await backendSees(w, id, true);
  const { cmd, pending } = await sendAndReceive(w, client, id, { name: 'ping', timeout_ms: 10_000 }, w.playerOwner.token);
  assert.equal((await w.ts.http.delete(`${API}/devices/${id}`, w.owner.token)).status, 204);
  assertError(await pending, 404, 'not_found');
  // The connection was closed by the deletion; an ack from a straggling session changes nothing.
  client.publish(`devices/${id}/ack`, ackPayload(cmd));
  await settle(200);
  assert.equal((await w.ts.http.get('/healthz')).status, 200);
});
