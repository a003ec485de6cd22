import type { Scheduler } from '../scheduler.ts';

/** What a transmitter announced on its mosque's broadcast topic (docs/firmware.md, "4.3 Broadcast events"). */
export interface TransmitterBroadcast {
  broadcast_id: string;
  kind: string;
  action: 'start' | 'stop';
}

/**
 * The story of a transmitter starting or stopping its own mosque's broadcast (docs/schedule.md), told by the
 * broker once the event passed its checks: it creates no broadcast record, yet its start serves the scheduled
 * slot whose window is open (an azaan or Jumu'ah) and its stop ends that slot.
 */
export function transmitterStory(scheduler: Pick<Scheduler, 'broadcastStarted' | 'broadcastStopped'>) {
  return (mosqueId: string, e: TransmitterBroadcast): void => {
    if (e.action === 'start') void scheduler.broadcastStarted({ id: e.broadcast_id, mosqueId, kind: e.kind, prayer: null });
    else void scheduler.broadcastStopped({ id: e.broadcast_id, mosqueId });
  };
}
