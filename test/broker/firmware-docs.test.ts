import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import * as v from 'valibot';
import { COMMAND_NAMES, PAYLOAD_SCHEMAS, commandArgsSchemas, type PayloadName } from '../../broker/payloads.ts';
import { buildAsyncApi } from '../../broker/asyncapi.ts';
import { Credentials, LeaseKeys } from '../../api/responses.ts';
import { createAjv } from '../support/json-schema.ts';
import { projectPath } from '../../src/platform/config.ts';

/** docs/firmware.md: every ```json block names its schema after the language (```json playerStatus). */
const GUIDE = fs.readFileSync(projectPath('docs/firmware.md'), 'utf8');
const BLOCKS = [...GUIDE.matchAll(/```json ([\w-]+)\n([\s\S]*?)```/g)].map((m) => ({ name: m[1]!, text: m[2]! }));

const LeaseClaims = v.strictObject({ sub: v.string(), mosque_id: v.string(), iat: v.number(), exp: v.number(), jti: v.string() });
const OTHER_SCHEMAS: Record<string, v.GenericSchema> = {
  credentials: v.strictObject(Credentials.entries),
  'lease-keys': LeaseKeys,
  'lease-claims': LeaseClaims,
};
const isPayload = (name: string): name is PayloadName => name in PAYLOAD_SCHEMAS;

const examples = (name: string) => BLOCKS.filter((b) => b.name === name).map((b) => JSON.parse(b.text) as Record<string, any>);

test('every JSON block of the firmware guide names the schema it is an example of', () => {
  assert.ok(BLOCKS.length >= 30, `${BLOCKS.length} named blocks`);
  assert.equal((GUIDE.match(/```json\s*\n/g) ?? []).length, 0, 'no unnamed json block');
  for (const b of BLOCKS) assert.ok(isPayload(b.name) || b.name in OTHER_SCHEMAS, `unknown schema name ${b.name}`);
});

test('every example in the firmware guide is valid against the schema the broker validates with', () => {
  for (const b of BLOCKS) {
    const body = JSON.parse(b.text) as Record<string, any>;
    const schema = isPayload(b.name) ? PAYLOAD_SCHEMAS[b.name] : OTHER_SCHEMAS[b.name]!;
    const parsed = v.safeParse(schema, body);
    assert.ok(parsed.success, `${b.name} ${b.text.slice(0, 80)}: ${parsed.issues?.map((i) => `${i.path?.map((p) => p.key).join('.')} ${i.message}`).join('; ')}`);
    if (b.name === 'command' && body.name in commandArgsSchemas) {
      const args = v.safeParse(commandArgsSchemas[body.name as keyof typeof commandArgsSchemas], body.args);
      assert.ok(args.success, `args of ${body.name}`);
    }
  }
});

test('every example is also valid against the payload schema the AsyncAPI document publishes', () => {
  const doc = buildAsyncApi();
  const ajv = createAjv('draft-07');
  for (const b of BLOCKS.filter((x) => isPayload(x.name))) {
    const validate = ajv.compile(doc.components.messages[b.name as PayloadName].payload);
    assert.ok(validate(JSON.parse(b.text)), `${b.name}: ${ajv.errorsText(validate.errors)}`);
  }
});

test('the guide shows every message, every status a firmware author asks about, and every command with its ack', () => {
  for (const name of Object.keys(PAYLOAD_SCHEMAS)) assert.ok(examples(name).length > 0, `an example of ${name}`);
  const playerStates = new Set(examples('playerStatus').map((s) => s.status));
  for (const s of ['UNBOUND', 'ONLINE', 'PLAYING', 'MUTED']) assert.ok(playerStates.has(s), `a player ${s} status`);
  const txStates = new Set(examples('transmitterStatus').map((s) => s.status));
  for (const s of ['ONLINE', 'PLAYING', 'STREAM_ERROR', 'UPDATING', 'CONFIG_ERROR', 'OFFLINE']) assert.ok(txStates.has(s), `a transmitter ${s} status`);
  assert.equal(examples('playerStatus').find((s) => s.status === 'UNBOUND')!.detail.reason, 'awaiting_approval');

  const commands = examples('command');
  const acks = examples('ack');
  for (const name of COMMAND_NAMES) {
    const cmd = commands.find((c) => c.name === name);
    assert.ok(cmd, `a ${name} command`);
    assert.ok(acks.some((a) => a.id === cmd.id && a.name === name && a.ok === true), `an ack of ${name} copying its id and name`);
  }
  for (const ack of acks) {
    const cmd = commands.find((c) => c.id === ack.id);
    if (cmd) assert.equal(ack.name, cmd.name, 'an ack is named like its command');
  }
  assert.ok(acks.some((a) => a.ok === false && typeof a.error === 'string'), 'a failed ack');
});

test('the required heartbeat fields are the ones the guide marks: a heartbeat without status is refused', () => {
  assert.match(GUIDE, /\*Required:\* \*\*`v`, `status`, `ts`\*\*/);
  const heartbeat = examples('playerHeartbeat')[0]!;
  const { status: _dropped, ...withoutStatus } = heartbeat;
  assert.equal(v.safeParse(PAYLOAD_SCHEMAS.playerHeartbeat, withoutStatus).success, false);
  const ack = examples('ack')[0]!;
  const { id, ...renamed } = ack;
  assert.equal(v.safeParse(PAYLOAD_SCHEMAS.ack, { ...renamed, command_id: id }).success, false, 'an ack with command_id instead of id');
});

test("the example lease verifies offline against the example JWKS, as section 5 describes", () => {
  const config = examples('config').find((c) => c.lease)!;
  const [jwks] = examples('lease-keys');
  const [claims] = examples('lease-claims');
  const [credentials] = examples('credentials');
  const [header64, payload64, signature64] = (config.lease.token as string).split('.') as [string, string, string];
  const header = JSON.parse(Buffer.from(header64, 'base64url').toString('utf8'));
  assert.equal(header.alg, 'EdDSA');
  const jwk = jwks!.keys.find((k: { kid: string }) => k.kid === header.kid);
  assert.ok(jwk, 'the header names a key of the JWKS');
  const key = crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' });
  const signed = Buffer.from(`${header64}.${payload64}`, 'ascii');
  assert.equal(crypto.verify(null, signed, key, Buffer.from(signature64, 'base64url')), true);
  assert.equal(crypto.verify(null, Buffer.from(`${header64}.${payload64}x`), key, Buffer.from(signature64, 'base64url')), false, 'a changed payload fails');
  const payload = JSON.parse(Buffer.from(payload64, 'base64url').toString('utf8'));
  assert.deepEqual(payload, claims!);
  assert.equal(payload.exp, config.lease.expires_at);
  assert.equal(payload.sub, credentials!.client_id);
  assert.equal(payload.mosque_id, config.mosque_id);
});
