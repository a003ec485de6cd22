import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { effectiveSettings, type DeviceKind, type DeviceSettings, type EffectiveSettings } from './device-config.ts';
import { sha256Hex } from '../platform/identifiers.ts';
import { randomToken } from '../platform/secret-codes.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';

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
 * the entry (telemetry columns are not mirrored and not announced).
 */
export function createDeviceStore(db: Db, clock: Clock, changes: ChangePublisher = noChanges) {
  const byId = db.prepare<[string], DeviceRow>('SELECT * FROM devices WHERE id = ?');
  const insert = db.prepare(
    `INSERT INTO devices (id, kind, name, mosque_id, owner_user_id, secret_hash, created_at, updated_at)
     VALUES (@id, @kind, @name, @mosque_id, @owner_user_id, @secret_hash, @now, @now)`,
  );
  const updateRow = db.prepare(
    `UPDATE devices SET name = @name, mosque_id = @mosque_id, config = @config, config_version = config_version + @bump,
       updated_at = @now WHERE id = @id`,
  );
  const bump = db.prepare('UPDATE devices SET config_version = config_version + 1, updated_at = ? WHERE id = ?');
  const setSecret = db.prepare('UPDATE devices SET secret_hash = ?, updated_at = ? WHERE id = ?');
  const remove = db.prepare('DELETE FROM devices WHERE id = ?');
  const setLogLevel = db.prepare('UPDATE devices SET log_level = ?, log_level_until = ?, updated_at = ? WHERE id = ?');
  const ofMosque = db.prepare<[string], DeviceRow>('SELECT * FROM devices WHERE mosque_id = ? ORDER BY created_at, id');
  const transmittersOf = db.prepare<[string], DeviceRow>("SELECT * FROM devices WHERE mosque_id = ? AND kind = 'transmitter' ORDER BY created_at, id");
  const ofOwner = db.prepare<[string], DeviceRow>('SELECT * FROM devices WHERE owner_user_id = ? ORDER BY created_at, id');
  const all = db.prepare<[], DeviceRow>('SELECT * FROM devices ORDER BY created_at, id');
  const after = db.prepare<[string, number], DeviceRow>('SELECT * FROM devices WHERE id > ? ORDER BY id LIMIT ?');
  const playersOf = db.prepare<[string], { n: number }>("SELECT count(*) AS n FROM devices WHERE owner_user_id = ? AND kind = 'stream_player'");
  const claim = db.prepare('UPDATE devices SET connected_broker = ? WHERE id = ?');
  const release = db.prepare('UPDATE devices SET connected_broker = NULL WHERE id = ? AND connected_broker = ?');
  const owner = db.prepare<[string], { connected_broker: string | null }>('SELECT connected_broker FROM devices WHERE id = ?');
  const releaseAll = db.prepare('UPDATE devices SET connected_broker = NULL WHERE connected_broker IS NOT NULL');

  const registry = new Map<string, DeviceInfo>();
  const reloadAll = () => {
    registry.clear();
    for (const row of all.iterate()) registry.set(row.id, toDeviceInfo(row));
  };
  reloadAll();
  const refresh = (id: string) => {
    const row = byId.get(id);
    if (row) registry.set(id, toDeviceInfo(row));
    else registry.delete(id);
    return row ?? null;
  };
  const changed = (id: string) => changes.publish({ kind: 'device', id });
  /** Re-reads the row into memory and announces it. */
  const commit = (id: string) => {
    const row = refresh(id);
    changed(id);
    return row;
  };
  const now = () => toUnixSeconds(clock());

  return {
    info: (id: string) => registry.get(id) ?? null,
    /** Like info, read from the row when memory does not know the id (registered through another process). */
    load: (id: string): DeviceInfo | null => registry.get(id) ?? (refresh(id) ? registry.get(id)! : null),
    /**
     * Re-reads the whole registry. Only for several processes sharing one database (REDIS_URL): a change
     * made by another process reaches this one's memory within one reload period.
     */
    reloadAll,
    /** Re-reads one device into memory without announcing it (another process changed it: the feed said so). */
    reload: refresh,
    /** Which devices memory knows now, and as what (to compare before and after a full reload). */
    snapshot: () => new Map(registry),
    findById: (id: string) => byId.get(id) ?? null,
    listForMosque: (mosqueId: string) => ofMosque.all(mosqueId),
    listForOwner: (userId: string) => ofOwner.all(userId),
    countPlayersOf: (userId: string) => playersOf.get(userId)!.n,
    /** A mosque's transmitters only (a broadcast must not load every player row to find them). */
    listTransmitters: (mosqueId: string) => transmittersOf.all(mosqueId),
    listAll: () => all.all(),
    /** The next `limit` rows in id order after `afterId` ('' to begin): a pass over every device a page at a time. */
    listPage: (afterId: string, limit: number) => after.all(afterId, limit),

    /** The password is returned once, here; only its SHA-256 is kept. */
    create(d: NewDevice): { row: DeviceRow; password: string } {
      const id = newDeviceId();
      const password = randomToken(32);
      insert.run({ id, kind: d.kind, name: d.name, mosque_id: d.mosqueId, owner_user_id: d.ownerUserId, secret_hash: sha256Hex(password), now: now() });
      return { row: commit(id)!, password };
    },

    /** A change of settings or binding raises config_version. */
    update(id: string, change: DeviceChange): DeviceRow {
      const row = byId.get(id)!;
      const settings = change.settings ? { ...(JSON.parse(row.config) as DeviceSettings), ...change.settings } : null;
      const rebinds = change.mosqueId !== undefined && change.mosqueId !== row.mosque_id;
      updateRow.run({
        id,
        name: change.name === undefined ? row.name : change.name,
        mosque_id: change.mosqueId === undefined ? row.mosque_id : change.mosqueId,
        config: settings ? JSON.stringify(settings) : row.config,
        bump: settings || rebinds ? 1 : 0,
        now: now(),
      });
      return commit(id)!;
    },

    /** Something the config carries changed outside the device row (entitlement, the mosque's stream). */
    bumpConfigVersion(id: string): DeviceRow {
      bump.run(now(), id);
      return commit(id)!;
    },

    /** A temporary log escalation (set_log_level) that expires by itself at `until`. */
    setLogLevel(id: string, level: string, until: number): void {
      setLogLevel.run(level, until, now(), id);
      commit(id);
    },

    rotateSecret(id: string): string {
      const password = randomToken(32);
      setSecret.run(sha256Hex(password), now(), id);
      commit(id);
      return password;
    },

    delete(id: string): void {
      remove.run(id);
      registry.delete(id);
      changed(id);
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
    claimConnection: (id: string, brokerId: string) => void claim.run(brokerId, id),
    /** Only the process's own claim: another process may hold the device by now. */
    releaseConnection: (id: string, brokerId: string) => void release.run(id, brokerId),
    connectionOwner: (id: string) => owner.get(id)?.connected_broker ?? null,
    /**
     * A single process claims nothing (no write per CONNECT), so a claim left from a run with
     * REDIS_URL would name a process that no longer exists and hide a device's own will: it goes at start.
     */
    releaseAllConnections: () => void releaseAll.run(),

    /** Constant-time check of a presented password against the stored SHA-256, from memory. */
    verifySecret(id: string, password: string): boolean {
      if (!registry.has(id)) refresh(id);
      const info = registry.get(id);
      // One-shot hash (node >= 20.12): the same SHA-256 without a Hash object per CONNECT.
      const presented = crypto.hash('sha256', password, 'buffer');
      const expected = info?.secretHash ?? crypto.randomBytes(32);
      return crypto.timingSafeEqual(presented, expected) && info !== undefined && info.enabled;
    },
  };
}

export type DeviceStore = ReturnType<typeof createDeviceStore>;
