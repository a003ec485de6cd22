import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as v from 'valibot';
import * as checks from '../../generated/payload-checks.ts';
import { COMPILED_PAYLOADS, PAYLOAD_SCHEMAS, parsePayload } from '../../broker/payloads.ts';
import { STATUSES } from '../../src/devices/device-config.ts';
import { PAYLOAD_CHECKS_FILE, generatedPayloadChecks } from '../../scripts/payload-checks.ts';

/**
 * The generated checks (generated/payload-checks.ts) against valibot, the schema of record, over a corpus made
 * from the schemas themselves: every field valid, missing, of each wrong type, on and past its bounds, too
 * long in UTF-16 units but not in code points, extra and prototype-named keys, non-object JSON, not JSON;
 * then random mixes. valibot decides what is valid; the tests only ask that both sides agree.
 */

type Name = (typeof COMPILED_PAYLOADS)[number];
type Schema = v.GenericSchema & { type: string; wrapped?: Schema; pipe?: { type: string; requirement?: unknown }[]; options?: string[]; literal?: unknown };

const TS = 1_763_856_000;
/** One accepted payload per schema, every optional field present. */
const FULL: Record<Name, Record<string, unknown>> = {
  transmitterStatus: { v: '1.0', status: 'ONLINE', prev: 'CONNECTING', reason: 'boot', fw: 'tx/1.2.0', mac: '02:00:00:00:00:01', ssid: 'Masjid', ip: '10.0.0.2', rssi: -61, temp_c: 41.5, uptime_s: 120, config_version: 3, detail: { reason: 'x' }, ts: TS },
  playerStatus: { v: '1.0', status: 'MUTED', prev: 'PLAYING', reason: 'user', fw: 'sp/1.0.0', mac: '02:00:00:00:00:02', ssid: 'Home', ip: '10.0.0.3', rssi: -70, uptime_s: 60, config_version: 1, detail: { reason: 'quiet_hours' }, ts: TS },
  transmitterHeartbeat: { v: '1.0', status: 'PLAYING', rssi: -50, ip: '10.0.0.2', uptime_s: 99, free_heap: 151_000, volume: 80, config_version: 3, ts: TS },
  playerHeartbeat: { v: '1.0', status: 'UNBOUND', rssi: -80, ip: '10.0.0.3', uptime_s: 5, free_heap: 20_000, volume: 0, config_version: 1, ts: TS },
  log: { v: '1.0', level: 'warn', msg: 'wifi weak', ts: TS },
  ack: { v: '1.0', id: 'c-1', name: 'ping', ok: true, result: { pong: 1 }, error: null, ts: TS },
};

const json = (text: string) => JSON.parse(text) as unknown;
const WRONG_TYPES: unknown[] = [null, true, false, 0, -1, 1.5, '', 'x', '1', [], [1], {}, { a: 1 }];
const ALL_STATUSES = [...new Set([...STATUSES.transmitter, ...STATUSES.stream_player])];
/** Shapes valibot's record takes that the check leaves to it (arrays; keys valibot skips), and plain ones. */
const RECORDS: unknown[] = [
  {}, { reason: 'x' }, { n: 1, nested: { a: [1, null] } }, [], [1, 2], json('{"__proto__":{"a":1},"x":1}'), json('{"constructor":1}'), json('{"prototype":{}}'),
];

const requirementOf = (s: Schema, type: string) => s.pipe?.find((a) => a.type === type)?.requirement as number | undefined;

/** The values worth trying for one field, read from its schema: its bounds and one step past them. */
function candidates(entry: Schema): unknown[] {
  const s = entry.type === 'optional' ? entry.wrapped! : entry;
  const out: unknown[] = [...WRONG_TYPES];
  if (s.type === 'literal') out.push(s.literal, '1.00', '1', 1);
  if (s.type === 'picklist') out.push(...s.options!, s.options![0]!.toLowerCase(), ` ${s.options![0]}`, ...ALL_STATUSES);
  if (s.type === 'record') out.push(...RECORDS);
  if (s.type === 'string') {
    const max = requirementOf(s, 'max_length');
    if (max === undefined) out.push('x'.repeat(600), '😀', '\ud800');
    else {
      // An emoji is 2 UTF-16 units and 1 code point: valibot counts units.
      out.push('x'.repeat(max), 'x'.repeat(max + 1), '😀'.repeat(max / 2), `${'😀'.repeat(max / 2)}x`, '😀'.repeat(max / 2 + 1), '\ud800'.repeat(max));
    }
  }
  if (s.type === 'number') {
    const min = requirementOf(s, 'min_value') ?? -1e6;
    const max = requirementOf(s, 'max_value') ?? Number.MAX_SAFE_INTEGER;
    out.push(min, max, min - 1, max + 1, min + 0.5, max - 0.5, -0, 1e400, -1e400, 2 ** 53, 2 ** 53 - 1, -(2 ** 53));
  }
  return out;
}

const entriesOf = (name: Name) => (PAYLOAD_SCHEMAS[name] as unknown as { entries: Record<string, Schema> }).entries;
const without = (o: Record<string, unknown>, key: string) => Object.fromEntries(Object.entries(o).filter(([k]) => k !== key));

/** Seeded, so a failure names a payload that can be run again. */
function random(seed: number) {
  let x = seed;
  return (n: number) => {
    x = (Math.imul(x, 1_103_515_245) + 12_345) >>> 0;
    return x % n;
  };
}

