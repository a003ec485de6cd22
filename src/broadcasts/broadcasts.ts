import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import type { ActivityLog } from '../mosques/activity.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { fail, ok, type Result } from '../platform/failure.ts';

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

/** Counts per outcome over the mosque's devices, plus push deliveries (docs/api.md, "Broadcasts and their delivery report"). */
export interface DeliveryReport {
  playing: number;
  unbound: number;
  muted: number;
  offline: number;
  stream_error: number;
  other: number;
  push: { queued: number; sent: number; failed: number };
  /** With an audio server: who the audio server admitted and for how long (src/broadcasts/who-heard.ts). */
  listeners?: Listeners;
  /** Only in the start's 201 (docs/decisions.md, "The start's `201` carries a pending report"): the counts are not read yet, all zero; GET of the broadcast has them. */
  pending?: true;
}

/** What the start's 201 carries instead of counts it would have to read before the players hear the start. */
export const PENDING_REPORT: Readonly<DeliveryReport> = Object.freeze({
  playing: 0, unbound: 0, muted: 0, offline: 0, stream_error: 0, other: 0, push: Object.freeze({ queued: 0, sent: 0, failed: 0 }), pending: true,
});

export interface BroadcastRow {
  id: string;
  mosque_id: string;
  kind: BroadcastKind;
  prayer: string | null;
  title: string | null;
  status: 'live' | 'stopped';
  started_by: string | null;
  started_at: number;
  stopped_by: string | null;
  stopped_at: number | null;
  /** 1: started while the mosque's source was not on air; its players hear it when the source goes live. */
  waiting_for_source: number;
  /** 1: plays the mosque's recorded azaan because the live one was missed. */
  fallback: number;
}

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
}

/** Told of every start and stop once its row is committed (src/broadcasts/broadcast-story.ts). */
export interface BroadcastListener {
  started(b: BroadcastRow): void;
  stopped(b: BroadcastRow): void;
}

/**
 * The record of a broadcast and its activity entries. Reaching devices and members (fan-out, delivery
 * report, the schedule) is src/broadcasts/broadcast-story.ts's: it listens through `listen`.
 */
export function createBroadcasts(deps: { db: Db; clock: Clock; activity: ActivityLog }) {
  const { db, activity } = deps;
  const listeners: BroadcastListener[] = [];
  /** Whether a start now waits for the mosque's source (src/broadcasts/source-follow.ts); never without an audio server. */
  let waitsForSource: (mosqueId: string) => boolean = () => false;
  const byId = db.prepare<[string, string], BroadcastRow>('SELECT * FROM broadcasts WHERE id = ? AND mosque_id = ?');
  const live = db.prepare<[string], BroadcastRow>("SELECT * FROM broadcasts WHERE mosque_id = ? AND status = 'live'");
  const insert = db.prepare(
    `INSERT INTO broadcasts (id, mosque_id, kind, prayer, title, status, started_by, started_at, waiting_for_source, fallback)
     VALUES (?, ?, ?, ?, ?, 'live', ?, ?, ?, ?)`,
  );
  const sourceLive = db.prepare('UPDATE broadcasts SET waiting_for_source = 0 WHERE id = ? AND waiting_for_source = 1');
  const becomeFallback = db.prepare("UPDATE broadcasts SET waiting_for_source = 0, fallback = 1 WHERE id = ? AND status = 'live'");
  const stop = db.prepare("UPDATE broadcasts SET status = 'stopped', stopped_by = ?, stopped_at = ? WHERE id = ?");
  const page = db.prepare<[string, number], BroadcastRow>('SELECT * FROM broadcasts WHERE mosque_id = ? ORDER BY started_at DESC, rowid DESC LIMIT ?');
  const now = () => toUnixSeconds(deps.clock());

  return {
    listen: (listener: BroadcastListener) => void listeners.push(listener),
    /** With an audio server, the source follow says whether a start waits for the mosque's source to go live. */
    gateOnSource: (waits: (mosqueId: string) => boolean) => void (waitsForSource = waits),
    find: (mosqueId: string, id: string) => byId.get(id, mosqueId) ?? null,
    findLive: (mosqueId: string) => live.get(mosqueId) ?? null,
    /** The source went live: a waiting broadcast stops waiting. True for the one call that changed it (several processes may hear it). */
    markSourceLive: (id: string) => sourceLive.run(id).changes > 0,
    /** A waiting broadcast whose source never came plays the recording instead. */
    markFallback: (id: string) => becomeFallback.run(id).changes > 0,
    list: (mosqueId: string, limit: number) => page.all(mosqueId, limit),

    /** One live broadcast per mosque at a time: a second start while one is live is a conflict. */
    /** `actorId` is null when the service starts it itself (a mosque's `auto_start`, docs/schedule.md, "Setting a mosque's times"). */
    start(mosqueId: string, input: StartBroadcast, actorId: string | null): Result<BroadcastRow> {
      const started = db.transaction((): Result<BroadcastRow> => {
        if (live.get(mosqueId)) return fail('conflict', 'A broadcast is already live for this mosque; stop it first.');
        const id = crypto.randomUUID();
        const waits = !input.fallback && (input.waitForSource ?? waitsForSource(mosqueId));
        insert.run(id, mosqueId, input.kind, input.prayer, input.title, actorId, now(), waits ? 1 : 0, input.fallback ? 1 : 0);
        const data = { kind: input.kind, prayer: input.prayer, ...(waits && { waiting_for_source: true }), ...(input.fallback && { fallback: true }) };
        activity.recordSync({ mosqueId, actorUserId: actorId, kind: 'broadcast.started', subjectId: id, data });
        return ok(byId.get(id, mosqueId)!);
      })();
      if (started.ok) for (const l of listeners) l.started(started.value);
      return started;
    },

    /** Stopping a stopped broadcast changes nothing and answers the record. */
    stop(broadcast: BroadcastRow, actorId: string | null): BroadcastRow {
      if (broadcast.status === 'stopped') return broadcast;
      db.transaction(() => {
        stop.run(actorId, now(), broadcast.id);
        activity.recordSync({ mosqueId: broadcast.mosque_id, actorUserId: actorId, kind: 'broadcast.stopped', subjectId: broadcast.id, data: {} });
      })();
      const stopped = byId.get(broadcast.id, broadcast.mosque_id)!;
      for (const l of listeners) l.stopped(stopped);
      return stopped;
    },
  };
}

export type Broadcasts = ReturnType<typeof createBroadcasts>;
