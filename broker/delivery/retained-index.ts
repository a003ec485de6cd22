import { Readable } from 'node:stream';
import memoryPersistence from 'aedes-persistence';

interface RetainedPacket {
  topic: string;
  payload: Buffer | string;
}

interface MemoryPersistence {
  storeRetained(packet: RetainedPacket, cb?: (err: Error | null) => void): unknown;
  createRetainedStreamCombi(patterns: string[]): Readable;
}

const hasWildcard = (pattern: string) => pattern.includes('+') || pattern.includes('#');

/**
 * aedes's in-memory persistence answers each SUBSCRIBE by testing every retained message against the
 * filter: with one retained config (and status) per device, getting 10,000 players ready took 266 s, as
 * each of their two SUBSCRIBEs scanned all the others' messages (bench/RESULTS.md, "Broadcasts"). Devices
 * may subscribe only to exact topics, so those are answered from a topic -> packet index kept beside the
 * store; any filter with a wildcard still goes the library's way.
 */
export function createIndexedMemoryPersistence(): unknown {
  const persistence = memoryPersistence() as unknown as MemoryPersistence;
  const retained = new Map<string, RetainedPacket>();
  const store = persistence.storeRetained.bind(persistence);
  const scan = persistence.createRetainedStreamCombi.bind(persistence);

  persistence.storeRetained = (packet, cb) => {
    // The same copy and the same rule as the library: an empty payload clears the topic.
    if (packet.payload.length === 0) retained.delete(packet.topic);
    else retained.set(packet.topic, { ...packet });
    return store(packet, cb);
  };
  persistence.createRetainedStreamCombi = (patterns) => {
    if (patterns.some(hasWildcard)) return scan(patterns);
    return Readable.from(patterns.flatMap((p) => (retained.has(p) ? [retained.get(p)!] : [])));
  };
  return persistence;
}

// ---------------------------------------------------------------------------------------------------
// Redis mode (REDIS_URL)

/** The sorted set of every retained topic (all scores 0, so ordered by bytes): a prefix is a range of it. */
export const RETAINED_TOPICS_KEY = 'minaret:retained-topics';
/** Set once the topics of retained messages stored before this index existed have been copied into it. */
export const RETAINED_TOPICS_BUILT_KEY = 'minaret:retained-topics:built';
/** The library's hash of retained messages (topic -> msgpack), which stays the one source of truth. */
const RETAINED_HASH_KEY = 'retained';
/** Topics read per ZRANGEBYLEX page and fetched per pipelined batch: bounds the memory of one lookup. */
const PAGE = 500;

/**
 * The index entry follows what the hash holds now, read inside Redis: whichever of two racing stores (a
 * status from process A, its clearing by process B) runs its script last sees the final hash, so the index
 * ends as the hash does whatever the interleaving.
 */
const REINDEX_SCRIPT = `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then redis.call('ZADD', KEYS[2], 0, ARGV[1]) return 1 end
redis.call('ZREM', KEYS[2], ARGV[1])
return 0`;

interface RedisIndexConn {
  exists(key: string): Promise<number>;
  set(key: string, value: string): Promise<unknown>;
  hscan(key: string, cursor: string, ...args: Array<string | number>): Promise<[string, string[]]>;
  zadd(key: string, ...args: Array<string | number>): Promise<unknown>;
  zrangebylex(key: string, min: Buffer, max: Buffer, limit: 'LIMIT', offset: number, count: number): Promise<string[]>;
  defineCommand(name: string, def: { numberOfKeys: number; lua: string }): void;
}

interface AsyncRedisPersistence {
  createRetainedStreamCombi(patterns: string[]): AsyncGenerator<RetainedPacket>;
}

interface RedisPersistence {
  asyncPersistence: AsyncRedisPersistence;
  storeRetained(packet: RetainedPacket, cb?: (err: Error | null) => void): unknown;
  createRetainedStream(pattern: string): Readable;
  createRetainedStreamCombi(patterns: string[]): Readable;
}

/**
 * The part of a filter before its first wildcard, without the `/` that ends it (`a/#` also matches `a`
 * [MQTT-4.7.1-2]): every topic the filter matches starts with it. '' when the first level is a wildcard.
 */
