import type { Store, StoreTransaction } from '../../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../../platform/clock.ts';
import type { DeviceStore } from '../devices.ts';
import type { Faults } from '../../platform/faults.ts';
import type { Logger } from '../../platform/log.ts';
import type { Timeline } from '../timeline.ts';
import { createGroupCommit, type GroupCommit } from '../group-commit.ts';
import type { HeartbeatReport, LogReport, StatusReport } from '../device-config.ts';
import {
  LOG_MAX_BYTES, LOG_MIN_INTERVAL_MS, STALE_AFTER_MISSED,
  newCounters, newLive, overlay, type DeviceCounters, type Live, type LoggingState, type StatusChange,
} from './live.ts';
import { createTelemetryRows, type Transition } from './rows.ts';
import { createTelemetryFlush } from './flush.ts';
import { createDeviceNotes } from './notes.ts';
import { CONNECTED, DeviceRowSet, HEARTBEAT, STALE, STATUS } from './row-set.ts';

// The payload types live beside the statuses they carry; re-exported for the broker edge.
export type { HeartbeatReport, LogReport, StatusReport };
export { LOG_MAX_BYTES, LOG_MIN_INTERVAL_MS, LOGS_KEPT_PER_DEVICE, MAX_PENDING_LOGS, STALE_AFTER_MISSED } from './live.ts';
export type { BudgetedChannel, DeviceCounters, LoggingState, StatusChange } from './live.ts';

/**
 * What devices tell the backend, and whether they are there. Presence is tracked per connection (on a
 * takeover, the old connection's disconnect arrives after the new one is up). Every row write (statuses,
 * the backend's own transitions, connected and disconnected notes, rejection notes) goes into the device group
 * commit (group-commit.ts), so the rows land in the order things happened; heartbeats and logs live in memory
 * and are flushed in batches, one transaction each.
 */
