import net from 'node:net';
import type http from 'node:http';
import { Aedes, type AedesOptions, type AuthenticateError } from 'aedes';
import { Redis } from 'ioredis';
import { WebSocketServer, createWebSocketStream } from 'ws';
import type { Logger } from '../src/log.ts';

export const WEBSOCKET_PATH = '/mqtt';

export interface BrokerDeps {
  logger: Logger;
  redisUrl: string | undefined;
}

export interface Broker {
  aedes: Aedes;
  /** The TCP listener (MQTT 3.1.1 and 3.1), created with noDelay: Nagle stalls QoS 0 at ~12.6k msg/s here. */
  tcpServer: net.Server;
  /** Serves MQTT over WebSocket on the HTTP server's upgrade requests at /mqtt. */
  attachWebSocket(server: http.Server): void;
  isHealthy(): boolean;
  close(): Promise<void>;
}

/**
 * The device door. Until devices exist (a later issue) every CONNECT is refused with return code 5
 * (not authorized): the broker listens and reports its health, but admits nobody.
 */
export async function createBroker(deps: BrokerDeps): Promise<Broker> {
  const redis = deps.redisUrl ? await redisParts(deps.redisUrl) : null;
  const options: AedesOptions = {
    ...(redis ?? {}),
    authenticate: (_client, _username, _password, done) => {
      const error = Object.assign(new Error('not authorized'), { returnCode: 5 }) as AuthenticateError;
      done(error, false);
    },
  };
  const aedes = await Aedes.createBroker(options);
  aedes.on('clientError', (client, err) => deps.logger.debug({ client_id: client.id, err: err.message }, 'mqtt client error'));
  aedes.on('connectionError', (client, err) => deps.logger.debug({ client_id: client?.id, err: err.message }, 'mqtt connection error'));

  const tcpServer = net.createServer({ noDelay: true }, (socket) => aedes.handle(socket));
  const wss = new WebSocketServer({ noServer: true });
  wss.on('connection', (ws, req) => aedes.handle(createWebSocketStream(ws), req));

  return {
    aedes,
    tcpServer,
    attachWebSocket(server) {
      server.on('upgrade', (req, socket, head) => {
        const path = (req.url ?? '').split('?')[0];
        if (path !== WEBSOCKET_PATH) return socket.destroy();
        wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
      });
    },
    isHealthy: () => !aedes.closed && tcpServer.listening,
    async close() {
      for (const client of wss.clients) client.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      await new Promise<void>((resolve) => aedes.close(() => resolve()));
      await new Promise<void>((resolve) => (tcpServer.listening ? tcpServer.close(() => resolve()) : resolve()));
      await redis?.close();
    },
  };
}

/** REDIS_URL: persistence and pub/sub through Redis, so several processes can share the devices. */
async function redisParts(url: string) {
  const { default: redisPersistence } = await import('aedes-persistence-redis');
  const { default: redisEmitter } = await import('mqemitter-redis');
  const conn = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 3 });
  const persistence = redisPersistence({ conn });
  const mq = redisEmitter({ connectionString: url });
  return {
    persistence,
    mq,
    // aedes.close() closes the emitter; the persistence connection is ours to end.
    async close() {
      conn.disconnect();
    },
  };
}
