import type { Clock } from '../../platform/clock.ts';
import type { Queries, Store } from '../../platform/store/store.ts';
import type { MembershipStatus } from '../../mosques/memberships.ts';
import type { DeviceKind } from '../device-config.ts';
import { toDevice, type DeviceRow } from '../devices.ts';
import type { Entitlement } from '../entitlement.ts';
import type { Telemetry } from '../telemetry/telemetry.ts';
import { explain } from '../why.ts';

/**
 * How a device reads to a person (the `Device`, `DeviceLogs` and `DeviceWhy` shapes of docs/openapi.json):
 * its row with what memory knows newer (presence, the last heartbeat, counters), and for a player its
 * entitlement and the lease it holds.
 */
export function createDescriber(deps: {
  telemetry: Pick<Telemetry, 'isConnected' | 'lastSeenMs' | 'lastHeartbeat' | 'counters' | 'currentStatus' | 'flush' | 'recentLogs' | 'logging'>;
  entitlement: Pick<Entitlement, 'decisionFor' | 'lease'>;
  membershipStatus: (mosqueId: string, userId: string, q: Queries) => Promise<MembershipStatus | null>;
  store: Store;
  clock: Clock;
}) {
  const { telemetry, entitlement } = deps;
  const lastSeenSeconds = (id: string): number | null => {
    const ms = telemetry.lastSeenMs(id);
    return ms === null ? null : Math.floor(ms / 1000);
  };

  /** Players only: what the store decides and the lease the player holds (transmitters: null). */
  const entitlementOf = async (row: DeviceRow) => {
    if (row.kind !== 'stream_player') return null;
    const decision = await entitlement.decisionFor(row);
    const lease = entitlement.lease(row.id);
    return {
      entitled: decision.entitled,
      reason: decision.entitled ? null : decision.reason,
      mosque_id: row.mosque_id,
      lease_expires_at: lease ? new Date(lease.expiresAt * 1000).toISOString() : null,
    };
  };

  const describe = async (row: DeviceRow) => {
    const entitlement = await entitlementOf(row); // memory below is read after it, as it is now
    return {
      ...toDevice(row, { lastSeenAt: lastSeenSeconds(row.id), connected: telemetry.isConnected(row.id), heartbeat: telemetry.lastHeartbeat(row.id) }),
      counters: telemetry.counters(row.id),
      entitlement,
    };
  };

  return {
    describe,

    /**
     * GET /devices/{id}/why: the first fact in the chain that decides (src/devices/why.ts), and whether the
     * mosque is on the air (`onAir`: the audio gate, a later room; null while there is none).
     */
    async why(row: DeviceRow, onAir: ((mosqueId: string) => Promise<boolean>) | null) {
      const lease = entitlement.lease(row.id);
      const detail = JSON.parse(row.status_detail) as { detail?: Record<string, unknown> };
      const now = Math.floor(deps.clock() / 1000);
      const status = telemetry.currentStatus(row.id) ?? row.status;
      const answer = explain({
        kind: row.kind,
        enabled: row.enabled === 1,
        mosqueId: row.mosque_id,
        decision: row.kind === 'stream_player' ? await entitlement.decisionFor(row) : null,
        membershipStatus: row.kind === 'stream_player' && row.mosque_id && row.owner_user_id ? await deps.membershipStatus(row.mosque_id, row.owner_user_id, deps.store) : null,
        leaseExpiresAt: lease?.expiresAt ?? null,
        connected: telemetry.isConnected(row.id),
        lastSeenAt: lastSeenSeconds(row.id) ?? row.last_seen_at,
        status,
        statusReason: row.status_reason,
        statusDetail: detail.detail ?? {},
        now,
      });
      const live = onAir && row.mosque_id ? await onAir(row.mosque_id) : null;
      return { device_id: row.id, status, ...answer, on_air: live, checked_at: new Date(now * 1000).toISOString() };
    },

    /** The device's recent log lines, with whether it is logging and a note saying why the list is what it is. */
    async logs(row: DeviceRow, limit: number) {
      await telemetry.flush(); // the lines gathered since the last batched write are part of the answer
      const lines = (await telemetry.recentLogs(row.id, limit)).map((l) => ({ at: new Date(l.at * 1000).toISOString(), ts: l.ts, level: l.level, msg: l.msg }));
      const logging = telemetry.logging(row.id);
      const until = logging.until === null ? null : new Date(logging.until * 1000).toISOString();
      return { device_id: row.id, logging: { ...logging, until }, note: logsNote(row.kind, logging.enabled, until, lines.length, telemetry.isConnected(row.id)), lines };
    },
  };
}

export type DeviceBody = Awaited<ReturnType<ReturnType<typeof createDescriber>['describe']>>;

/**
 * Says in words why the list is what it is (docs/decisions.md, "`GET /devices/{id}/logs`": right after set_log_level the list is empty and a
 * person must learn that the device is expected to send, not that logging failed).
 */
function logsNote(kind: DeviceKind, enabled: boolean, until: string | null, count: number, connected: boolean): string | null {
  if (!enabled) {
    const how = kind === 'transmitter' ? 'set config.log_enabled to true' : 'send the set_log_level command';
    return `Logging is off for this device: ${how} to collect its logs.`;
  }
  if (count > 0) return null;
  const window = until ? ` until ${until}` : '';
  if (!connected) return `Logging is on${window}, but the device is not connected: it sends nothing while offline (lines are dropped, not queued).`;
  return `Logging is on${window}; waiting for the device's first line (at most one a second).`;
}
