import { Readable } from 'node:stream';
import type { Client, Subscription } from 'aedes';
import type { Redis } from 'ioredis';

/**
 * Persistent sessions (clean: false) that a device cannot turn into a memory sink:
 * - only filters the authorizeSubscribe hook granted are stored;
 * - the queue of QoS 1 messages a session holds (offline, or sent and not yet acknowledged) keeps at
 *   most MQTT_MAX_QUEUED_MESSAGES, the oldest dropped and counted;
 * - forget(deviceId) clears the stored filters and the queue (device deleted, credentials rotated).
 */

export interface SessionCounters {
  queued_messages_dropped: number;
}

interface QueuedPacket {
  brokerId: string;
  brokerCounter: number;
  messageId?: number;
  [key: string]: unknown;
}

/** The parts of an aedes persistence (memory or Redis) this module wraps. */
interface Persistence {
  addSubscriptions(client: { id: string }, subs: Subscription[]): Promise<void>;
  subscriptionsByClient(client: { id: string }): Promise<Array<{ topic: string }>>;
  cleanSubscriptions(client: { id: string }): Promise<unknown>;
  outgoingEnqueue(sub: { clientId: string }, packet: QueuedPacket): Promise<void>;
  outgoingEnqueueCombi(subs: Array<{ clientId: string }>, packet: QueuedPacket): Promise<void>;
  outgoingUpdate(client: { id: string }, packet: QueuedPacket): Promise<void>;
  outgoingClearMessageId(client: { id: string }, packet: { messageId?: number }): Promise<QueuedPacket | undefined>;
  outgoingStream(client: { id: string }): Readable | AsyncIterable<QueuedPacket>;
}

type Done = (err: Error | null, sub?: Subscription | null) => void;
type AuthorizeSubscribe = (client: Client, sub: Subscription, done: Done) => void;

export interface Sessions {
  /** Wraps the authorizeSubscribe hook to note which filter objects it granted. */
  noteGrants(hook: AuthorizeSubscribe): AuthorizeSubscribe;
  forget(deviceId: string): Promise<void>;
  /** What the broker keeps for a device between connections (diagnostics, tests). */
  describe(deviceId: string): Promise<SessionState>;
}

export interface SessionState {
  filters: string[];
  queued: number;
}

/**
 * Filters rather than refusing the whole SUBSCRIBE: aedes hands addSubscriptions every filter of the
 * packet once any one is granted, and [MQTT-3.8.4-5] answers per filter, so a device whose packet mixes its
 * own topic with `#` keeps its own topic (SUBACK 0x80 for the rest) and nothing else is ever stored.
 * The granted Subscription objects are the packet's own, so a WeakSet marks them without a copy.
 * Each granted filter is stored once, by the first call that sees it: aedes calls once per granted filter,
 * and the Redis persistence waits for its own broadcast keyed by client and first topic, so two calls
 * starting with the same topic left the first waiting forever (a two-filter SUBSCRIBE never got its SUBACK).
 */
function storeOnlyGranted(persistence: Persistence): (hook: AuthorizeSubscribe) => AuthorizeSubscribe {
  const granted = new WeakSet<Subscription>();
  const stored = new WeakSet<Subscription>();
  const add = persistence.addSubscriptions.bind(persistence);
  persistence.addSubscriptions = (client, subs) => {
    const fresh = subs.filter((s) => granted.has(s) && !stored.has(s));
    for (const s of fresh) stored.add(s);
    return fresh.length === 0 ? Promise.resolve() : add(client, fresh);
  };
  return (hook) => (client, sub, done) =>
    hook(client, sub, (err, result) => {
      if (!err && result) granted.add(result);
      done(err, result);
    });
}

/**
 * Memory mode: the library keeps each client's queue in a private field with no way to trim it, so the
 * queue lives here instead, with the library's semantics (match by broker id and counter, then message id).
 */
