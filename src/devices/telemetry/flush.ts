import { toUnixSeconds, type Clock } from '../../platform/clock.ts';
import type { Faults } from '../../platform/faults.ts';
import type { GroupCommit } from '../group-commit.ts';
import type { HeartbeatReport, LogReport } from '../device-config.ts';
import { FLUSH_BACKOFF_MS, MAX_PENDING_LOGS, overlay, type Live, type PendingLog } from './live.ts';

type WriteBatch = (seen: Array<{ id: string; lastSeenMs: number | null; heartbeat: HeartbeatReport | null }>, logs: PendingLog[]) => Promise<void>;

/**
 * What waits in memory for the next flush: the devices heard from since the last one (their last-seen times and
 * merged heartbeats live in their Live records) and the accepted log lines; and the flush that writes them, one
 * transaction at a time, keeping them on a refusal and backing off.
 */
export function createTelemetryFlush(deps: {
  live: Map<string, Live>; stateOf: (id: string) => Live; commits: GroupCommit; writeBatch: WriteBatch; clock: Clock; faults: Faults;
}) {
  const { live, stateOf, commits } = deps;
  const pendingLogs: PendingLog[] = [];
  const touched = new Set<string>();
  const retry = { backoffMs: 0, at: 0 };
  let flushing: Promise<boolean> | null = null;

  /** One flush (see `flush` below): what waits in memory, taken out and written in one transaction. */
  async function flushOnce(force: boolean): Promise<boolean> {
    await commits.flush(); // a status of this turn is older than the heartbeats gathered: its row first
    if (touched.size === 0 && pendingLogs.length === 0) return true;
    if (!force && deps.clock() < retry.at) return false;
    // Taken out of memory before the write, as the store may answer after other packets were read: what
    // arrives meanwhile waits for the next flush instead of being forgotten with this one.
    const seen = [...touched].map((id) => {
      const s = live.get(id);
      const taken = { id, lastSeenMs: s?.lastSeenMs ?? null, heartbeat: s?.pendingHeartbeat ?? null };
      if (s) s.pendingHeartbeat = null;
      return taken;
    });
    touched.clear();
    const logs = pendingLogs.splice(0);
    try {
      await commits.runAlone(() => deps.writeBatch(seen, logs));
    } catch (err) {
      // Kept for the next flush: merged under what arrived since (newer fields win), logs back in front.
      for (const { id, heartbeat } of seen) {
        touched.add(id);
        const s = live.get(id);
        if (s && heartbeat) s.pendingHeartbeat = s.pendingHeartbeat ? overlay(heartbeat, s.pendingHeartbeat) : heartbeat;
      }
      pendingLogs.unshift(...logs);
      // Still at most MAX_PENDING_LOGS waiting, as queueLog keeps it: the oldest go, counted.
      for (const dropped of pendingLogs.splice(0, Math.max(0, pendingLogs.length - MAX_PENDING_LOGS))) stateOf(dropped.deviceId).counters.logs_dropped++;
      retry.backoffMs = Math.min(FLUSH_BACKOFF_MS.max, retry.backoffMs * 2 || FLUSH_BACKOFF_MS.first);
      retry.at = deps.clock() + retry.backoffMs;
      deps.faults.report('telemetry flush', err, { devices: seen.length, logs: logs.length, retry_in_ms: retry.backoffMs });
      return false;
    }
    retry.backoffMs = 0;
    retry.at = 0;
    return true;
  }

  return {
    /** The device was heard from: its last-seen time (and merged heartbeat, if any) goes in the next flush. */
    touch: (id: string) => void touched.add(id),

    /** An accepted log line; past MAX_PENDING_LOGS waiting (the store refusing writes) the oldest goes, counted. */
    queueLog(id: string, nowMs: number, report: LogReport): void {
      if (pendingLogs.length >= MAX_PENDING_LOGS) {
        const oldest = pendingLogs.shift()!;
        stateOf(oldest.deviceId).counters.logs_dropped++;
        deps.faults.report('telemetry backlog', { message: `${MAX_PENDING_LOGS} log lines wait for a flush; the oldest was dropped` });
      }
      pendingLogs.push({ deviceId: id, at: toUnixSeconds(nowMs), report });
    },

    /**
     * Writes heartbeats, last-seen times and logs gathered since the last flush, in one transaction. The batch
     * is forgotten only once that committed: a refused flush keeps it for the next (heartbeats merge per
     * device, logs are capped at MAX_PENDING_LOGS) and backs off. False when nothing was written; `force`
     * (the last flush at shutdown) ignores the back-off.
     */
    async flush(force = false): Promise<boolean> {
      // One at a time (the timer's, a GET of the logs, the last at shutdown): a later one waits for the one under way.
      while (flushing) await flushing.catch(() => undefined);
      const done = flushOnce(force);
      flushing = done;
      try {
        return await done;
      } finally {
        if (flushing === done) flushing = null;
      }
    },
  };
}
