import type { Db } from '../platform/db.ts';
import type { ActivityLog } from '../mosques/activity.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import { configPayload, type Binding, type DeviceKind, type DeviceSettings } from './device-config.ts';
import { topics, type DeviceLink } from './device-link.ts';
import type { DeviceRow, DeviceStore } from './devices.ts';
import type { Logger } from '../platform/log.ts';
import type { Telemetry } from './telemetry/telemetry.ts';
import type { Timeline } from './timeline.ts';

export interface Registered {
  row: DeviceRow;
  password: string;
}

const FIELD_NAMES = { name: 'name', mosqueId: 'mosque_id', settings: 'config' } as const;

/** How the config of a device is completed beyond its own row: mosque, stream and lease (src/devices/entitlement.ts). */
export type BindingResolver = (row: DeviceRow) => Binding;

/**
 * Device registry operations with their side effects on the wire: every change of what a device should
 * know republishes its retained config at once; rotation and deletion close a live connection at once.
 */
export function createDeviceService(deps: {
  db: Db;
  devices: DeviceStore;
  timeline: Timeline;
  /** The mosque's activity feed (it carries device events beside membership, admin and broadcast ones). */
  activity: ActivityLog;
  telemetry: Telemetry;
  link: () => DeviceLink;
  logger: Logger;
  resolveBinding: BindingResolver;
  onDeleted?: (id: string) => void;
  /** After a password rotation committed (the plane drops the lease signed under the old one). */
  onRotated?: (id: string) => void;
  /** Stream players one person may own (MAX_PLAYERS_PER_USER). */
  maxPlayersPerOwner: number;
}) {
  const { devices, timeline } = deps;
  const published = new Set<string>();

  /** A person's change to a device of a mosque, in that mosque's feed (a device bound to none has no feed). */
  function note(mosqueId: string | null, actorId: string | null, kind: string, deviceId: string, data: Record<string, unknown> = {}): void {
    if (mosqueId !== null) deps.activity.recordSync({ mosqueId, actorUserId: actorId, kind, subjectId: deviceId, data });
  }

  function configOf(row: DeviceRow): Record<string, unknown> {
    return configPayload(row.kind, row.config_version, JSON.parse(row.config) as DeviceSettings, deps.resolveBinding(row));
  }

  /** Publishes a config as the device's retained one; a failure is logged, the device gets it on its next connect. */
  function publishConfig(id: string, payload: Record<string, unknown> | Buffer): Promise<void> {
    published.add(id);
    return deps.link().publish(topics.config(id), payload, { qos: 1, retain: true }).catch((err: Error) => {
      published.delete(id);
      deps.logger.warn({ device_id: id, err: err.message }, 'config publish failed; it goes out on the next connect');
    });
  }

  function pushConfig(row: DeviceRow): Promise<void> {
    return publishConfig(row.id, configOf(row));
  }

  /** Something outside the row changed what the config says: a new config_version, noted in the timeline. */
  function bumpFor(id: string, reason: string): DeviceRow {
    const bumped = devices.bumpConfigVersion(id);
    timeline.record({ deviceId: id, mosqueId: bumped.mosque_id, kind: 'config_changed', reason, detail: { config_version: bumped.config_version } });
    return bumped;
  }

  /** Clears what the broker retains for a device that no longer exists. */
  function clearRetained(id: string): void {
    for (const topic of [topics.config(id), topics.status(id)]) {
      deps.link().publish(topic, '', { qos: 1, retain: true }).catch(() => undefined);
    }
  }

  return {
    link: () => deps.link(),
    configOf,
    pushConfig,
    publishConfig,
    /** Whether this process published the device's retained config (and the broker took it). */
    isPublished: (id: string) => published.has(id),

    /**
     * The config a device is to hold now, built without publishing it (the start pass publishes only once
     * its writes committed); `reason` set: a new config_version too, as refreshConfig gives.
     */
    buildConfig(row: DeviceRow, reason: string | null): { id: string; payload: Buffer } {
      const current = reason === null ? row : bumpFor(row.id, reason);
      // Serialized at once: the bytes are what the broker retains, and no object per device outlives the pass.
      return { id: row.id, payload: Buffer.from(JSON.stringify(configOf(current))) };
    },

    /** Called when a device authenticates: after a restart the broker may have lost the retained config. */
    ensureConfigPublished(id: string, known?: DeviceRow): void {
      if (published.has(id)) return;
      const row = known ?? devices.findById(id);
      if (row) void pushConfig(row);
    },

    register(kind: DeviceKind, name: string | null, mosqueId: string | null, ownerUserId: string | null, actorId: string): Registered {
      const registered = deps.db.transaction(() => {
        const r = devices.create({ kind, name, mosqueId, ownerUserId });
        timeline.record({ deviceId: r.row.id, mosqueId, kind: 'registered', actorUserId: actorId, detail: { kind, name } });
        note(mosqueId, actorId, 'device.registered', r.row.id, { kind, name });
        return r;
      })();
      void pushConfig(registered.row);
      return registered;
    },

    /**
     * A person registers a stream player they own, within MAX_PLAYERS_PER_USER (docs/decisions.md, "Stream players per person": an account must not
     * mint devices without bound). A superadmin is the operator and is not counted against it.
     */
    registerPlayer(name: string | null, mosqueId: string | null, owner: { id: string; isSuperadmin: boolean }): Result<Registered> {
      const registered = deps.db.transaction((): Result<Registered> => {
        if (!owner.isSuperadmin && devices.countPlayersOf(owner.id) >= deps.maxPlayersPerOwner) {
          return fail('conflict', `At most ${deps.maxPlayersPerOwner} stream players per user; delete one first.`);
        }
        const r = devices.create({ kind: 'stream_player', name, mosqueId, ownerUserId: owner.id });
        timeline.record({ deviceId: r.row.id, mosqueId, kind: 'registered', actorUserId: owner.id, detail: { kind: 'stream_player', name } });
        note(mosqueId, owner.id, 'device.registered', r.row.id, { kind: 'stream_player', name });
        return ok(r);
      }).immediate();
      if (registered.ok) void pushConfig(registered.value.row);
      return registered;
    },

    /** `actorId` null: the device's own doing (an acknowledged unbind_mosque sent by no person). */
    update(row: DeviceRow, change: { name?: string | null; mosqueId?: string | null; settings?: DeviceSettings }, actorId: string | null): DeviceRow {
      const updated = deps.db.transaction(() => {
        const u = devices.update(row.id, change);
        if (u.config_version !== row.config_version) {
          timeline.record({ deviceId: row.id, mosqueId: u.mosque_id, kind: 'config_changed', actorUserId: actorId, detail: { config_version: u.config_version, ...(change.mosqueId !== undefined && { mosque_id: change.mosqueId }) } });
        }
        // Named as the API names them. Both mosques hear of a move: the one it left and the one it joined.
        const fields = (Object.keys(change) as Array<keyof typeof change>).map((k) => FIELD_NAMES[k]);
        if (fields.length > 0) for (const mosqueId of new Set([row.mosque_id, u.mosque_id])) note(mosqueId, actorId, 'device.updated', row.id, { fields, mosque_id: u.mosque_id });
        return u;
      })();
      if (updated.config_version !== row.config_version) void pushConfig(updated);
      return updated;
    },

    /** Something outside the row changed what the config says (mosque stream, entitlement). */
    refreshConfig(id: string, reason: string): void {
      if (!devices.findById(id)) return;
      void pushConfig(bumpFor(id, reason));
    },

    rotateCredentials(row: DeviceRow, actorId: string): string {
      // The rows first: the rotation also updates memory, which a rolled-back transaction would not undo.
      const password = deps.db.transaction(() => {
        timeline.record({ deviceId: row.id, mosqueId: row.mosque_id, kind: 'credentials_rotated', actorUserId: actorId });
        note(row.mosque_id, actorId, 'device.credentials_rotated', row.id);
        return devices.rotateSecret(row.id);
      })();
      deps.onRotated?.(row.id);
      deps.link().disconnect(row.id);
      deps.link().forgetSession(row.id);
      return password;
    },

    /** `actorId` null: the mosque itself is going away, and its feed with it. */
    delete(row: DeviceRow, actorId: string | null): void {
      deps.onDeleted?.(row.id);
      deps.db.transaction(() => {
        if (actorId !== null) note(row.mosque_id, actorId, 'device.deleted', row.id, { kind: row.kind, name: row.name });
        devices.delete(row.id); // last: it also forgets the device in memory
      })();
      deps.telemetry.forget(row.id);
      published.delete(row.id);
      deps.link().disconnect(row.id);
      deps.link().forgetSession(row.id);
      clearRetained(row.id);
    },

    /** Devices removed by the database itself (their owner was deleted): forget them and cut them off. */
    forgetRemoved(ids: string[]): void {
      for (const id of ids) {
        deps.onDeleted?.(id);
        devices.forget(id);
        deps.telemetry.forget(id);
        published.delete(id);
        deps.link().disconnect(id);
        deps.link().forgetSession(id);
        clearRetained(id);
      }
    },
  };
}

export type DeviceService = ReturnType<typeof createDeviceService>;
