import type { EventEmitter } from 'node:events';
import net from 'node:net';
import type http from 'node:http';
import { Aedes, type AedesOptions, type Client } from 'aedes';
import { Redis } from 'ioredis';
import { WebSocketServer, createWebSocketStream } from 'ws';
import type { DeviceLink } from '../src/devices/device-link.ts';
import { createHooks, type HookDeps } from './hooks.ts';
import { createIndexedMemoryPersistence } from './retained-index.ts';

export const WEBSOCKET_PATH = '/mqtt';

export interface BrokerDeps extends HookDeps {
  redisUrl: string | undefined;
}

export interface Broker {
  aedes: Aedes;
  /** The TCP listener (MQTT 3.1.1 and 3.1), created with noDelay: Nagle stalls QoS 0 at ~12.6k msg/s here. */
  tcpServer: net.Server;
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
  close(): Promise<void>;
}

/** The device door: aedes with the hooks of broker/hooks.ts, on TCP and on WebSocket. */
export async function createBroker(deps: BrokerDeps): Promise<Broker> {
  const redis = deps.redisUrl ? await redisParts(deps.redisUrl, (what, err) => deps.faults.report(what, err)) : null;
  const hooks = createHooks(deps);
  const options: AedesOptions = {
    ...(redis ? { persistence: redis.persistence, mq: redis.mq } : { persistence: createIndexedMemoryPersistence() }),
    preConnect: hooks.preConnect,
    authenticate: hooks.authenticate,
    authorizePublish: hooks.authorizePublish,
    authorizeSubscribe: hooks.authorizeSubscribe,
    authorizeForward: hooks.authorizeForward,
  };
  const aedes = await Aedes.createBroker(options);
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
  const tcpServer = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    aedes.handle(socket);
  });
  const wss = new WebSocketServer({ noServer: true });
  wss.on('connection', (ws, req) => aedes.handle(createWebSocketStream(ws), req));

  const link: DeviceLink = {
    publish: (topic, payload, opts) =>
      new Promise((resolve, reject) => {
        const body = payload === '' ? Buffer.alloc(0) : Buffer.from(JSON.stringify(payload));
        aedes.publish({ cmd: 'publish', topic, payload: body, qos: opts.qos, retain: opts.retain, dup: false }, (err) => (err ? reject(err) : resolve()));
      }),
    disconnect: (deviceId) => (aedes as unknown as { clients: Record<string, Client | undefined> }).clients[deviceId]?.close(),
    isConnected: (deviceId) => deps.telemetry.isConnected(deviceId),
  };

  return {
    aedes,
    tcpServer,
    link,
    attachWebSocket(server) {
      server.on('upgrade', (req, socket, head) => {
        const path = (req.url ?? '').split('?')[0];
        if (path !== WEBSOCKET_PATH) return socket.destroy();
        wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
      });
    },
    dropWebSockets() {
      for (const client of wss.clients) client.terminate();
    },
    isHealthy: () => !aedes.closed && tcpServer.listening,
    // aedes closes only clients that finished CONNECT; a socket that never sent one held the stop for the
    // connect timeout (30 s). So: stop accepting, let aedes close its clients, then drop what is left.
    async close() {
      const unbound = tcpServer.listening ? new Promise<void>((resolve) => tcpServer.close(() => resolve())) : Promise.resolve();
      for (const client of wss.clients) client.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      const closed = new Promise<void>((resolve) => aedes.close(() => resolve()));
      // With Redis unreachable, mqemitter-redis' QUIT never completes: do not wait on it for ever.
      await (redis ? Promise.race([closed, new Promise((r) => setTimeout(r, 2000).unref())]) : closed);
      for (const socket of sockets) socket.destroy();
      await unbound;
      await redis?.close();
    },
  };
}

/** REDIS_URL: persistence and pub/sub through Redis, so several processes can share the devices. */
async function redisParts(url: string, onError: (what: string, err: Error) => void) {
  const { default: redisPersistence } = await import('aedes-persistence-redis');
  const { default: redisEmitter } = await import('mqemitter-redis');
  const conn = new Redis(url, { maxRetriesPerRequest: 3 });
  // ioredis reconnects by itself; without a listener it prints every failed attempt to stderr.
  conn.on('error', (err: Error) => onError('redis connection', err));
  const mq = redisEmitter({ connectionString: url });
  // mqemitter-redis re-emits its connections' errors on `state`: with no listener that EventEmitter throws.
  (mq as unknown as { state: EventEmitter }).state.on('error', (err: Error) => onError('redis pub/sub', err));
  return {
    persistence: redisPersistence({ conn }),
    mq,
    // aedes.close() asks the emitter to QUIT; disconnect() also ends the reconnect loops of all three
    // connections when Redis is gone, which would otherwise keep the process alive.
    async close() {
      conn.disconnect();
      const pubSub = mq as unknown as { subConn: Redis; pubConn: Redis };
      pubSub.subConn.disconnect();
      pubSub.pubConn.disconnect();
    },
  };
}
