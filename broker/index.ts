import type { EventEmitter } from 'node:events';
import net from 'node:net';
import type http from 'node:http';
import tls from 'node:tls';
import { Aedes, type AedesOptions, type Client } from 'aedes';
import mqemitter from 'mqemitter';
import { WebSocketServer, createWebSocketStream } from 'ws';
import type { Duplex, Readable } from 'node:stream';
import type { DeviceLink } from '../src/devices/device-link.ts';
import type { MqttLimits } from '../src/platform/config.ts';
import { createHooks } from './hooks/adapter.ts';
import type { HookDeps } from './hooks/deps.ts';
import { createIndexedMemoryPersistence } from './delivery/retained-index.ts';
import { redisParts } from './redis-parts.ts';
import { sliceDeliveries, type SubscriptionEmitter } from './delivery/sliced-delivery.ts';
import { createMemorySessions, createRedisSessions, type SessionCounters, type SessionState } from './sessions.ts';
import { createSocketGuard, newGuardCounters, type GuardCounters } from './socket-guard.ts';

export const WEBSOCKET_PATH = '/mqtt';

export interface BrokerDeps extends HookDeps {
  redisUrl: string | undefined;
  /** MQTTS_PORT is set: the PEM certificate chain and key of the TLS listener. */
  tls?: { cert: Buffer; key: Buffer } | undefined;
  limits: MqttLimits;
  /** aedes's heartbeatInterval (default 60 s): how soon a dead process's stored wills come up. */
  heartbeatIntervalMs?: number;
}

/** A TLS handshake that has not finished by then is dropped (node's default of 120 s holds a socket for free). */
const TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

/** What the broker refused or dropped to protect itself (docs/firmware.md#2-what-the-broker-refuses-and-why); monotonic since start. */
export type BrokerCounters = GuardCounters & SessionCounters;

export interface Broker {
  aedes: Aedes;
  /** The TCP listener (MQTT 3.1.1 and 3.1), created with noDelay: Nagle stalls QoS 0 at ~12.6k msg/s here. */
  tcpServer: net.Server;
  /** The MQTT-over-TLS listener (MQTTS_PORT), or null when TLS is off. Same socket handler as TCP. */
  tlsServer: tls.Server | null;
  /** Swaps the certificate for new connections (a renewal); throws on a bad pair, leaving the old one in use. */
  setTlsCredentials(creds: { cert: Buffer; key: Buffer }): void;
  /** Serves MQTT over WebSocket on the HTTP server's upgrade requests at /mqtt. */
  attachWebSocket(server: http.Server): void;
  /**
   * Drops the MQTT-over-WebSocket sessions: the HTTP server's close waits for every socket it accepted,
   * upgraded ones too, and closeAllConnections() does not reach those, so one live device would hold it forever.
   */
  dropWebSockets(): void;
  /** The DeviceLink port of src/devices/device-link.ts. */
  link: DeviceLink;
  isHealthy(): boolean;
  /** Connections open now (TCP and WebSocket) and the refusals and drops so far. */
  counters(): BrokerCounters & { open_connections: number };
  /** The filters and queued messages kept for a device's persistent session. */
  session(deviceId: string): Promise<SessionState>;
  close(): Promise<void>;
}

