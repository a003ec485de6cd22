import type { Store, StoreTransaction } from '../../platform/store/store.ts';
import { prepared } from '../../platform/store/prepared.ts';
import type { HeartbeatReport } from '../device-config.ts';
import { toUnixSeconds, type Clock } from '../../platform/clock.ts';
import type { DeviceStore } from '../devices.ts';
import type { Timeline } from '../timeline.ts';
import type { StatusReport } from '../device-config.ts';
import { LOGS_KEPT_PER_DEVICE, type Live, type PendingLog, type Transition } from './live.ts';
import { inTransaction } from '../../platform/store/after-commit.ts';
import { SeenColumns, createSeenWriter } from './seen-set.ts';
import { CONNECTED, Columns, HEARTBEAT, STATUS, createColumnWriter, type DeviceRowSet } from './row-set.ts';

export type { Transition } from './live.ts';

/** What telemetry writes to the store: a status transition, the batched heartbeats and logs; and the logs read back. */
export function createTelemetryRows(deps: { store: Store; clock: Clock; devices: DeviceStore; timeline: Timeline; live: Map<string, Live> }) {
  const { store, devices, timeline } = deps;
  // Run once per status: built and compiled once (prepared). A field the report did not carry keeps the row's value.
  type StatusValues = {
    status: string; reason: string | null; detail: string; at: number; seen: number | null; fw: string | null; mac: string | null; ssid: string | null;
    ip: string | null; rssi: number | null; temp: number | null; uptime: number | null; cfg: number | null; id: string;
  };
  const STATUS_NAMES = ['status', 'reason', 'detail', 'at', 'seen', 'fw', 'mac', 'ssid', 'ip', 'rssi', 'temp', 'uptime', 'cfg', 'id'] as const;
  const statusColumns = (v: StatusValues) => store.updateTable('devices').set((eb) => ({
    status: v.status, status_reason: v.reason, status_detail: v.detail, status_at: v.at,
    last_seen_at: eb.fn.coalesce(eb.val(v.seen), 'last_seen_at'),
    fw: eb.fn.coalesce(eb.val(v.fw), 'fw'), mac: eb.fn.coalesce(eb.val(v.mac), 'mac'), ssid: eb.fn.coalesce(eb.val(v.ssid), 'ssid'),
    ip: eb.fn.coalesce(eb.val(v.ip), 'ip'), rssi: eb.fn.coalesce(eb.val(v.rssi), 'rssi'), temp_c: eb.fn.coalesce(eb.val(v.temp), 'temp_c'),
    uptime_s: eb.fn.coalesce(eb.val(v.uptime), 'uptime_s'), reported_config_version: eb.fn.coalesce(eb.val(v.cfg), 'reported_config_version'),
  }));
  const writeStatus = prepared<StatusValues>(store, STATUS_NAMES, (v) => statusColumns(v).where('id', '=', v.id));
  // A transition: its timeline row is inserted first, and the same UPDATE makes it the device's head.
  const writeTransitionRow = prepared<StatusValues & { head: number }>(store, [...STATUS_NAMES, 'head'], (v) => statusColumns(v)
    .set((eb) => ({ timeline_head: v.head, timeline_seq: eb('timeline_seq', '+', 1) })).where('id', '=', v.id));
  const writeSeen = createSeenWriter(store);
  const insertLog = prepared<{ device: string; at: number; ts: number | null; level: string; msg: string }>(
    store, ['device', 'at', 'ts', 'level', 'msg'],
    (v) => store.insertInto('device_logs').values({ device_id: v.device, at: v.at, ts: v.ts, level: v.level, msg: v.msg }),
  );
  // Every line older than the newest LOGS_KEPT_PER_DEVICE of the device (none when it has no more than those).
  const trimLogs = prepared<{ device: string }>(store, ['device'], (v) => store.deleteFrom('device_logs').where('device_id', '=', v.device)
    .where('id', '<=', (eb) => eb.selectFrom('device_logs').select('id').where('device_id', '=', v.device).orderBy('id', 'desc').limit(1).offset(LOGS_KEPT_PER_DEVICE)));
  const readLogs = (id: string, limit: number) =>
    deps.store.selectFrom('device_logs').select(['at', 'ts', 'level', 'msg']).where('device_id', '=', id).orderBy('id', 'desc').limit(limit).execute();
  const mosqueOf = (id: string) => devices.info(id)?.mosqueId ?? null;
  const nowMs = () => deps.clock();

  /**
   * One transaction for the whole batch, on the store: each device's last-seen time and the heartbeat fields
   * taken from memory when the flush began (src/devices/telemetry/seen-set.ts); a device deleted since is skipped.
   */
  async function writeBatch(seen: Array<{ id: string; lastSeenMs: number | null; heartbeat: HeartbeatReport | null }>, logs: PendingLog[]): Promise<void> {
    await inTransaction(store, async (trx) => {
      const rows = new SeenColumns();
      for (const { id, lastSeenMs, heartbeat } of seen) {
        if (devices.info(id)) rows.push(id, lastSeenMs === null ? null : toUnixSeconds(lastSeenMs), heartbeat);
      }
      await writeSeen(trx, rows);
      const logged = new Set<string>();
      for (const l of logs) {
        if (!devices.info(l.deviceId)) continue;
        await insertLog.run(trx, { device: l.deviceId, at: l.at, ts: l.report.ts, level: l.report.level, msg: l.report.msg });
        logged.add(l.deviceId);
      }
      for (const id of logged) await trimLogs.run(trx, { device: id });
    });
  }



  const valuesOf = (id: string, from: string, report: Transition, source: string): StatusValues => {
    const reason = report.reason ?? null;
    const now = toUnixSeconds(nowMs());
    return {
      status: report.status, reason, detail: JSON.stringify({ prev: report.prev ?? from, reason, detail: report.detail ?? {} }), at: now,
      // last_seen_at is the time of the device's last packet: the backend's own verdicts (stale, disconnect) keep it.
      seen: source === 'backend' ? null : now,
      fw: report.fw ?? null, mac: report.mac ?? null, ssid: report.ssid ?? null, ip: report.ip ?? null, rssi: report.rssi ?? null,
      temp: report.temp_c ?? null, uptime: report.uptime_s ?? null, cfg: report.config_version ?? null, id,
    };
  };
  const entryOf = (id: string, from: string, report: Transition, source: string) => (
    { deviceId: id, mosqueId: mosqueOf(id), kind: 'status', from, to: report.status, reason: report.reason ?? null, detail: { source, ...(report.detail && { detail: report.detail }) } }
  );

  /** The row's UPDATE and, for a transition, its timeline entry (inside the caller's transaction). */
  async function writeTransition(trx: StoreTransaction, id: string, from: string, report: Transition, source: string): Promise<void> {
    const values = valuesOf(id, from, report, source);
    if (from === report.status) return void (await writeStatus.run(trx, values));
    const head = await timeline.appended(trx, entryOf(id, from, report, source));
    await writeTransitionRow.run(trx, { ...values, head });
  }

  const columnWriter = createColumnWriter(store);
  const SOURCES = ['status', 'heartbeat', 'backend'];
  /**
   * A batch's rows as columns, merged per device in the order they came (a later value over an earlier one, as
   * the row's COALESCE lays them); `set.written` says which were written (a device deleted meanwhile has none).
   * A report's detail is encoded once, for both the row's status_detail and the timeline entry.
   */
  function columnsOf(set: DeviceRowSet): Columns {
    const c = new Columns();
    const now = toUnixSeconds(nowMs());
    const d = c.d;
    for (let i = 0; i < set.ids.length; i++) {
      const id = set.ids[i]!;
      const info = devices.info(id);
      set.written[i] = info !== null;
      if (!info) continue;
      const dev = c.device(id);
      const kind = set.kinds[i]!;
      if (kind === CONNECTED) {
        c.timeline(dev, info.mosqueId, set.ats[i]!, 'connected', null, null, null, '{}');
        c.set(dev, 'broker', set.brokers[i]);
        timeline.appendedTo(id);
        continue;
      }
      const r = set.reports[i]!;
      const from = set.froms[i]!;
      const reason = r.reason ?? null;
      const detail = r.detail == null ? null : JSON.stringify(r.detail);
      d.status[dev] = r.status;
      d.reason[dev] = reason;
      d.detail[dev] = `{"prev":${JSON.stringify(r.prev ?? from)},"reason":${reason === null ? 'null' : JSON.stringify(reason)},"detail":${detail ?? '{}'}}`;
      d.status_at[dev] = now;
      // last_seen_at is the time of the device's last packet: the backend's own verdicts (stale, disconnect) keep it.
      if (kind === STATUS || kind === HEARTBEAT) d.seen[dev] = now;
      c.set(dev, 'fw', r.fw);
      c.set(dev, 'mac', r.mac);
      c.set(dev, 'ssid', r.ssid);
      c.set(dev, 'ip', r.ip);
      c.set(dev, 'rssi', r.rssi);
      c.set(dev, 'temp', r.temp_c);
      c.set(dev, 'uptime', r.uptime_s);
      c.set(dev, 'cfg', r.config_version);
      if (from === r.status) continue;
      const source = SOURCES[kind]!;
      c.timeline(dev, info.mosqueId, now, 'status', from, r.status, reason, detail === null ? `{"source":"${source}"}` : `{"source":"${source}","detail":${detail}}`);
      timeline.appendedTo(id);
    }
    return c;
  }
  const rowSets = {
    write: (set: DeviceRowSet, trx: StoreTransaction) => columnWriter.write(trx, columnsOf(set)),
    writeAlone: (set: DeviceRowSet) => (columnWriter.sqlite ? null : columnWriter.writeAlone(columnsOf(set))),
  };

  return { writeBatch, writeTransition, rowSets, readLogs };
}
