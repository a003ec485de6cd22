import type { Audio } from '../audio/audio.ts';
import type { Broadcasts, StartBroadcast } from './broadcasts.ts';
import type { PushOutbox } from './push-outbox.ts';
import type { SourceFollow } from './source-follow.ts';

/**
 * What the schedule asks of broadcasts for a slot (docs/schedule.md): its auto start, its missed-azaan
 * push, and with an audio server whether the mosque's source sounded and the recorded azaan instead.
 * src/schedule/scheduler.ts declares the shape it takes; schedule and broadcasts are siblings and import
 * nothing of each other, so this side is written here and handed over in src/service.ts.
 */
export function slotBroadcasts(deps: {
  broadcasts: Pick<Broadcasts, 'start'>;
  follow: Pick<SourceFollow, 'sourceProblem' | 'startFallback'>;
  outbox: Pick<PushOutbox, 'enqueue' | 'drain'>;
  audio: Pick<Audio, 'listOnAirIntervals'> | null;
  /** Where a push no caller awaits reports its failure. */
  onError: (what: string, err: unknown) => void;
}) {
  const { broadcasts, follow, outbox, audio } = deps;
  return {
    /** An auto start is the service's own: no title, no actor. */
    async startAzaan(
      mosqueId: string, call: { kind: 'azaan' | 'jummah'; prayer: string }, guard?: StartBroadcast['guard'],
    ): Promise<{ ok: true; broadcastId: string } | { ok: false; message: string }> {
      const started = await broadcasts.start(mosqueId, { ...call, title: null, ...(guard && { guard }) }, null);
      return started.ok ? { ok: true, broadcastId: started.value.id } : { ok: false, message: started.message ?? started.failure };
    },
    /** Queued, then sent at once rather than at the outbox's next tick. */
    push(userIds: string[], payload: Record<string, unknown>): void {
      void outbox.enqueue(null, userIds, payload).then(() => outbox.drain()).catch((err: unknown) => deps.onError('push outbox', err));
    },
    // With an audio server, what it saw serves a slot or misses it (src/broadcasts/source-follow.ts).
    ...(audio && {
      source: {
        sounded: async (mosqueId: string, fromMs: number, toMs: number) => (await audio.listOnAirIntervals(mosqueId, Math.floor(fromMs / 1000), Math.ceil(toMs / 1000))).length > 0,
        problem: () => follow.sourceProblem() ?? 'no_source',
        startFallback: (mosqueId: string, prayer: string) => follow.startFallback(mosqueId, prayer),
      },
    }),
  };
}
