import type { Clock } from '../../platform/clock.ts';
import type { DeviceStore } from '../devices.ts';
import type { GroupCommit } from '../group-commit.ts';
import type { Timeline } from '../timeline.ts';
import { DROPPED_COUNTER, REJECTION_NOTE_INTERVAL_MS, type BudgetedChannel, type Live } from './live.ts';

/**
 * What a device did wrong, counted in memory and noted in its timeline: bad payloads, refused topics, publishes
 * over budget (each noted at most once a minute), bans. A note rides the device group commit after the writes
 * before it; losing the note must not lose the fact, which the counters keep.
 */
export function createDeviceNotes(deps: {
  devices: DeviceStore; timeline: Timeline; commits: GroupCommit; clock: Clock; stateOf: (id: string) => Live;
  writeFailed: (id: string, channel: string, err: unknown) => void;
}) {
  const { devices, stateOf } = deps;
  const mosqueOf = (id: string) => devices.info(id)?.mosqueId ?? null;

  function note(id: string, entry: Parameters<Timeline['record']>[1]): void {
    deps.commits.add({
      write: async (trx) => {
        if (devices.info(id)) await deps.timeline.record(trx, entry); // a device deleted meanwhile has no timeline
      },
      settle: (err) => {
        if (err) deps.writeFailed(id, `${entry.kind} note`, err);
      },
    });
  }

  return {
    /** A payload that failed its schema or size: counted, and noted in the timeline (at most once a minute). */
    rejected(id: string, channel: string, reason: string, refusedTopic = false): void {
      const s = stateOf(id);
      if (refusedTopic) s.counters.publishes_refused++;
      else s.counters.payloads_rejected++;
      const now = deps.clock();
      const kind = refusedTopic ? 'publish' : 'payload';
      if (now - s.lastNoteMs[kind] < REJECTION_NOTE_INTERVAL_MS || !devices.info(id)) return;
      s.lastNoteMs[kind] = now;
      note(id, { deviceId: id, mosqueId: mosqueOf(id), kind: refusedTopic ? 'publish_refused' : 'payload_rejected', reason, detail: { channel, counters: { ...s.counters } } });
    },

    /**
     * A publish over the device's budget (broker/budgets.ts): counted, never written; noted in the timeline
     * at most once a minute whatever the channel.
     */
    overBudget(id: string, channel: BudgetedChannel): void {
      const s = stateOf(id);
      s.counters[DROPPED_COUNTER[channel]]++;
      const now = deps.clock();
      if (now - s.lastNoteMs.budget < REJECTION_NOTE_INTERVAL_MS || !devices.info(id)) return;
      s.lastNoteMs.budget = now;
      note(id, { deviceId: id, mosqueId: mosqueOf(id), kind: 'over_budget', reason: channel, detail: { channel, counters: { ...s.counters } } });
    },

    /** A device banned from connecting (reconnect flapping, or a flood of publishes): noted once per ban. */
    banned(id: string, reason: 'flapping' | 'flood', detail: Record<string, unknown>): void {
      const s = stateOf(id);
      if (!devices.info(id)) return;
      note(id, { deviceId: id, mosqueId: mosqueOf(id), kind: 'flapping', reason, detail: { ...detail, counters: { ...s.counters } } });
    },

    /** A CONNECT refused during a ban: counted only (the ban itself was noted once). */
    connectRefused(id: string): void {
      stateOf(id).counters.connects_refused++;
    },
  };
}
