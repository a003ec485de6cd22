import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API, member } from '../support/people.ts';
import { browserKeys } from '../support/push-service.ts';
import { createManualClock, startTestService } from '../support/service.ts';
import { assertError } from '../support/api.ts';

/**
 * docs/api.md, "Web Push, from a browser's side": GET /me/push-subscriptions answers the caller's own
 * subscriptions, the endpoint in full with when it was made, never the keys, and nobody else's.
 */

const PATH = `${API}/me/push-subscriptions`;

test("a person lists their own push subscriptions, oldest first, without the keys, and never another person's", async (t) => {
  const clock = createManualClock(Date.UTC(2026, 4, 1, 9, 0, 0));
  const ts = await startTestService(t, { clock, logLevel: 'warn' });
  const amina = await member(ts, 'amina@example.com');
  const bilal = await member(ts, 'bilal@example.com');
  const phone = { endpoint: 'https://push.example.test/amina-phone', ...browserKeys() };
  const laptop = { endpoint: 'https://push.example.test/amina-laptop', ...browserKeys() };
  const unsubscribe = (endpoint: string, token: string) => ts.http.request('DELETE', PATH, { body: { endpoint }, token });
  const his = { endpoint: 'https://push.example.test/bilal', ...browserKeys() };

  assert.deepEqual((await ts.http.get(PATH, amina.token)).body, []);
  // The body is what a browser's subscription.toJSON() gives: {endpoint, keys: {p256dh, auth}}.
  assert.equal((await ts.http.post(PATH, { endpoint: phone.endpoint, keys: phone.keys }, amina.token)).status, 201);
  clock.advance(60_000);
  assert.equal((await ts.http.post(PATH, { endpoint: laptop.endpoint, keys: laptop.keys }, amina.token)).status, 201);
  assert.equal((await ts.http.post(PATH, { endpoint: his.endpoint, keys: his.keys }, bilal.token)).status, 201);

  const mine = await ts.http.get(PATH, amina.token);
  assert.equal(mine.status, 200);
  assert.deepEqual(mine.body, [
    { endpoint: phone.endpoint, created_at: '2026-05-01T09:00:00.000Z' },
    { endpoint: laptop.endpoint, created_at: '2026-05-01T09:01:00.000Z' },
  ]);
  const raw = JSON.stringify(mine.body);
  for (const k of [phone.keys.p256dh, phone.keys.auth, laptop.keys.p256dh, laptop.keys.auth]) assert.ok(!raw.includes(k), 'no key is ever shown');
  assert.deepEqual((await ts.http.get(PATH, bilal.token)).body.map((s: { endpoint: string }) => s.endpoint), [his.endpoint]);

  // Removed with the DELETE the list's endpoint names; someone else's endpoint is not theirs to remove.
  assertError(await unsubscribe(his.endpoint, amina.token), 404, 'not_found');
  assert.equal((await unsubscribe(phone.endpoint, amina.token)).status, 204);
  assert.deepEqual((await ts.http.get(PATH, amina.token)).body.map((s: { endpoint: string }) => s.endpoint), [laptop.endpoint]);
  // A browser re-subscribing under another account moves the endpoint with it: it leaves the first list.
  assert.equal((await ts.http.post(PATH, { endpoint: laptop.endpoint, keys: laptop.keys }, bilal.token)).status, 201);
  assert.deepEqual((await ts.http.get(PATH, amina.token)).body, []);
  assert.deepEqual((await ts.http.get(PATH, bilal.token)).body.map((s: { endpoint: string }) => s.endpoint).sort(), [his.endpoint, laptop.endpoint].sort());
  assertError(await ts.http.get(PATH), 401, 'unauthorized');
});
