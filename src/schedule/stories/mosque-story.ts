import type { DevicePlane } from '../../devices/device-plane.ts';
import { scheduleFieldsOf, type MosqueRow } from '../../mosques/mosques.ts';
import type { ChangeListener } from '../../platform/changes.ts';
import type { ScheduleStore } from '../schedule-store.ts';
import type { Scheduler } from '../scheduler.ts';

/**
 * The story of a mosque changed or deleted (docs/walkthrough.md, "3. The mosque and its members"), told by
 * src/mosques/mosque-ops.ts around its writes and, for another process's writes, by the change feed:
 * - updated: its transmitters and entitled players get the new stream address in their configs, then the
 *   schedule derives its times again, and when those changed its entitled players get their new offline plan;
 * - changed by another process: the schedule derives its times again (the devices follow the devices' own
 *   changes, src/devices/stories/shared-caches.ts);
 * - deleted: the schedule forgets its uploaded timetable and its transmitters are deleted before the row goes;
 *   after, its players, now unbound, get their new config.
 */
export function createMosqueStory(deps: {
  plane: Pick<DevicePlane, 'beforeMosqueDelete' | 'mosqueUpdated'>;
  scheduleStore: Pick<ScheduleStore, 'forgetMosque'>;
  scheduler: Pick<Scheduler, 'mosqueChanged' | 'timesChanged'>;
}) {
  return {
    async beforeDelete(mosqueId: string): Promise<() => Promise<void>> {
      deps.scheduleStore.forgetMosque(mosqueId);
      return deps.plane.beforeMosqueDelete(mosqueId);
    },
    async updated(before: MosqueRow, after: MosqueRow): Promise<void> {
      await deps.plane.mosqueUpdated(before, after);
      const times = (row: MosqueRow) => JSON.stringify([row.timezone, scheduleFieldsOf(row)]);
      if (times(before) !== times(after)) deps.scheduler.timesChanged(after.id);
      else deps.scheduler.mosqueChanged(after.id);
    },
    followChanges: {
      changed(change, origin) {
        if (origin === 'remote' && change.kind === 'mosque') deps.scheduler.mosqueChanged(change.id);
      },
      resync() {},
    } satisfies ChangeListener,
  };
}
