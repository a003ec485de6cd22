import type { Queries, Store, StoreTransaction } from '../platform/store/store.ts';
import type { ActivityLog } from '../mosques/activity.ts';
import { fail, ok, type Result } from '../platform/failure.ts';
import { configPayload, type Binding, type DeviceKind, type DeviceSettings } from './device-config.ts';
import { topics, type DeviceLink } from './device-link.ts';
import type { DeviceRow, DeviceStore } from './devices.ts';
import type { Decision } from './entitlement.ts';
import type { Logger } from '../platform/log.ts';
import type { Telemetry } from './telemetry/telemetry.ts';
import type { Timeline } from './timeline.ts';
import { inTransaction } from '../platform/store/after-commit.ts';

export interface Registered {
  row: DeviceRow;
  password: string;
}

/** Devices per transaction when many configs are refreshed at once: short transactions, and a mosque's players in few. */
const REFRESH_CHUNK = 100; // about 10 ms of writes on SQLite: the group commit of statuses waits no longer than that
const FIELD_NAMES = { name: 'name', mosqueId: 'mosque_id', settings: 'config' } as const;

/**
 * How the config of a device is completed beyond its own row: mosque, stream and lease (src/devices/entitlement.ts),
 * read and written through `q` (a lease issued or dropped is written with it). `known`: the player's entitlement as
 * its caller read it through `q` (not read again).
 */
export type BindingResolver = (q: Queries, row: DeviceRow, known?: Decision) => Promise<Binding>;

/**
 * Device registry operations with their side effects on the wire: every change of what a device should
 * know republishes its retained config at once; rotation and deletion close a live connection at once.
 */
