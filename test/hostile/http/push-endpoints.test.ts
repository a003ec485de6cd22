import http from 'node:http';
import type net from 'node:net';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { PushNetwork } from '../../../notify/webpush.ts';
import { API, joinMosque, member, setStatus, type Person } from '../../support/people.ts';
import { createManualClock, startTestService, type TestService } from '../../support/service.ts';
import { mosqueWithOwner, settle, waitFor } from '../../support/devices.ts';
import { deliveringTo, PUSH_TEST_CERT, resolveToLoopback, startPushService } from '../../support/push-service.ts';

// docs/decisions.md, "Push endpoints": a push subscription must not make the server POST into its own network (SSRF), neither
// by the URL it names nor by what that name resolves to at send time; a user's subscriptions are bounded,
// and slow or dead push services cannot hold back a new broadcast's pushes.

const KEYS = { p256dh: 'BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM', auth: 'tBHItJI5svbpez7KI4CCXg' };
const TOGGLES_OFF = { notify_azaan: false, notify_jummah: false, notify_waaz: false, notify_announcement: false };

async function world(t: TestContext, opts: { pushNetwork?: PushNetwork; env?: Record<string, string>; clock?: ReturnType<typeof createManualClock> } = {}) {
  const ts = await startTestService(t, { logLevel: 'warn', ...opts });
  const { owner, mosque } = await mosqueWithOwner(ts);
  return { ts, owner, mosque };
}
type World = Awaited<ReturnType<typeof world>>;

/** An approved member of the mosque who wants pushes of `kinds` only. */
async function listener(w: World, email: string, kinds: Array<keyof typeof TOGGLES_OFF> = ['notify_announcement']): Promise<Person> {
  const person = await member(w.ts, email);
  const m = await joinMosque(w.ts, person, w.mosque.id);
  await setStatus(w.ts, w.owner.token, m.id, 'approved');
  const toggles = { ...TOGGLES_OFF, ...Object.fromEntries(kinds.map((k) => [k, true])) };
  assert.equal((await w.ts.http.patch(`${API}/memberships/${m.id}`, toggles, person.token)).status, 200);
  return person;
}

const subscribe = (ts: TestService, person: Person, endpoint: string) => ts.http.post(`${API}/me/push-subscriptions`, { endpoint, keys: KEYS }, person.token);

async function broadcast(w: World, kind = 'announcement') {
  const res = await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts`, { kind, ...(kind === 'azaan' && { prayer: 'asr' }) }, w.owner.token);
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id as string;
}
const stop = async (w: World, id: string) => assert.equal((await w.ts.http.post(`${API}/mosques/${w.mosque.id}/broadcasts/${id}/stop`, {}, w.owner.token)).status, 200);
const pushReport = async (w: World, id: string) => (await w.ts.http.get(`${API}/mosques/${w.mosque.id}/broadcasts/${id}`, w.owner.token)).body.report.push as { queued: number; sent: number; failed: number };

/** A plain http server on 127.0.0.1 that counts every connection made to it. */
async function loopbackTarget(t: TestContext) {
  let hits = 0;
  const server = http.createServer((_req, res) => res.end('ok'));
  server.on('connection', () => hits++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  t.after(() => new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  }));
  return { port: (server.address() as net.AddressInfo).port, hits: () => hits };
}

test('subscribing with an endpoint on the server\'s own network is 400 validation_failed naming the endpoint, and no broadcast reaches it', async (t) => {
  const target = await loopbackTarget(t);
  const w = await world(t);
  const mallory = await listener(w, 'mallory@example.com');
  const refused = [
    'https://127.0.0.1/x', 'https://10.1.2.3/x', `http://127.0.0.1:${target.port}/`, `https://127.0.0.1:${target.port}/`,
    'https://2130706433/x', 'https://0x7f.1/x', 'https://017700000001/x', 'https://[::1]/x', 'https://[::ffff:127.0.0.1]/x',
    'https://[fd00::1]/x', 'https://[fe80::1]/x', 'https://100.64.0.1/x', 'https://169.254.169.254/latest/meta-data/',
    'https://224.0.0.1/x', 'https://0.0.0.0/x', 'https://localhost/x', 'https://push.localhost/x', 'https://printer.local/x',
    'https://metadata.google.internal/x', 'https://intranet/x', 'https://user:secret@push.example.com/x', 'https://push.example.com:8443/x',
  ];
  for (const endpoint of refused) {
    const res = await subscribe(w.ts, mallory, endpoint);
    assert.equal(res.status, 400, `${endpoint}: ${res.status}`);
    assert.equal(res.body.error.code, 'validation_failed', endpoint);
    assert.equal(res.body.error.details[0].path, 'endpoint', endpoint);
    assert.doesNotMatch(res.body.error.details[0].message, /127|10\.1|secret/, 'the message does not echo the URL');
  }
  const id = await broadcast(w);
  await settle(1500); // the outbox drains every second
  assert.deepEqual(await pushReport(w, id), { queued: 0, sent: 0, failed: 0 });
  assert.equal(target.hits(), 0, 'nothing connected to the loopback server');
});

