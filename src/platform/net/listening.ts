import type http from 'node:http';
import type net from 'node:net';
import { StartupError } from '../boot/startup-error.ts';

/**
 * Where a server of this process listens, asked of the server itself: its port once it listens (port 0 in the
 * settings picks a free one, known only then), else the port the settings name.
 */
export function listeningPort(server: net.Server, configured: number): number {
  const address = server.address();
  return address !== null && typeof address === 'object' ? address.port : configured;
}

/** The address people and devices see for HOST: 0.0.0.0 listens everywhere, and 127.0.0.1 reaches it here. */
export function shownHost(host: string): string {
  return host === '0.0.0.0' ? '127.0.0.1' : host;
}

/** Listens on HOST and the port of `setting`; a port in use, a port not allowed or a HOST not here is one line naming the setting. */
export function listen(server: net.Server, port: number, host: string, setting: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') reject(new StartupError(`${setting}: port ${port} on ${host} is already in use`));
      else if (err.code === 'EACCES') reject(new StartupError(`${setting}: no permission to listen on port ${port}`));
      else if (err.code === 'EADDRNOTAVAIL') reject(new StartupError(`HOST: ${host} is not an address of this machine`));
      else reject(err);
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve((server.address() as net.AddressInfo).port);
    });
  });
}

/** Stops accepting, lets requests in flight finish for a moment, then drops what is left. */
export async function closeHttp(server: http.Server): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), 2000);
  await closed;
  clearTimeout(timer);
}
