import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';

export interface ListenerSessionRow {
  id: string;
  mosque_id: string;
  client_id: number;
  device_id: string | null;
  user_id: string | null;
  ip: string | null;
  started_at: number;
  ended_at: number | null;
  seconds: number | null;
  bytes: number | null;
  end_reason: SessionEnd | null;
}

/** `left`: Icecast's listener_remove; `revoked`: Minaret removed it; `reconciled`: Icecast no longer had it; `replaced`: Icecast reused its id. */
export type SessionEnd = 'left' | 'revoked' | 'reconciled' | 'replaced';

/** Who an admitted listener is: a stream player by its lease, or a member by a console ticket. */
export type Listener = { deviceId: string; userId?: undefined } | { userId: string; deviceId?: undefined };

export interface RefusalCount {
  reason: string;
  kind: 'listener' | 'source';
  device_id: string | null;
  user_id: string | null;
  count: number;
}

/** The listener sessions and refusals (data/migrations/016_audio.sql); the only code that names those tables. */
export function createListenerSessions(db: Db, clock: Clock) {
  const now = () => toUnixSeconds(clock());
  const insert = db.prepare(
    `INSERT INTO audio_listener_sessions (id, mosque_id, client_id, device_id, user_id, ip, started_at)
     VALUES (@id, @mosque_id, @client_id, @device_id, @user_id, @ip, @started_at)`,
  );
  const byId = db.prepare<[string], ListenerSessionRow>('SELECT * FROM audio_listener_sessions WHERE id = ?');
  const openOf = db.prepare<[string, number], ListenerSessionRow>('SELECT * FROM audio_listener_sessions WHERE mosque_id = ? AND client_id = ? AND ended_at IS NULL');
  const end = db.prepare(
    `UPDATE audio_listener_sessions SET ended_at = @ended_at, end_reason = @reason, bytes = COALESCE(@bytes, bytes),
       seconds = COALESCE(@seconds, @ended_at - started_at) WHERE id = @id AND ended_at IS NULL`,
  );
  const openAll = db.prepare<[], ListenerSessionRow>('SELECT * FROM audio_listener_sessions WHERE ended_at IS NULL ORDER BY started_at, id');
  const openForMosque = db.prepare<[string], ListenerSessionRow>('SELECT * FROM audio_listener_sessions WHERE mosque_id = ? AND ended_at IS NULL ORDER BY started_at, id');
  const openForDevice = db.prepare<[string], ListenerSessionRow>('SELECT * FROM audio_listener_sessions WHERE device_id = ? AND ended_at IS NULL');
  const openForUser = db.prepare<[string], ListenerSessionRow>('SELECT * FROM audio_listener_sessions WHERE user_id = ? AND ended_at IS NULL');
  const overlapping = db.prepare<[string, number, number], ListenerSessionRow>(
    'SELECT * FROM audio_listener_sessions WHERE mosque_id = ? AND started_at < ? AND (ended_at IS NULL OR ended_at >= ?) ORDER BY started_at, id',
  );
  const refuse = db.prepare('INSERT INTO audio_refusals (mosque_id, kind, reason, device_id, user_id, at) VALUES (?, ?, ?, ?, ?, ?)');
  const refusalsIn = db.prepare<[string, number, number], RefusalCount>(
    `SELECT reason, kind, device_id, user_id, count(*) AS count FROM audio_refusals WHERE mosque_id = ? AND at >= ? AND at < ?
     GROUP BY reason, kind, device_id, user_id ORDER BY count DESC, reason`,
  );
  const pruneSessions = db.prepare('DELETE FROM audio_listener_sessions WHERE ended_at IS NOT NULL AND ended_at < ?');
  const pruneRefusals = db.prepare('DELETE FROM audio_refusals WHERE at < ?');

  const close = (row: ListenerSessionRow, reason: SessionEnd, detail: { seconds?: number | undefined; bytes?: number | undefined } = {}): ListenerSessionRow | null => {
    const changed = end.run({ id: row.id, ended_at: now(), reason, seconds: detail.seconds ?? null, bytes: detail.bytes ?? null }).changes;
    return changed === 1 ? byId.get(row.id)! : null;
  };

  return {
    /**
     * Records an admitted listener. An open session under the same Icecast client id is a ghost of an earlier
     * Icecast run (ids restart at 1 when it does): it is closed as `replaced` first.
     */
    open(s: { mosqueId: string; clientId: number; listener: Listener; ip: string | null }): ListenerSessionRow {
      return db.transaction(() => {
        const ghost = openOf.get(s.mosqueId, s.clientId);
        if (ghost) close(ghost, 'replaced');
        const id = crypto.randomUUID();
        insert.run({ id, mosque_id: s.mosqueId, client_id: s.clientId, device_id: s.listener.deviceId ?? null, user_id: s.listener.userId ?? null, ip: s.ip, started_at: now() });
        return byId.get(id)!;
      })();
    },
    findOpen: (mosqueId: string, clientId: number) => openOf.get(mosqueId, clientId) ?? null,
    /** Ends a session once; null when it had already ended (a listener_remove after Minaret removed it). */
    close,
    listOpen: (mosqueId?: string) => (mosqueId === undefined ? openAll.all() : openForMosque.all(mosqueId)),
    listOpenForDevice: (deviceId: string) => openForDevice.all(deviceId),
    listOpenForUser: (userId: string) => openForUser.all(userId),
    /** Sessions of a mosque that overlap [from, to) (Unix seconds): who heard a broadcast, and how long. */
    listOverlapping: (mosqueId: string, from: number, to: number) => overlapping.all(mosqueId, to, from),
    refuse(r: { mosqueId: string | null; kind: 'listener' | 'source'; reason: string; deviceId?: string | null; userId?: string | null }): void {
      refuse.run(r.mosqueId, r.kind, r.reason, r.deviceId ?? null, r.userId ?? null, now());
    },
    /** Refusals of a mosque in [from, to), counted by reason and by whom the credential named. */
    countRefusals: (mosqueId: string, from: number, to: number) => refusalsIn.all(mosqueId, from, to),
    /** Ended sessions and refusals older than `before` (Unix seconds) go (the nightly pass). */
    prune(before: number): number {
      return pruneSessions.run(before).changes + pruneRefusals.run(before).changes;
    },
  };
}

export type ListenerSessions = ReturnType<typeof createListenerSessions>;
