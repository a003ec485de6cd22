import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createBudgets, newBucket, spend, type Rate, type Verdict } from '../../broker/budgets.ts';
import { createFlapDetector } from '../../broker/flapping.ts';

// SECURITY.md, "Connection limits" and "Per-device budgets": the pure rules, with the time passed in.

const STATUS: Rate = { perSecond: 2, burst: 10 };
const FLOOD_WINDOW_MS = 30_000;

/** Spends one token per entry of `times` (ms) on a fresh bucket; returns the verdicts in order. */
function run(rate: Rate, times: number[], floodWindowMs = FLOOD_WINDOW_MS): Verdict[] {
  const bucket = newBucket(rate, times[0] ?? 0);
  return times.map((at) => spend(bucket, rate, at, floodWindowMs));
}

const count = (verdicts: Verdict[], v: Verdict) => verdicts.filter((x) => x === v).length;
/** `n` publishes spread evenly over [from, from + spanMs). */
const evenly = (n: number, from: number, spanMs: number) => Array.from({ length: n }, (_, i) => from + Math.floor((i * spanMs) / n));

test('token bucket: the burst passes at once, the rest of a burst is over budget, refill follows the rate', () => {
  const cases: Array<[string, Rate, number[], { ok: number; over: number }]> = [
    ['status: 10 at once pass', STATUS, Array(10).fill(0), { ok: 10, over: 0 }],
    ['status: the 11th at once is over', STATUS, Array(11).fill(0), { ok: 10, over: 1 }],
    ['status: 2,000 in 2 s leave the burst plus 2/s', STATUS, evenly(2000, 0, 2000), { ok: 13, over: 1987 }],
    ['status: one every 500 ms forever is within budget', STATUS, evenly(100, 0, 50_000), { ok: 100, over: 0 }],
    ['heartbeat: 5 at once, the 6th is over', { perSecond: 1, burst: 5 }, Array(6).fill(0), { ok: 5, over: 1 }],
    ['heartbeat: a 6th after a second passes again', { perSecond: 1, burst: 5 }, [0, 0, 0, 0, 0, 1000], { ok: 6, over: 0 }],
    ['heartbeat: a 6th after 999 ms is still over', { perSecond: 1, burst: 5 }, [0, 0, 0, 0, 0, 999], { ok: 5, over: 1 }],
    ['ack: 20 at once, then 10 a second', { perSecond: 10, burst: 20 }, [...Array(20).fill(0), ...evenly(10, 1000, 1000)], { ok: 30, over: 0 }],
    ['log: one a second', { perSecond: 1, burst: 1 }, [0, 500, 1000, 1999, 2000], { ok: 3, over: 2 }],
  ];
  for (const [what, rate, times, expected] of cases) {
    const verdicts = run(rate, times);
    assert.deepEqual({ ok: count(verdicts, 'ok'), over: count(verdicts, 'over') }, expected, what);
  }
});

test('token bucket: a clock set back neither refills nor drains the bucket', () => {
  const bucket = newBucket(STATUS, 10_000);
  for (let i = 0; i < 10; i++) assert.equal(spend(bucket, STATUS, 10_000, FLOOD_WINDOW_MS), 'ok');
  assert.equal(spend(bucket, STATUS, 5_000, FLOOD_WINDOW_MS), 'over');
  assert.equal(spend(bucket, STATUS, 5_500, FLOOD_WINDOW_MS), 'ok', 'refill resumes from the earlier time');
});

