import { test } from 'node:test';
import assert from 'node:assert/strict';
import { coalescedPass } from '../../src/platform/flow/coalesced-pass.ts';

// src/platform/flow/coalesced-pass.ts: the one-at-a-time pass the scheduler, the push outbox, the change log's
// catch-up and the device caches' reload share.

/** A pass whose runs end when the test says, each answering its run number. */
function gatedPass() {
  const gates: Array<() => void> = [];
  let runs = 0;
  let atOnce = 0;
  let most = 0;
  const pass = coalescedPass(async () => {
    const n = ++runs;
    most = Math.max(most, ++atOnce);
    await new Promise<void>((resolve) => gates.push(resolve));
    atOnce--;
    return n;
  });
  const open = async () => {
    while (gates.length === 0) await new Promise((r) => setImmediate(r));
    gates.shift()!();
  };
  return { pass, open, runs: () => runs, most: () => most };
}

test('asked three times while it runs, a pass runs once more after, never two at once, and every asker gets the last run', async () => {
  const p = gatedPass();
  const first = p.pass();
  const asked = [p.pass(), p.pass(), p.pass()];
  await p.open(); // the first run ends; one more follows for the three asks
  await p.open();
  assert.deepEqual(await Promise.all([first, ...asked]), [2, 2, 2, 2]);
  assert.equal(p.runs(), 2);
  assert.equal(p.most(), 1);
  // Idle again: the next ask starts a run of its own.
  const later = p.pass();
  await p.open();
  assert.equal(await later, 3);
});

test('a run that rejects ends the loop and rejects its askers; the next ask runs again', async () => {
  let calls = 0;
  const pass = coalescedPass(async () => {
    calls++;
    if (calls === 1) throw new Error('the store is away');
    return calls;
  });
  await assert.rejects(pass(), /the store is away/);
  assert.equal(await pass(), 2);
});
