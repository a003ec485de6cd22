import type { AedesOptions } from 'aedes';
import type { DeviceInfo } from '../../src/devices/devices.ts';
import type { Clock } from '../../src/platform/clock.ts';
import type { Faults } from '../../src/platform/faults.ts';
import type { Logger } from '../../src/platform/log.ts';
import type { TelemetryIngest } from '../../src/devices/telemetry/telemetry.ts';
import type { Rate } from '../budgets.ts';
import type { FlapRule } from '../flapping.ts';
import type { AckReport } from '../payloads.ts';
import type { DeviceIdentity } from '../topics.ts';

/** What the broker's hooks are given: the parts of src/ they answer from, and the settings they apply. */
export interface HookDeps {
  logger: Logger;
  /** Where a hook that threw is counted and logged (at most once a minute), instead of ending the process. */
  faults: Faults;
  telemetry: TelemetryIngest;
  device: (id: string) => DeviceInfo | null;
  /**
   * As `device`, falling back to the store: for a device memory does not know (another process registered it
   * and the change feed has not told this one yet), at its CONNECT or its stored will.
   */
  loadDevice?: (id: string) => Promise<DeviceInfo | null>;
  verifySecret: (id: string, password: string) => boolean;
  /**
   * A device authenticated: make sure its retained config is there before it subscribes. A promise: its CONNACK
   * waits for it (a player whose password was rotated is given a config with a fresh lease first).
   */
  onAuthenticated: (id: string) => Promise<void> | void;
  onAck?: (deviceId: string, ack: AckReport) => void;
  /** Whether a stream player may hear its mosque's broadcasts right now (docs/firmware.md#5-the-lease-and-checking-it-offline). */
  entitled?: (device: DeviceIdentity, mosqueId: string) => boolean;
  /** The mosque's own stream_url: the only one a transmitter's broadcast event may carry (docs/firmware.md#43-broadcast-events-mosquesmosque_idbroadcast-qos-1-retained). */
  mosqueStreamUrl?: (mosqueId: string) => Promise<string | null> | string | null;
  clock: Clock;
  /** Publish budgets per device (DEVICE_*_RATE, DEVICE_*_BURST) and the flood window (DEVICE_FLOOD_WINDOW_S). */
  budgets: Record<'status' | 'heartbeat' | 'ack', Rate>;
  floodWindowMs: number;
  /** Reconnect flapping (MQTT_FLAP_*). */
  flap: FlapRule;
  /**
   * Several processes share the devices (REDIS_URL): each CONNECT names its broker process in the device's
   * row, for the stored-will check. A single process keeps that in memory only: no UPDATE per CONNECT
   * (docs/sizing.md#sizing-how-many-devices-one-process-and-one-host-carry).
   */
  claimsConnections?: boolean;
  /** A transmitter announced its own mosque's broadcast: it may serve a scheduled azaan (docs/schedule.md). */
  onDeviceBroadcast?: (mosqueId: string, event: { broadcast_id: string; kind: string; action: 'start' | 'stop' }) => void;
}

/** The hooks aedes takes (broker/hooks/adapter.ts makes them). */
export type Hooks = Required<Pick<AedesOptions, 'preConnect' | 'authenticate' | 'authorizePublish' | 'authorizeSubscribe' | 'authorizeForward'>>;