test('flood rule: more than 10x the rate every second for the whole window, and only then', () => {
  // 10x the status rate is 20 a second: 21 a second is flooding, 20 is not.
  const perSecond = (n: number, seconds: number, from = 0) => Array.from({ length: seconds }, (_, s) => evenly(n, from + s * 1000, 1000)).flat();
  const cases: Array<[string, number[], number, 'flood' | 'none', number?]> = [
    ['21/s for 31 s floods', perSecond(21, 31), FLOOD_WINDOW_MS, 'flood'],
    ['20/s for 60 s does not', perSecond(20, 60), FLOOD_WINDOW_MS, 'none'],
    ['21/s for 29 s does not (not yet the window)', perSecond(21, 29), FLOOD_WINDOW_MS, 'none'],
    ['1,000/s for 29.9 s does not: the window, not the volume', perSecond(1000, 30).slice(0, 29_900), FLOOD_WINDOW_MS, 'none'],
    ['21/s for 20 s, a silent second, 21/s for 20 s does not', [...perSecond(21, 20), ...perSecond(21, 20, 21_000)], FLOOD_WINDOW_MS, 'none'],
    ['21/s for 20 s, a calm second (5), 21/s for 20 s does not', [...perSecond(21, 20), ...evenly(5, 20_000, 1000), ...perSecond(21, 20, 21_000)], FLOOD_WINDOW_MS, 'none'],
    ['with a 2 s window: 21/s for 3 s floods', perSecond(21, 3), 2000, 'flood'],
    ['the first flood comes right after the window is full', perSecond(21, 31), FLOOD_WINDOW_MS, 'flood', 30 * 21],
  ];
  for (const [what, times, windowMs, expected, firstAt] of cases) {
    const verdicts = run(STATUS, times, windowMs);
    const first = verdicts.indexOf('flood');
    assert.equal(first >= 0 ? 'flood' : 'none', expected, what);
    if (firstAt !== undefined) assert.equal(first, firstAt, `${what}: the first publish of second 31`);
  }
});

test('budgets: each device and channel has its own bucket', () => {
  const budgets = createBudgets({ status: STATUS, heartbeat: { perSecond: 1, burst: 5 }, ack: { perSecond: 10, burst: 20 }, log: { perSecond: 1, burst: 1 }, broadcast: { perSecond: 1, burst: 5 } }, FLOOD_WINDOW_MS);
  for (let i = 0; i < 10; i++) assert.equal(budgets.spend('d1', 'status', 0), 'ok');
  assert.equal(budgets.spend('d1', 'status', 0), 'over');
  assert.equal(budgets.spend('d2', 'status', 0), 'ok', 'another device');
  assert.equal(budgets.spend('d1', 'heartbeat', 0), 'ok', 'another channel');
  assert.equal(budgets.spend('d1', 'status', 500), 'ok', 'one token back after 500 ms at 2/s');
});

test('flapping: the 16th CONNECT within a minute starts a 60 s ban; the count restarts after it', () => {
  const flap = createFlapDetector({ maxConnects: 15, windowMs: 60_000, banMs: 60_000 });
  for (let i = 0; i < 15; i++) assert.equal(flap.connect('d1', i * 1000), false, `connect ${i + 1}`);
  assert.equal(flap.isBanned('d1', 14_500), false);
  assert.equal(flap.connect('d1', 15_000), true, 'the 16th');
  assert.equal(flap.isBanned('d1', 15_000), true);
  assert.equal(flap.isBanned('d1', 74_999), true);
  assert.equal(flap.isBanned('d2', 20_000), false, 'another device');
  assert.equal(flap.isBanned('d1', 75_000), false, 'over after 60 s');
  assert.equal(flap.connect('d1', 75_000), false, 'a fresh count');
});

test('flapping: connects spread wider than the window never ban', () => {
  const flap = createFlapDetector({ maxConnects: 15, windowMs: 60_000, banMs: 60_000 });
  // One every 4.1 s: at most 15 within any 60 s.
  for (let i = 0; i < 100; i++) assert.equal(flap.connect('d1', i * 4100), false, `connect ${i + 1}`);
});

test('flapping: a ban for flooding is fresh once; a second one during it is not', () => {
  const flap = createFlapDetector({ maxConnects: 15, windowMs: 60_000, banMs: 60_000 });
  assert.equal(flap.ban('d1', 0), true);
  assert.equal(flap.ban('d1', 1000), false, 'already banned: noted once');
  assert.equal(flap.isBanned('d1', 59_999), true);
  assert.equal(flap.isBanned('d1', 60_000), false);
  assert.equal(flap.ban('d1', 60_000), true);
});
