import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';

export interface TimelineRow {
  id: number;
  device_id: string;
  mosque_id: string | null;
  at: number;
  kind: string;
  from_status: string | null;
  to_status: string | null;
  reason: string | null;
  actor_user_id: string | null;
  detail: string;
}

/** contract 7: `{id, at, device_id, mosque_id, kind, from, to, reason, detail}`. */
export function toTimelineEntry(row: TimelineRow) {
  return {
    id: String(row.id),
    at: toIsoString(row.at),
    device_id: row.device_id,
    mosque_id: row.mosque_id,
    kind: row.kind,
    from: row.from_status,
    to: row.to_status,
    reason: row.reason,
    actor_user_id: row.actor_user_id,
    detail: JSON.parse(row.detail) as Record<string, unknown>,
  };
}

export interface TimelineEvent {
  deviceId: string;
  mosqueId: string | null;
  kind: string;
  from?: string | null;
  to?: string | null;
  reason?: string | null;
  actorUserId?: string | null;
  detail?: Record<string, unknown>;
  /** Unix seconds; now by default (a note written later than it happened carries its own time). */
  at?: number;
}

/**
 * The seed's mosque_device_events timeline, with retention so a Raspberry Pi's card does not fill up.
 * `pendingFirst` commits notes still waiting in the device group commit, so that a note written directly
 * (outside a transaction) and a page read come after them, in the order things happened.
 */
export function createTimeline(db: Db, clock: Clock, pendingFirst: () => void = () => undefined) {
  const insert = db.prepare(
    `INSERT INTO mosque_device_events (device_id, mosque_id, at, kind, from_status, to_status, reason, actor_user_id, detail)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const page = db.prepare<[string, number, number], TimelineRow>(
    'SELECT * FROM mosque_device_events WHERE device_id = ? AND id < ? ORDER BY id DESC LIMIT ?',
  );
  const olderThan = db.prepare('DELETE FROM mosque_device_events WHERE at < ?');
  const overCap = db.prepare<[number], { device_id: string }>(
    'SELECT device_id FROM mosque_device_events GROUP BY device_id HAVING count(*) > ?',
  );
  const trim = db.prepare(
    `DELETE FROM mosque_device_events WHERE device_id = ? AND id <= (
       SELECT id FROM mosque_device_events WHERE device_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`,
  );

  return {
    record(e: TimelineEvent): void {
      if (!db.inTransaction) pendingFirst();
      insert.run(e.deviceId, e.mosqueId, e.at ?? toUnixSeconds(clock()), e.kind, e.from ?? null, e.to ?? null, e.reason ?? null, e.actorUserId ?? null, JSON.stringify(e.detail ?? {}));
    },
    /** Newest first; `before` is the id of the last entry of the previous page. */
    list(deviceId: string, limit: number, before: number | null) {
      pendingFirst();
      return page.all(deviceId, before ?? Number.MAX_SAFE_INTEGER, limit).map(toTimelineEntry);
    },
    /** Deletes events older than the retention and, per device, all but the newest `cap`. Returns how many went. */
    prune(retentionDays: number, cap: number): number {
      return db.transaction(() => {
        let removed = olderThan.run(toUnixSeconds(clock()) - retentionDays * 86_400).changes;
        for (const { device_id } of overCap.all(cap)) removed += trim.run(device_id, device_id, cap).changes;
        return removed;
      })();
    },
  };
}

export type Timeline = ReturnType<typeof createTimeline>;
