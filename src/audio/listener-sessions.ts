import crypto from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { AudioListenerSessionsTable } from '../../generated/tables.ts';

/** A row of `audio_listener_sessions` (generated/tables.ts), narrowed to the values written here. */
export type ListenerSessionRow = Omit<Selectable<AudioListenerSessionsTable>, 'end_reason'> & { end_reason: SessionEnd | null };

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
export function createListenerSessions(store: Store, clock: Clock) {
  const now = () => toUnixSeconds(clock());
  const sessions = (q: Queries = store) => q.selectFrom('audio_listener_sessions').selectAll().$castTo<ListenerSessionRow>();
  const open = (q: Queries = store) => sessions(q).where('ended_at', 'is', null);

  /** Ends a session once; null when it had already ended (a listener_remove after Minaret removed it). */
  const closeIn = async (q: Queries, row: ListenerSessionRow, reason: SessionEnd, detail: { seconds?: number | undefined; bytes?: number | undefined } = {}): Promise<ListenerSessionRow | null> => {
    const endedAt = now();
    const r = await q.updateTable('audio_listener_sessions')
      .set((eb) => ({
        ended_at: endedAt, end_reason: reason,
        bytes: detail.bytes ?? eb.ref('bytes'),
        seconds: detail.seconds ?? sql<number>`${endedAt} - started_at`,
      }))
      .where('id', '=', row.id).where('ended_at', 'is', null)
      .executeTakeFirst();
    if (Number(r.numUpdatedRows) !== 1) return null;
    return (await sessions(q).where('id', '=', row.id).executeTakeFirst()) ?? null;
  };

  return {
    /**
     * Records an admitted listener. An open session under the same Icecast client id is a ghost of an earlier
     * Icecast run (ids restart at 1 when it does): it is closed as `replaced` first, in the same transaction.
     */
    open: (s: { mosqueId: string; clientId: number; listener: Listener; ip: string | null }): Promise<ListenerSessionRow> =>
      store.transaction().execute(async (trx) => {
        const ghost = await open(trx).where('mosque_id', '=', s.mosqueId).where('client_id', '=', s.clientId).executeTakeFirst();
        if (ghost) await closeIn(trx, ghost, 'replaced');
        const id = crypto.randomUUID();
        await trx.insertInto('audio_listener_sessions')
          .values({ id, mosque_id: s.mosqueId, client_id: s.clientId, device_id: s.listener.deviceId ?? null, user_id: s.listener.userId ?? null, ip: s.ip, started_at: now() })
          .execute();
        return (await sessions(trx).where('id', '=', id).executeTakeFirstOrThrow());
      }),
    findOpen: async (mosqueId: string, clientId: number): Promise<ListenerSessionRow | null> =>
      (await open().where('mosque_id', '=', mosqueId).where('client_id', '=', clientId).executeTakeFirst()) ?? null,
    /** Ends a session once; null when it had already ended (a listener_remove after Minaret removed it). */
    close: (row: ListenerSessionRow, reason: SessionEnd, detail: { seconds?: number | undefined; bytes?: number | undefined } = {}) => closeIn(store, row, reason, detail),
    listOpen: (mosqueId?: string): Promise<ListenerSessionRow[]> =>
      (mosqueId === undefined ? open() : open().where('mosque_id', '=', mosqueId)).orderBy('started_at').orderBy('id').execute(),
    listOpenForDevice: (deviceId: string): Promise<ListenerSessionRow[]> => open().where('device_id', '=', deviceId).execute(),
    listOpenForUser: (userId: string): Promise<ListenerSessionRow[]> => open().where('user_id', '=', userId).execute(),
    /** Sessions of a mosque that overlap [from, to) (Unix seconds): who heard a broadcast, and how long. */
    listOverlapping: (mosqueId: string, from: number, to: number): Promise<ListenerSessionRow[]> =>
      sessions().where('mosque_id', '=', mosqueId).where('started_at', '<', to)
        .where((eb) => eb.or([eb('ended_at', 'is', null), eb('ended_at', '>=', from)]))
        .orderBy('started_at').orderBy('id').execute(),
    async refuse(r: { mosqueId: string | null; kind: 'listener' | 'source'; reason: string; deviceId?: string | null; userId?: string | null }): Promise<void> {
      await store.insertInto('audio_refusals')
        .values({ mosque_id: r.mosqueId, kind: r.kind, reason: r.reason, device_id: r.deviceId ?? null, user_id: r.userId ?? null, at: now() })
        .execute();
    },
    /** Refusals of a mosque in [from, to), counted by reason and by whom the credential named. */
    async countRefusals(mosqueId: string, from: number, to: number): Promise<RefusalCount[]> {
      const rows = await store.selectFrom('audio_refusals')
        .select((eb) => ['reason', 'kind', 'device_id', 'user_id', eb.fn.countAll<number>().as('count')])
        .where('mosque_id', '=', mosqueId).where('at', '>=', from).where('at', '<', to)
        .groupBy(['reason', 'kind', 'device_id', 'user_id'])
        .orderBy('count', 'desc').orderBy('reason')
        .execute();
      return rows.map((r) => ({ ...r, kind: r.kind as RefusalCount['kind'], count: Number(r.count) }));
    },
    /** Ended sessions and refusals older than `before` (Unix seconds) go (the nightly pass). */
    async prune(before: number): Promise<number> {
      const sessionsGone = await store.deleteFrom('audio_listener_sessions').where('ended_at', 'is not', null).where('ended_at', '<', before).executeTakeFirst();
      const refusalsGone = await store.deleteFrom('audio_refusals').where('at', '<', before).executeTakeFirst();
      return Number(sessionsGone.numDeletedRows) + Number(refusalsGone.numDeletedRows);
    },
  };
}

export type ListenerSessions = ReturnType<typeof createListenerSessions>;
