import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { BroadcastRow, DeliveryReport } from './broadcasts.ts';
import type { Commands } from '../devices/commands.ts';
import { topics, type DeviceLink } from '../devices/device-link.ts';
import type { DeviceStore } from '../devices/devices.ts';
import type { Store } from '../platform/store/store.ts';
import { createDeliveryStatuses } from '../devices/timeline.ts';
import type { Logger } from '../platform/log.ts';
import type { MosqueStore } from '../mosques/mosques.ts';
import type { Memberships } from '../mosques/memberships.ts';
import type { PushOutbox } from './push-outbox.ts';

/**
 * Runs `fn` once the broker has written the start event to its subscribers. aedes stores the retained copy
 * through a promise and then walks the subscribers, so the walk has begun by the first setImmediate after
 * the publish; from there the broker says when the writes of its last slice are done (`afterDeliveries`). A link
 * without it gets two hops: aedes queues each subscriber's write in a setImmediate of its own, behind any the
 * caller queued in the same turn, so one hop would run `fn` before the first player hears anything.
 */
export function afterFanoutWrites(link: DeviceLink, topic: string, fn: () => void): void {
  setImmediate(() => (link.afterDeliveries ? link.afterDeliveries(topic, fn) : setImmediate(fn)));
}

/** How long after the start a device's new status still counts for the report. */
export const REPORT_WINDOW_SECONDS = 120;
/** A PLAYING reported this long after the stop still counts: the device heard the start late, not nothing. */
export const REPORT_TAIL_SECONDS = 10;

/** A local play's status arriving this long after the start still counts: a player reconnects within its config's 48 hours of slots. */
export const LOCAL_REPORT_LATE_S = 48 * 3600;

const TOGGLE = { azaan: 'notify_azaan', jummah: 'notify_jummah', waaz: 'notify_waaz', announcement: 'notify_announcement' } as const;

/** Device status -> report outcome. UNBOUND and MUTED are correct outcomes, never failures
 * (docs/api.md, "Broadcasts and their delivery report"). */
export function outcomeOf(status: string): keyof Omit<DeliveryReport, 'push' | 'transmitters' | 'listeners' | 'pending'> {
  switch (status) {
    case 'PLAYING': return 'playing';
    case 'UNBOUND': return 'unbound';
    case 'MUTED': return 'muted';
    case 'OFFLINE':
    case 'UNKNOWN': return 'offline';
    case 'STREAM_ERROR': return 'stream_error';
    default: return 'other';
  }
}

/**
 * A broadcast reaches the mosque: broadcast_start to its transmitters, the start event on the mosque's
 * broadcast topic (which only leased players receive), and Web Push to approved members whose toggle for
 * that kind is on. Stop does the reverse. The delivery report is read from the device timeline.
 */
