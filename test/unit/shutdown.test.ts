import { test } from 'node:test';
import assert from 'node:assert/strict';
import { silentLogger } from '../../src/platform/log.ts';
import { closeInOrder } from '../../src/platform/shutdown.ts';

test('a stop runs every closer in order past one that throws and one that hangs, then the finals, within the deadline', async () => {
  const calls: string[] = [];
  const started = performance.now();
  const outcome = await closeInOrder(
    [
      { name: 'throws', close: () => { calls.push('throws'); throw new Error('boom'); } },
      { name: 'rejects', close: async () => { calls.push('rejects'); throw new Error('later boom'); } },
      { name: 'hangs', close: () => { calls.push('hangs'); return new Promise(() => undefined); } },
      { name: 'after the deadline', close: () => void calls.push('after the deadline') },
    ],
    [
      { name: 'flush', close: () => void calls.push('flush') },
      { name: 'final that throws', close: () => { calls.push('final that throws'); throw new Error('close failed'); } },
      { name: 'db.close', close: () => void calls.push('db.close') },
    ],
    { deadlineMs: 300, logger: silentLogger },
  );
  const took = performance.now() - started;
  assert.deepEqual(calls, ['throws', 'rejects', 'hangs', 'after the deadline', 'flush', 'final that throws', 'db.close']);
  assert.deepEqual(outcome, { failed: ['throws', 'rejects', 'final that throws'], late: ['hangs'] });
  assert.ok(took >= 250 && took < 3000, `waited for the hanging part until the deadline only: ${Math.round(took)} ms`);
});
