/**
 * The wire types of the firmware contract (docs/firmware.md, docs/asyncapi.json), as a device reads and writes
 * them. Nothing here knows the service: these are the payloads on the device's own topics.
 */
export type DeviceKind = 'transmitter' | 'stream_player';
export type DeviceStatus =
  | 'CONNECTING'
  | 'ONLINE'
  | 'PLAYING'
  | 'UPDATING'
  | 'STREAM_ERROR'
  | 'CONFIG_ERROR'
  | 'OFFLINE'
  | 'UNBOUND'
  | 'MUTED';
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';
export type Detail = Record<string, unknown>;

export interface DeviceLease {
  token: string;
  expires_at: number;
}

/** devices/{id}/config, as the device understood it (docs/firmware.md, "4.1 Config"). */
export interface DeviceConfig {
  v?: string;
  config_version: number;
  heartbeat_secs?: number;
  log_enabled?: boolean;
  volume?: number;
  quiet_hours?: unknown;
  mosque_id?: string | null;
  stream_url?: string | null;
  lease?: DeviceLease | null;
  unbound_reason?: string | null;
  [key: string]: unknown;
}

/** devices/{id}/status (docs/firmware.md, "3.1 Status"): what the hardware cannot tell is left out. */
export interface StatusPayload {
  v: '1.0';
  status: DeviceStatus;
  prev: DeviceStatus;
  reason: string;
  fw: string;
  mac?: string;
  ssid?: string;
  ip?: string;
  rssi?: number;
  temp_c?: number;
  uptime_s: number;
  config_version: number;
  detail: Detail;
  ts: number;
}

export interface HeartbeatPayload {
  v: '1.0';
  status: DeviceStatus;
  rssi?: number;
  ip?: string;
  uptime_s: number;
  free_heap: number;
  volume: number;
  config_version: number;
  ts: number;
}

export interface CommandMessage {
  v?: string;
  id: string;
  name: string;
  args: Record<string, unknown>;
  ts?: number;
  expires_at?: number;
}

export interface AckPayload {
  v: '1.0';
  id: string;
  name: string;
  ok: boolean;
  result?: unknown;
  error?: string;
  ts: number;
}

export interface BroadcastMessage {
  v?: string;
  broadcast_id?: string;
  kind?: string;
  action: 'start' | 'stop';
  stream_url?: string;
  ts?: number;
  [key: string]: unknown;
}

export interface Transition {
  ts: number;
  from: DeviceStatus;
  to: DeviceStatus;
  reason: string;
  detail: Detail;
}

export interface FirmwareCounters {
  connects: number;
  disconnects: number;
  reconnects: number;
  connectAttempts: number;
  refusals: number;
  publishes: number;
  statusPublishes: number;
  heartbeats: number;
  logsSent: number;
  logsDropped: number;
  acks: number;
  commands: number;
  commandsExpired: number;
  commandsDuplicate: number;
  configsApplied: number;
  malformedConfigs: number;
  malformedCommands: number;
  malformedBroadcasts: number;
  broadcasts: number;
  transitions: number;
  errors: number;
}

export type CommandOutcome = { ok: true; result: unknown } | { ok: false; error: string };

/**
 * What the device knows of its own hardware, read when a status or heartbeat is built (a Linux board reads its
 * network interfaces and thermal zone; the simulator makes them up from the id).
 */
export interface Hardware {
  readonly mac?: string;
  readonly ssid?: string;
  readonly ip?: string;
  readonly hwRev: string;
  rssi(): number | undefined;
  freeHeap(): number;
  /** Transmitters only (docs/firmware.md, "3.1 Status": a player's temp_c drops its whole status). */
  tempC(): number | undefined;
  /** Called once a heartbeat, before the heartbeat is built. */
  sample(): void;
}
