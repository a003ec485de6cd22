import type { Clock } from '../platform/clock.ts';
import type { BroadcastRow } from './broadcasts.ts';
import type { Fanout } from './broadcast-fanout.ts';

/**
 * What keeps the day's slots (src/schedule/scheduler.ts): told of every start and stop, it names the slot a
 * start serves. Declared here because the schedule is this domain's sibling, not something it may import.
 */
export interface SlotKeeper {
  /** Never rejects: a slot it cannot record answers null. */
  broadcastStarted(b: { id: string; mosqueId: string; kind: string; prayer: string | null }): Promise<{ prayer: string } | null>;
  /** Never rejects. */
  broadcastStopped(b: { id: string; mosqueId: string }): Promise<void>;
}

/** The event-stream message of a start or stop (docs/api.md, "Live events of a mosque"). */
export interface BroadcastEvent {
  type: 'broadcast';
  broadcast_id: string;
  action: 'start' | 'stop';
  kind: string;
  at: string;
}

/**
 * The story of a broadcast starting and stopping, after its row is committed, in one place (docs/api.md,
 * "Broadcasts and their delivery report"; docs/firmware.md, "Broadcast events"):
 * 1. the players hear the start event first, before any bookkeeping (docs/decisions.md, "The start's `201` carries
 *    a pending report"), unless the broadcast waits for its source
 *    (src/broadcasts/source-follow.ts: the transmitters go on air first, the players hear it once the source is
 *    live) or plays the recorded azaan (a fallback: the transmitters have no part);
 * 2. the schedule records the slot the start serves at once (an auto start writes its own outcome meanwhile);
 *    an azaan started without a prayer takes the slot's prayer, which its transmitters and its push then name
 *    (the fan-out waits for that answer; a stop meanwhile still cancels them);
 * 3. the transmitters' commands and the pushes follow once the broker has written the start event;
 * 4. the mosque's open event streams hear of it.
 * A stop runs the fan-out's stop, then the schedule's, then the event.
 */
export function createBroadcastStory(deps: {
  fanout: Pick<Fanout, 'publishStart' | 'startTransmitters' | 'afterStart' | 'onStop'>;
  slots: SlotKeeper;
  announce: (mosqueId: string, event: () => BroadcastEvent) => void;
  clock: Clock;
}) {
  const event = (b: BroadcastRow, action: 'start' | 'stop') => deps.announce(b.mosque_id, () => ({
    type: 'broadcast', broadcast_id: b.id, action, kind: b.kind, at: new Date(deps.clock()).toISOString(),
  }));
  return {
    started(b: BroadcastRow): Promise<void> {
      const published = b.waiting_for_source === 0 ? deps.fanout.publishStart(b) : undefined;
      const slot = deps.slots.broadcastStarted({ id: b.id, mosqueId: b.mosque_id, kind: b.kind, prayer: b.prayer });
      const prayer = b.prayer === null ? slot.then((s) => s?.prayer ?? null) : undefined;
      if (b.waiting_for_source === 1) deps.fanout.startTransmitters(b, prayer);
      else deps.fanout.afterStart(b, { transmitters: b.fallback === 0, ...(prayer && { prayer }) });
      event(b, 'start');
      // The start answers once its slot is recorded live too: a read of the schedule right after the 201 sees it.
      return Promise.all([published, slot]).then(() => undefined);
    },
    stopped(b: BroadcastRow): void {
      deps.fanout.onStop(b);
      void deps.slots.broadcastStopped({ id: b.id, mosqueId: b.mosque_id });
      event(b, 'stop');
    },
  };
}