export function createDeviceService(deps: {
  store: Store;
  devices: DeviceStore;
  timeline: Timeline;
  /** The mosque's activity feed (it carries device events beside membership, admin and broadcast ones). */
  activity: ActivityLog;
  telemetry: Telemetry;
  link: () => DeviceLink;
  logger: Logger;
  resolveBinding: BindingResolver;
  /** Before the row goes, in the delete's transaction (the store itself for rows the database removed): the lease and waiting commands go with it. */
  onDeleted?: (q: Queries, id: string) => Promise<void>;
  /** Inside the rotation's transaction (the plane drops the lease signed under the old password). */
  onRotated?: (trx: StoreTransaction, id: string) => Promise<void>;
  /** Stream players one person may own (MAX_PLAYERS_PER_USER). */
  maxPlayersPerOwner: number;
}) {
  const { devices, timeline } = deps;
  const published = new Set<string>();

  const { store } = deps;
  /** A person's change to a device of a mosque, in that mosque's feed (a device bound to none has no feed), in the change's transaction. */
  async function note(trx: StoreTransaction, mosqueId: string | null, actorId: string | null, kind: string, deviceId: string, data: Record<string, unknown> = {}): Promise<void> {
    if (mosqueId !== null) await deps.activity.record(trx, { mosqueId, actorUserId: actorId, kind, subjectId: deviceId, data });
  }

  async function configOf(q: Queries, row: DeviceRow, known?: Decision): Promise<Record<string, unknown>> {
    return configPayload(row.kind, row.config_version, JSON.parse(row.config) as DeviceSettings, await deps.resolveBinding(q, row, known));
  }

  /** Publishes a config as the device's retained one; a failure is logged, the device gets it on its next connect. */
  function publishConfig(id: string, payload: Record<string, unknown> | Buffer): Promise<void> {
    published.add(id);
    return deps.link().publish(topics.config(id), payload, { qos: 1, retain: true }).catch((err: Error) => {
      published.delete(id);
      deps.logger.warn({ device_id: id, err: err.message }, 'config publish failed; it goes out on the next connect');
    });
  }

  /** The config built (its lease written) in the caller's transaction; published once that committed. */
  async function configFor(q: Queries, row: DeviceRow, known?: Decision): Promise<{ id: string; payload: Record<string, unknown> }> {
    return { id: row.id, payload: await configOf(q, row, known) };
  }

  /** Something outside the row changed what the config says: a new config_version, noted in the timeline. */
  async function bumpFor(trx: StoreTransaction, id: string, reason: string): Promise<DeviceRow> {
    const bumped = await devices.bumpConfigVersion(trx, id);
    await timeline.record(trx, { deviceId: id, mosqueId: bumped.mosque_id, kind: 'config_changed', reason, detail: { config_version: bumped.config_version } });
    return bumped;
  }

  /**
   * A player's retained config after its password was rotated: it carries the lease the rotation dropped, so it is
   * cleared (never handed out again) and this process no longer counts it as published. The player's next
   * connection is given a config with a fresh lease before its CONNACK (src/devices/device-plane.ts).
   */
  async function clearRotatedConfig(id: string): Promise<void> {
    published.delete(id);
    await deps.link().publish(topics.config(id), '', { qos: 1, retain: true }).catch((err: Error) => {
      deps.logger.warn({ device_id: id, err: err.message }, 'could not clear the config of a rotated player; its next connection replaces it');
    });
  }

  /** Clears what the broker retains for a device that no longer exists. */
  function clearRetained(id: string): void {
    for (const topic of [topics.config(id), topics.status(id)]) {
      deps.link().publish(topic, '', { qos: 1, retain: true }).catch(() => undefined);
    }
  }

  /**
   * Several devices' configs refreshed for one reason (a mosque's players when its schedule or recording changed):
   * one transaction per REFRESH_CHUNK devices instead of one each, every config published once its chunk committed.
   * A device deleted meanwhile is skipped.
   */
  async function refreshConfigs(ids: readonly string[], reason: string): Promise<void> {
    for (let at = 0; at < ids.length; at += REFRESH_CHUNK) {
      const configs = await inTransaction(store, async (trx) => {
        const built: Array<{ id: string; payload: Record<string, unknown> }> = [];
        for (const id of ids.slice(at, at + REFRESH_CHUNK)) {
          if (await devices.findById(id, trx)) built.push(await configFor(trx, await bumpFor(trx, id, reason)));
        }
        return built;
      });
      for (const config of configs) void publishConfig(config.id, config.payload);
    }
  }

  return {
    link: () => deps.link(),
    publishConfig,
    /** Whether this process published the device's retained config (and the broker took it). */
    isPublished: (id: string) => published.has(id),
    /** Another process rotated the player's password and cleared its retained config. */
    forgetPublished: (id: string) => void published.delete(id),
    /** The broker was found to retain the device's current config already (read back from it): nothing to publish. */
    notePublished: (id: string) => void published.add(id),

    /**
     * The config a device is to hold now, built in the caller's transaction without publishing it (the start
     * pass and a CONNECT publish only once their writes committed); `reason` set: a new config_version too,
     * as refreshConfig gives. `decision`: the player's entitlement as the caller read it in `trx`.
     */
    async buildConfig(trx: StoreTransaction, row: DeviceRow, reason: string | null, decision?: Decision): Promise<{ id: string; payload: Buffer }> {
      const current = reason === null ? row : await bumpFor(trx, row.id, reason);
      // Serialized at once: the bytes are what the broker retains, and no object per device outlives the pass.
      return { id: row.id, payload: Buffer.from(JSON.stringify(await configOf(trx, current, decision))) };
    },

    /** Called when a device authenticates: after a restart the broker may have lost the retained config. */
    async ensureConfigPublished(q: Queries, id: string, known?: DeviceRow, decision?: Decision): Promise<{ id: string; payload: Record<string, unknown> } | null> {
      if (published.has(id)) return null;
      const row = known ?? (await devices.findById(id, q));
      return row ? configFor(q, row, decision) : null;
    },

    async register(kind: DeviceKind, name: string | null, mosqueId: string | null, ownerUserId: string | null, actorId: string): Promise<Registered> {
      const { registered, config } = await inTransaction(store, async (trx) => {
        const r = await devices.create(trx, { kind, name, mosqueId, ownerUserId });
        await timeline.record(trx, { deviceId: r.row.id, mosqueId, kind: 'registered', actorUserId: actorId, detail: { kind, name } });
        await note(trx, mosqueId, actorId, 'device.registered', r.row.id, { kind, name });
        return { registered: r, config: await configFor(trx, r.row) };
      });
      void publishConfig(config.id, config.payload);
      return registered;
    },

    /**
     * A person registers a stream player they own, within MAX_PLAYERS_PER_USER (docs/decisions.md, "Stream players per person": an account must not
     * mint devices without bound). A superadmin is the operator and is not counted against it. The count and
     * the insert share one transaction (IMMEDIATE on SQLite), so two registrations at once cannot both pass it.
     */
    async registerPlayer(name: string | null, mosqueId: string | null, owner: { id: string; isSuperadmin: boolean }): Promise<Result<Registered>> {
      const registered = await inTransaction(store, async (trx): Promise<Result<{ r: Registered; config: { id: string; payload: Record<string, unknown> } }>> => {
        if (!owner.isSuperadmin && (await devices.countPlayersOf(trx, owner.id)) >= deps.maxPlayersPerOwner) {
          return fail('conflict', `At most ${deps.maxPlayersPerOwner} stream players per user; delete one first.`);
        }
        const r = await devices.create(trx, { kind: 'stream_player', name, mosqueId, ownerUserId: owner.id });
        await timeline.record(trx, { deviceId: r.row.id, mosqueId, kind: 'registered', actorUserId: owner.id, detail: { kind: 'stream_player', name } });
        await note(trx, mosqueId, owner.id, 'device.registered', r.row.id, { kind: 'stream_player', name });
        return ok({ r, config: await configFor(trx, r.row) });
      });
      if (!registered.ok) return registered;
      void publishConfig(registered.value.config.id, registered.value.config.payload);
      return ok(registered.value.r);
    },

    /** `actorId` null: the device's own doing (an acknowledged unbind_mosque sent by no person). */
    async update(row: DeviceRow, change: { name?: string | null; mosqueId?: string | null; settings?: DeviceSettings }, actorId: string | null): Promise<DeviceRow> {
      const { updated, config } = await inTransaction(store, async (trx) => {
        const u = await devices.update(trx, row.id, change);
        if (u.config_version !== row.config_version) {
          await timeline.record(trx, { deviceId: row.id, mosqueId: u.mosque_id, kind: 'config_changed', actorUserId: actorId, detail: { config_version: u.config_version, ...(change.mosqueId !== undefined && { mosque_id: change.mosqueId }) } });
        }
        // Named as the API names them. Both mosques hear of a move: the one it left and the one it joined.
        const fields = (Object.keys(change) as Array<keyof typeof change>).map((k) => FIELD_NAMES[k]);
        if (fields.length > 0) for (const mosqueId of new Set([row.mosque_id, u.mosque_id])) await note(trx, mosqueId, actorId, 'device.updated', row.id, { fields, mosque_id: u.mosque_id });
        return { updated: u, config: u.config_version !== row.config_version ? await configFor(trx, u) : null };
      });
      if (config) void publishConfig(config.id, config.payload);
      return updated;
    },

    /** Something outside the row changed what the config says (mosque stream, entitlement). */
    async refreshConfig(id: string, reason: string): Promise<void> {
      await refreshConfigs([id], reason);
    },
    refreshConfigs,

    async rotateCredentials(row: DeviceRow, actorId: string): Promise<string> {
      // The rows first: the rotation also updates memory, which a rolled-back transaction would not undo.
      const password = await inTransaction(store, async (trx) => {
        await timeline.record(trx, { deviceId: row.id, mosqueId: row.mosque_id, kind: 'credentials_rotated', actorUserId: actorId });
        await note(trx, row.mosque_id, actorId, 'device.credentials_rotated', row.id);
        const p = await devices.rotateSecret(trx, row.id);
        await deps.onRotated?.(trx, row.id);
        return p;
      });
      deps.link().disconnect(row.id);
      deps.link().forgetSession(row.id);
      // Before the new password is handed out: no connection made with it can find the old config retained.
      if (row.kind === 'stream_player') await clearRotatedConfig(row.id);
      return password;
    },

    /**
     * `actorId` null: the mosque itself is going away, and its feed with it; or, with `reason`, nobody's doing
     * (an address claim lost), noted with that reason.
     */
    async delete(row: DeviceRow, actorId: string | null, reason?: string): Promise<void> {
      await inTransaction(store, async (trx) => {
        await deps.onDeleted?.(trx, row.id);
        if (actorId !== null) await note(trx, row.mosque_id, actorId, 'device.deleted', row.id, { kind: row.kind, name: row.name });
        else if (reason !== undefined) await note(trx, row.mosque_id, null, 'device.deleted', row.id, { kind: row.kind, reason });
        await devices.delete(trx, row.id); // last: it also forgets the device in memory
      });
      deps.telemetry.forget(row.id);
      published.delete(row.id);
      deps.link().disconnect(row.id);
      deps.link().forgetSession(row.id);
      clearRetained(row.id);
    },

    /** Devices removed by the database itself (their owner was deleted): forget them and cut them off. */
    async forgetRemoved(ids: string[]): Promise<void> {
      for (const id of ids) {
        await deps.onDeleted?.(store, id);
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
