import type { Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { ActivityTable } from '../../generated/tables.ts';

/** A row of `activity` (generated/tables.ts). */
export type ActivityRow = Selectable<ActivityTable>;

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

/**
 * The per-mosque activity feed. An entry is written inside the transaction of the change it describes:
 * `record` takes that transaction (or the store, for a change of one statement).
 */
export interface ActivityLog {
  record(q: Queries, entry: NewActivity): Promise<void>;
  /** Newest first; `before` is the id of the last entry of the previous page. */
  list(mosqueId: string, limit: number, before: number | null): Promise<ActivityEntry[]>;
  /** One subject's entries (a membership's status changes), newest first, at most `limit`. */
  listForSubject(mosqueId: string, subjectId: string, limit: number): Promise<ActivityEntry[]>;
}

export function createActivityLog(store: Store, clock: Clock): ActivityLog {
  const rowOf = (e: NewActivity) => ({
    mosque_id: e.mosqueId, at: toUnixSeconds(clock()), actor_user_id: e.actorUserId, kind: e.kind, subject_id: e.subjectId, data: JSON.stringify(e.data ?? {}),
  });
  return {
    async record(q, e) {
      await q.insertInto('activity').values(rowOf(e)).execute();
    },
    async list(mosqueId, limit, before) {
      const rows = await store.selectFrom('activity').selectAll().where('mosque_id', '=', mosqueId)
        .where('id', '<', before ?? Number.MAX_SAFE_INTEGER).orderBy('id', 'desc').limit(limit).execute();
      return rows.map(toActivityEntry);
    },
    async listForSubject(mosqueId, subjectId, limit) {
      const rows = await store.selectFrom('activity').selectAll().where('mosque_id', '=', mosqueId)
        .where('subject_id', '=', subjectId).orderBy('id', 'desc').limit(limit).execute();
      return rows.map(toActivityEntry);
    },
  };
}
