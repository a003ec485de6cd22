import crypto from 'node:crypto';
import type { Queries, Store } from '../platform/store/store.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { effectiveSettings, type DeviceKind, type DeviceSettings, type EffectiveSettings } from './device-config.ts';
import { sha256Hex } from '../platform/identifiers.ts';
import { randomToken } from '../platform/secret-codes.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';
import { afterCommit } from '../platform/store/after-commit.ts';

export interface DeviceRow {
  id: string;
  kind: DeviceKind;
  name: string | null;
  mosque_id: string | null;
  owner_user_id: string | null;
  secret_hash: string;
  enabled: number;
  status: string;
  status_reason: string | null;
  status_detail: string;
  status_at: number | null;
  last_seen_at: number | null;
  fw: string | null;
  /** The hardware revision last reported (migration 027): at pairing, and by get_state. */
  hw_rev: string | null;
  mac: string | null;
  ssid: string | null;
  ip: string | null;
  rssi: number | null;
  temp_c: number | null;
  uptime_s: number | null;
  free_heap: number | null;
  volume: number | null;
  reported_config_version: number | null;
  config: string;
  config_version: number;
  lease_expires_at: number | null;
  /** The signed lease of lease_expires_at (migration 010), reused on reconnect while not due for renewal. */
  lease_token: string | null;
  log_level: string | null;
  log_level_until: number | null;
  /** With REDIS_URL: the broker process holding the device's connection (migration 008), null when none. */
  connected_broker: string | null;
  created_at: number;
  updated_at: number;
}

/** What every MQTT packet is checked against: kept in memory, refreshed on every write (never a query per packet). */
export interface DeviceInfo {
  id: string;
  kind: DeviceKind;
  mosqueId: string | null;
  ownerUserId: string | null;
  enabled: boolean;
  secretHash: Buffer;
  settings: EffectiveSettings;
  /** Until when (Unix seconds) a stream player's logs are accepted (set_log_level); null: not escalated. */
  logUntil: number | null;
  /** The row's status when memory last read it: where telemetry starts a device it has not seen yet. */
  status: string;
}

export function toDeviceInfo(row: DeviceRow): DeviceInfo {
  return {
    id: row.id,
    kind: row.kind,
    mosqueId: row.mosque_id,
    ownerUserId: row.owner_user_id,
    enabled: row.enabled === 1,
    secretHash: Buffer.from(row.secret_hash, 'hex'),
    settings: effectiveSettings(row.kind, JSON.parse(row.config) as DeviceSettings),
    logUntil: row.log_level_until,
    status: row.status,
  };
}

/** Heartbeat fields newer than the row (heartbeats are flushed in batches). */
export interface HeartbeatFields {
  ip?: string | undefined;
  rssi?: number | undefined;
  uptime_s?: number | undefined;
  free_heap?: number | undefined;
  volume?: number | undefined;
  config_version?: number | undefined;
}

/** The HTTP shape of a device (the `Device` schema of docs/openapi.json); `entitlement` is filled by the caller. */
export function toDevice(row: DeviceRow, live: { lastSeenAt: number | null; connected: boolean; heartbeat: HeartbeatFields | null }) {
  const lastSeen = Math.max(row.last_seen_at ?? 0, live.lastSeenAt ?? 0);
  const hb = live.heartbeat;
  return {
    id: row.id,
    kind: row.kind,
    name: row.name,
    mosque_id: row.mosque_id,
    owner_user_id: row.owner_user_id,
    enabled: row.enabled === 1,
    connected: live.connected,
    status: row.status,
    status_detail: JSON.parse(row.status_detail) as Record<string, unknown>,
    status_at: row.status_at === null ? null : toIsoString(row.status_at),
    last_seen_at: lastSeen === 0 ? null : toIsoString(lastSeen),
    fw: row.fw,
    mac: row.mac,
    ssid: row.ssid,
    ip: hb?.ip ?? row.ip,
    rssi: hb?.rssi ?? row.rssi,
    temp_c: row.temp_c,
    uptime_s: hb?.uptime_s ?? row.uptime_s,
    free_heap: hb?.free_heap ?? row.free_heap,
    volume: hb?.volume ?? row.volume,
    reported_config_version: hb?.config_version ?? row.reported_config_version,
    config_version: row.config_version,
    config: effectiveSettings(row.kind, JSON.parse(row.config) as DeviceSettings),
    created_at: toIsoString(row.created_at),
  };
}

// 16 characters of base32 (80 bits) behind a 'd': 17 characters, inside MQTT 3.1's 23-character clientId limit.
const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';
export function newDeviceId(): string {
  const bytes = crypto.randomBytes(16);
  let id = 'd';
  for (const b of bytes) id += ID_ALPHABET[b & 31];
  return id;
}

export interface NewDevice {
  kind: DeviceKind;
  name: string | null;
  mosqueId: string | null;
  ownerUserId: string | null;
}

export interface DeviceChange {
  name?: string | null;
  mosqueId?: string | null;
  settings?: DeviceSettings;
}

