import type { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { createIndexedRedisPersistence } from './delivery/retained-index.ts';

/**
 * The broker's Redis parts (REDIS_URL): one connection for the persistence, two for the pub/sub emitter, and
 * the mends their libraries need so that Redis going away is reported instead of ending the process.
 */

/** REDIS_URL: persistence and pub/sub through Redis, so several processes can share the devices. */
export async function redisParts(url: string, onError: (what: string, err: Error) => void) {
  const { default: redisPersistence } = await import('aedes-persistence-redis');
  const { default: redisEmitter } = await import('mqemitter-redis');
  // Loaded only with REDIS_URL: ioredis alone is megabytes of RSS a single-process service never uses
  // (bench/RESULTS.md, "Idle memory").
  const { Redis } = await import('ioredis');
  // Auto-pipelining (ioredis): the commands issued in one turn of the event loop go out in one write, as Redis
  // answers them in order anyway. A packet costs the persistence several commands (a retained store, a
  // subscription, a session), so under a reconnect storm one write carries many devices' commands instead of a
  // system call each.
  const conn = new Redis(url, { maxRetriesPerRequest: 3, enableAutoPipelining: true });
  // ioredis reconnects by itself; without a listener it prints every failed attempt to stderr.
  conn.on('error', (err: Error) => onError('redis connection', err));
  // The emitter's publishing connection too (mqemitter-redis asks for auto-pipelining, but with a connection
  // string its own connections are made without it). Subscribing stays a connection of the emitter's own.
  const mq = redisEmitter({ connectionString: url, pubConn: new Redis(url, { enableAutoPipelining: true }) });
  // mqemitter-redis re-emits its connections' errors on `state`: with no listener that EventEmitter throws.
  (mq as unknown as { state: EventEmitter }).state.on('error', (err: Error) => onError('redis pub/sub', err));
  // Its close() sends QUIT on both connections and drops the promises: when a connection closes before QUIT is
  // answered (Redis gone, or the stop's last publishes still queued ahead of it), that rejection went unhandled
  // and the process died at its stop. The connection is closed either way, which is all QUIT asked for.
  const pubSub = mq as unknown as { subConn: Redis; pubConn: Redis };
  for (const c of [pubSub.subConn, pubSub.pubConn]) unawaitedMayFail(c, ['quit']);
  // ioredis itself, back after a reconnect, sends SELECT and renews the subscriptions (SUBSCRIBE, PSUBSCRIBE)
  // without awaiting them: a connection lost or closed again before they were answered left their rejection
  // unhandled (ioredis 5.11). The emitter's own subscribe calls pass callbacks and still see their errors.
  unawaitedMayFail(pubSub.subConn, ['select', 'subscribe', 'psubscribe']);
  // The persistence sends LREM and RPUSH without awaiting them (storing and clearing a will, dropping a queued
  // message it cannot decode): with Redis away, their rejection after the retries, or at the stop's disconnect,
  // went unhandled and ended the process with every device on it. Its awaited commands still fail for their
  // callers: aedes reports the will's SET that failed with them.
  unawaitedMayFail(conn, ['lrem', 'rpush']);
  return {
    conn,
    persistence: willDeletesThatReport(
      createIndexedRedisPersistence(redisPersistence({ conn }), conn, (err) => onError('redis retained index', err)),
      (err) => onError('redis will', err),
    ),
    mq,
    /** Resolves once the connection to Redis is lost (at once when it is not up now). */
    lost: () =>
      new Promise<void>((resolve) => {
        if (conn.status !== 'ready') return resolve();
        conn.once('close', () => resolve());
      }),
    // aedes.close() asks the emitter to QUIT; disconnect() also ends the reconnect loops of all three
    // connections when Redis is gone, which would otherwise keep the process alive.
    async close() {
      conn.disconnect();
      pubSub.subConn.disconnect();
      pubSub.pubConn.disconnect();
    },
  };
}

/**
 * Marks the promises of these commands as handled (the caller that awaits one still sees its rejection): for
 * libraries that send a command and drop its promise, which Node would otherwise report as an unhandled
 * rejection, fatal for this process (src/main.ts).
 */
function unawaitedMayFail(conn: Redis, commands: ReadonlyArray<'quit' | 'lrem' | 'rpush' | 'select' | 'subscribe' | 'psubscribe'>): void {
  const methods = conn as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  for (const name of commands) {
    const send = methods[name]!.bind(conn);
    methods[name] = (...args: unknown[]) => {
      const answered = send(...args);
      answered.catch(() => undefined);
      return answered;
    };
  }
}

/**
 * A will's delete that fails (Redis away) is reported and answers "no will" instead of rejecting: aedes's
 * CONNECT deletes the device's previous will with `.finally()` and drops the promise that returns, so a
 * rejection there was unhandled and ended the process. Its other callers ignore the outcome (a closing
 * client) or, clearing a dead process's wills, leave the will stored to be published again on the next
 * round, which devices/ingests once: an OFFLINE of a device connected nowhere.
 */
function willDeletesThatReport(persistence: unknown, onError: (err: Error) => void): unknown {
  const p = persistence as { delWill(client: unknown, cb?: (err: Error | null, packet?: unknown, client?: unknown) => void): Promise<unknown> | undefined };
  const del = p.delWill.bind(p);
  p.delWill = (client, cb) => {
    if (cb) return del(client, cb);
    return del(client)!.catch((err: Error) => (onError(err), undefined));
  };
  return p;
}
