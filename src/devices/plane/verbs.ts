import type { Actor, AdminStore } from '../../mosques/admins.ts';
import { ok, type Result } from '../../platform/failure.ts';
import { commandFits, type CommandOutcome, type Commands } from '../commands.ts';
import { heartbeatFits, type DeviceSettings } from '../device-config.ts';
import type { DeviceService } from '../device-service.ts';
import type { DeviceStore } from '../devices.ts';
import type { Timeline } from '../timeline.ts';
import type { DeviceAccess, OpenDevice } from './access.ts';
import type { DeviceBody, createDescriber } from './describe.ts';

/** A device just registered or given a new password: how it reads, and the password (shown this once). */
export interface Credentials {
  device: DeviceBody;
  password: string;
}

export interface DeviceChange {
  name?: string | null;
  mosqueId?: string | null;
  settings?: DeviceSettings;
}

/**
 * What people do with devices (docs/api.md, "Devices, from the app's side"), each verb with its rules: the
 * HTTP edge checks a request's shape and calls these. A verb on one device takes the device `open` gave, so
 * who may see or change it is decided once, here.
 */
export function createDeviceVerbs(deps: {
  devices: Pick<DeviceStore, 'listForMosque' | 'listForOwner' | 'listAll' | 'findById' | 'setHwRev'>;
  service: DeviceService;
  commands: Pick<Commands, 'send'>;
  timeline: Pick<Timeline, 'list'>;
  access: DeviceAccess;
  describer: ReturnType<typeof createDescriber>;
  admins: Pick<AdminStore, 'listForUser'>;
  jwks: () => { keys: Array<Record<string, unknown>> };
}) {
  const { access, service, describer } = deps;
  const { describe } = describer;

  return {
    open: access.open,
    /** Whether the person may bind a player to the mosque (a pending or approved member, or a manager). */
    mayBind: access.mayBind,
    describe: (device: OpenDevice): Promise<DeviceBody> => describe(device.row),

    /** The devices one mosque's list holds, or (no mosque named) every device the person may see. */
    async list(actor: Actor, mosqueId?: string): Promise<DeviceBody[]> {
      let rows;
      if (mosqueId) rows = await deps.devices.listForMosque(mosqueId);
      else if (actor.isSuperadmin) rows = await deps.devices.listAll();
      else {
        rows = await deps.devices.listForOwner(actor.id);
        for (const a of await deps.admins.listForUser(actor.id)) rows.push(...(await deps.devices.listForMosque(a.mosque_id)));
      }
      const unique = new Map<string, (typeof rows)[number]>();
      for (const row of rows) if (await access.visible(actor, row)) unique.set(row.id, row);
      const bodies: DeviceBody[] = [];
      for (const row of unique.values()) bodies.push(await describe(row));
      return bodies;
    },

    /** A member's players in one mosque, as its admins see them beside the membership (the caller checked it is one). */
    async playersOf(userId: string, mosqueId: string): Promise<DeviceBody[]> {
      const bodies: DeviceBody[] = [];
      for (const row of await deps.devices.listForOwner(userId)) if (row.kind === 'stream_player' && row.mosque_id === mosqueId) bodies.push(await describe(row));
      return bodies;
    },

    /** A mosque's transmitter (the edge's mosque gate let only its managers through). */
    async registerTransmitter(mosqueId: string, name: string | null, actorId: string): Promise<Credentials> {
      const { row, password } = await service.register('transmitter', name, mosqueId, null, actorId);
      return { device: await describe(row), password };
    },

    /** A stream player the person owns, bound to a mosque that takes them or to none. */
    async registerPlayer(actor: Actor, name: string | null, mosqueId: string | null): Promise<Result<Credentials>> {
      if (mosqueId) {
        const bindable = await access.mayBind(actor, mosqueId);
        if (!bindable.ok) return bindable;
      }
      const registered = await service.registerPlayer(name, mosqueId, actor);
      return registered.ok ? ok({ device: await describe(registered.value.row), password: registered.value.password }) : registered;
    },

    /**
     * A paired device's first password (docs/api.md, "Pairing a device"), generated when the device's poll takes
     * it: the one made at registration was never shown, so none lay at rest. Null when the device is gone.
     */
    async issuePairedPassword(deviceId: string, actorId: string): Promise<Credentials | null> {
      const row = await deps.devices.findById(deviceId);
      if (!row) return null;
      const password = await service.rotateCredentials(row, actorId);
      return { device: await describe(row), password };
    },

    /** The hardware revision a device's pairing request named (docs/api.md, "Firmware updates" targets by it). */
    recordHwRev: (deviceId: string, hwRev: string): Promise<void> => deps.devices.setHwRev(deviceId, hwRev),

    /** Name, settings and binding in one change (a move is a change of `mosqueId`), each with its rule first. */
    async update(device: OpenDevice, change: DeviceChange): Promise<Result<DeviceBody>> {
      const { row } = device;
      const heartbeat = heartbeatFits(row.kind, change.settings?.heartbeat_secs);
      if (!heartbeat.ok) return heartbeat;
      if (change.mosqueId !== undefined) {
        const movable = await access.mayMove(device, change.mosqueId);
        if (!movable.ok) return movable;
      }
      return ok(await describe(await service.update(row, change, device.actor.id)));
    },

    remove: (device: OpenDevice): Promise<void> => service.delete(device.row, device.actor.id),

    /** A new password; the old one, its lease and its live connection end now. */
    async rotate(device: OpenDevice): Promise<Credentials> {
      const password = await service.rotateCredentials(device.row, device.actor.id);
      return { device: await describe(device.row), password };
    },

    /** Whether this device takes the command: asked before the command's arguments are read. */
    commandFits: (device: OpenDevice, name: string): Result<void> => commandFits(device.row.kind, name),

    /** Sends and waits for the ack; the command's effects ran by then (src/devices/commands.ts). */
    async sendCommand(device: OpenDevice, name: string, args: Record<string, unknown>, timeoutMs: number): Promise<Result<CommandOutcome>> {
      const fits = commandFits(device.row.kind, name);
      if (!fits.ok) return fits;
      return deps.commands.send(device.row.id, name, args, { timeoutMs, actorUserId: device.actor.id });
    },

    /** Why the device plays or not; `onAir` says whether its mosque is on the air (null: no audio server). */
    why: (device: OpenDevice, onAir: ((mosqueId: string) => Promise<boolean>) | null) => describer.why(device.row, onAir),
    events: (device: OpenDevice, limit: number, before: number | null) => deps.timeline.list(device.row.id, limit, before),
    logs: (device: OpenDevice, limit: number) => describer.logs(device.row, limit),
    /** Public: firmware checks leases offline against these keys. */
    leaseKeys: () => deps.jwks(),
  };
}

export type DeviceVerbs = ReturnType<typeof createDeviceVerbs>;