export function createFanout(deps: {
  /** The store port: the delivery report's read of the device timeline (src/devices/timeline.ts). */
  store: Store;
  clock: Clock;
  logger: Logger;
  devices: Pick<DeviceStore, 'listTransmitters'>;
  mosques: Pick<MosqueStore, 'findById'>;
  memberships: Pick<Memberships, 'notifiedMembers'>;
  commands: Pick<Commands, 'dispatch'>;
  outbox: PushOutbox;
  link: () => DeviceLink;
  /** The stream address a start event names: the mosque's mount with an audio server, else its own stream_url. */
  streamUrl?: (mosqueId: string) => string | null;
  /** The address of the mosque's recorded azaan (src/audio/recordings.ts), for a fallback broadcast. */
  fallbackUrl?: (mosqueId: string) => string | null;
  /**
   * How long before a broadcast's start a player's local play still counts as covering it (docs/api.md, "Broadcasts
   * and their delivery report"): SCHEDULE_GRACE_MINUTES, the latest an azaan may start after its slot.
   */
  localLeadS?: number;
}) {
  const statuses = createDeliveryStatuses(deps.store);
  const localLeadS = deps.localLeadS ?? 300;
  /** The devices whose local play (docs/firmware.md, "The azaan without the network") covered an azaan or Jumu'ah broadcast. */
  const coveredBy = async (b: BroadcastRow, playedUntil: number, now: number): Promise<Set<string>> => {
    if (b.kind !== 'azaan' && b.kind !== 'jummah') return new Set();
    const plays = await statuses.localPlays({ mosque: b.mosque_id, from: b.started_at - localLeadS, until: Math.min(now, b.started_at + LOCAL_REPORT_LATE_S) });
    return new Set(plays.filter((p) => p.playedFor >= b.started_at - localLeadS && p.playedFor <= playedUntil).map((p) => p.deviceId));
  };

  // Starts whose transmitter commands and pushes still wait behind the fan-out writes (afterStart). The POST
  // answers before they run, so a stop can come first: its broadcast_stop must stay the transmitters' last word.
  const startsPending = new Set<string>();

  // Start events that wait for the mosque's own stream address (read from the store: no audio server, not a
  // fallback), by broadcast: the rest of the start, and the stop's event, follow once it is published.
  const startsReading = new Map<string, Promise<void>>();

  function sendEvent(b: BroadcastRow, action: 'start' | 'stop', streamUrl: string | null): void {
    const event = { v: '1.0', broadcast_id: b.id, kind: b.kind, action, ...(streamUrl && action === 'start' && { stream_url: streamUrl }), ts: toUnixSeconds(deps.clock()) };
    // Retained, so a leased player that (re)connects during the broadcast learns it is on.
    deps.link().publish(topics.broadcast(b.mosque_id), event, { qos: 1, retain: true }).catch((err: Error) => deps.logger.warn({ broadcast_id: b.id, err: err.message }, 'broadcast publish failed'));
  }

  /** Resolves once the event is with the broker (a start may first read the mosque's address); never rejects. */
  function publishEvent(b: BroadcastRow, action: 'start' | 'stop'): Promise<void> | undefined {
    const reading = startsReading.get(b.id);
    // A stop's event names no address; it waits only for a start still reading its own, so it stays the last word.
    if (action === 'stop') {
      if (reading) void reading.then(() => sendEvent(b, 'stop', null));
      else sendEvent(b, 'stop', null);
      return undefined;
    }
    // A fallback names the recording; players add their lease to it (docs/firmware.md, "4.3 Broadcast events").
    const known = b.fallback === 1 && deps.fallbackUrl ? deps.fallbackUrl(b.mosque_id) : deps.streamUrl ? deps.streamUrl(b.mosque_id) : undefined;
    if (known !== undefined) {
      sendEvent(b, 'start', known);
      return undefined;
    }
    const read = deps.mosques.findById(b.mosque_id)
      .then((mosque) => sendEvent(b, 'start', mosque?.stream_url ?? null))
      .catch((err: Error) => deps.logger.warn({ broadcast_id: b.id, err: err.message }, 'broadcast publish failed'))
      .finally(() => startsReading.delete(b.id));
    startsReading.set(b.id, read);
    return read;
  }

  function commandTransmitters(b: BroadcastRow, action: 'start' | 'stop'): void {
    const name = action === 'start' ? 'broadcast_start' : 'broadcast_stop';
    for (const row of deps.devices.listTransmitters(b.mosque_id)) {
      deps.commands.dispatch(row.id, name, { broadcast_id: b.id, kind: b.kind, ...(b.prayer && { prayer: b.prayer }) });
    }
  }

  /** A start without a prayer takes the prayer of the slot it serves (the schedule names it). */
  const named = (b: BroadcastRow, prayer: string | null): BroadcastRow => (b.prayer === null && prayer ? { ...b, prayer } : b);

  return {
    /**
     * The start event goes to the broker before any bookkeeping of the start, so its caller calls
     * this first. aedes stores the retained copy through a promise and only then fans out, so any synchronous
     * work left in the same turn (rows, the report) delays the first player as much as it lasts. Without an
     * audio server a start names the mosque's own stream_url, read from the store first (one query): the
     * promise it then answers resolves once the event is with the broker (the start's 201 waits for it).
     */
    publishStart: (b: BroadcastRow): Promise<void> | undefined => publishEvent(b, 'start'),

    /**
     * broadcast_start to the transmitters alone: a broadcast waiting for its source asks them to go on air first.
     * `prayer`: the schedule is still naming the slot's prayer (a start without one); a stop meanwhile cancels it.
     */
    startTransmitters(b: BroadcastRow, prayer?: Promise<string | null>): void {
      if (!prayer) return commandTransmitters(b, 'start');
      startsPending.add(b.id);
      void prayer.then((p) => {
        if (startsPending.delete(b.id)) commandTransmitters(named(b, p), 'start');
      }).catch((err: Error) => deps.logger.error({ broadcast_id: b.id, err: err.message }, 'broadcast_start not sent'));
    },

    /**
     * The rest of a start, once aedes has written the start event to the players: broadcast_start to the
     * transmitters (they read the slot's prayer, which `b` carries by now), then a push per member's
     * subscription.
     */
    afterStart(start: BroadcastRow, opts: { transmitters?: boolean; prayer?: Promise<string | null> } = {}): void {
      startsPending.add(start.id);
      const rest = (prayer: string | null) => {
        // Stopped meanwhile: a broadcast_start now would leave the transmitters playing, a push would announce nothing.
        if (!startsPending.delete(start.id)) return;
        const b = named(start, prayer);
        if (opts.transmitters !== false) commandTransmitters(b, 'start');
        const title = b.title ?? `${b.kind === 'azaan' ? 'Azaan' : b.kind[0]!.toUpperCase() + b.kind.slice(1)}${b.prayer ? ` (${b.prayer})` : ''}`;
        // Who is notified, then (only if anyone is) the mosque's name: a few reads per broadcast, whatever the
        // number of its members, and one when no member has the toggle on.
        void deps.memberships.notifiedMembers(b.mosque_id, TOGGLE[b.kind as keyof typeof TOGGLE])
          .then(async (users) => {
            if (users.length === 0) return;
            const mosque = await deps.mosques.findById(b.mosque_id);
            const queued = await deps.outbox.enqueue(b.id, users, { title, body: mosque?.name ?? '', broadcast_id: b.id, mosque_id: b.mosque_id, kind: b.kind, prayer: b.prayer });
            if (queued > 0) await deps.outbox.drain();
          })
          .catch((err: Error) => deps.logger.error({ broadcast_id: b.id, err: err.message }, 'broadcast push failed'));
      };
      const afterWrites = () => afterFanoutWrites(deps.link(), topics.broadcast(start.mosque_id), () => {
        if (opts.prayer) void opts.prayer.then(rest).catch((err: Error) => deps.logger.error({ broadcast_id: start.id, err: err.message }, 'broadcast start not completed'));
        else rest(null);
      });
      // A start event still reading the mosque's address is not with the broker yet: its writes are waited for once it is.
      const reading = startsReading.get(start.id);
      if (reading) void reading.then(afterWrites);
      else afterWrites();
    },

    onStop(b: BroadcastRow): void {
      startsPending.delete(b.id);
      void publishEvent(b, 'stop');
      commandTransmitters(b, 'stop');
    },

    /** Each device's latest status in the window after the start, or the status it was in at the start. */
    async report(b: BroadcastRow): Promise<DeliveryReport> {
      const report: DeliveryReport = { playing: 0, unbound: 0, muted: 0, offline: 0, stream_error: 0, other: 0, covered_locally: 0, push: await deps.outbox.report(b.id) };
      // Timeline times are whole seconds: a status in the stop's own second is the device's reaction to
      // the stop (PLAYING -> ONLINE), not the outcome of the broadcast, so the window ends just before it
      // (a broadcast stopped within its first second keeps that second).
      const stopBound = b.stopped_at === null ? Number.MAX_SAFE_INTEGER : b.stopped_at - 1;
      const now = toUnixSeconds(deps.clock());
      const windowEnd = Math.max(b.started_at, Math.min(b.started_at + REPORT_WINDOW_SECONDS, stopBound, now));
      const played = { from: b.started_at, played_until: (b.stopped_at ?? now) + REPORT_TAIL_SECONDS, mosque: b.mosque_id };
      const rows = windowEnd >= now ? await statuses.now(played) : await statuses.asOf({ ...played, until: windowEnd });
      // A player that played its cached recording for this azaan is counted once, as covered locally; its status
      // may arrive long after (it reconnects), naming the slot it played for.
      const local = await coveredBy(b, played.played_until, now);
      // A transmitter is counted apart: its PLAYING is the source going out, not a home hearing it (docs/api.md).
      for (const row of rows) {
        if (row.kind === 'transmitter') {
          report.transmitters ??= { playing: 0, not_playing: 0 };
          report.transmitters[row.played === 1 ? 'playing' : 'not_playing']++;
        } else report[local.has(row.id) ? 'covered_locally' : row.played === 1 ? 'playing' : outcomeOf(row.status ?? 'UNKNOWN')]++;
      }
      return report;
    },
  };
}

export type Fanout = ReturnType<typeof createFanout>;
