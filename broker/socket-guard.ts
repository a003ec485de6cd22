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

    /**
     * Puts the byte guard in front of aedes for one admitted connection and hands back the same stream:
     * aedes reads a connection only through `read()` (on 'readable'), so the guard wraps that one method and
     * scans each fixed header before aedes's parser sees the bytes. A packet announcing more than the cap
     * (MQTT_MAX_CONNECT_BYTES until CONNACK, MQTT_MAX_PACKET_BYTES after) closes the connection at its header
     * instead of being buffered past the socket's own high-water mark; so does a connection without CONNACK
     * within MQTT_CONNECT_TIMEOUT_S. Writes go straight to the socket: no second stream to pass through on
     * every packet (a Duplex in between cost every read and write its own stream machinery; bench/RESULTS.md, "Devices").
     */
    wrap<S extends Duplex>(inner: S, ticket: { trusted(): void }): S {
      const scanner = createHeaderScanner();
      const state: Guarded = { limit: limits.maxConnectBytes, timer: null, ticket };
      state.timer = setTimeout(() => {
        counters.closed_connect_timeout++;
        inner.destroy();
      }, limits.connectTimeoutS * 1000);
      inner.once('close', () => {
        if (state.timer) clearTimeout(state.timer);
        state.timer = null;
      });
      const read = inner.read;
      inner.read = function guardedRead(this: S, size?: number) {
        const chunk = read.call(this, size) as Buffer | string | null;
        if (chunk === null || inner.destroyed) return chunk;
        const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
        const verdict = scanChunk(scanner, bytes, state.limit);
        if (verdict === 'ok') return chunk;
        counters[counterOf[verdict]]++;
        inner.destroy();
        return null;
      };
      guarded.set(inner, state);
      return inner;
    },

    /** CONNACK 0 went out: the connection is a device now and gets the larger cap. */
    trust(stream: object): void {
      const state = guarded.get(stream);
      if (!state) return;
      if (state.timer) clearTimeout(state.timer);
      state.timer = null;
      state.limit = limits.maxPacketBytes;
      state.ticket.trusted();
    },
  };
}

interface Guarded {
  limit: number;
  timer: NodeJS.Timeout | null;
  ticket: { trusted(): void };
}

/** The guard's state of each connection it wraps, found again from aedes's `client.conn` at CONNACK. */
const guarded = new WeakMap<object, Guarded>();

export type SocketGuard = ReturnType<typeof createSocketGuard>;
