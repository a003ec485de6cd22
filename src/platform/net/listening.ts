import type net from 'node:net';

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
