import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Aedes } from 'aedes';
import mqtt from 'mqtt';
import mqemitter from 'mqemitter';
import { FIRST_SLICE, sliceDeliveries, type SubscriptionEmitter } from '../../broker/delivery/sliced-delivery.ts';
import { nextMessage, settle, subscribeCode, waitFor } from '../support/devices.ts';

// A publish to many subscribers is delivered in slices (broker/delivery/sliced-delivery.ts), so the
// first subscribers are written to before the broker has walked the last ones. These tests run aedes with
// that emitter alone (no Minaret hooks) over real sockets, and note in the broker, in order, each delivery
// aedes asks about (authorizeForward, called in the walk) and each PUBLISH written to a socket.

const SUBSCRIBERS = FIRST_SLICE * 2 + 10; // the first slice, and more than as many again in the second

interface Broker {
  aedes: Aedes;
  afterDeliveries: (topic: string, fn: () => void) => void;
  url: string;
  /** 'walk <clientId> <topic>' and 'write <clientId> <topic>', in the order they happened in the broker. */
  log: string[];
}

async function startBroker(t: TestContext): Promise<Broker> {
  const log: string[] = [];
  const sliced = sliceDeliveries(mqemitter({ concurrency: 100, matchEmptyLevels: true }) as unknown as SubscriptionEmitter);
  const aedes = await Aedes.createBroker({
    mq: sliced.emitter,
    authorizeForward: (client, packet) => {
      log.push(`walk ${client.id} ${packet.topic}`);
      return packet;
    },
  });
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    let clientId = '?';
    const write = socket.write.bind(socket) as (chunk: Buffer, ...rest: unknown[]) => boolean;
    // mqtt-packet writes a PUBLISH's fixed header, topic and payload as separate chunks; the topic is read
    // from the chunk that starts with its length.
    (socket as unknown as { write: typeof write }).write = (chunk, ...rest) => {
      const text = Buffer.isBuffer(chunk) ? chunk.toString('latin1') : String(chunk);
      const topic = /(mosques|other)\/[a-z0-9/]+/.exec(text)?.[0];
      if (topic) log.push(`write ${clientId} ${topic}`);
      return write(chunk, ...rest);
    };
    aedes.handle(socket);
    aedes.once('client', (client) => {
      if (client.conn === socket) clientId = client.id;
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  t.after(
    () =>
      new Promise<void>((resolve) => {
        server.close();
        aedes.close(() => {
          for (const s of sockets) s.destroy();
          resolve();
        });
      }),
  );
  return { aedes, afterDeliveries: sliced.afterDeliveries, url: `mqtt://127.0.0.1:${(server.address() as net.AddressInfo).port}`, log };
}

async function subscriber(t: TestContext, b: Broker, id: string, topic: string): Promise<mqtt.MqttClient> {
  const client = await mqtt.connectAsync(b.url, { clientId: id, clean: true, reconnectPeriod: 0, protocolVersion: 4 });
  t.after(() => client.end(true));
  assert.equal(await subscribeCode(client, topic, 1), 1);
  return client;
}

/** Subscribers s000.. one after the other (the emitter walks them in that order), each noting what it receives. */
async function fleet(t: TestContext, b: Broker, n: number, topic: string) {
  const received = new Map<string, string[]>();
  for (let i = 0; i < n; i++) {
    const id = `s${String(i).padStart(3, '0')}`;
    const client = await subscriber(t, b, id, topic);
    received.set(id, []);
    client.on('message', (_topic, payload) => received.get(id)!.push(payload.toString()));
  }
  return received;
}

/** A broker with SUBSCRIBERS on a mosque's broadcast topic and one more client, 'lone', on `loneTopic`; its log cleared. */
async function fanoutAndLone(t: TestContext, loneTopic: string) {
  const b = await startBroker(t);
  const topic = 'mosques/m1/broadcast';
  const received = await fleet(t, b, SUBSCRIBERS, topic);
  const lone = await subscriber(t, b, 'lone', loneTopic);
  const loneGot = nextMessage(lone, loneTopic, 3000);
  b.log.length = 0;
  return { b, topic, received, loneGot };
}

/** Waits until each subscriber of the fleet has received `n` messages. */
const everyHas = (received: Map<string, string[]>, n: number, what: string) => waitFor(what, () => [...received.values()].every((r) => r.length === n), 5000);

function publish(b: Broker, topic: string, body: string): Promise<void> {
  return new Promise((resolve, reject) =>
    b.aedes.publish({ cmd: 'publish', topic, payload: Buffer.from(body), qos: 1, retain: false, dup: false }, (err) => (err ? reject(err) : resolve())),
  );
}

test('a publish to more subscribers than one slice is written to the first of them before the broker walks the last', async (t) => {
  const b = await startBroker(t);
  const topic = 'mosques/m1/broadcast';
  const received = await fleet(t, b, SUBSCRIBERS, topic);
  b.log.length = 0;

  await publish(b, topic, 'start');
  await everyHas(received, 1, 'every subscriber has the start');

  const walks = b.log.filter((e) => e.startsWith('walk'));
  const writes = b.log.filter((e) => e.startsWith('write'));
  assert.equal(walks.length, SUBSCRIBERS);
  assert.equal(writes.length, SUBSCRIBERS);
  const firstWrite = b.log.indexOf(writes[0]!);
  const lastWalk = b.log.lastIndexOf(walks.at(-1)!);
  assert.ok(firstWrite < lastWalk, `the first write came after the whole walk: ${b.log.slice(0, 3).join(', ')} ...`);
  // The first slice is walked before its first write; the rest is walked after those writes.
  assert.equal(firstWrite, FIRST_SLICE, 'the first write did not follow the first slice');
  assert.ok(b.log.indexOf(writes[FIRST_SLICE - 1]!) < b.log.indexOf(walks[FIRST_SLICE]!), 'the second slice was walked before the first was written');
  assert.deepEqual([...received.values()].map((r) => r.join()), Array(SUBSCRIBERS).fill('start'));
});

test('every subscriber receives a topic\'s messages in the order they were published, though the second comes while the first is still being sliced', async (t) => {
  const b = await startBroker(t);
  const topic = 'mosques/m1/broadcast';
  const received = await fleet(t, b, SUBSCRIBERS, topic);

  // Both publishes in the same turn: the second one's walk comes while the first one's slices still wait.
  const sent = ['start', 'stop', 'start-again'].map((body) => publish(b, topic, body));
  await Promise.all(sent);
  await everyHas(received, 3, 'every subscriber has all three');
  for (const [id, got] of received) assert.deepEqual(got, ['start', 'stop', 'start-again'], `${id} got them out of order`);
});

test('a subscriber of another topic is written to while a fan-out is still being sliced', async (t) => {
  const { b, topic, received, loneGot } = await fanoutAndLone(t, 'other/lone/config');

  await Promise.all([publish(b, topic, 'start'), publish(b, 'other/lone/config', '{}')]);
  await loneGot;
  await everyHas(received, 1, 'every subscriber has the start');

  const loneWrite = b.log.indexOf('write lone other/lone/config');
  const lastFanoutWrite = b.log.findLastIndex((e) => e.startsWith('write s'));
  assert.ok(loneWrite >= 0 && loneWrite < lastFanoutWrite, 'the other topic waited for the whole fan-out');
});

test('a subscriber that unsubscribed gets nothing from a sliced fan-out: the subscription aedes removes is the one the emitter walks', async (t) => {
  const b = await startBroker(t);
  const topic = 'mosques/m1/broadcast';
  const received = await fleet(t, b, SUBSCRIBERS, topic);
  const leaving = await subscriber(t, b, 'leaving', topic);
  const gone: string[] = [];
  leaving.on('message', (_t, payload) => gone.push(payload.toString()));

  await new Promise<void>((resolve, reject) => leaving.unsubscribe(topic, (err) => (err ? reject(err) : resolve())));
  await publish(b, topic, 'start');
  await everyHas(received, 1, 'every subscriber has the start');
  await settle(200);
  assert.deepEqual(gone, [], 'the unsubscribed client still received the publish');
  assert.ok(!b.log.includes('walk leaving mosques/m1/broadcast'), 'the broker still walked the removed subscription');
});

test('what waits for a fan-out (the transmitters\' broadcast_start, the pushes) runs after the last slice is written, and after a small one too', async (t) => {
  const { b, topic, received, loneGot } = await fanoutAndLone(t, 'mosques/m2/broadcast');

  for (const [tp, body] of [[topic, 'start'], ['mosques/m2/broadcast', '{}']] as const) {
    void publish(b, tp, body);
    // As src/broadcasts/broadcast-fanout.ts asks: a turn after the publish.
    setImmediate(() => b.afterDeliveries(tp, () => b.log.push(`after ${tp}`)));
  }
  await waitFor('both have run', () => b.log.includes(`after ${topic}`) && b.log.includes('after mosques/m2/broadcast'), 5000);
  await loneGot;
  await everyHas(received, 1, 'every subscriber has the start');

  const after = b.log.indexOf(`after ${topic}`);
  assert.equal(b.log.filter((e, i) => e.startsWith('write s') && i > after).length, 0, 'a subscriber was written to after the fan-out was reported done');
  assert.equal(b.log.filter((e) => e.startsWith('write s')).length, SUBSCRIBERS);
  assert.ok(b.log.indexOf('write lone mosques/m2/broadcast') < b.log.indexOf('after mosques/m2/broadcast'), 'reported done before its one write');
});
