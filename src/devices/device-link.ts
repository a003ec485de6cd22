/**
 * The port through which the core reaches devices (ARCHITECTURE: src/ never imports the broker).
 * broker/ implements it; src/service.ts hands it in.
 */
export interface DeviceLink {
  /** Publishes from the backend (client-less, so no device hook refuses it); a Buffer is sent as it is (JSON already). */
  publish(topic: string, payload: Record<string, unknown> | '' | Buffer, opts: { qos: 0 | 1; retain: boolean }): Promise<void>;
  /** Closes the device's live connection, if any (credentials rotated, device deleted or disabled). */
  disconnect(deviceId: string): void;
  /**
   * Clears what the broker keeps for the device between connections (stored filters, queued messages):
   * a deleted device leaves nothing behind, and rotated credentials start from an empty session.
   */
  forgetSession(deviceId: string): void;
  isConnected(deviceId: string): boolean;
  /**
   * The payload the broker retains on `topic` now (with REDIS_URL, what every process shares), or null. Without
   * it (a test double), the caller takes nothing as retained.
   */
  retained?(topic: string): Promise<Buffer | null>;
  /**
   * Runs `fn` once the broker has written to every subscriber the publishes on `topic` it has begun to deliver
   * (a fan-out to many players goes out in two slices, the second a turn of the event loop after the first).
   * Called a turn after the publish; without it (a test double), the caller waits two turns.
   */
  afterDeliveries?(topic: string, fn: () => void): void;
}

export const topics = {
  status: (id: string) => `devices/${id}/status`,
  heartbeat: (id: string) => `devices/${id}/heartbeat`,
  log: (id: string) => `devices/${id}/log`,
  ack: (id: string) => `devices/${id}/ack`,
  config: (id: string) => `devices/${id}/config`,
  cmd: (id: string) => `devices/${id}/cmd`,
  broadcast: (mosqueId: string) => `mosques/${mosqueId}/broadcast`,
};
