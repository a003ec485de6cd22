import type { Logger } from '../platform/log.ts';
import type { BroadcastRow, Broadcasts } from './broadcasts.ts';
import type { Fanout } from './broadcast-fanout.ts';

/** What this story needs of the audio gate (src/audio/audio.ts), null while ICECAST_URL is unset. */
export interface SourceFacts {
  isOnAir(mosqueId: string): Promise<boolean>;
  /** 'ok' while Icecast's admin API answers. */
  health(): 'ok' | 'down';
}

/** Why an azaan that should have sounded did not, as far as the audio server can tell. */
export type SourceProblem = 'no_source' | 'audio_server_unreachable';

/** A fallback ends this long after the recording would have (players start it a little late). */
export const FALLBACK_MARGIN_S = 10;

/**
 * A broadcast follows its mosque's source, once the audio server tells Minaret when a source is on air
 * (docs/api.md, "Broadcasts and the audio server"):
 * - a start while the source is not on air tells the transmitters to go on air at once, and the players hear
 *   the start only when the source goes live, instead of being sent to silence;
 * - the source ending stops the live broadcast;
 * - a slot missed with a recorded azaan uploaded plays the recording to every entitled player instead.
 * Icecast tells one process of a mount's start and end; the broadcast's state is in the store, so that process
 * acts for all.
 */
export function createSourceFollow(deps: {
  broadcasts: Broadcasts;
  fanout: Pick<Fanout, 'publishStart' | 'afterStart'>;
  audio: SourceFacts | null;
  /** The duration of the mosque's recorded azaan in seconds, null when it has none. */
  recordingSeconds(mosqueId: string): Promise<number | null>;
  logger: Logger;
}) {
  const { broadcasts, fanout, audio } = deps;
  const fallbackTimers = new Map<string, NodeJS.Timeout>();

  /** The players hear a broadcast that waited: the start event now, then its push (the transmitters were told at the start). */
  function releaseToPlayers(b: BroadcastRow): void {
    void fanout.publishStart(b);
    fanout.afterStart(b, { transmitters: false });
  }

  function stopFallbackLater(b: BroadcastRow, seconds: number): void {
    const timer = setTimeout(() => {
      fallbackTimers.delete(b.id);
      void broadcasts.find(b.mosque_id, b.id)
        .then(async (current) => {
          if (current?.status === 'live') await broadcasts.stop(current, null);
        })
        .catch((err: Error) => deps.logger.error({ broadcast_id: b.id, err: err.message }, 'fallback stop failed'));
    }, (seconds + FALLBACK_MARGIN_S) * 1000);
    timer.unref();
    fallbackTimers.set(b.id, timer);
  }

  return {
    /** Whether a start now waits for the source: the gate is on and the mosque's source is not on air. */
    waitsForSource: async (mosqueId: string): Promise<boolean> => audio !== null && !(await audio.isOnAir(mosqueId)),

    /** Whether this broadcast still waits for its source (a slot it serves is not yet served). */
    isWaiting: async (mosqueId: string, broadcastId: string): Promise<boolean> => (await broadcasts.find(mosqueId, broadcastId))?.waiting_for_source === 1,

    /** Why no source sounded, for a missed slot; null without an audio server. */
    sourceProblem(): SourceProblem | null {
      if (!audio) return null;
      return audio.health() === 'ok' ? 'no_source' : 'audio_server_unreachable';
    },

    /** Icecast's mount_add / mount_remove for a mosque's mount, in the process that received it. */
    async onAirChanged(mosqueId: string, live: boolean): Promise<void> {
      const b = await broadcasts.findLive(mosqueId);
      if (!b) return;
      if (live) {
        // markSourceLive changes the row for one caller only: a second mount_add meanwhile releases nothing twice.
        if (b.waiting_for_source === 1 && await broadcasts.markSourceLive(b.id)) releaseToPlayers({ ...b, waiting_for_source: 0 });
        return;
      }
      // The source ended: so did the broadcast (a fallback plays the recording, not the source). stop changes
      // only a broadcast still live: one stopped since the read above is left as it is.
      if (b.waiting_for_source === 0 && b.fallback === 0) await broadcasts.stop(b, null);
    },

    /**
     * The slot was missed: the recording plays to every entitled player, in the broadcast that waited for the
     * source if there is one, else in a new one. Returns the broadcast's id, or null without a recording.
     */
    async startFallback(mosqueId: string, prayer: string | null): Promise<string | null> {
      const seconds = await deps.recordingSeconds(mosqueId);
      if (seconds === null) return null;
      const waiting = await broadcasts.findLive(mosqueId);
      if (waiting && waiting.waiting_for_source === 1 && await broadcasts.markFallback(waiting.id)) {
        const b = { ...waiting, waiting_for_source: 0, fallback: 1 };
        releaseToPlayers(b);
        stopFallbackLater(b, seconds);
        return b.id;
      }
      if (waiting) return null; // a live broadcast plays already
      const started = await broadcasts.start(mosqueId, { kind: 'azaan', prayer, title: null, fallback: true }, null);
      if (!started.ok) {
        deps.logger.warn({ mosque_id: mosqueId, err: started.message ?? started.failure }, 'fallback azaan not started');
        return null;
      }
      stopFallbackLater(started.value, seconds);
      return started.value.id;
    },

    stop(): void {
      for (const timer of fallbackTimers.values()) clearTimeout(timer);
      fallbackTimers.clear();
    },
  };
}

export type SourceFollow = ReturnType<typeof createSourceFollow>;
