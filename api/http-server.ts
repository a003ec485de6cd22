import type http from 'node:http';
import type net from 'node:net';
import type { Duplex } from 'node:stream';

export interface HttpServerLimits {
  httpHeadersTimeoutS: number;
  httpRequestTimeoutS: number;
  httpKeepAliveTimeoutS: number;
  httpMaxConnections: number;
}

/**
 * Options that only take effect when the server is created. Node enforces headersTimeout and requestTimeout
 * only when it sweeps its connections, every connectionsCheckingInterval (30 s by default): a slow-loris
 * socket would live up to 30 s past the timeout, so the sweep runs at least every second.
 */
export function httpServerOptions(limits: HttpServerLimits): http.ServerOptions {
  return {
    connectionsCheckingInterval: Math.min(1000, (limits.httpHeadersTimeoutS * 1000) / 2),
    headersTimeout: limits.httpHeadersTimeoutS * 1000,
    requestTimeout: limits.httpRequestTimeoutS * 1000,
  };
}

/**
 * The HTTP door's limits: timeouts for slow clients and a cap on open sockets. A socket over the cap is
 * dropped at once, so a flood cannot hold file descriptors. A socket that upgrades to MQTT over WebSocket
 * leaves the count: from then on it is a device connection, governed by the broker's own limits, and a
 * fleet of WebSocket devices must not lock people out of the API.
 */
export function limitHttpServer(server: http.Server, limits: HttpServerLimits): void {
  server.headersTimeout = limits.httpHeadersTimeoutS * 1000;
  server.requestTimeout = limits.httpRequestTimeoutS * 1000;
  server.keepAliveTimeout = limits.httpKeepAliveTimeoutS * 1000;
  const releases = new WeakMap<Duplex, () => void>();
  let open = 0;
  server.on('connection', (socket: net.Socket) => {
    if (open >= limits.httpMaxConnections) {
      socket.destroy();
      return;
    }
    open++;
    let counted = true;
    const release = () => {
      if (!counted) return;
      counted = false;
      open--;
    };
    socket.once('close', release);
    releases.set(socket, release);
  });
  server.on('upgrade', (_req, socket) => releases.get(socket)?.());
}
