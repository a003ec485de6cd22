import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_STREAMS_PER_USER } from '../../api/mosques/events.ts';
import { SimDevice } from '../../simulator/device.ts';
import { AUTH, emailId, sent } from '../support/api.ts';
import { createMosque, makeAdmin, member, signInSuperadmin, type Person } from '../support/people.ts';
import { mosqueWithOwner } from '../support/devices.ts';
import { createManualClock, sha256, startTestService, type TestService } from '../support/service.ts';

const V1 = '/api/v1';

/** An open event stream read as it arrives: every `event:`/`data:` block parsed, plus whether it ended. */
async function openStream(ts: TestService, mosqueId: string, ticket: string) {
  const controller = new AbortController();
  const res = await fetch(`${ts.url}${V1}/mosques/${mosqueId}/events/stream?ticket=${encodeURIComponent(ticket)}`, { signal: controller.signal });
  const events: Array<{ event: string; data: any }> = [];
  let raw = '';
  let ended = false;
  const waiters = new Set<() => void>();
  const wake = () => waiters.forEach((w) => w());
  if (res.status === 200) {
    void (async () => {
      const decoder = new TextDecoder();
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          raw += decoder.decode(chunk, { stream: true });
          let cut;
          while ((cut = raw.indexOf('\n\n')) >= 0) {
            const block = raw.slice(0, cut);
            raw = raw.slice(cut + 2);
            const event = /^event: (.+)$/m.exec(block)?.[1];
            const data = /^data: (.+)$/m.exec(block)?.[1];
            if (event && data) events.push({ event, data: JSON.parse(data) });
          }
          wake();
        }
      } catch { /* aborted */ }
      ended = true;
      wake();
    })();
  }
  const until = (check: () => boolean, what: string, ms = 20_000) => new Promise<void>((resolve, reject) => {
    if (check()) return resolve();
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}; events: ${JSON.stringify(events)}`)), ms);
    const w = () => {
      if (!check()) return;
      clearTimeout(timer);
      waiters.delete(w);
      resolve();
    };
    waiters.add(w);
  });
  return { res, events, until, ended: () => ended, close: () => controller.abort() };
}

async function ticketFor(ts: TestService, mosqueId: string, person: { token: string }) {
  const r = await ts.http.post(`${V1}/mosques/${mosqueId}/events/ticket`, undefined, person.token);
  return r;
}

async function world(t: TestContext) {
  const ts = await startTestService(t, { logLevel: 'warn' });
  return { ts, ...(await mosqueWithOwner(ts, {}, 'owner@stream.test')) };
}

test('an admin hears device status changes and broadcast start and stop of their mosque over the stream', async (t) => {
  const { ts, owner, mosque } = await world(t);
  const ticket = await ticketFor(ts, mosque.id, owner);
  assert.equal(ticket.status, 201);
  assert.equal(ticket.body.expires_in, 30);
  const stream = await openStream(ts, mosque.id, ticket.body.ticket);
  t.after(() => stream.close());
  assert.equal(stream.res.status, 200);
  assert.match(stream.res.headers.get('content-type') ?? '', /text\/event-stream/);

  const reg = await ts.http.post(`${V1}/mosques/${mosque.id}/devices`, { kind: 'transmitter', name: 'Minbar' }, owner.token);
  const sim = new SimDevice({ kind: 'transmitter', id: reg.body.device.id, password: reg.body.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 10_000 });
  await sim.start();
  t.after(() => sim.stop().catch(() => {}));
  await stream.until(() => stream.events.some((e) => e.event === 'device_status' && e.data.device_id === reg.body.device.id), 'a device_status event');

  const started = await ts.http.post(`${V1}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, owner.token);
  assert.equal(started.status, 201);
  await ts.http.post(`${V1}/mosques/${mosque.id}/broadcasts/${started.body.id}/stop`, undefined, owner.token);
  await stream.until(() => stream.events.filter((e) => e.event === 'broadcast').length >= 2, 'broadcast start and stop');
  const actions = stream.events.filter((e) => e.event === 'broadcast').map((e) => [e.data.broadcast_id, e.data.action]);
  assert.deepEqual(actions, [[started.body.id, 'start'], [started.body.id, 'stop']]);
  await sim.stop(); // while the service still runs (the after hooks close the service first)
});

test('another mosque\'s events never reach the stream', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const other = await createMosque(ts, root.token, await member(ts, 'other@stream.test'), { name: 'Other' });
  const stream = await openStream(ts, mosque.id, (await ticketFor(ts, mosque.id, owner)).body.ticket);
  t.after(() => stream.close());
  await ts.http.post(`${V1}/mosques/${other.id}/broadcasts`, { kind: 'azaan' }, root.token);
  const mine = await ts.http.post(`${V1}/mosques/${mosque.id}/broadcasts`, { kind: 'waaz' }, owner.token);
  await stream.until(() => stream.events.length > 0, 'an event');
  assert.deepEqual(stream.events.map((e) => e.data.broadcast_id), [mine.body.id]);
});

test('a ticket opens one stream of its own mosque only, and a bearer token alone opens none', async (t) => {
  const { ts, root, owner, mosque } = await world(t);
  const other = await createMosque(ts, root.token, null, { name: 'Other' });
  const { ticket } = (await ticketFor(ts, mosque.id, owner)).body;
  const wrongMosque = await fetch(`${ts.url}${V1}/mosques/${other.id}/events/stream?ticket=${ticket}`);
  assert.equal(wrongMosque.status, 401);
  assert.equal((await wrongMosque.json() as any).error.code, 'unauthorized');
  const reused = await fetch(`${ts.url}${V1}/mosques/${mosque.id}/events/stream?ticket=${ticket}`);
  assert.equal(reused.status, 401, 'the ticket was spent by the first try, even a refused one');
  const bearer = await fetch(`${ts.url}${V1}/mosques/${mosque.id}/events/stream`, { headers: { authorization: `Bearer ${owner.token}` } });
  assert.equal(bearer.status, 401);
});

