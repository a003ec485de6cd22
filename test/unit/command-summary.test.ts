import { test } from 'node:test';
import assert from 'node:assert/strict';
import { commandSummary } from '../../cli/support.ts';

/** The CLI's timeline names the command of every command_* event. */
const cases: Array<[string, unknown, Record<string, unknown> | null, string]> = [
  ['a sent command', 'command_sent', { command_id: 'c1', name: 'ping', args: {} }, 'ping'],
  ['an ack that succeeded, with its round trip', 'command_acked', { command_id: 'c1', name: 'ping', ok: true, rtt_ms: 12 }, 'ping ok 12 ms'],
  ['an ack that failed, without a round trip', 'command_acked', { command_id: 'c2', name: 'diag_bundle', ok: false }, 'diag_bundle failed'],
  ['a timeout', 'command_timeout', { command_id: 'c3', name: 'identify', timeout_ms: 3000 }, 'identify timed out'],
  ['a status event is not a command', 'status', { name: 'ping' }, ''],
  ['a command event without a name', 'command_sent', {}, ''],
  ['no detail at all', 'command_acked', null, ''],
];

for (const [name, kind, detail, expected] of cases) {
  test(`timeline command summary: ${name}`, () => assert.equal(commandSummary(kind, detail), expected));
}
