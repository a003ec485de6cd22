import crypto from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import type { Queries, Store } from '../platform/store/store.ts';
import type { ActivityLog } from '../mosques/activity.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import type { BroadcastsTable } from '../../generated/tables.ts';

export const BROADCAST_KINDS = ['azaan', 'jummah', 'waaz', 'announcement'] as const;
export type BroadcastKind = (typeof BROADCAST_KINDS)[number];

/** Who heard a broadcast, as the audio server saw it (docs/api.md, "Broadcasts and the audio server"). */
export interface Listeners {
  /** Players and members the audio server admitted to the mosque's mount while the broadcast was on. */
  admitted: { devices: number; members: number };
  /** Seconds heard within the broadcast, all listeners together. */
  seconds: number;
  /** Listeners refused in that time, by reason (no lease, expired, another mosque's, membership not approved...). */
  refused: Record<string, number>;
  /** Each listener with the seconds it heard within the broadcast, the longest first. */
  heard: Array<{ device_id: string | null; user_id: string | null; seconds: number }>;
  /** True when `heard` stops at its bound (HEARD_LIST_MAX in src/broadcasts/who-heard.ts). */
  truncated: boolean;
}

/** Counts per outcome over the mosque's stream players, plus push deliveries (docs/api.md, "Broadcasts and their delivery report"). */
export interface DeliveryReport {
  playing: number;
  unbound: number;
  muted: number;
  offline: number;
  stream_error: number;
  other: number;
  /** Players that played their cached recording for this azaan (docs/firmware.md, "The azaan without the network"). */
  covered_locally: number;
  push: { queued: number; sent: number; failed: number };
  /**
   * The mosque's transmitters, counted apart from the players (a transmitter sends the azaan, it is not a home that
   * heard it): how many played it and how many did not. Absent when the mosque has none.
   */
  transmitters?: { playing: number; not_playing: number };
  /** With an audio server: who the audio server admitted and for how long (src/broadcasts/who-heard.ts). */
  listeners?: Listeners;
  /** Only in the start's 201 (docs/decisions.md, "The start's `201` carries a pending report"): the counts are not read yet, all zero; GET of the broadcast has them. */
  pending?: true;
}

/** What the start's 201 carries instead of counts it would have to read before the players hear the start. */
export const PENDING_REPORT: Readonly<DeliveryReport> = Object.freeze({
  playing: 0, unbound: 0, muted: 0, offline: 0, stream_error: 0, other: 0, covered_locally: 0, push: Object.freeze({ queued: 0, sent: 0, failed: 0 }), pending: true,
});

/**
 * A row of `broadcasts` (generated/tables.ts), its kind and status narrowed to the values written here.
 * `waiting_for_source` 1: started while the mosque's source was not on air, its players hear it when the source
 * goes live; `fallback` 1: plays the mosque's recorded azaan because the live one was missed.
 */
export type BroadcastRow = Omit<Selectable<BroadcastsTable>, 'kind' | 'status'> & { kind: BroadcastKind; status: 'live' | 'stopped' };

/** The HTTP shape: the row with ISO-8601 times and flags as booleans. */
export type Broadcast = Omit<BroadcastRow, 'started_at' | 'stopped_at' | 'waiting_for_source' | 'fallback'>
  & { started_at: string; stopped_at: string | null; waiting_for_source: boolean; fallback: boolean };

/** The record without its delivery report, which is read from the device timeline (src/broadcasts/broadcast-fanout.ts). */
export function toBroadcast(row: BroadcastRow): Broadcast {
  return {
    ...row, started_at: toIsoString(row.started_at), stopped_at: row.stopped_at === null ? null : toIsoString(row.stopped_at),
    waiting_for_source: row.waiting_for_source === 1, fallback: row.fallback === 1,
  };
}

export interface StartBroadcast {
  kind: BroadcastKind;
  prayer: string | null;
  title: string | null;
  /** The mosque's source is not on air: the players wait for it (src/broadcasts/source-follow.ts). */
  waitForSource?: boolean;
  /** Plays the recorded azaan (a missed live one). */
  fallback?: boolean;
  /**
   * Asked inside the start's transaction once its row is written, with the new broadcast's id: false refuses the
   * start (`conflict`) and the transaction is rolled back, so nothing is written. A scheduled start checks that
   * its claim on the slot is still its own and records the slot as served by this broadcast, in one write
   * (src/schedule/scheduler.ts).
   */
  guard?: (trx: Queries, broadcastId: string) => Promise<boolean>;
}

/**
 * Told of every start and stop once its row is committed (src/broadcasts/broadcast-story.ts). A start's listener
 * may answer a promise: the start resolves once it settles (the start event is with the broker before the 201:
 * docs/decisions.md, "The start's `201` carries a pending report"); it must never reject.
 */
export interface BroadcastListener {
  started(b: BroadcastRow): Promise<void> | void;
  stopped(b: BroadcastRow): void;
}

/**
 * The record of a broadcast and its activity entries. Reaching devices and members (fan-out, delivery
 * report, the schedule) is src/broadcasts/broadcast-story.ts's: it listens through `listen`, told once the
 * row is committed. A start and a stop write their activity entry in the same store transaction as the row.
 */