test('a member who is not an admin gets no ticket', async (t) => {
  const { ts, mosque } = await world(t);
  const joiner = await member(ts, 'joiner@stream.test');
  await ts.http.post(`${V1}/mosques/${mosque.id}/join`, undefined, joiner.token);
  const r = await ticketFor(ts, mosque.id, joiner);
  assert.equal(r.status, 403);
  assert.equal(r.body.error.code, 'forbidden');
});

test(`a user holds at most ${MAX_STREAMS_PER_USER} open streams; the next answers 429, and a closed one frees its slot`, async (t) => {
  const { ts, owner, mosque } = await world(t);
  const open = [];
  for (let i = 0; i < MAX_STREAMS_PER_USER; i++) {
    const s = await openStream(ts, mosque.id, (await ticketFor(ts, mosque.id, owner)).body.ticket);
    t.after(() => s.close());
    assert.equal(s.res.status, 200);
    open.push(s);
  }
  const over = await fetch(`${ts.url}${V1}/mosques/${mosque.id}/events/stream?ticket=${(await ticketFor(ts, mosque.id, owner)).body.ticket}`);
  assert.equal(over.status, 429);
  assert.ok(over.headers.get('retry-after'));
  assert.equal((await over.json() as any).error.code, 'rate_limited');

  // The browser goes away: its slot comes back (a leaked slot would lock the admin out).
  open[0]!.close();
  const deadline = Date.now() + 20_000;
  let status = 0;
  while (Date.now() < deadline) {
    const again = await openStream(ts, mosque.id, (await ticketFor(ts, mosque.id, owner)).body.ticket);
    t.after(() => again.close());
    status = again.res.status;
    if (status === 200) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.equal(status, 200);
});

async function resetPassword(ts: TestService, person: Person) {
  const before = (await sent(ts, 'password_reset')).length;
  await ts.http.post(`${AUTH}/forgot-password`, { identifier_hash: emailId(person.email) });
  const token = (await sent(ts, 'password_reset')).slice(before).at(-1)!.token!;
  const r = await ts.http.post(`${AUTH}/reset-password`, { token, password_hash: sha256('a brand new password') });
  assert.equal(r.status, 200);
}

test('the stream closes when its token is revoked by a password reset', async (t) => {
  const { ts, owner, mosque } = await world(t);
  const stream = await openStream(ts, mosque.id, (await ticketFor(ts, mosque.id, owner)).body.ticket);
  t.after(() => stream.close());
  assert.equal(stream.res.status, 200);
  await resetPassword(ts, owner);
  await stream.until(() => stream.ended(), 'the stream to close', 30_000);
});

test('the stream closes when the admin loses their admin row', async (t) => {
  const { ts, root, mosque } = await world(t);
  const helper = await member(ts, 'helper@stream.test');
  await makeAdmin(ts, root.token, mosque.id, helper);
  const stream = await openStream(ts, mosque.id, (await ticketFor(ts, mosque.id, helper)).body.ticket);
  t.after(() => stream.close());
  assert.equal(stream.res.status, 200);
  const removed = await ts.http.delete(`${V1}/mosques/${mosque.id}/admins/${helper.id}`, root.token);
  assert.equal(removed.status, 204);
  await stream.until(() => stream.ended(), 'the stream to close', 30_000);
});

test('an admin hears a schedule slot change status over the stream, and another mosque hears nothing of it', async (t) => {
  // Wednesday 10 June 2026, London: Dhuhr's azaan fixed at 13:00 BST = 12:00 UTC; ready check at 11:50 UTC.
  const clock = createManualClock(Date.parse('2026-06-10T11:40:00Z'));
  const ts = await startTestService(t, { logLevel: 'warn', clock });
  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@schedule-stream.test');
  const schedule = { timezone: 'Europe/London', latitude: 51.5072, longitude: -0.1276, prayer_times: { method: 'muslim_world_league', madhab: 'shafi' }, azaan: { dhuhr: { fixed: '13:00' } } };
  const mosque = await createMosque(ts, root.token, owner, schedule);
  const other = await createMosque(ts, root.token, await member(ts, 'other@schedule-stream.test'), { ...schedule, azaan: { dhuhr: { fixed: '14:00' } } });
  const mine = await openStream(ts, mosque.id, (await ticketFor(ts, mosque.id, owner)).body.ticket);
  const theirs = await openStream(ts, other.id, (await ticketFor(ts, other.id, root)).body.ticket);
  t.after(() => { mine.close(); theirs.close(); });

  clock.set(Date.parse('2026-06-10T11:50:00Z'));
  await ts.service.schedule.runDue();
  await mine.until(() => mine.events.some((e) => e.event === 'schedule'), 'the schedule event');
  const event = mine.events.find((e) => e.event === 'schedule')!.data;
  assert.deepEqual({ ...event, at: undefined }, { type: 'schedule', date: '2026-06-10', prayer: 'dhuhr', index: 0, status: 'not_ready', at: undefined });
  assert.equal(event.at, '2026-06-10T11:50:00.000Z');
  assert.deepEqual(theirs.events.filter((e) => e.event === 'schedule'), [], "the other mosque's ready check is an hour later");
});
