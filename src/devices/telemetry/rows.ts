import type { Db } from '../../platform/db.ts';
import type { Store } from '../../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../../platform/clock.ts';
import type { DeviceStore } from '../devices.ts';
import type { Timeline } from '../timeline.ts';
import type { StatusReport } from '../device-config.ts';
import { LOGS_KEPT_PER_DEVICE, type Live, type PendingLog } from './live.ts';

export type Transition = Pick<StatusReport, 'status' | 'reason' | 'detail' | 'prev'> & Partial<StatusReport>;

/** What telemetry writes to SQLite: a status transition, the batched heartbeats and logs; and the logs read back. */
export function createTelemetryRows(deps: { db: Db; store: Store; clock: Clock; devices: DeviceStore; timeline: Timeline; live: Map<string, Live> }) {
  const { db, devices, timeline, live } = deps;
  // Positional parameters: run once per status, and binding by name cost ~1 µs more per run here.
  const writeStatus = db.prepare(
    `UPDATE devices SET status = ?, status_reason = ?, status_detail = ?, status_at = ?, last_seen_at = COALESCE(?, last_seen_at),
       fw = COALESCE(?, fw), mac = COALESCE(?, mac), ssid = COALESCE(?, ssid), ip = COALESCE(?, ip),
       rssi = COALESCE(?, rssi), temp_c = COALESCE(?, temp_c), uptime_s = COALESCE(?, uptime_s),
       reported_config_version = COALESCE(?, reported_config_version) WHERE id = ?`,
  );
  // Positional too: run for every device that sent a heartbeat, at each flush.
  const writeHeartbeat = db.prepare(
    `UPDATE devices SET last_seen_at = ?, rssi = COALESCE(?, rssi), ip = COALESCE(?, ip), uptime_s = COALESCE(?, uptime_s),
       free_heap = COALESCE(?, free_heap), volume = COALESCE(?, volume),
       reported_config_version = COALESCE(?, reported_config_version) WHERE id = ?`,
  );
  const touchOnly = db.prepare('UPDATE devices SET last_seen_at = ? WHERE id = ?');
  const insertLog = db.prepare('INSERT INTO device_logs (device_id, at, ts, level, msg) VALUES (?, ?, ?, ?, ?)');
  const trimLogs = db.prepare(
    `DELETE FROM device_logs WHERE device_id = ? AND id <= (SELECT id FROM device_logs WHERE device_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
  );
  // The writes above are still better-sqlite3's statements: they run inside the synchronous transactions of the
  // group commit and of the heartbeat flush, which move to the store together. The read is on the store already.
  const readLogs = (id: string, limit: number) =>
    deps.store.selectFrom('device_logs').select(['at', 'ts', 'level', 'msg']).where('device_id', '=', id).orderBy('id', 'desc').limit(limit).execute();
  const mosqueOf = (id: string) => devices.info(id)?.mosqueId ?? null;
  const nowMs = () => deps.clock();

  /** One transaction for the whole batch; a device deleted since is skipped. */
  function writeBatch(ids: string[], logs: PendingLog[]): void {
    db.transaction(() => {
      for (const id of ids) {
        const s = live.get(id);
        if (!s || !devices.info(id)) continue;
        const seen = s.lastSeenMs === null ? null : toUnixSeconds(s.lastSeenMs);
        const hb = s.pendingHeartbeat;
        if (hb) writeHeartbeat.run(seen, hb.rssi ?? null, hb.ip ?? null, hb.uptime_s ?? null, hb.free_heap ?? null, hb.volume ?? null, hb.config_version ?? null, id);
        else touchOnly.run(seen, id);
      }
      const logged = new Set<string>();
      for (const l of logs) {
        if (!devices.info(l.deviceId)) continue;
        insertLog.run(l.deviceId, l.at, l.report.ts, l.report.level, l.report.msg);
        logged.add(l.deviceId);
      }
      for (const id of logged) trimLogs.run(id, id, LOGS_KEPT_PER_DEVICE);
    })();
  }



  /** The row's UPDATE and, for a transition, its timeline entry (inside the caller's transaction). */
  function writeTransition(id: string, from: string, report: Transition, source: string): void {
    const reason = report.reason ?? null;
    const now = toUnixSeconds(nowMs());
    writeStatus.run(
      report.status, reason, JSON.stringify({ prev: report.prev ?? from, reason, detail: report.detail ?? {} }), now,
      // last_seen_at is the time of the device's last packet: the backend's own verdicts (stale, disconnect) keep it.
      source === 'backend' ? null : now,
      report.fw ?? null, report.mac ?? null, report.ssid ?? null, report.ip ?? null, report.rssi ?? null,
      report.temp_c ?? null, report.uptime_s ?? null, report.config_version ?? null, id,
    );
    if (from !== report.status) {
      timeline.record({ deviceId: id, mosqueId: mosqueOf(id), kind: 'status', from, to: report.status, reason, detail: { source, ...(report.detail && { detail: report.detail }) } });
    }
  }

  const writeTransitionNow = db.transaction(writeTransition);

  return { writeBatch, writeTransition, writeTransitionNow, readLogs };
}
