import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';

export interface ActivityRow {
  id: number;
  mosque_id: string;
  at: number;
  actor_user_id: string | null;
  kind: string;
  subject_id: string | null;
  data: string;
}

export interface ActivityEntry {
  id: string;
  at: string;
  actor_user_id: string | null;
  kind: string;
  subject_id: string | null;
  data: Record<string, unknown>;
}

export function toActivityEntry(row: ActivityRow): ActivityEntry {
  return {
    id: String(row.id),
    at: toIsoString(row.at),
    actor_user_id: row.actor_user_id,
    kind: row.kind,
    subject_id: row.subject_id,
    data: JSON.parse(row.data) as Record<string, unknown>,
  };
}

export interface NewActivity {
  mosqueId: string;
  actorUserId: string | null;
  kind: string;
  subjectId: string | null;
  data?: Record<string, unknown>;
}

/** The per-mosque activity feed. `record` is called inside the transaction of the change it describes. */
export interface ActivityLog {
  record(entry: NewActivity): void;
  /** Newest first; `before` is the id of the last entry of the previous page. */
  list(mosqueId: string, limit: number, before: number | null): ActivityEntry[];
  /** One subject's entries (a membership's status changes), newest first, at most `limit`. */
  listForSubject(mosqueId: string, subjectId: string, limit: number): ActivityEntry[];
}

export function createActivityLog(db: Db, clock: Clock): ActivityLog {
  const insert = db.prepare(
    'INSERT INTO activity (mosque_id, at, actor_user_id, kind, subject_id, data) VALUES (?, ?, ?, ?, ?, ?)',
  );
  const page = db.prepare<[string, number, number], ActivityRow>(
    'SELECT * FROM activity WHERE mosque_id = ? AND id < ? ORDER BY id DESC LIMIT ?',
  );
  const ofSubject = db.prepare<[string, string, number], ActivityRow>(
    'SELECT * FROM activity WHERE mosque_id = ? AND subject_id = ? ORDER BY id DESC LIMIT ?',
  );
  return {
    record(e) {
      insert.run(e.mosqueId, toUnixSeconds(clock()), e.actorUserId, e.kind, e.subjectId, JSON.stringify(e.data ?? {}));
    },
    list(mosqueId, limit, before) {
      return page.all(mosqueId, before ?? Number.MAX_SAFE_INTEGER, limit).map(toActivityEntry);
    },
    listForSubject(mosqueId, subjectId, limit) {
      return ofSubject.all(mosqueId, subjectId, limit).map(toActivityEntry);
    },
  };
}
