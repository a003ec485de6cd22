import type { Config } from '../platform/config.ts';
import type { Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { Store } from '../platform/store/store.ts';
import type { Closer } from '../platform/shutdown.ts';
import type { Mosques } from '../mosques/build.ts';
import type { DevicePlane } from '../devices/device-plane.ts';
import type { Audio } from '../audio/audio.ts';
import { recordingUrl, type Recordings } from '../audio/recordings.ts';
import { createBroadcasts } from './broadcasts.ts';
import { createPushSubscriptions } from './push-subscriptions.ts';
import { createPushOutbox, type PushSender } from './push-outbox.ts';
import { createFanout } from './broadcast-fanout.ts';
import { createSourceFollow } from './source-follow.ts';
import { createDeliveryReports } from './who-heard.ts';
import { slotBroadcasts } from './slot-story.ts';
import { createBroadcastStory, type BroadcastEvent, type SlotKeeper } from './broadcast-story.ts';
import { listenToAudio, type ListenersEvent, type OnAirEvent } from './on-air-story.ts';

export interface BroadcastsPorts {
  store: Store;
  clock: Clock;
  logger: Logger;
  mosques: Pick<Mosques, 'mosques' | 'memberships' | 'activity'>;
  plane: Pick<DevicePlane, 'ports'>;
  audio: Audio | null;
  recordings: Pick<Recordings, 'find'>;
  /** Web Push (notify/webpush.ts, handed in by the service); closed with the rest. */
  sender: PushSender & { close?(): void };
  /** With ICECAST_URL, the stream address a start names: the mosque's mount (else its own stream_url). */
  mountUrl?: ((mosqueId: string) => string) | undefined;
  /** PUBLIC_URL, else this process's own address: where players fetch the recorded azaan. */
  publicOrigin: () => string;
  /** The mosque's open event streams (docs/api.md, "Live events of a mosque"), and whether a console listens. */
  announce: (mosqueId: string, event: () => BroadcastEvent | OnAirEvent | ListenersEvent) => void;
  listened: (mosqueId: string) => boolean;
  onError: (what: string, err: unknown) => void;
}

/**
 * Broadcasts, their fan-out to devices and Web Push, the source follow and the delivery report; `slotPorts` is
 * this side of the schedule's auto start (src/broadcasts/slot-story.ts), and `connect` registers the broadcasts'
 * stories once the schedule exists (docs/architecture.md, "Where each story lives").
 */
export function buildBroadcasts(config: Config, p: BroadcastsPorts, closers: Closer[]) {
  const { store, clock, logger, mosques, audio } = p;
  const broadcasts = createBroadcasts({ store, clock, activity: mosques.activity });
  const pushSubscriptions = createPushSubscriptions(store, clock, config.maxPushSubscriptionsPerUser);
  closers.push({ name: 'push sender', close: () => p.sender.close?.() });
  const outbox = createPushOutbox({ store, clock, logger, sender: p.sender, subscriptions: pushSubscriptions, concurrency: config.pushConcurrency });
  const fanout = createFanout({
    store, clock, logger, ...p.plane.ports.fanout, mosques: mosques.mosques, memberships: mosques.memberships, outbox,
    ...(p.mountUrl && { streamUrl: p.mountUrl }),
    fallbackUrl: (mosqueId) => recordingUrl(p.publicOrigin(), mosqueId),
    localLeadS: config.scheduleGraceMinutes * 60,
  });
  const follow = createSourceFollow({
    broadcasts, fanout, audio, logger,
    recordingSeconds: async (mosqueId) => (await p.recordings.find(mosqueId))?.duration_s ?? null,
  });
  closers.push({ name: 'fallback timers', close: () => follow.stop() });
  const reports = createDeliveryReports({ fanout, broadcasts, heard: audio, clock });
  return {
    broadcasts, pushSubscriptions, outbox, reports,
    slotPorts: slotBroadcasts({ broadcasts, follow, outbox, audio, onError: p.onError }),
    connect(slots: SlotKeeper): void {
      broadcasts.gateOnSource(follow.waitsForSource);
      broadcasts.listen(createBroadcastStory({ fanout, slots, announce: p.announce, clock }));
      if (audio) listenToAudio({ audio, follow, announce: p.announce, listened: p.listened, clock, onError: p.onError });
    },
    /** The outbox is drained every second (and at once after a slot's push). */
    startOutbox(): Closer {
      const timer = setInterval(() => void outbox.drain().catch((err: unknown) => p.onError('push outbox', err)), 1000);
      timer.unref();
      return { name: 'push outbox', close: () => clearInterval(timer) };
    },
  };
}
