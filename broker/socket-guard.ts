import { Duplex } from 'node:stream';
import type { MqttLimits } from '../src/platform/config.ts';
import { createHeaderScanner, scanChunk, type HeaderVerdict } from './packet-guard.ts';

/** Why the broker closed a connection before aedes would have; each is counted. */
export interface GuardCounters {
  refused_connections: number;
  refused_handshakes: number;
  closed_too_large: number;
  closed_malformed: number;
  closed_not_connect: number;
  closed_connect_timeout: number;
}

export const newGuardCounters = (): GuardCounters => ({
  refused_connections: 0, refused_handshakes: 0, closed_too_large: 0, closed_malformed: 0, closed_not_connect: 0, closed_connect_timeout: 0,
});

const counterOf: Record<Exclude<HeaderVerdict, 'ok'>, keyof GuardCounters> = {
  too_large: 'closed_too_large',
  malformed: 'closed_malformed',
  not_connect: 'closed_not_connect',
};

/** IPv4 clients of a dual-stack listener show up as ::ffff:a.b.c.d; one address, one count. */
const normalise = (address: string | undefined) => (address ?? 'unknown').replace(/^::ffff:/, '');

/**
 * Counts what sockets cost before they are trusted, for every listener alike (TCP, WebSocket, and any
 * TLS listener later): `open(socket)` admits or refuses a fresh socket, `wrap` puts the byte guard in front
 * of aedes. One per broker.
 */
export function createSocketGuard(limits: MqttLimits, counters: GuardCounters) {
  let open = 0;
  const handshakes = new Map<string, number>();

  function releaseHandshake(address: string): void {
    const n = (handshakes.get(address) ?? 1) - 1;
    if (n <= 0) handshakes.delete(address);
    else handshakes.set(address, n);
  }

  return {
    /** Connections open now, TCP and WebSocket together. */
    get open() {
      return open;
    },

    /**
     * Admits a socket that just arrived from `remoteAddress`, or destroys it at once (over a cap) and
     * returns null. The returned ticket must be settled: `trusted()` once CONNACK 0 went out, and the
     * socket's close releases the rest.
     */
    admit(socket: { destroy(): void; once(event: 'close', fn: () => void): unknown }, remoteAddress: string | undefined) {
      const address = normalise(remoteAddress);
      if (open >= limits.maxConnections) {
        counters.refused_connections++;
        socket.destroy();
        return null;
      }
      if ((handshakes.get(address) ?? 0) >= limits.maxHandshakesPerAddress) {
        counters.refused_handshakes++;
        socket.destroy();
        return null;
      }
      open++;
      handshakes.set(address, (handshakes.get(address) ?? 0) + 1);
      let handshaking = true;
      const ticket = {
        trusted() {
          if (!handshaking) return;
          handshaking = false;
          releaseHandshake(address);
        },
      };
      socket.once('close', () => {
        open--;
        ticket.trusted();
      });
      return ticket;
    },

    /** The byte guard in front of aedes.handle for one admitted connection. */
    wrap(inner: Duplex, ticket: { trusted(): void }): GuardedStream {
      return new GuardedStream(inner, limits, counters, ticket);
    },
  };
}

export type SocketGuard = ReturnType<typeof createSocketGuard>;

/**
 * A duplex over the connection's stream that reads each fixed header before aedes's parser sees the bytes:
 * a packet announcing more than the cap (MQTT_MAX_CONNECT_BYTES until CONNACK, MQTT_MAX_PACKET_BYTES after)
 * closes the connection at its header instead of being buffered; so does a connection without CONNACK
 * within MQTT_CONNECT_TIMEOUT_S. Writes pass straight through (with cork batching kept by _writev).
 */
export class GuardedStream extends Duplex {
  #inner: Duplex;
  #scanner = createHeaderScanner();
  #limit: number;
  #packetLimit: number;
  #timer: NodeJS.Timeout | null;
  #ticket: { trusted(): void };

  constructor(inner: Duplex, limits: MqttLimits, counters: GuardCounters, ticket: { trusted(): void }) {
    super({ allowHalfOpen: false });
    this.#inner = inner;
    this.#limit = limits.maxConnectBytes;
    this.#packetLimit = limits.maxPacketBytes;
    this.#ticket = ticket;
    this.#timer = setTimeout(() => {
      counters.closed_connect_timeout++;
      this.destroy();
    }, limits.connectTimeoutS * 1000);
    inner.on('data', (chunk: Buffer) => {
      if (this.destroyed) return;
      const verdict = scanChunk(this.#scanner, chunk, this.#limit);
      if (verdict !== 'ok') {
        counters[counterOf[verdict]]++;
        this.destroy();
        return;
      }
      if (!this.push(chunk)) inner.pause();
    });
    inner.once('end', () => this.push(null));
    inner.once('error', (err) => this.destroy(err));
    inner.once('close', () => this.destroy());
  }

  /** CONNACK 0 went out: the connection is a device now and gets the larger cap. */
  trust(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#limit = this.#packetLimit;
    this.#ticket.trusted();
  }

  override _read(): void {
    this.#inner.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.#inner.write(chunk)) cb();
    else this.#inner.once('drain', () => cb());
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, cb: (err?: Error | null) => void): void {
    const inner = this.#inner;
    inner.cork();
    let flowing = true;
    for (const { chunk } of chunks) flowing = inner.write(chunk);
    inner.uncork();
    if (flowing) cb();
    else inner.once('drain', () => cb());
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.#inner.end(() => cb());
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#inner.destroy();
    cb(err);
  }
}
