import { standingOf, type Actor, type AdminStore } from '../../mosques/admins.ts';
import type { MembershipStatus } from '../../mosques/memberships.ts';
import type { MosqueStore } from '../../mosques/mosques.ts';
import { fail, invalid, ok, type Result } from '../../platform/failure.ts';
import type { DeviceRow } from '../devices.ts';

/** What a person may do with one device. */
export interface DeviceStanding {
  /** The owner of a stream player (a transmitter has none). */
  owner: boolean;
  superadmin: boolean;
  view: boolean;
  write: boolean;
}

/**
 * A device opened for one person: what every verb after the first acts on. The edge keeps it between
 * reading the request and acting, and passes it back: an unknown or hidden device is answered before the
 * body is read, as it was when the check lived at the edge.
 */
export interface OpenDevice {
  readonly row: DeviceRow;
  readonly standing: DeviceStanding;
  readonly actor: Actor;
}

const NO_MOSQUE = 'No mosque has that mosque_id.';

/**
 * Who may see and change a device, and bind one to a mosque (docs/api.md, "Devices, from the app's side";
 * test/api/authorization-matrix.test.ts holds who): the owner of a player; an admin of its mosque sees it and a
 * manager changes it; a superadmin everything. Whoever may not see a device is told it does not exist.
 */
export function createDeviceAccess(deps: {
  findById: (id: string) => Promise<DeviceRow | null>;
  mosques: Pick<MosqueStore, 'findById'>;
  admins: Pick<AdminStore, 'find'>;
  membershipStatus: (mosqueId: string, userId: string) => Promise<MembershipStatus | null>;
}) {
  async function standingFor(actor: Actor, row: DeviceRow): Promise<DeviceStanding> {
    const standing = standingOf(actor, row.mosque_id && !actor.isSuperadmin ? await deps.admins.find(row.mosque_id, actor.id) : null);
    const owner = row.kind === 'stream_player' && row.owner_user_id === actor.id;
    // An unbound device has no mosque whose admins could see it: its owner and superadmins only.
    const inMosque = row.mosque_id !== null || actor.isSuperadmin;
    return { owner, superadmin: actor.isSuperadmin, view: owner || (inMosque && standing.admin), write: owner || (inMosque && standing.manager) };
  }

  /**
   * docs/api.md, "Devices": a player joins a mosque's list only by someone with a place in it: a member
   * (pending or approved), a manager, or a superadmin. To anyone else the mosque does not exist.
   */
  async function mayBind(actor: Actor, mosqueId: string): Promise<Result<void>> {
    if (!(await deps.mosques.findById(mosqueId))) return fail('not_found', NO_MOSQUE);
    if (actor.isSuperadmin) return ok(undefined);
    const admin = await deps.admins.find(mosqueId, actor.id);
    const status = await deps.membershipStatus(mosqueId, actor.id);
    if (admin?.can_manage === 1 || status === 'pending' || status === 'approved') return ok(undefined);
    if (admin || status) return fail('forbidden', 'Only a member or a manager of the mosque may bind a player to it.');
    return fail('not_found', NO_MOSQUE);
  }

  return {
    /** The device if the person may see it (not_found otherwise) and, for `write`, change it (forbidden). */
    async open(actor: Actor, deviceId: string, need: 'view' | 'write'): Promise<Result<OpenDevice>> {
      const row = await deps.findById(deviceId);
      if (!row) return fail('not_found');
      const standing = await standingFor(actor, row);
      if (!standing.view) return fail('not_found');
      if (need === 'write' && !standing.write) return fail('forbidden');
      return ok({ row, standing, actor });
    },

    visible: async (actor: Actor, row: DeviceRow): Promise<boolean> => (await standingFor(actor, row)).view,

    mayBind,

    /**
     * Moving a device to another mosque (or to none): a player is its owner's to move, a transmitter a
     * superadmin's, and a transmitter always belongs to a mosque; the mosque it joins must take the person.
     */
    async mayMove(device: OpenDevice, mosqueId: string | null): Promise<Result<void>> {
      const { row, standing } = device;
      if (mosqueId === row.mosque_id) return ok(undefined);
      if (row.kind === 'stream_player' ? !standing.owner && !standing.superadmin : !standing.superadmin) return fail('forbidden', 'You may not move this device to another mosque.');
      if (mosqueId === null && row.kind === 'transmitter') return invalid('mosque_id', 'a transmitter belongs to a mosque');
      return mosqueId ? mayBind(device.actor, mosqueId) : ok(undefined);
    },
  };
}

export type DeviceAccess = ReturnType<typeof createDeviceAccess>;
