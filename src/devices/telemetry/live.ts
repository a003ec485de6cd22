import type { HeartbeatReport, LogReport, StatusReport } from '../device-config.ts';

/** The live record telemetry keeps of each device in memory: state, merged heartbeats, counters; and its limits. */

export const LOG_MAX_BYTES = 512;
export const LOG_MIN_INTERVAL_MS = 1000;
export const LOGS_KEPT_PER_DEVICE = 500;
export const STALE_AFTER_MISSED = 3;
/** Log lines held for the next flush while the database refuses writes: beyond it the oldest go (counted). */
export const MAX_PENDING_LOGS = 5000;
/**
 * After a refused flush the next tries back off (4 s, 8 s, ... 30 s): a write waiting out the busy timeout
 * blocks the event loop for 5 s, and a retry every 2 s would leave the process no time for anything else.
 */
export const FLUSH_BACKOFF_MS = { first: 4000, max: 30_000 };
/** A device that keeps sending bad payloads, or more than its budget, is noted in its timeline at most this often. */
export const REJECTION_NOTE_INTERVAL_MS = 60_000;

/** The channels with a publish budget (broker/budgets.ts) and the counter of what each dropped. */
export type BudgetedChannel = 'status' | 'heartbeat' | 'ack' | 'broadcast';
export const DROPPED_COUNTER = {
  status: 'status_dropped', heartbeat: 'heartbeats_dropped', ack: 'acks_dropped', broadcast: 'broadcasts_dropped',
} as const satisfies Record<BudgetedChannel, keyof DeviceCounters>;

export interface DeviceCounters {
  status_messages: number;
  heartbeats: number;
  logs_accepted: number;
  logs_dropped: number;
  payloads_rejected: number;
  publishes_refused: number;
  connects: number;
  /** Dropped over the device's publish budget (SECURITY.md, "Per-device budgets"): never written, never retained. */
  status_dropped: number;
  heartbeats_dropped: number;
  acks_dropped: number;
  broadcasts_dropped: number;
  /** CONNECTs refused while banned for flapping or flooding. */
  connects_refused: number;
  /** Messages dropped because the database refused the write (disk full, busy). */
  writes_failed: number;
}

export interface Live {
  connection: object | null;
  status: string;
  /** The last status waiting in the group commit (open or committing): what the next one transitions from. */
  pendingStatus: string | null;
  /** Which write set pendingStatus: only its own settle clears it (a later batch may hold a newer one). */
  pendingWrite: object | null;
  /** Its row in that write, when the write is a set of rows (src/devices/telemetry/row-set.ts); -1 otherwise. */
  pendingRow: number;
  lastSeenMs: number | null;
  pendingHeartbeat: HeartbeatReport | null;
  lastHeartbeat: HeartbeatReport | null;
  lastLogMs: number;
  lastNoteMs: { payload: number; publish: number; budget: number };
  counters: DeviceCounters;
}

export const OVERLAY_FIELDS = ['rssi', 'ip', 'uptime_s', 'free_heap', 'volume', 'config_version'] as const;

/**
 * `base` with the fields `report` carries laid over it: the row's COALESCE rule, kept in memory. `base` is
 * changed in place (a new object only when there is none): this runs on every heartbeat, twice, and each
 * device's two merged reports are its own objects, read synchronously by the flush and by GET.
 * The OVERLAY_FIELDS are written out rather than looped over by key: a keyed loop cost ~2 % of the broker's
 * time per heartbeat in a profile.
 */
export function overlay(base: HeartbeatReport | null, report: HeartbeatReport | StatusReport): HeartbeatReport {
  const merged = base ?? ({} as HeartbeatReport);
  const r = report as Partial<HeartbeatReport>;
  merged.v = report.v;
  merged.status = report.status;
  merged.ts = report.ts;
  if (r.rssi !== undefined) merged.rssi = r.rssi;
  if (r.ip !== undefined) merged.ip = r.ip;
  if (r.uptime_s !== undefined) merged.uptime_s = r.uptime_s;
  if (r.free_heap !== undefined) merged.free_heap = r.free_heap;
  if (r.volume !== undefined) merged.volume = r.volume;
  if (r.config_version !== undefined) merged.config_version = r.config_version;
  return merged;
}

export const newLive = (status: string, lastSeenMs: number | null): Live => ({
  connection: null, status, pendingStatus: null, pendingWrite: null, pendingRow: -1, lastSeenMs, pendingHeartbeat: null, lastHeartbeat: null, lastLogMs: 0, lastNoteMs: { payload: 0, publish: 0, budget: 0 }, counters: newCounters(),
});

export const newCounters = (): DeviceCounters => ({
  status_messages: 0, heartbeats: 0, logs_accepted: 0, logs_dropped: 0, payloads_rejected: 0, publishes_refused: 0, connects: 0,
  status_dropped: 0, heartbeats_dropped: 0, acks_dropped: 0, broadcasts_dropped: 0, connects_refused: 0, writes_failed: 0,
});

/** A status to write: a device's report, or a transition the backend decides with the fields it knows. */
export type Transition = Pick<StatusReport, 'status' | 'reason' | 'detail' | 'prev'> & Partial<StatusReport>;

export interface StatusChange {
  deviceId: string;
  from: string;
  to: string;
  reason: string | null;
}

export interface LoggingState {
  enabled: boolean;
  /** Unix seconds when a player's set_log_level escalation ends; null for a transmitter's config switch. */
  until: number | null;
  source: 'log_enabled' | 'set_log_level' | null;
}

/** A log line held for the next flush. */
export interface PendingLog {
  deviceId: string;
  at: number;
  report: LogReport;
}
