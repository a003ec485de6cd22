import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createDuties } from '../../src/platform/store/duties.ts';
import { createManualClock } from '../../src/platform/clock.ts';
import { postgresInstalled } from './postgres.ts';
import { testStore } from '../support/database.ts';

// docs/operator.md, "Several hosts": a periodic duty of the deployment (pruning a table) runs once per period across
// every node on the store, and a run whose node died is taken over by another node's next check.

const HOUR = 3_600_000;

for (const dialect of ['sqlite', 'postgres'] as const) {
  const skip = dialect === 'postgres' && !postgresInstalled() ? 'PostgreSQL 15 or newer is not installed (.ci/run installs it)' : false;

  test(`on ${dialect}: three nodes checking at once run a duty once per period; a new period runs it once more`, { skip, timeout: 60_000 }, async (t) => {
    const { store } = await testStore(t, dialect);
    const clock = createManualClock(Date.UTC(2026, 10, 26, 10, 0, 0));
    const runs: string[] = [];
    const errors: unknown[] = [];
    const nodes = ['a', 'b', 'c'].map((node) => {
      const duties = createDuties({ store, clock, node, onError: (_w, err) => void errors.push(err) });
      duties.add('prune', HOUR, async () => void runs.push(node));
      return duties;
    });
    await Promise.all(nodes.map((n) => n.check()));
    await Promise.all(nodes.map((n) => n.check()));
    assert.equal(runs.length, 1, `ran on ${runs.join(', ')}`);
    clock.advance(HOUR);
    await Promise.all(nodes.map((n) => n.check()));
    assert.equal(runs.length, 2, 'once in the next period');
    assert.deepEqual(errors, []);
  });

  test(`on ${dialect}: a node that dies mid-run loses its claim within 15 s and another node runs the duty; one that failed runs again`, { skip, timeout: 60_000 }, async (t) => {
    const { store } = await testStore(t, dialect);
    const clock = createManualClock(Date.UTC(2026, 10, 26, 10, 0, 0));
    const errors: unknown[] = [];
    const onError = (_w: string, err: unknown) => void errors.push(err);
    const dying = createDuties({ store, clock, node: 'dying', onError });
    let entered!: () => void;
    const inPass = new Promise<void>((resolve) => (entered = resolve));
    dying.add('prune', HOUR, () => {
      entered();
      return new Promise(() => {}); // never ends: the process died in the middle of it
    });
    void dying.check();
    await inPass;
    dying.stop();

    const runs: string[] = [];
    const live = createDuties({ store, clock, node: 'live', onError });
    let fail = true;
    live.add('prune', HOUR, async () => {
      runs.push('live');
      if (fail) throw new Error('the store refused the delete');
    });
    await live.check();
    assert.deepEqual(runs, [], 'the claim still holds');
    clock.advance(11_000); // past the claim's hold: the dead node renews nothing
    await live.check();
    assert.deepEqual(runs, ['live'], 'taken over');
    assert.equal(errors.length, 1, 'the failure is reported');
    fail = false;
    await live.check();
    assert.deepEqual(runs, ['live'], 'a failed run keeps its claim until it lapses');
    clock.advance(11_000);
    await live.check();
    await live.check();
    assert.deepEqual(runs, ['live', 'live'], 'then runs again, and once done, no more this period');
  });
}