export async function createTelemetry(deps: { store: Store; clock: Clock; devices: DeviceStore; timeline: Timeline; logger: Logger; faults: Faults; onStatusChange?: (c: StatusChange) => void; commits?: GroupCommit }) {
  const { devices, timeline } = deps;

  const live = new Map<string, Live>();
  for (const row of await devices.listAll()) {
    live.set(row.id, newLive(row.status, row.last_seen_at === null ? null : row.last_seen_at * 1000));
  }
  /** The broker process each connection claimed the device row for: its disconnect releases only that claim. */
  const brokers = new WeakMap<object, string>();
  const commits = deps.commits ?? createGroupCommit(deps.store, (err) => deps.faults.report('status group commit', err));
  const { writeBatch, writeTransition, rowSets, readLogs } = createTelemetryRows({ store: deps.store, clock: deps.clock, devices, timeline, live });

  const stateOf = (id: string): Live => {
    let s = live.get(id);
    if (!s) {
      // A device registered since the start: its row's status as the registry read it.
      s = newLive(devices.info(id)?.status ?? 'UNKNOWN', null);
      live.set(id, s);
    }
    return s;
  };
  const mosqueOf = (id: string) => devices.info(id)?.mosqueId ?? null;
  const nowMs = () => deps.clock();
  const isConnected = (id: string) => (live.get(id)?.connection ?? null) !== null;

  /** A message the database would not take: dropped and counted; the device and the service go on. */
  function writeFailed(id: string, channel: string, err: unknown): void {
    const s = live.get(id);
    if (s) s.counters.writes_failed++;
    deps.faults.report(`device ${channel}`, err, { device_id: id });
  }

  // Heartbeats, last-seen times and logs wait in memory for the flush (flush.ts); bad behaviour is counted and
  // noted (notes.ts).
  const flusher = createTelemetryFlush({ live, stateOf, commits, writeBatch, clock: deps.clock, faults: deps.faults });
  const notes = createDeviceNotes({ devices, timeline, commits, clock: deps.clock, stateOf, writeFailed });

  /** Memory follows the committed row; listeners hear of a transition only once it is written. */
  function applied(s: Live, id: string, from: string, to: string, reason: string | null): void {
    s.status = to;
    if (from !== to) deps.onStatusChange?.({ deviceId: id, from, to, reason });
  }

  /**
   * A status to write in the group commit: it transitions from the last one written or waiting. `write` writes
   * it (false: it was not written after all); `settled` runs after the commit or the rollback.
   */
  function pendingTransition(id: string, to: string, write: (trx: StoreTransaction, from: string) => Promise<boolean> | boolean, settled: (err: unknown, from: string, written: boolean) => void): void {
    const s = stateOf(id);
    const from = s.pendingStatus ?? s.status;
    const mine = {};
    s.pendingStatus = to;
    s.pendingWrite = mine;
    s.pendingRow = -1;
    let written = false;
    commits.add({
      write: (trx) => {
        const done = write(trx, from);
        if (typeof done === 'boolean') written = done;
        else return done.then((w) => void (written = w));
      },
      settle: (err) => {
        // A later write of this device may be waiting in the next batch: it keeps its own.
        if (s.pendingWrite === mine) {
          s.pendingStatus = null;
          s.pendingWrite = null;
        }
        settled(err, from, written && !err);
      },
    });
  }

  /**
   * The batch's statuses, transitions and connected notes, settled together in the order they came: a row's
   * status becomes memory's only once written, and a status's PUBACK goes only after the commit that holds it.
   */
  function settleRows(set: DeviceRowSet, err: unknown): void {
    let thrown: unknown = null;
    for (let i = 0; i < set.ids.length; i++) {
      const id = set.ids[i]!;
      const s = set.lives[i]!;
      const kind = set.kinds[i]!;
      if (kind === CONNECTED) {
        if (err) writeFailed(id, 'connected note', err);
        continue;
      }
      // A later status of this device may be waiting in this batch or the next: it keeps its own.
      if (s.pendingWrite === set && s.pendingRow === i) {
        s.pendingStatus = null;
        s.pendingWrite = null;
      }
      const report = set.reports[i]!;
      if (err) writeFailed(id, kind === STATUS ? 'status' : kind === HEARTBEAT ? 'heartbeat' : 'stale sweep', err);
      else if (kind === STATUS || set.written[i]) applied(s, id, set.froms[i]!, report.status, report.reason ?? null);
      try {
        set.acks[i]?.(err);
      } catch (bug) {
        thrown ??= bug; // the other rows are settled all the same; the group commit's fault handler reports it
      }
    }
    if (thrown !== null) throw thrown;
  }
  const sink = { write: rowSets.write, writeAlone: rowSets.writeAlone, settle: settleRows };
  const openRows = () => new DeviceRowSet(sink);

  /** A status or a transition into the turn's set: it transitions from the last one written or waiting. */
  function pushStatus(id: string, kind: number, report: Transition, ack: ((err: unknown) => void) | null): void {
    const s = stateOf(id);
    const set = commits.join(openRows);
    s.pendingRow = set.push(id, kind, s, s.pendingStatus ?? s.status, report, ack);
    s.pendingStatus = report.status;
    s.pendingWrite = set;
  }

  /** A transition the backend decides (stale, a heartbeat's differing status): in the group commit, as a status. */
  function transition(id: string, report: Transition, kind: number): void {
    pushStatus(id, kind, report, null);
  }

  /** Whether the device's logs are accepted now, and until when (docs/firmware.md, "3.3 Log": config or a self-expiring command). */
  function loggingOf(id: string, now: number): LoggingState {
    const info = devices.info(id);
    if (!info) return { enabled: false, until: null, source: null };
    if (info.kind === 'transmitter') return { enabled: info.settings.log_enabled, until: null, source: info.settings.log_enabled ? 'log_enabled' : null };
    const until = info.logUntil ?? 0;
    return until * 1000 > now ? { enabled: true, until, source: 'set_log_level' } : { enabled: false, until: null, source: null };
  }

  return {
    ...notes,
    logging: (id: string): LoggingState => loggingOf(id, nowMs()),

    /** `brokerId`: the broker process holding the connection, written to the row for the other processes. */
    connected(id: string, connection: object, brokerId?: string): void {
      const s = stateOf(id);
      s.connection = connection;
      s.lastSeenMs = nowMs();
      s.counters.connects++;
      flusher.touch(id);
      if (brokerId !== undefined) brokers.set(connection, brokerId);
      // Into the group commit, not a transaction of its own: the CONNACK does not wait on the disk. Nothing
      // waits on this row (a note beside the fact kept in memory), so it rides in the next batch and a
      // reconnect storm costs no commit of its own. With REDIS_URL the claim is read by the other processes
      // on a takeover: it commits in this turn.
      const at = toUnixSeconds(s.lastSeenMs);
      const set = brokerId === undefined ? commits.joinLater(openRows) : commits.join(openRows);
      set.push(id, CONNECTED, s, s.status, null, null, at, brokerId ?? null);
    },

    /**
     * True when `connection` was the device's current one (a taken-over connection's goodbye is ignored).
     * aedes ingests a will before it reports the disconnect, so a device still not OFFLINE here left without
     * one: it is marked OFFLINE (reason `disconnect`) at once rather than minutes later as stale
     * (docs/decisions.md, "A connection that closes without a will").
     * With REDIS_URL, a device that reconnected through another process has had its row claimed by that
     * process before this one closes the old connection: a takeover, not a departure, so no status changes.
     */
    disconnected(id: string, connection: object, reason: string): boolean {
      const s = live.get(id);
      if (!s || s.connection !== connection) return false;
      s.connection = null;
      const brokerId = brokers.get(connection);
      if (!devices.info(id)) return true;
      // In the group commit, after its connected row (and statuses): the note, the released claim and, unless
      // another process took the device over, OFFLINE. A refused write leaves it to the stale sweep.
      const goesOffline = (from: string) => from !== 'OFFLINE' && from !== 'UNKNOWN';
      pendingTransition(id, goesOffline(s.pendingStatus ?? s.status) ? 'OFFLINE' : s.pendingStatus ?? s.status, async (trx, from) => {
        if (!devices.info(id)) return false;
        const owner = brokerId === undefined ? null : await devices.connectionOwner(id, trx);
        const takenOver = owner !== null && owner !== brokerId;
        await timeline.record(trx, { deviceId: id, mosqueId: mosqueOf(id), kind: 'disconnected', reason: takenOver ? 'taken_over' : reason });
        if (brokerId !== undefined) await devices.releaseConnection(trx, id, brokerId);
        if (takenOver || !goesOffline(from)) return false;
        await writeTransition(trx, id, from, { status: 'OFFLINE', reason: 'disconnect', prev: from }, 'backend');
        return true;
      }, (err, from, written) => {
        if (err) writeFailed(id, 'disconnected note', err); // the stale sweep marks it OFFLINE later
        else if (written) applied(s, id, from, 'OFFLINE', 'disconnect');
      });
      return true;
    },

    /** Whether a broker process other than `exceptBrokerId` holds the device's connection, as the row says. */
    async connectedElsewhere(id: string, exceptBrokerId: string | null): Promise<boolean> {
      const owner = await devices.connectionOwner(id);
      return owner !== null && owner !== exceptBrokerId;
    },

    isCurrent: (id: string, connection: object) => live.get(id)?.connection === connection,
    isConnected,
    /**
     * Presence every process agrees on (docs/operator.md, "Several hosts"): connected to this process, or to
     * another as its row says (with REDIS_URL each process claims the row of a device it holds, and releases it
     * when the device goes). A claim on an OFFLINE row is what a process that died left behind. `status` is
     * memory's for a device here, else the row's: this process's memory of a device held elsewhere is old.
     */
    presence(row: { id: string; connected_broker: string | null; status: string }): { connected: boolean; status: string } {
      if (isConnected(row.id)) return { connected: true, status: live.get(row.id)?.status ?? row.status };
      return { connected: row.connected_broker !== null && row.status !== 'OFFLINE', status: row.status };
    },
    lastSeenMs: (id: string) => live.get(id)?.lastSeenMs ?? null,
    currentStatus: (id: string) => live.get(id)?.status ?? null,
    /** The newest heartbeat, fresher than the row between flushes. */
    lastHeartbeat: (id: string) => live.get(id)?.lastHeartbeat ?? null,
    counters: (id: string): DeviceCounters => ({ ...(live.get(id)?.counters ?? newCounters()) }),
    writeFailed,

    /**
     * A device's status, written in the turn's group commit; `settled` runs after that commit (err null: the
     * row holds it, PUBACK it) or after its rollback (err set: nothing of the batch was written, do not
     * acknowledge). A device's statuses keep their order: each transitions from the one before it, written or pending.
     */
    status(id: string, report: StatusReport, settled: (err: unknown) => void): void {
      const s = stateOf(id);
      s.counters.status_messages++;
      s.lastSeenMs = nowMs();
      // The status is newer than any heartbeat held in memory: else the overlay (and the next flush) would
      // put an older rssi, ip, uptime back over what this status just wrote.
      if (s.pendingHeartbeat) s.pendingHeartbeat = overlay(s.pendingHeartbeat, report);
      if (s.lastHeartbeat) s.lastHeartbeat = overlay(s.lastHeartbeat, report);
      pushStatus(id, STATUS, report, settled);
    },

    /** A heartbeat repeats the status so a lost retained status recovers (docs/firmware.md, "3.2 Heartbeat"). */
    heartbeat(id: string, report: HeartbeatReport): void {
      const s = stateOf(id);
      s.counters.heartbeats++;
      s.lastSeenMs = nowMs();
      // Merged, not replaced: a heartbeat without rssi must not undo the rssi of one earlier in this flush window.
      s.pendingHeartbeat = overlay(s.pendingHeartbeat, report);
      s.lastHeartbeat = overlay(s.lastHeartbeat, report);
      flusher.touch(id);
      if (report.status !== (s.pendingStatus ?? s.status)) transition(id, { status: report.status, reason: 'heartbeat', prev: s.status }, HEARTBEAT);
    },

    /**
     * At most one log a second and 512 bytes each per device; the rest is dropped and counted, never queued.
     * Logs are accepted only while enabled: a transmitter's log_enabled, a player's set_log_level until it expires.
     */
    log(id: string, report: LogReport, bytes: number): boolean {
      const s = stateOf(id);
      const now = nowMs();
      s.lastSeenMs = now;
      const enabled = loggingOf(id, now).enabled;
      if (!enabled || bytes > LOG_MAX_BYTES || now - s.lastLogMs < LOG_MIN_INTERVAL_MS) {
        s.counters.logs_dropped++;
        return false;
      }
      s.lastLogMs = now;
      s.counters.logs_accepted++;
      flusher.queueLog(id, now, report);
      return true;
    },

    /**
     * Marks OFFLINE (reason stale) every device silent for 3 of its heartbeat intervals, in the group commit.
     * One sweep for all; returns the devices it marked.
     */
    sweep(): string[] {
      const now = nowMs();
      const stale: string[] = [];
      for (const [id, s] of live) {
        const current = s.pendingStatus ?? s.status;
        if (current === 'OFFLINE' || current === 'UNKNOWN' || s.lastSeenMs === null) continue;
        const info = devices.info(id);
        if (!info) continue;
        if (now - s.lastSeenMs > STALE_AFTER_MISSED * info.settings.heartbeat_secs * 1000) stale.push(id);
      }
      // A refused write leaves the device stale in memory: the next sweep tries again.
      for (const id of stale) transition(id, { status: 'OFFLINE', reason: 'stale', prev: live.get(id)!.status }, STALE);
      return stale;
    },

    flush: flusher.flush,

    recentLogs(id: string, limit: number) {
      return readLogs(id, limit);
    },

    forget(id: string): void {
      live.delete(id);
    },
  };
}

export type Telemetry = Awaited<ReturnType<typeof createTelemetry>>;

/** What the broker tells telemetry and asks it, per packet and per connection (broker/hooks/deps.ts). */
export type TelemetryIngest = Pick<Telemetry,
  'connected' | 'disconnected' | 'connectedElsewhere' | 'isCurrent' | 'isConnected' | 'status' | 'heartbeat' | 'log'
  | 'rejected' | 'overBudget' | 'banned' | 'connectRefused' | 'writeFailed'>;