import type { Audio } from '../audio/audio.ts';
import type { Clock } from '../platform/clock.ts';
import type { SourceFollow } from './source-follow.ts';

/** The event-stream message of a mosque's source going on or off air (docs/api.md, "Broadcasts and the audio server"). */
export interface OnAirEvent {
  type: 'on_air';
  live: boolean;
  at: string;
}

/** The event-stream message of how many the audio server lets listen to the mosque now. */
export interface ListenersEvent {
  type: 'listeners';
  count: number;
  at: string;
}

/**
 * The story of a mosque's source going on or off air at the audio server, and of its listeners coming and
 * going (docs/api.md, "Broadcasts and the audio server"), told by src/audio/ in the process Icecast asked:
 * 1. the broadcast that waits for its source is released to the players, or ended when the source ends
 *    (src/broadcasts/source-follow.ts);
 * 2. the mosque's open event streams hear of it.
 */
export function listenToAudio(deps: {
  audio: Pick<Audio, 'onAirChange' | 'onListenersChange' | 'listOpenSessions'>;
  follow: Pick<SourceFollow, 'onAirChanged'>;
  announce: (mosqueId: string, event: () => OnAirEvent | ListenersEvent) => void;
  /** Whether a console of the mosque listens now: the count is a query, read only then. */
  listened: (mosqueId: string) => boolean;
  clock: Clock;
  /** Where a step no caller awaits reports its failure. */
  onError: (what: string, err: unknown) => void;
}): void {
  const at = () => new Date(deps.clock()).toISOString();
  deps.audio.onAirChange((mosqueId, live) => {
    void deps.follow.onAirChanged(mosqueId, live).catch((err: unknown) => deps.onError('source follow', err));
    deps.announce(mosqueId, () => ({ type: 'on_air', live, at: at() }));
  });
  deps.audio.onListenersChange((mosqueId) => {
    if (!deps.listened(mosqueId)) return;
    void deps.audio.listOpenSessions(mosqueId)
      .then((open) => deps.announce(mosqueId, () => ({ type: 'listeners', count: open.length, at: at() })))
      .catch((err: unknown) => deps.onError('listener count', err));
  });
}