test('a push host that resolves to 127.0.0.1 at send time is refused: the https server there receives nothing, and the delivery fails without retry', async (t) => {
  const push = await startPushService(t);
  // The rebinding attacker's DNS: the name passed the URL rule when subscribing, then points at loopback.
  const w = await world(t, { pushNetwork: { resolve: resolveToLoopback, port: push.port, ca: PUSH_TEST_CERT } });
  const mallory = await listener(w, 'mallory@example.com');
  assert.equal((await subscribe(w.ts, mallory, 'https://rebind.example.com/push/x')).status, 201);
  const id = await broadcast(w);
  await waitFor('the delivery settled', async () => (await pushReport(w, id)).failed === 1, 4000);
  assert.deepEqual(await pushReport(w, id), { queued: 0, sent: 0, failed: 1 }, 'failed at once, not queued for a retry');
  await settle(300);
  assert.equal(push.connections(), 0, 'no connection reached the server on 127.0.0.1');
  assert.equal(push.received.length, 0);
});

test('the same set-up with 127.0.0.1 let through does deliver (so the refusal above is the address rule\'s doing)', async (t) => {
  const push = await startPushService(t);
  const w = await world(t, { pushNetwork: deliveringTo(push) });
  const amina = await listener(w, 'amina@example.com');
  assert.equal((await subscribe(w.ts, amina, 'https://rebind.example.com/push/x')).status, 201);
  const id = await broadcast(w);
  await waitFor('the push arrived', () => push.to('/push/x').length === 1, 4000);
  await waitFor('the delivery settled', async () => (await pushReport(w, id)).sent === 1, 2000);
});

test('a user holds at most 10 subscriptions: the 11th is 409 conflict, re-subscribing one of the 10 still works, and after removing one the next fits', async (t) => {
  const w = await world(t);
  const amina = await member(w.ts, 'amina@example.com');
  for (let i = 0; i < 10; i++) assert.equal((await subscribe(w.ts, amina, `https://push.example.com/amina/${i}`)).status, 201, `subscription ${i}`);
  const eleventh = await subscribe(w.ts, amina, 'https://push.example.com/amina/10');
  assert.equal(eleventh.status, 409);
  assert.equal(eleventh.body.error.code, 'conflict');
  assert.equal((await subscribe(w.ts, amina, 'https://push.example.com/amina/3')).status, 201, 'a browser renewing its keys is not a new subscription');
  // Another user is not affected by amina's count.
  assert.equal((await subscribe(w.ts, await member(w.ts, 'bilal@example.com'), 'https://push.example.com/bilal/0')).status, 201);
  const removed = await w.ts.http.request('DELETE', `${API}/me/push-subscriptions`, { body: { endpoint: 'https://push.example.com/amina/0' }, token: amina.token });
  assert.equal(removed.status, 204);
  assert.equal((await subscribe(w.ts, amina, 'https://push.example.com/amina/10')).status, 201);
  assert.equal((await subscribe(w.ts, amina, 'https://push.example.com/amina/11')).status, 409);
});

