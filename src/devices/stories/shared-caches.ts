import type { ChangeListener } from '../../platform/changes.ts';
import type { DevicePlane } from '../device-plane.ts';

/**
 * The story of a device changed by another process (docs/decisions.md, "Several processes"): the change feed
 * names it, and this process reads its registry entry and lease again and cuts off a connection here that no
 * longer holds; a resync does the same for every device. This process's own changes are current already.
 */
export function followDeviceChanges(
  plane: Pick<DevicePlane, 'deviceChangedElsewhere' | 'reloadAll'>,
  /** Where a reload the feed started and no caller awaits reports its failure. */
  onError: (what: string, err: unknown) => void = () => undefined,
): ChangeListener {
  return {
    changed(change, origin) {
      if (origin === 'remote' && change.kind === 'device') void plane.deviceChangedElsewhere(change.id).catch((err: unknown) => onError('device reload', err));
    },
    resync: () => void plane.reloadAll().catch((err: unknown) => onError('devices reload', err)),
  };
}