export function createMemorySessions(persistence: unknown, maxQueued: number, counters: SessionCounters): Sessions {
  const p = persistence as Persistence;
  const queues = new Map<string, QueuedPacket[]>();
  const enqueue = (clientId: string, packet: QueuedPacket) => {
    const queue = queues.get(clientId) ?? [];
    queues.set(clientId, queue);
    // A copy without a message id, as the library's Packet makes: the id is assigned when it is sent.
    const { messageId: _unused, ...copy } = packet;
    queue.push(copy as QueuedPacket);
    if (queue.length > maxQueued) {
      counters.queued_messages_dropped += queue.length - maxQueued;
      queue.splice(0, queue.length - maxQueued);
    }
  };
  p.outgoingEnqueue = async (sub, packet) => enqueue(sub.clientId, packet);
  p.outgoingEnqueueCombi = async (subs, packet) => {
    for (const sub of subs) enqueue(sub.clientId, packet);
  };
  p.outgoingUpdate = async (client, packet) => {
    const queue = queues.get(client.id) ?? [];
    for (let i = 0; i < queue.length; i++) {
      const q = queue[i]!;
      if (q.brokerId === packet.brokerId && q.brokerCounter === packet.brokerCounter) {
        q.messageId = packet.messageId;
        return;
      }
      if (q.brokerId !== packet.brokerId && q.messageId === packet.messageId) {
        queue[i] = packet;
        return;
      }
    }
    throw new Error('no such packet');
  };
  p.outgoingClearMessageId = async (client, packet) => {
    const queue = queues.get(client.id);
    const i = queue ? queue.findIndex((q) => q.messageId === packet.messageId) : -1;
    if (i < 0) return undefined;
    const [removed] = queue!.splice(i, 1);
    if (queue!.length === 0) queues.delete(client.id);
    return removed;
  };
  p.outgoingStream = (client) => Readable.from([...(queues.get(client.id) ?? [])]);

  return {
    noteGrants: storeOnlyGranted(p),
    async forget(deviceId) {
      queues.delete(deviceId);
      await p.cleanSubscriptions({ id: deviceId });
    },
    async describe(deviceId) {
      const subs = await p.subscriptionsByClient({ id: deviceId });
      return { filters: subs.map((s) => s.topic).sort(), queued: queues.get(deviceId)?.length ?? 0 };
    },
  };
}

// Drops the oldest entries of one client's queue (a list of packet keys, aedes-persistence-redis 11) above
// the cap; a packet shared by several queues is deleted when its last reference goes, as the library does.
const TRIM_QUEUE = `
local excess = redis.call('LLEN', KEYS[1]) - tonumber(ARGV[1])
if excess <= 0 then return 0 end
local dropped = redis.call('LRANGE', KEYS[1], 0, excess - 1)
redis.call('LTRIM', KEYS[1], excess, -1)
for _, key in ipairs(dropped) do
  if string.sub(key, 1, 7) == 'packet:' then
    if redis.call('DECR', key .. ':offlineCount') <= 0 then redis.call('DEL', key, key .. ':offlineCount') end
  else
    redis.call('DEL', key)
  end
end
return excess`;

const outgoingKey = (clientId: string) => `outgoing:${encodeURIComponent(clientId)}`;

/** Redis mode: the library's queue, trimmed by one atomic script after each enqueue. */
export function createRedisSessions(persistence: unknown, redis: Redis, maxQueued: number, counters: SessionCounters): Sessions {
  const p = persistence as Persistence;
  const trim = async (clientId: string, keep: number) => {
    const dropped = Number(await redis.eval(TRIM_QUEUE, 1, outgoingKey(clientId), keep));
    counters.queued_messages_dropped += keep > 0 ? dropped : 0;
  };
  const combi = p.outgoingEnqueueCombi.bind(p);
  p.outgoingEnqueueCombi = async (subs, packet) => {
    await combi(subs, packet);
    for (const sub of subs) await trim(sub.clientId, maxQueued);
  };
  // The library's outgoingEnqueue goes through outgoingEnqueueCombi, so it is trimmed too.
  return {
    noteGrants: storeOnlyGranted(p),
    async forget(deviceId) {
      await p.cleanSubscriptions({ id: deviceId });
      // cleanSubscriptions drops the queue only when filters were stored; the script drops it always.
      await trim(deviceId, 0);
    },
    async describe(deviceId) {
      const subs = await p.subscriptionsByClient({ id: deviceId });
      return { filters: subs.map((s) => s.topic).sort(), queued: await redis.llen(outgoingKey(deviceId)) };
    },
  };
}