export function fixedPrefix(filter: string): string {
  const at = filter.search(/[+#]/);
  const head = at < 0 ? filter : filter.slice(0, at);
  return head.endsWith('/') ? head.slice(0, -1) : head;
}

/** Whether an MQTT filter matches a topic ([MQTT-4.7.1]; callers never pass a `$` topic to a wildcard). */
export function filterMatches(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (i >= t.length || (f[i] !== '+' && f[i] !== t[i])) return false;
  }
  return f.length === t.length;
}

/**
 * aedes-persistence-redis keeps retained messages in one hash: a filter without wildcards is one HGET, but
 * a filter with one is an HSCAN of the whole hash (MATCH filters after reading every field), in Redis, which
 * every process shares. Beside the hash, this keeps a sorted set of the retained topics, updated in Redis by
 * a script after each store; a wildcard filter with a fixed first level reads only the range of topics
 * starting with its fixed prefix (ZRANGEBYLEX, O(log N + matches)), tests each against the filter, and
 * fetches the matching messages through the library's own exact lookup (so its encoding stays its own).
 * Exact filters (all a device may send) keep the library's HGET; a filter whose first level is a wildcard
 * keeps the scan, as does any lookup before this process has checked the index covers older messages.
 * Wraps the persistence in place and returns it; the copy of older topics runs in the background, and
 * `retainedIndexReady` resolves true once lookups use the index (false: it failed, the scan answers).
 */
export function createIndexedRedisPersistence(persistence: unknown, conn: unknown, onError: (err: Error) => void): unknown {
  const p = persistence as RedisPersistence;
  const redis = conn as RedisIndexConn;
  redis.defineCommand('minaretReindexRetained', { numberOfKeys: 2, lua: REINDEX_SCRIPT });
  const reindex = (topic: string) =>
    (redis as unknown as { minaretReindexRetained(h: string, z: string, topic: string): Promise<unknown> }).minaretReindexRetained(RETAINED_HASH_KEY, RETAINED_TOPICS_KEY, topic);
  const store = p.storeRetained.bind(p);
  const scan = p.createRetainedStreamCombi.bind(p);
  let built = false;

  p.storeRetained = (packet, cb) => {
    // Without a callback: the library's callback form waits for a 'ready' that aedes 1.x (which awaits
    // setup() itself) never brings about. The library sends its HSET/HDEL before its first await, so the
    // script, sent now on the same connection, runs after it in Redis: one round trip, not two (a
    // store that waited for its script cut stores/s by a quarter here). Should the script not see this
    // store's outcome (another process's store came between, or a library that sends later), it runs again.
    const stored = store(packet) as Promise<void>;
    const seen = reindex(packet.topic);
    const present = packet.payload.length > 0 ? 1 : 0;
    const done = Promise.all([stored, seen]).then(([, was]) => (was === present ? undefined : reindex(packet.topic))).then(() => undefined);
    if (!cb) return done;
    done.then(() => cb(null), (err: Error) => cb(err));
    return undefined;
  };
  // aedes pipes this stream to the subscriber without an 'error' listener: Redis going away in the middle
  // of a lookup would end the process (and every device with it). Reported instead; the lookup stops.
  const reported = (stream: Readable) => stream.on('error', onError);
  p.createRetainedStreamCombi = (patterns) => {
    const wild = patterns.filter(hasWildcard);
    if (wild.length === 0 || !built || wild.some((f) => fixedPrefix(f) === '')) return reported(scan(patterns));
    return reported(Readable.from(indexedLookup(p.asyncPersistence, redis, patterns, reindex)));
  };
  p.createRetainedStream = (pattern) => p.createRetainedStreamCombi([pattern]);

  const ready = copyOlderTopics(redis).then(
    () => (built = true),
    (err: Error) => (onError(err), false), // the scan still answers; the next start tries again
  );
  return Object.assign(p, { retainedIndexReady: ready });
}

/** Topics retained before the index existed (an upgrade) go into it once; later stores keep it current. */
async function copyOlderTopics(redis: RedisIndexConn): Promise<void> {
  if ((await redis.exists(RETAINED_TOPICS_BUILT_KEY)) === 1) return;
  let cursor = '0';
  do {
    const [next, flat] = await redis.hscan(RETAINED_HASH_KEY, cursor, 'COUNT', PAGE);
    const members: Array<string | number> = [];
    for (let i = 0; i < flat.length; i += 2) members.push(0, flat[i]!);
    if (members.length > 0) await redis.zadd(RETAINED_TOPICS_KEY, ...members);
    cursor = next;
  } while (cursor !== '0');
  await redis.set(RETAINED_TOPICS_BUILT_KEY, '1');
}

async function* indexedLookup(
  lib: AsyncRedisPersistence,
  redis: RedisIndexConn,
  patterns: string[],
  reindex: (topic: string) => Promise<unknown>,
): AsyncGenerator<RetainedPacket> {
  const wild = patterns.filter(hasWildcard);
  const sent = new Set<string>();
  const fetch = async function* (topics: string[], fromIndex: boolean) {
    const fresh = topics.filter((t) => !sent.has(t));
    for (const t of fresh) sent.add(t);
    // One exact lookup per topic, all in flight at once: the connection pipelines them.
    const packets = await Promise.all(fresh.map((t) => firstOf(lib.createRetainedStreamCombi([t]))));
    for (let i = 0; i < fresh.length; i++) {
      const packet = packets[i];
      if (packet) yield packet;
      // Cleared between the range read and the fetch, or copied in by a start racing a clear: the script drops it.
      else if (fromIndex) reindex(fresh[i]!).catch(() => undefined);
    }
  };
  yield* fetch(patterns.filter((f) => !hasWildcard(f)), false);
  for (const prefix of new Set(wild.map(fixedPrefix))) {
    let min = Buffer.from(`[${prefix}`);
    const max = Buffer.concat([Buffer.from(`[${prefix}`), Buffer.from([0xff])]); // 0xff never occurs in UTF-8
    for (;;) {
      const topics = await redis.zrangebylex(RETAINED_TOPICS_KEY, min, max, 'LIMIT', 0, PAGE);
      yield* fetch(topics.filter((t) => wild.some((f) => filterMatches(f, t))), true);
      if (topics.length < PAGE) break;
      min = Buffer.from(`(${topics[topics.length - 1]!}`);
    }
  }
}

async function firstOf<T>(gen: AsyncGenerator<T>): Promise<T | undefined> {
  const { value, done } = await gen.next();
  await gen.return(undefined);
  return done ? undefined : value;
}
