import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import type mqtt from 'mqtt';
import { startTestService } from '../support/service.ts';
import { createMosque, joinMosque, member, setStatus, signInSuperadmin } from '../support/people.ts';
import { connectDevice, nextMessage, publish, registerPlayer, registerTransmitter, statusPayload, subscribeCode, waitForStatus } from '../support/devices.ts';
import { createAjv } from '../support/json-schema.ts';
import { buildAsyncApi } from '../../broker/asyncapi.ts';
import { DOCS_DIR, generatedDocs } from '../../scripts/docs.ts';

type Doc = ReturnType<typeof buildAsyncApi>;
const require = createRequire(import.meta.url);

/** The official AsyncAPI 3.0.0 JSON Schema (it carries its own copy of draft-07, hence meta: false). */
function specValidator() {
  const ajv = createAjv('draft-07', { meta: false, validateSchema: false });
  return ajv.compile(require('@asyncapi/specs').schemas['3.0.0']);
}

/** A validator for one message's payload, as the document describes it. */
function payloadValidator(doc: Doc, message: keyof Doc['components']['messages']) {
  const ajv = createAjv('draft-07');
  const validate = ajv.compile(doc.components.messages[message].payload);
  return (body: unknown) => {
    const ok = validate(body);
    return { ok, errors: ajv.errorsText(validate.errors) };
  };
}

test('GET /api/v1/asyncapi.json serves the document without a token, and docs/asyncapi.json is what the code generates', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.get('/api/v1/asyncapi.json');
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, JSON.parse(JSON.stringify(buildAsyncApi())));
  assert.equal(fs.readFileSync(path.join(DOCS_DIR, 'asyncapi.json'), 'utf8'), generatedDocs()['asyncapi.json'], 'run npm run docs');
});

test('the document is valid AsyncAPI 3.0.0 with zero errors, and the validator catches a broken one', () => {
  const validate = specValidator();
  const doc = buildAsyncApi();
  assert.equal(validate(doc), true, JSON.stringify(validate.errors, null, 1));
  const broken = structuredClone(doc) as Record<string, any>;
  broken.operations.sendStatus.action = 'publish'; // AsyncAPI 2's word: not an action in 3.0
  assert.equal(validate(broken), false, 'the validator is not a rubber stamp');
});

test('every topic of docs/firmware.md is a channel with its direction, QoS and required fields', () => {
  const doc = buildAsyncApi();
  const addresses = Object.values(doc.channels).map((c) => c.address).sort();
  assert.deepEqual(addresses, [
    'devices/{device_id}/ack', 'devices/{device_id}/cmd', 'devices/{device_id}/config', 'devices/{device_id}/heartbeat',
    'devices/{device_id}/log', 'devices/{device_id}/status', 'mosques/{mosque_id}/broadcast',
  ]);
  const ops = doc.operations;
  assert.deepEqual([ops.sendStatus.action, ops.sendStatus.bindings.mqtt], ['send', { qos: 1, retain: true, bindingVersion: '0.2.0' }]);
  assert.deepEqual([ops.sendHeartbeat.action, ops.sendHeartbeat.bindings.mqtt.qos], ['send', 0]);
  assert.deepEqual([ops.receiveConfig.action, ops.receiveConfig.bindings.mqtt.retain], ['receive', true]);
  assert.equal(ops.receiveCommand.action, 'receive');
  const required = (m: keyof Doc['components']['messages']) => [...((doc.components.messages[m].payload as { required?: string[] }).required ?? [])].sort();
  // The issue: a heartbeat without status is dropped and the device goes stale; an ack must echo id and name.
  assert.deepEqual(required('playerHeartbeat'), ['status', 'ts', 'v']);
  assert.deepEqual(required('ack'), ['id', 'name', 'ok', 'ts', 'v']);
  assert.deepEqual(required('command'), ['args', 'expires_at', 'id', 'name', 'ts', 'v']);
  const playerStatus = doc.components.messages.playerStatus.payload as { properties: Record<string, { enum?: string[] }> };
  assert.ok(playerStatus.properties.status!.enum!.includes('UNBOUND'));
  assert.ok(!(doc.components.messages.transmitterStatus.payload as typeof playerStatus).properties.status!.enum!.includes('UNBOUND'));
  assert.equal(payloadValidator(doc, 'playerStatus')({ v: '1.0', status: 'ONLINE', temp_c: 40, ts: 1 }).ok, false, 'a player sends no temp_c');
});

