import type { Clock } from '../../platform/clock.ts';
import type { Store } from '../../platform/store/store.ts';
import { fail, ok, type Result } from '../../platform/failure.ts';
import type { CommandEffects } from '../commands.ts';
import type { DeviceRow, DeviceStore } from '../devices.ts';
import type { Timeline } from '../timeline.ts';
import { HW_REV } from '../device-config.ts';
import { inTransaction } from '../../platform/store/after-commit.ts';

/**
 * What the backend records once a device said ok to a command (docs/firmware.md, "4.2 Commands"): the log
 * escalation's expiry (so GET /devices/{id}/logs knows until when the device sends), and the binding the
 * player cleared. Run by src/devices/commands.ts for every ack that settles a command, whoever waits for it.
 */
export function createCommandEffects(deps: {
  store: Store;
  devices: Pick<DeviceStore, 'findById' | 'setLogLevel' | 'setHwRev'>;
  timeline: Pick<Timeline, 'record'>;
  clock: Clock;
  unbind: (row: DeviceRow, actorUserId: string | null) => Promise<unknown>;
}): CommandEffects {
  return async (deviceId, name, args, actorUserId, result): Promise<Result<void>> => {
    // Read now: the row the person loaded before the wait may be stale (rebound) or gone (deleted meanwhile).
    const row = await deps.devices.findById(deviceId);
    if (!row) return fail('not_found', 'The device was deleted while the command waited for its acknowledgement.');
    if (name === 'set_log_level') {
      const until = Math.floor(deps.clock() / 1000) + Number(args.ttl_s);
      // The level and its timeline note together: one transaction.
      await inTransaction(deps.store, async (trx) => {
        await deps.devices.setLogLevel(trx, row.id, String(args.level), until);
        await deps.timeline.record(trx, { deviceId: row.id, mosqueId: row.mosque_id, kind: 'log_level_set', actorUserId, detail: { level: args.level, until } });
      });
    }
    // docs/api.md, "Firmware updates": a rollout targets devices by the hw_rev they last reported.
    const hwRev = name === 'get_state' ? (result as { hw_rev?: unknown } | null)?.hw_rev : undefined;
    if (typeof hwRev === 'string' && HW_REV.test(hwRev)) await deps.devices.setHwRev(row.id, hwRev);
    if (name === 'unbind_mosque' && row.mosque_id !== null) await deps.unbind(row, actorUserId);
    return ok(undefined);
  };
}
