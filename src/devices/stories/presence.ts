import type { Clock } from '../../platform/clock.ts';
import type { StatusChange } from '../telemetry/telemetry.ts';
import type { DevicePlane } from '../device-plane.ts';

/** The event-stream message of a status transition (docs/api.md, "Live events of a mosque"). */
export interface DeviceStatusEvent {
  type: 'device_status';
  device_id: string;
  from: string;
  to: string;
  reason: string | null;
  at: string;
}

/**
 * The story of a device's presence (docs/firmware.md, "1. Credentials and connecting" and "3.1 Status"): a
 * device that authenticated gets its config after the CONNACK when memory says it needs one (the plane's broker
 * port, `onAuthenticated`, in the turn's group commit); its status messages and its goodbye (the broker tells
 * telemetry of each connection that closes, so a taken-over connection's goodbye leaves the new one alone) move
 * its presence; each written transition reaches the mosque's open event streams, built only when one listens
 * (a hot path: every transition of every device). This is that last step.
 */
export function createPresenceStory(deps: {
  plane: Pick<DevicePlane, 'mosqueOf'>;
  announce: (mosqueId: string | null, event: () => DeviceStatusEvent) => void;
  clock: Clock;
}) {
  return {
    statusChanged(c: StatusChange): void {
      deps.announce(deps.plane.mosqueOf(c.deviceId), () => ({
        type: 'device_status', device_id: c.deviceId, from: c.from, to: c.to, reason: c.reason, at: new Date(deps.clock()).toISOString(),
      }));
    },
  };
}