/** The device door: aedes with the hooks of broker/hooks/, on TCP and on WebSocket. */
export async function createBroker(deps: BrokerDeps): Promise<Broker> {
  const redis = deps.redisUrl ? await redisParts(deps.redisUrl, (what, err) => deps.faults.report(what, err)) : null;
  const hooks = createHooks({ ...deps, claimsConnections: redis !== null });
  const counters: BrokerCounters = { ...newGuardCounters(), queued_messages_dropped: 0 };
  const persistence = redis ? redis.persistence : createIndexedMemoryPersistence();
  const sessions = redis
    ? createRedisSessions(persistence, redis.conn, deps.limits.maxQueuedMessages, counters)
    : createMemorySessions(persistence, deps.limits.maxQueuedMessages, counters);
  // aedes's own emitter, as it makes it (concurrency 100, [MQTT-4.7.1-3] empty levels), with its walk cut
  // in two so that a broadcast's first players are written to before the others are walked
  // (broker/delivery/sliced-delivery.ts; bench/RESULTS.md, "Broadcasts").
  const sliced = sliceDeliveries((redis?.mq ?? mqemitter({ concurrency: 100, matchEmptyLevels: true })) as SubscriptionEmitter);
  const options: AedesOptions = {
    persistence: persistence as AedesOptions['persistence'],
    mq: sliced.emitter,
    // The socket guard closes a silent socket at the same moment; this covers a stream handed to aedes.handle without it.
    connectTimeout: deps.limits.connectTimeoutS * 1000,
    preConnect: hooks.preConnect,
    authenticate: hooks.authenticate,
    authorizePublish: hooks.authorizePublish,
    authorizeSubscribe: sessions.noteGrants(hooks.authorizeSubscribe),
    authorizeForward: hooks.authorizeForward,
    ...(deps.heartbeatIntervalMs && { heartbeatInterval: deps.heartbeatIntervalMs }),
  };
  const aedes = await Aedes.createBroker(options);
  const guard = createSocketGuard(deps.limits, counters);
  // CONNACK 0: the connection is a device now; it leaves the handshake count and gets the packet cap.
  aedes.on('connackSent', (connack, client) => {
    if (connack.returnCode === 0) guard.trust(client.conn);
  });
  const ready = new WeakSet<Client>();
  // A persistence or pub/sub failure (Redis gone, a stored will that could not be published) is reported,
  // not thrown: an 'error' event with no listener ends the process, and every device with it.
  (aedes as unknown as EventEmitter).on('error', (err: Error) => deps.faults.report('mqtt broker', err)); // not in aedes' types
  aedes.on('clientReady', (client) => ready.add(client));
  // After aedes has published the will (if any): presence per connection, so a taken-over connection's
  // goodbye does not touch the device's new connection.
  aedes.on('clientDisconnect', (client) => deps.telemetry.disconnected(client.id, client, 'disconnect'));
  aedes.on('clientError', (client, err) => deps.logger.debug({ client_id: client.id, err: err.message }, 'mqtt client error'));
  aedes.on('connectionError', (client, err) => deps.logger.debug({ client_id: client?.id, err: err.message }, 'mqtt connection error'));
  aedes.on('client', (client) => {
    // A connection that authenticated but never became ready gets no clientDisconnect from aedes.
    client.conn.once('close', () => {
      if (!ready.has(client)) deps.telemetry.disconnected(client.id, client, 'connect_failed');
    });
  });

  const sockets = new Set<net.Socket>();
  // One handler for every stream socket, plain or TLS, so the byte caps, connection caps and CONNECT timeout
  // apply to both doors alike.
  const acceptSocket = (socket: net.Socket) => {
    const ticket = guard.admit(socket, socket.remoteAddress);
    if (!ticket) return;
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    aedes.handle(guard.wrap(socket, ticket));
  };
  const tcpServer = net.createServer({ noDelay: true }, acceptSocket);
  const tlsServer = deps.tls
    ? tls.createServer({ cert: deps.tls.cert, key: deps.tls.key, noDelay: true, handshakeTimeout: TLS_HANDSHAKE_TIMEOUT_MS }, acceptSocket)
    : null;
  tlsServer?.on('tlsClientError', (err) => deps.logger.debug({ err: err.message }, 'mqtts handshake failed'));
  // One WebSocket message carries at most one whole packet (header of up to 5 bytes + the cap); ws refuses a
  // longer frame at its header instead of buffering it (its default allows 100 MiB).
  const maxPayload = Math.max(deps.limits.maxConnectBytes, deps.limits.maxPacketBytes) + 5;
  const wss = new WebSocketServer({ noServer: true, maxPayload });
  const tickets = new WeakMap<object, { trusted(): void }>();
  wss.on('connection', (ws, req) => {
    const ticket = tickets.get(req.socket);
    if (!ticket) return ws.terminate();
    aedes.handle(guard.wrap(createWebSocketStream(ws) as Duplex, ticket), req);
  });

  const link: DeviceLink = {
    publish: (topic, payload, opts) =>
      new Promise((resolve, reject) => {
        const body = payload === '' ? Buffer.alloc(0) : Buffer.isBuffer(payload) ? payload : Buffer.from(JSON.stringify(payload));
        aedes.publish({ cmd: 'publish', topic, payload: body, qos: opts.qos, retain: opts.retain, dup: false }, (err) => (err ? reject(err) : resolve()));
      }),
    disconnect: (deviceId) => (aedes as unknown as { clients: Record<string, Client | undefined> }).clients[deviceId]?.close(),
    forgetSession: (deviceId) => {
      sessions.forget(deviceId).catch((err: Error) => deps.logger.error({ device_id: deviceId, err: err.message }, 'could not clear the device session'));
    },
    isConnected: (deviceId) => deps.telemetry.isConnected(deviceId),
    retained: (topic) => firstRetained(persistence, topic),
    afterDeliveries: (topic, fn) => sliced.afterDeliveries(topic, fn),
  };

  return {
    aedes,
    tcpServer,
    tlsServer,
    setTlsCredentials(creds) {
      if (!tlsServer) throw new Error('MQTT over TLS is off');
      tlsServer.setSecureContext({ cert: creds.cert, key: creds.key });
    },
    link,
    attachWebSocket(server) {
      server.on('upgrade', (req, socket, head) => {
        const path = (req.url ?? '').split('?')[0];
        if (path !== WEBSOCKET_PATH) return socket.destroy();
        // The socket's address is the peer's; behind a reverse proxy it is the proxy's, and TRUST_PROXY
        // (X-Forwarded-For from a trusted hop) would name the device here.
        const ticket = guard.admit(socket, req.socket.remoteAddress);
        if (!ticket) return;
        tickets.set(socket, ticket);
        wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
      });
    },
    dropWebSockets() {
      for (const client of wss.clients) client.terminate();
    },
    isHealthy: () => !aedes.closed && tcpServer.listening && (tlsServer === null || tlsServer.listening),
    counters: () => ({ ...counters, open_connections: guard.open }),
    session: (deviceId) => sessions.describe(deviceId),
    // aedes closes only clients that finished CONNECT; a socket that never sent one held the stop for the
    // connect timeout (30 s). So: stop accepting, let aedes close its clients, then drop what is left.
    async close() {
      const unbind = (server: net.Server | null) => (server?.listening ? new Promise<void>((resolve) => server.close(() => resolve())) : Promise.resolve());
      const unbound = Promise.all([unbind(tcpServer), unbind(tlsServer)]);
      for (const client of wss.clients) client.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      const closed = new Promise<void>((resolve) => aedes.close(() => resolve()));
      // Each client's goodbye (its subscriptions, its will) is Redis commands: disconnecting before they are
      // answered left them to fail unhandled, and the process died at its stop (a fixed 2 s was too short for a
      // few thousand clients). So wait while Redis answers; with Redis unreachable mqemitter-redis' QUIT never
      // completes, so stop waiting once the connection is lost. SHUTDOWN_TIMEOUT_S bounds the whole stop.
      await (redis ? Promise.race([closed, redis.lost()]) : closed);
      for (const socket of sockets) socket.destroy();
      await unbound;
      await redis?.close();
    },
  };
}

/**
 * The retained payload on one exact topic, through the persistence's own lookup (in Redis one HGET); null when
 * none. Read to its end (one packet at most): leaving the stream early would destroy it with an AbortError, a
 * stack trace made per lookup. A failed lookup rejects: the caller then takes it as missing.
 */
function firstRetained(persistence: unknown, topic: string): Promise<Buffer | null> {
  const stream = (persistence as { createRetainedStreamCombi(patterns: string[]): Readable }).createRetainedStreamCombi([topic]);
  return new Promise((resolve, reject) => {
    let found: Buffer | null = null;
    stream.on('data', (packet: { topic: string; payload: Buffer | string }) => {
      if (packet.topic === topic) found = Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload);
    });
    stream.once('end', () => resolve(found));
    stream.once('error', reject);
  });
}