function corpus(name: Name): string[] {
  const full = FULL[name];
  const entries = entriesOf(name);
  const required = Object.fromEntries(Object.entries(full).filter(([k]) => entries[k]!.type !== 'optional'));
  const out = [full, required].map((o) => JSON.stringify(o));
  for (const [key, entry] of Object.entries(entries)) {
    out.push(JSON.stringify(without(full, key)), JSON.stringify(without(required, key)));
    for (const value of candidates(entry)) out.push(JSON.stringify({ ...full, [key]: value }), JSON.stringify({ ...required, [key]: value }));
  }
  // Unknown keys, prototype-named ones included (JSON.parse makes them own properties).
  const body = JSON.stringify(full).slice(1, -1);
  for (const extra of ['"extra":1', '"__proto__":{"v":"2"}', '"constructor":{}', '"toString":1', '"hasOwnProperty":null', '"detail2":[]']) out.push(`{${extra},${body}}`, `{${body},${extra}}`);
  // The same number written as JSON writes it differently; a duplicate key (the last one counts).
  out.push(`{${body},"ts":${TS}.0}`, `{${body},"ts":1.763856e9}`, `{${body},"ts":-0}`, `{${body},"ts":1e400}`, `{${body},"v":"2.0","v":"1.0"}`, `{${body},"v":"1.0","v":1}`);
  out.push('null', 'true', '1', '"x"', '[]', `[${JSON.stringify(full)}]`, '{}', '', '{', 'nul', `\ufeff${JSON.stringify(full)}`, ` \n${JSON.stringify(full)}\n `);
  const pick = random(name.length * 7919);
  const keys = Object.keys(entries);
  for (let i = 0; i < 400; i++) {
    const o: Record<string, unknown> = {};
    for (const key of keys) {
      const roll = pick(4);
      if (roll === 0) continue;
      const c = candidates(entries[key]!);
      o[key] = roll === 1 ? c[pick(c.length)] : full[key];
    }
    out.push(JSON.stringify(o));
  }
  return out;
}

/** A case valibot accepts and the check leaves to it by design: a record that is an array or carries a key valibot skips. */
function leftToValibot(text: string): boolean {
  const detail = (JSON.parse(text) as { detail?: unknown }).detail;
  return Array.isArray(detail) || (typeof detail === 'object' && detail !== null && ['__proto__', 'prototype', 'constructor'].some((k) => Object.hasOwn(detail, k)));
}

test('generated/payload-checks.ts is what npm run docs generates from the valibot schemas', () => {
  assert.equal(fs.readFileSync(PAYLOAD_CHECKS_FILE, 'utf8'), generatedPayloadChecks(), 'run npm run docs');
});

for (const name of COMPILED_PAYLOADS) {
  test(`the compiled ${name} check and valibot agree on accept or reject and on the value handed on, over the corpus`, () => {
    const check = checks[name] as (data: unknown) => boolean;
    const texts = corpus(name);
    let accepted = 0;
    let left = 0;
    const rejectedFields = new Set<string>();
    for (const text of texts) {
      const payload = Buffer.from(text, 'utf8');
      const reference = parsePayload(name, payload, false);
      // What the broker does: the check first, valibot for the rest. Same verdict, value and reason.
      assert.deepStrictEqual(parsePayload(name, payload), reference, text);
      if (!reference.ok) {
        rejectedFields.add(reference.reason);
        if (reference.reason !== 'not_json') assert.equal(check(JSON.parse(text)), false, `the check accepts what valibot rejects: ${text}`);
        continue;
      }
      accepted++;
      if (check(JSON.parse(text))) continue;
      assert.ok(leftToValibot(text), `the check rejects what valibot accepts: ${text}`);
      left++;
    }
    assert.ok(accepted >= 50 && texts.length - accepted >= 100, `${accepted} of ${texts.length} accepted`);
    // Every field the schema can refuse was refused somewhere in the corpus, so each rule was exercised.
    const refusable = Object.entries(entriesOf(name)).filter(([, s]) => (s.type === 'optional' ? s.wrapped! : s).type !== 'unknown').map(([k]) => `invalid ${k}`);
    assert.deepEqual(refusable.filter((r) => !rejectedFields.has(r)), []);
    assert.ok(rejectedFields.has('not_json') && rejectedFields.has('invalid payload'));
    if ('detail' in entriesOf(name)) assert.ok(left > 0, 'arrays and skipped keys in detail went to valibot');
  });
}

test('a value the check accepts is the parsed JSON without the keys valibot leaves out', () => {
  const text = `{"extra":1,${JSON.stringify(FULL.playerStatus).slice(1, -1)},"__proto__":{"v":"2"}}`;
  const parsed = parsePayload('playerStatus', Buffer.from(text));
  assert.ok(parsed.ok);
  assert.deepStrictEqual(parsed.value, FULL.playerStatus);
  assert.deepStrictEqual(Object.keys(parsed.value as object).sort(), Object.keys(FULL.playerStatus).sort());
});

test('a status of the other kind, or a player sending temp_c, is refused with valibot reason', () => {
  const muted = Buffer.from(JSON.stringify({ ...FULL.transmitterStatus, status: 'MUTED' }));
  assert.deepStrictEqual(parsePayload('transmitterStatus', muted), { ok: false, reason: 'invalid status' });
  const warm = Buffer.from(JSON.stringify({ ...FULL.playerStatus, temp_c: 20 }));
  assert.deepStrictEqual(parsePayload('playerStatus', warm), { ok: false, reason: 'invalid temp_c' });
  const long = Buffer.from(JSON.stringify({ ...FULL.playerHeartbeat, ip: `${'😀'.repeat(32)}x` }));
  assert.deepStrictEqual(parsePayload('playerHeartbeat', long), { ok: false, reason: 'invalid ip' });
});