/**
 * The device table and its in-memory mirror. Device passwords are 256 random bits, stored as SHA-256 and
 * compared in constant time: a reconnect storm of 10,000 devices must not cost minutes of bcrypt.
 * Every write the mirror depends on is announced on `changes` (kind `device`), so other processes reload
 * the entry (telemetry columns are not mirrored and not announced). Writes take `Queries`: the caller's
 * transaction (registration with its timeline row and activity entry) or the store.
 */
export async function createDeviceStore(store: Store, clock: Clock, changes: ChangePublisher = noChanges) {
  const rows = (q: Queries) => q.selectFrom('devices').selectAll();
  const byId = async (id: string, q: Queries = store) => ((await rows(q).where('id', '=', id).executeTakeFirst()) as DeviceRow | undefined) ?? null;

  let registry = new Map<string, DeviceInfo>();
  /** Built aside and swapped in whole: a CONNECT never sees the registry half filled. */
  const reloadAll = async () => {
    const next = new Map<string, DeviceInfo>();
    for (const row of (await rows(store).orderBy('created_at').orderBy('id').execute()) as DeviceRow[]) next.set(row.id, toDeviceInfo(row));
    registry = next;
  };
  await reloadAll();
  const refresh = async (id: string, q: Queries = store) => {
    const row = await byId(id, q);
    if (row) registry.set(id, toDeviceInfo(row));
    else registry.delete(id);
    return row;
  };
  const changed = (id: string) => changes.publish({ kind: 'device', id });
  /**
   * Re-reads the row (through the caller's transaction) into memory, and announces it once that transaction
   * committed. Memory moves at once (this process answers from it): a rolled-back write leaves the entry to the
   * next reload.
   */
  const commit = async (q: Queries, id: string) => {
    const row = await refresh(id, q);
    afterCommit(q, () => changed(id));
    return row;
  };
  const now = () => toUnixSeconds(clock());
  const inMemory = (keep: (d: DeviceInfo) => boolean) => [...registry.values()].filter(keep);

  return {
    info: (id: string) => registry.get(id) ?? null,
    /** Like info, read from the row when memory does not know the id (registered through another process). */
    load: async (id: string): Promise<DeviceInfo | null> => registry.get(id) ?? ((await refresh(id)) ? registry.get(id) ?? null : null),
    /**
     * Re-reads the whole registry. Only for several processes sharing one database (REDIS_URL): a change
     * made by another process reaches this one's memory within one reload period.
     */
    reloadAll,
    /** Re-reads one device into memory without announcing it (another process changed it: the feed said so). */
    reload: (id: string) => refresh(id),
    /** Which devices memory knows now, and as what (to compare before and after a full reload). */
    snapshot: () => new Map(registry),
    findById: (id: string, q: Queries = store) => byId(id, q),
    listForMosque: async (mosqueId: string) => (await rows(store).where('mosque_id', '=', mosqueId).orderBy('created_at').orderBy('id').execute()) as DeviceRow[],
    listForOwner: async (userId: string) => (await rows(store).where('owner_user_id', '=', userId).orderBy('created_at').orderBy('id').execute()) as DeviceRow[],
    /** In the caller's transaction: the cap it checks must still hold when the insert commits. */
    countPlayersOf: async (q: Queries, userId: string) =>
      Number((await q.selectFrom('devices').select((eb) => eb.fn.countAll<number>().as('n')).where('owner_user_id', '=', userId).where('kind', '=', 'stream_player').executeTakeFirstOrThrow()).n),
    /**
     * A mosque's transmitters, from memory (a broadcast's fan-out asks at its start and stop, synchronously, and
     * needs only their ids), in the order memory learned them (the rows' created_at, id at a full load).
     */
    listTransmitters: (mosqueId: string): Array<Pick<DeviceInfo, 'id'>> => inMemory((d) => d.mosqueId === mosqueId && d.kind === 'transmitter'),
    /** The ids of the devices a person owns, from memory (the audio gate's standing change asks synchronously). */
    idsOwnedBy: (userId: string): string[] => inMemory((d) => d.ownerUserId === userId).map((d) => d.id),
    /** The devices a firmware rollout may target (docs/api.md, "Firmware updates"): of a kind and hardware revision. */
    listForHardware: async (kind: DeviceKind, hwRev: string) => (await rows(store).where('kind', '=', kind).where('hw_rev', '=', hwRev).orderBy('created_at').orderBy('id').execute()) as DeviceRow[],
    /** Rows by id, in one query per few hundred (a rollout's tick reads its devices' reported state). */
    async listByIds(ids: readonly string[]): Promise<DeviceRow[]> {
      const out: DeviceRow[] = [];
      for (let i = 0; i < ids.length; i += 500) out.push(...((await rows(store).where('id', 'in', ids.slice(i, i + 500)).execute()) as DeviceRow[]));
      return out;
    },
    /** The hardware revision the device reported (pairing, get_state); the same value again writes nothing. */
    async setHwRev(id: string, hwRev: string): Promise<void> {
      await store.updateTable('devices').set({ hw_rev: hwRev }).where('id', '=', id).where((eb) => eb.or([eb('hw_rev', 'is', null), eb('hw_rev', '!=', hwRev)])).execute();
    },
    listAll: async () => (await rows(store).orderBy('created_at').orderBy('id').execute()) as DeviceRow[],
    /** The next `limit` rows in id order after `afterId` ('' to begin): a pass over every device a page at a time. */
    listPage: async (q: Queries, afterId: string, limit: number) => (await rows(q).where('id', '>', afterId).orderBy('id').limit(limit).execute()) as DeviceRow[],

    /** The password is returned once, here; only its SHA-256 is kept. */
    async create(q: Queries, d: NewDevice): Promise<{ row: DeviceRow; password: string }> {
      const id = newDeviceId();
      const password = randomToken(32);
      const at = now();
      await q.insertInto('devices').values({ id, kind: d.kind, name: d.name, mosque_id: d.mosqueId, owner_user_id: d.ownerUserId, secret_hash: sha256Hex(password), created_at: at, updated_at: at }).execute();
      return { row: (await commit(q, id))!, password };
    },

    /** A change of settings or binding raises config_version. */
    async update(q: Queries, id: string, change: DeviceChange): Promise<DeviceRow> {
      const row = (await byId(id, q))!;
      const settings = change.settings ? { ...(JSON.parse(row.config) as DeviceSettings), ...change.settings } : null;
      const rebinds = change.mosqueId !== undefined && change.mosqueId !== row.mosque_id;
      await q.updateTable('devices').set((eb) => ({
        name: change.name === undefined ? row.name : change.name,
        mosque_id: change.mosqueId === undefined ? row.mosque_id : change.mosqueId,
        config: settings ? JSON.stringify(settings) : row.config,
        config_version: eb('config_version', '+', settings || rebinds ? 1 : 0),
        updated_at: now(),
      })).where('id', '=', id).execute();
      return (await commit(q, id))!;
    },

    /** Something the config carries changed outside the device row (entitlement, the mosque's stream). */
    async bumpConfigVersion(q: Queries, id: string): Promise<DeviceRow> {
      await q.updateTable('devices').set((eb) => ({ config_version: eb('config_version', '+', 1), updated_at: now() })).where('id', '=', id).execute();
      return (await commit(q, id))!;
    },

    /** A temporary log escalation (set_log_level) that expires by itself at `until`. */
    async setLogLevel(q: Queries, id: string, level: string, until: number): Promise<void> {
      await q.updateTable('devices').set({ log_level: level, log_level_until: until, updated_at: now() }).where('id', '=', id).execute();
      await commit(q, id);
    },

    async rotateSecret(q: Queries, id: string): Promise<string> {
      const password = randomToken(32);
      await q.updateTable('devices').set({ secret_hash: sha256Hex(password), updated_at: now() }).where('id', '=', id).execute();
      await commit(q, id);
      return password;
    },

    async delete(q: Queries, id: string): Promise<void> {
      await q.deleteFrom('devices').where('id', '=', id).execute();
      registry.delete(id);
      afterCommit(q, () => changed(id));
    },

    /** Drops rows the database removed on its own (ON DELETE CASCADE of an owner) from memory. */
    forget(id: string): void {
      registry.delete(id);
      changed(id);
    },

    /**
     * Which broker process (aedes id) holds the device's connection: the one view every process shares
     * with REDIS_URL, read only when a dead process's stored will comes up (migration 008).
     */
    claimConnection: async (q: Queries, id: string, brokerId: string) => void (await q.updateTable('devices').set({ connected_broker: brokerId }).where('id', '=', id).execute()),
    /** Only the process's own claim: another process may hold the device by now. */
    releaseConnection: async (q: Queries, id: string, brokerId: string) =>
      void (await q.updateTable('devices').set({ connected_broker: null }).where('id', '=', id).where('connected_broker', '=', brokerId).execute()),
    connectionOwner: async (id: string, q: Queries = store) =>
      (await q.selectFrom('devices').select('connected_broker').where('id', '=', id).executeTakeFirst())?.connected_broker ?? null,
    /**
     * A single process claims nothing (no write per CONNECT), so a claim left from a run with
     * REDIS_URL would name a process that no longer exists and hide a device's own will: it goes at start.
     */
    releaseAllConnections: async () => void (await store.updateTable('devices').set({ connected_broker: null }).where('connected_broker', 'is not', null).execute()),

    /**
     * Constant-time check of a presented password against the stored SHA-256, from memory only (a device
     * memory does not know is loaded first by the broker's CONNECT, src/devices/device-plane.ts).
     */
    verifySecret(id: string, password: string): boolean {
      const info = registry.get(id);
      // One-shot hash (node >= 20.12): the same SHA-256 without a Hash object per CONNECT.
      const presented = crypto.hash('sha256', password, 'buffer');
      const expected = info?.secretHash ?? crypto.randomBytes(32);
      return crypto.timingSafeEqual(presented, expected) && info !== undefined && info.enabled;
    },
  };
}

export type DeviceStore = Awaited<ReturnType<typeof createDeviceStore>>;