/** Collects every message on `topic` until the test ends. */
function collect(client: mqtt.MqttClient, topic: string): unknown[] {
  const seen: unknown[] = [];
  client.on('message', (tpc, payload) => {
    if (tpc === topic && payload.length > 0) seen.push(JSON.parse(payload.toString('utf8')));
  });
  return seen;
}

test('what the backend really sends (config with a lease, commands, broadcast events) matches the documented payloads', async (t) => {
  const ts = await startTestService(t);
  const doc = buildAsyncApi();
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.org');
  const amina = await member(ts, 'amina@example.org');
  const mosque = await createMosque(ts, root.token, owner, { stream_url: 'https://radio.example/noor' });
  const membership = await joinMosque(ts, amina, mosque.id);

  const player = await registerPlayer(ts, amina, mosque.id);
  const pid = player.device.id;
  const pc = await connectDevice(t, player.credentials);
  const configs = collect(pc, `devices/${pid}/config`);
  assert.equal(await subscribeCode(pc, `devices/${pid}/config`), 1);
  assert.equal(await subscribeCode(pc, `devices/${pid}/cmd`), 1);
  await publish(pc, `devices/${pid}/status`, statusPayload('UNBOUND', { prev: 'CONNECTING', reason: 'awaiting_approval', detail: { reason: 'awaiting_approval' } }), { retain: true });
  await waitForStatus(ts, amina.token, pid, 'UNBOUND');
  await setStatus(ts, owner.token, membership.id, 'approved');
  const leased = await nextMessage(pc, `devices/${pid}/config`, 3000, (b) => b?.lease);
  assert.ok(leased.body.stream_url && leased.body.lease.token, 'an entitled player gets stream_url and a lease');
  const config = payloadValidator(doc, 'config');
  for (const body of configs) assert.ok(config(body).ok, `config ${JSON.stringify(body)}: ${config(body).errors}`);
  assert.ok(configs.some((c: any) => c.unbound_reason === 'awaiting_approval'), 'the unbound config was checked too');

  // A command and its ack, as firmware answers it.
  const command = payloadValidator(doc, 'command');
  const cmdSeen = nextMessage(pc, `devices/${pid}/cmd`, 3000);
  const answer = ts.http.post(`/api/v1/devices/${pid}/commands`, { name: 'set_log_level', args: { level: 'debug', ttl_s: 600 }, timeout_ms: 3000 }, amina.token);
  const cmd = (await cmdSeen).body;
  assert.ok(command(cmd).ok, `cmd ${JSON.stringify(cmd)}: ${command(cmd).errors}`);
  const ack = { v: '1.0', id: cmd.id, name: cmd.name, ok: true, result: { level: 'debug', expires_at: cmd.ts + 600 }, ts: cmd.ts };
  assert.ok(payloadValidator(doc, 'ack')(ack).ok);
  await publish(pc, `devices/${pid}/ack`, JSON.stringify(ack));
  assert.equal((await answer).status, 200, 'the documented ack settles the command');

  // A broadcast: broadcast_start to the transmitter, the event to the leased player.
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const tc = await connectDevice(t, tx.credentials);
  assert.equal(await subscribeCode(tc, `devices/${tx.device.id}/cmd`), 1);
  assert.equal(await subscribeCode(pc, `mosques/${mosque.id}/broadcast`), 1);
  const txCmd = nextMessage(tc, `devices/${tx.device.id}/cmd`, 3000);
  const event = nextMessage(pc, `mosques/${mosque.id}/broadcast`, 3000);
  const started = await ts.http.post(`/api/v1/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'maghrib' }, owner.token);
  assert.equal(started.status, 201);
  const start = (await txCmd).body;
  assert.ok(command(start).ok, `broadcast_start ${JSON.stringify(start)}: ${command(start).errors}`);
  assert.deepEqual(start.args, { broadcast_id: started.body.id, kind: 'azaan', prayer: 'maghrib' });
  const broadcast = payloadValidator(doc, 'broadcast');
  const body = (await event).body;
  assert.ok(broadcast(body).ok, `broadcast ${JSON.stringify(body)}: ${broadcast(body).errors}`);
  assert.equal(body.action, 'start');
});