test('sends run at most PUSH_CONCURRENCY at a time, and a push service that never answers holds a slot only until the timeout', async (t) => {
  const push = await startPushService(t, (path) => (path.startsWith('/held/') ? 'hold' : 201));
  const w = await world(t, { pushNetwork: deliveringTo(push, { timeoutMs: 700 }), env: { PUSH_CONCURRENCY: '2' } });
  const amina = await listener(w, 'amina@example.com');
  for (const path of ['/held/1', '/held/2', '/held/3', '/quick/1', '/quick/2']) {
    assert.equal((await subscribe(w.ts, amina, `${push.origin}${path}`)).status, 201);
  }
  const id = await broadcast(w);
  // Two held sends fill both slots; the third waits for one of them to time out.
  await waitFor('two sends in flight', () => push.held() === 2, 3000);
  assert.equal(push.received.length, 2);
  await waitFor('every subscription tried once', () => push.received.length === 5, 6000);
  assert.equal(push.maxOpen(), 2, 'never more than two requests open at the push service');
  await waitFor('the quick ones sent', async () => (await pushReport(w, id)).sent === 2, 3000);
  assert.deepEqual(await pushReport(w, id), { queued: 3, sent: 2, failed: 0 }, 'the timed-out sends wait for a retry');
});

test('a new broadcast\'s pushes go before older retries', async (t) => {
  const push = await startPushService(t, (path, nth) => (path === '/failing' ? 500 : path === '/slow' && nth === 1 ? 'hold' : 201));
  const clock = createManualClock(Date.now());
  const w = await world(t, { pushNetwork: deliveringTo(push), env: { PUSH_CONCURRENCY: '1' }, clock });
  // Each listener wants one kind only, so each broadcast reaches exactly one subscription.
  const failing = await listener(w, 'failing@example.com', ['notify_azaan']);
  const slow = await listener(w, 'slow@example.com', ['notify_jummah']);
  const fresh = await listener(w, 'fresh@example.com', ['notify_waaz']);
  for (const [p, path] of [[failing, '/failing'], [slow, '/slow'], [fresh, '/fresh']] as const) {
    assert.equal((await subscribe(w.ts, p, `${push.origin}${path}`)).status, 201);
  }

  const first = await broadcast(w, 'azaan');
  await waitFor('the first attempt failed', () => push.to('/failing').length === 1, 3000);
  await stop(w, first);
  // The one slot is taken by a send that hangs; meanwhile the retry comes due and a new broadcast starts.
  const second = await broadcast(w, 'jummah');
  await waitFor('the slow send holds the slot', () => push.held() === 1, 3000);
  clock.advance(60_000);
  await stop(w, second);
  await broadcast(w, 'waaz');
  await settle(1200); // a drain tick or two: nothing moves while the slot is held
  assert.deepEqual(push.received.map((r) => r.path), ['/failing', '/slow']);
  push.release();
  await waitFor('the fresh push and the retry', () => push.received.length >= 4, 4000);
  assert.deepEqual(push.received.slice(0, 4).map((r) => r.path), ['/failing', '/slow', '/fresh', '/failing']);
});

test('a send still in flight is not sent a second time, however far the clock moves past its retry time', async (t) => {
  const push = await startPushService(t, (path, nth) => (path === '/slow' && nth === 1 ? 'hold' : 201));
  const clock = createManualClock(Date.now());
  const w = await world(t, { pushNetwork: deliveringTo(push), env: { PUSH_CONCURRENCY: '4' }, clock });
  const slow = await listener(w, 'slow@example.com', ['notify_jummah']);
  assert.equal((await subscribe(w.ts, slow, `${push.origin}/slow`)).status, 201);
  const id = await broadcast(w, 'jummah');
  await waitFor('the send hangs', () => push.held() === 1, 3000);
  clock.advance(10 * 60_000); // past the first retry (5 s) and the claim (30 s): only the send in flight holds it
  await settle(1200); // a drain tick or two, with free slots
  assert.equal(push.to('/slow').length, 1, 'the row was claimed again while its send was in flight');
  push.release();
  await stop(w, id);
  await waitFor('sent once', async () => (await pushReport(w, id)).sent === 1, 3000);
  await settle(1200);
  assert.equal(push.to('/slow').length, 1);
});