export function createBroadcasts(deps: { store: Store; clock: Clock; activity: Pick<ActivityLog, 'record'> }) {
  const { store, activity } = deps;
  const listeners: BroadcastListener[] = [];
  /** Whether a start now waits for the mosque's source (src/broadcasts/source-follow.ts); never without an audio server. */
  let waitsForSource: (mosqueId: string) => Promise<boolean> = async () => false;
  const now = () => toUnixSeconds(deps.clock());
  const rows = (q: Queries = store) => q.selectFrom('broadcasts').selectAll().$castTo<BroadcastRow>();

  return {
    listen: (listener: BroadcastListener) => void listeners.push(listener),
    /** With an audio server, the source follow says whether a start waits for the mosque's source to go live. */
    gateOnSource: (waits: (mosqueId: string) => Promise<boolean>) => void (waitsForSource = waits),
    find: async (mosqueId: string, id: string): Promise<BroadcastRow | null> =>
      (await rows().where('id', '=', id).where('mosque_id', '=', mosqueId).executeTakeFirst()) ?? null,
    findLive: async (mosqueId: string): Promise<BroadcastRow | null> =>
      (await rows().where('mosque_id', '=', mosqueId).where('status', '=', 'live').executeTakeFirst()) ?? null,
    /** The source went live: a waiting broadcast stops waiting. True for the one call that changed it (several processes may hear it). */
    async markSourceLive(id: string): Promise<boolean> {
      const r = await store.updateTable('broadcasts').set({ waiting_for_source: 0 }).where('id', '=', id).where('waiting_for_source', '=', 1).executeTakeFirst();
      return Number(r.numUpdatedRows) > 0;
    },
    /** A waiting broadcast whose source never came plays the recording instead. */
    async markFallback(id: string): Promise<boolean> {
      const r = await store.updateTable('broadcasts').set({ waiting_for_source: 0, fallback: 1 }).where('id', '=', id).where('status', '=', 'live').executeTakeFirst();
      return Number(r.numUpdatedRows) > 0;
    },
    /**
     * Newest first. A mosque's broadcasts follow one another (one live at a time), so within one second of
     * starts the live one is the newest, then the one stopped last; the id only orders two broadcasts started
     * and stopped within the same second.
     */
    list: (mosqueId: string, limit: number, sinceS?: number): Promise<BroadcastRow[]> =>
      rows().where('mosque_id', '=', mosqueId).$if(sinceS !== undefined, (q) => q.where('started_at', '>=', sinceS!))
        .orderBy('started_at', 'desc').orderBy(sql`stopped_at IS NULL`, 'desc').orderBy('stopped_at', 'desc').orderBy('id', 'desc')
        .limit(limit).execute(),

    /** One live broadcast per mosque at a time: a second start while one is live is a conflict. */
    /** `actorId` is null when the service starts it itself (a mosque's `auto_start`, docs/schedule.md, "Setting a mosque's times"). */
    async start(mosqueId: string, input: StartBroadcast, actorId: string | null): Promise<Result<BroadcastRow>> {
      // Asked before the transaction: the source follow reads the store, which waits while a transaction holds it.
      const waits = !input.fallback && (input.waitForSource ?? await waitsForSource(mosqueId));
      const refused = new Error('guard refused');
      const started = await store.transaction().execute(async (trx): Promise<Result<BroadcastRow>> => {
        const id = crypto.randomUUID();
        // One live broadcast per mosque is the unique index broadcasts_one_live (migration 002): a start while
        // one is live inserts nothing, whichever process or connection started the other (on PostgreSQL the
        // second insert waits for the first one's transaction, then does nothing). RETURNING (SQLite 3.35,
        // PostgreSQL) hands back the row as stored, without a read of its own.
        const row = await trx.insertInto('broadcasts').values({
          id, mosque_id: mosqueId, kind: input.kind, prayer: input.prayer, title: input.title, status: 'live',
          started_by: actorId, started_at: now(), waiting_for_source: waits ? 1 : 0, fallback: input.fallback ? 1 : 0,
        }).onConflict((oc) => oc.column('mosque_id').where('status', '=', sql.lit('live')).doNothing())
          .returningAll().$castTo<BroadcastRow>().executeTakeFirst();
        if (!row) return fail('conflict', 'A broadcast is already live for this mosque; stop it first.');
        if (input.guard && !(await input.guard(trx, id))) throw refused; // rolls the row back
        const data = { kind: input.kind, prayer: input.prayer, ...(waits && { waiting_for_source: true }), ...(input.fallback && { fallback: true }) };
        await activity.record(trx, { mosqueId, actorUserId: actorId, kind: 'broadcast.started', subjectId: id, data });
        return ok(row);
      }).catch((err: unknown): Result<BroadcastRow> => {
        if (err === refused) return fail('conflict', 'This scheduled start was taken over by another process.');
        throw err;
      });
      if (started.ok) await Promise.all(listeners.map((l) => l.started(started.value)));
      return started;
    },

    /** Stopping a stopped broadcast changes nothing and answers the record. */
    async stop(broadcast: BroadcastRow, actorId: string | null): Promise<BroadcastRow> {
      if (broadcast.status === 'stopped') return broadcast;
      const { changed, stopped } = await store.transaction().execute(async (trx) => {
        // Only a live one: between a caller's read and its stop another request, or another process, may have stopped it.
        const r = await trx.updateTable('broadcasts').set({ status: 'stopped', stopped_by: actorId, stopped_at: now() })
          .where('id', '=', broadcast.id).where('status', '=', 'live').executeTakeFirst();
        const changed = r.numUpdatedRows > 0n;
        if (changed) await activity.record(trx, { mosqueId: broadcast.mosque_id, actorUserId: actorId, kind: 'broadcast.stopped', subjectId: broadcast.id, data: {} });
        return { changed, stopped: await rows(trx).where('id', '=', broadcast.id).where('mosque_id', '=', broadcast.mosque_id).executeTakeFirstOrThrow() };
      });
      if (changed) for (const l of listeners) l.stopped(stopped);
      return stopped;
    },
  };
}

export type Broadcasts = ReturnType<typeof createBroadcasts>;
