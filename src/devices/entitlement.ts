import type { Queries, Store } from '../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Binding, HeldBinding, OfflinePlanner } from './device-config.ts';
import type { DeviceRow, DeviceStore } from './devices.ts';
import type { LeaseSigner } from './leases.ts';
import type { MembershipStatus } from '../mosques/memberships.ts';
import type { MosqueRow, MosqueStore } from '../mosques/mosques.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';
import { afterCommit } from '../platform/store/after-commit.ts';

export type UnboundReason = 'no_mosque' | 'awaiting_approval' | 'membership_lapsed' | 'lease_expired';

export type Decision =
  | { entitled: true; mosqueId: string }
  | { entitled: false; reason: UnboundReason; decidingField: string };

/**
 * Entitlement (docs/api.md, "Devices, from the app's side"): a stream player may hear its mosque's azaan only while it is enabled, bound to a
 * mosque, and its owner's membership there is approved. Pure; the lease is checked apart.
 */
export function decide(device: Pick<DeviceRow, 'mosque_id' | 'enabled'>, membership: MembershipStatus | null, removed = false): Decision {
  if (device.enabled !== 1) return { entitled: false, reason: 'membership_lapsed', decidingField: 'device.enabled' };
  if (device.mosque_id === null) return { entitled: false, reason: 'no_mosque', decidingField: 'device.mosque_id' };
  // A membership an admin removed has lapsed; one that never existed is still awaited.
  if (membership === null && removed) return { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' };
  if (membership === null || membership === 'pending') return { entitled: false, reason: 'awaiting_approval', decidingField: 'membership.status' };
  if (membership !== 'approved') return { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' };
  return { entitled: true, mosqueId: device.mosque_id };
}

export interface Lease {
  mosqueId: string;
  expiresAt: number;
  /** The signed JWT, reused while the lease is not due for renewal (null: none kept, e.g. a row from before migration 010). */
  token: string | null;
}

interface Deps {
  /** Where the leases are read back from (at start, and when another process changed one); a lease is written in its caller's transaction. */
  store: Store;
  clock: Clock;
  devices: DeviceStore;
  mosques: MosqueStore;
  /** Read through `q` (the caller's transaction when there is one: on SQLite a query outside it would wait for it). */
  membershipStatus: (mosqueId: string, userId: string, q: Queries) => Promise<MembershipStatus | null> | MembershipStatus | null;
  /** Whether the user's membership of the mosque was removed (and not re-created since). */
  membershipRemoved: (mosqueId: string, userId: string, q: Queries) => Promise<boolean> | boolean;
  signer: LeaseSigner;
  ttlHours: number;
  /** A lease issued or dropped is announced (kind `device`): other processes' broker checks read their own map. */
  changes?: ChangePublisher;
  /**
   * The stream address a config carries. Default: the mosque's own stream_url. With an audio server the composition
   * root hands in its mount's address (src/audio/mounts.ts), a player's with its lease in it (docs/operator.md#audio-icecast).
   */
  streamUrl?: (mosque: MosqueRow, lease: string | null) => string | null;
  /** The offline plan an entitled player's config carries (docs/firmware.md, "The azaan without the network"); none yet: left out. */
  offline?: () => OfflinePlanner | null;
}

/**
 * Leases held by stream players, in memory for the broker's per-packet checks. A lease is issued with
 * every config of an entitled player and dropped the moment entitlement ends, so `holdsLease` (asked on
 * every delivery to a player) turns false at once, before the new config even reaches the device.
 */
export async function createEntitlement(deps: Deps) {
  let leases = new Map<string, Lease>();
  /**
   * For each reload whose rows are being read, the players whose lease this process issued or dropped meanwhile:
   * memory is newer than those rows for them (the store may answer after other work ran), so it keeps its word.
   */
  const reloading = new Set<Set<string>>();
  const watchWrites = async <T>(read: () => Promise<T>): Promise<{ rows: T; changed: Set<string> }> => {
    const changed = new Set<string>();
    reloading.add(changed);
    try {
      return { rows: await read(), changed };
    } finally {
      reloading.delete(changed);
    }
  };
  const changes = deps.changes ?? noChanges;
  /** Memory first (the broker's check answers from it at once), then the row, in the caller's transaction. */
  const saveLease = async (q: Queries, expiresAt: number | null, token: string | null, id: string) => {
    for (const changed of reloading) changed.add(id);
    await q.updateTable('devices').set({ lease_expires_at: expiresAt, lease_token: token }).where('id', '=', id).execute();
    afterCommit(q, () => changes.publish({ kind: 'device', id }));
  };
  const nowSeconds = () => toUnixSeconds(deps.clock());
  const streamUrl = deps.streamUrl ?? ((mosque: MosqueRow) => mosque.stream_url);
  const ttlSeconds = deps.ttlHours * 3600;
  /** Only with a lease: an unentitled player's config carries no slots, so a ban takes them away with the lease. */
  const offlineOf = async (q: Queries, mosque: MosqueRow | null, ownerUserId: string | null, nowS: number): Promise<Pick<Binding, 'offline'>> => {
    const planner = deps.offline?.();
    if (!planner || !mosque || !ownerUserId) return {};
    const plan = await planner.plan(q, mosque, ownerUserId, nowS);
    return plan ? { offline: plan } : {};
  };

  const decisionFor = async (row: Pick<DeviceRow, 'mosque_id' | 'owner_user_id' | 'enabled'>, q: Queries = deps.store): Promise<Decision> => {
    if (!row.mosque_id || !row.owner_user_id) return decide(row, null);
    const status = await deps.membershipStatus(row.mosque_id, row.owner_user_id, q);
    return decide(row, status, status === null && (await deps.membershipRemoved(row.mosque_id, row.owner_user_id, q)));
  };

  /**
   * Leases from the database that still stand (at start, and with several processes, periodically): built aside
   * and swapped in whole, so the broker's per-packet check never sees the map half filled.
   */
  const reloadAll = async () => {
    // One read: the columns entitlement decides on come with the lease (no second read per leased player).
    const { rows, changed } = await watchWrites(() => deps.store.selectFrom('devices').select(['id', 'mosque_id', 'owner_user_id', 'enabled', 'lease_expires_at', 'lease_token'])
      .where('kind', '=', 'stream_player').where('lease_expires_at', 'is not', null).where('mosque_id', 'is not', null).execute());
    const next = new Map<string, Lease>();
    for (const row of rows) {
      if (row.lease_expires_at! > nowSeconds() && (await decisionFor(row)).entitled) next.set(row.id, { mosqueId: row.mosque_id!, expiresAt: row.lease_expires_at!, token: row.lease_token });
    }
    for (const id of changed) {
      const mine = leases.get(id);
      if (mine) next.set(id, mine);
      else next.delete(id);
    }
    leases = next;
  };
  await reloadAll();

  /** One player's lease as the database has it now (another process issued or dropped it). */
  const reloadOne = async (id: string) => {
    const { rows: row, changed } = await watchWrites(() => deps.store.selectFrom('devices').select(['kind', 'mosque_id', 'owner_user_id', 'enabled', 'lease_expires_at', 'lease_token']).where('id', '=', id).executeTakeFirst());
    if (changed.has(id)) return; // this process wrote it meanwhile: memory is the newer word
    if (row && row.kind === 'stream_player' && row.mosque_id !== null && row.lease_expires_at !== null && row.lease_expires_at > nowSeconds() && (await decisionFor(row)).entitled) {
      leases.set(id, { mosqueId: row.mosque_id, expiresAt: row.lease_expires_at, token: row.lease_token });
    } else leases.delete(id);
  };

  /**
   * Drops the lease from memory at once; the row's follows in `q` (the caller's transaction, or the store).
   * `rowHolds`: the row still carries a lease memory never loaded (a start reads only entitled players' leases,
   * so a ban whose own write a stop cut off left its token in the row).
   */
  async function revoke(q: Queries, id: string, rowHolds = false): Promise<void> {
    if (leases.delete(id) || rowHolds) await saveLease(q, null, null, id);
  }

  /** Not yet half spent (the renewal rule), not longer than the TTL now set, and signed with the key in use. */
  const reusable = (lease: Lease | undefined, mosqueId: string, now: number): lease is Lease & { token: string } =>
    lease !== undefined && lease.token !== null && lease.mosqueId === mosqueId && lease.expiresAt > now + ttlSeconds / 2 &&
    lease.expiresAt <= now + ttlSeconds && deps.signer.isOwn(lease.token);

  function staleFor(id: string, decision: Decision): boolean {
    const lease = leases.get(id);
    if (!decision.entitled) return lease !== undefined;
    return lease === undefined || lease.mosqueId !== decision.mosqueId;
  }

  return {
    reloadAll,
    reloadOne,
    decisionFor,
    lease: (id: string) => leases.get(id) ?? null,

    /** The broker's check, synchronous and from memory. */
    holdsLease(id: string, mosqueId: string): boolean {
      const lease = leases.get(id);
      return lease !== undefined && lease.mosqueId === mosqueId && lease.expiresAt > nowSeconds();
    },

    /**
     * What a device's config says beyond its own settings. An entitled player gets the lease it holds while
     * that is not due for renewal (no signature and no lease write per reconnect or config change),
     * else a freshly signed one; an unentitled one loses its lease here. Its reads and lease write go through `q`.
     * `known`: the decision its caller read through `q` already (a CONNECT reads the membership once).
     */
    async binding(q: Queries, row: DeviceRow, known?: Decision): Promise<Binding> {
      const mosque = row.mosque_id ? await deps.mosques.findById(row.mosque_id, q) : null;
      if (row.kind === 'transmitter') return { mosque_id: row.mosque_id, stream_url: mosque ? streamUrl(mosque, null) : null, lease: null, unbound_reason: null };
      const decision = known ?? (await decisionFor(row, q));
      if (!decision.entitled) {
        await revoke(q, row.id, row.lease_token !== null || row.lease_expires_at !== null);
        return { mosque_id: row.mosque_id, stream_url: null, lease: null, unbound_reason: decision.reason };
      }
      const issuedAt = nowSeconds();
      const held = leases.get(row.id);
      const offline = await offlineOf(q, mosque, row.owner_user_id, issuedAt);
      if (reusable(held, decision.mosqueId, issuedAt)) return { mosque_id: row.mosque_id, stream_url: mosque ? streamUrl(mosque, held.token) : null, lease: { token: held.token, expires_at: held.expiresAt }, unbound_reason: null, ...offline };
      const expiresAt = issuedAt + ttlSeconds;
      const token = deps.signer.issue(row.id, decision.mosqueId, expiresAt, issuedAt);
      leases.set(row.id, { mosqueId: decision.mosqueId, expiresAt, token });
      await saveLease(q, expiresAt, token, row.id);
      return { mosque_id: row.mosque_id, stream_url: mosque ? streamUrl(mosque, token) : null, lease: { token, expires_at: expiresAt }, unbound_reason: null, ...offline };
    },

    /** Whether the player's entitlement differs from the lease it holds (so its config must change now). */
    async isStale(row: DeviceRow, q: Queries = deps.store): Promise<boolean> {
      return staleFor(row.id, await decisionFor(row, q));
    },
    /** The same, for a decision its caller has read. */
    staleFor,

    /**
     * The binding `binding` would give this device now, its offline plan aside, without writing or signing anything
     * (the lease it holds, reusable), or null when it would sign or drop one: a retained config that says this
     * needs no rebuilding. Reads the mosque (its stream address) through `q`.
     */
    async heldBinding(q: Queries, row: DeviceRow, decision: Decision | null): Promise<HeldBinding | null> {
      const mosque = async (lease: string | null) => {
        const found = row.mosque_id ? await deps.mosques.findById(row.mosque_id, q) : null;
        return found ? streamUrl(found, lease) : null;
      };
      if (row.kind === 'transmitter') return { mosque_id: row.mosque_id, stream_url: await mosque(null), lease: null, unbound_reason: null };
      if (!decision) return null;
      if (!decision.entitled) {
        const rowHolds = row.lease_token !== null || row.lease_expires_at !== null;
        return leases.has(row.id) || rowHolds ? null : { mosque_id: row.mosque_id, stream_url: null, lease: null, unbound_reason: decision.reason };
      }
      const held = leases.get(row.id);
      if (!reusable(held, decision.mosqueId, nowSeconds())) return null;
      return { mosque_id: row.mosque_id, stream_url: await mosque(held.token), lease: { token: held.token, expires_at: held.expiresAt }, unbound_reason: null };
    },

    /** Leases past half their life: renewed while the player is connected and entitled, well before expiry. */
    dueForRenewal(): string[] {
      const horizon = nowSeconds() + ttlSeconds / 2;
      return [...leases].filter(([, l]) => l.expiresAt <= horizon).map(([id]) => id);
    },

    /** The same question for one player, in constant time (asked on every CONNECT). */
    isDue(id: string): boolean {
      const lease = leases.get(id);
      return lease !== undefined && lease.expiresAt <= nowSeconds() + ttlSeconds / 2;
    },

    /** The lease goes (a deleted device, a rotated password): memory at once, the row in `q`. */
    forget: revoke,
  };
}

export type Entitlement = Awaited<ReturnType<typeof createEntitlement>>;
