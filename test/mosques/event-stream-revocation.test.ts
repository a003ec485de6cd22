import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RECHECK_MS } from '../../api/mosques/events.ts';
import { makeAdmin, member, type Person } from '../support/people.ts';
import { mosqueWithOwner } from '../support/devices.ts';
import { sha256, startTestService, type TestService } from '../support/service.ts';

// docs/api.md "Live events of a mosque": a stream ends as soon as its admin loses the right to it, through the
// change feed, well before the RECHECK_MS poll (5 s) that stays as the safety net. Only admins (and
// superadmins) get a ticket (test/console/events-stream.test.ts), so a member's removal or ban has no stream to end.

const V1 = '/api/v1';
const WITHIN_MS = 1000;

/** Opens an event stream of `mosqueId` as `person`; `ended` resolves with the time its body ends. */
async function openEventStream(ts: TestService, mosqueId: string, person: Pick<Person, 'token'>) {
  const ticket = await ts.http.post(`${V1}/mosques/${mosqueId}/events/ticket`, undefined, person.token);
  assert.equal(ticket.status, 201, JSON.stringify(ticket.body));
  const controller = new AbortController();
  const res = await fetch(`${ts.url}${V1}/mosques/${mosqueId}/events/stream?ticket=${ticket.body.ticket}`, { signal: controller.signal });
  assert.equal(res.status, 200);
  let open = true;
  const ended = (async () => {
    try {
      for await (const _ of res.body as unknown as AsyncIterable<Uint8Array>) { /* heartbeats */ }
    } catch { /* aborted by the test */ }
    open = false;
    return performance.now();
  })();
  return { ended, isOpen: () => open, close: () => controller.abort() };
}

/** Milliseconds from the end of `act` to the stream's end; fails past `limitMs`. */
async function endsWithin(stream: { ended: Promise<number> }, act: () => Promise<unknown>, limitMs: number): Promise<number> {
  await act();
  const acted = performance.now();
  const timeout = new Promise<number>((_, reject) => setTimeout(() => reject(new Error(`the stream was still open ${limitMs} ms later`)), limitMs).unref());
  return (await Promise.race([stream.ended, timeout])) - acted;
}

test(`an admin removed from the mosque loses their open stream within ${WITHIN_MS} ms; another admin's stays open`, async (t) => {
  assert.ok(RECHECK_MS > 2 * WITHIN_MS, 'the poll alone could not explain it');
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts, {}, 'owner@revoke.test');
  const helper = await member(ts, 'helper@revoke.test');
  await makeAdmin(ts, root.token, mosque.id, helper);
  const helperStream = await openEventStream(ts, mosque.id, helper);
  const ownerStream = await openEventStream(ts, mosque.id, owner);
  t.after(() => { helperStream.close(); ownerStream.close(); });

  const took = await endsWithin(helperStream, async () => {
    const removed = await ts.http.delete(`${V1}/mosques/${mosque.id}/admins/${helper.id}`, root.token);
    assert.equal(removed.status, 204);
  }, WITHIN_MS);
  assert.ok(took < WITHIN_MS, `ended after ${took} ms`);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(ownerStream.isOpen(), true, "the owner's stream is not touched");
});

test(`a stream ends within ${WITHIN_MS} ms of its token being signed out, or of logout-all`, async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, {}, 'owner@logout-stream.test');
  const first = await openEventStream(ts, mosque.id, owner);
  t.after(() => first.close());
  const took = await endsWithin(first, () => ts.http.post(`${V1}/auth/logout`, undefined, owner.token), WITHIN_MS);
  assert.ok(took < WITHIN_MS, `ended after ${took} ms`);

  const relogin = await ts.http.post(`${V1}/auth/login`, { identifier_hash: sha256(owner.email), password_hash: sha256('correct horse battery staple') });
  assert.equal(relogin.status, 200);
  const again = await openEventStream(ts, mosque.id, { token: relogin.body.access_token });
  t.after(() => again.close());
  const tookAll = await endsWithin(again, () => ts.http.post(`${V1}/auth/logout-all`, undefined, relogin.body.access_token), WITHIN_MS);
  assert.ok(tookAll < WITHIN_MS, `ended after ${tookAll} ms`);
});
