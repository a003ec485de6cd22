import type { ActivityLog } from '../mosques/activity.ts';
import type { Clock } from '../platform/clock.ts';
import type { Config } from '../platform/config.ts';
import { sql } from 'kysely';
import type { Queries, Store, StoreTransaction } from '../platform/store/store.ts';
import { storageFaultOf, type Faults } from '../platform/faults.ts';
import { topics, type DeviceLink } from './device-link.ts';
import { createDeviceService } from './device-service.ts';
import { createDeviceStore, type DeviceRow } from './devices.ts';
import type { Logger } from '../platform/log.ts';
import type { MosqueRow, MosqueStore } from '../mosques/mosques.ts';
import { createTelemetry, type StatusChange } from './telemetry/telemetry.ts';
import { createDeliveryStatuses, createTimeline } from './timeline.ts';
import { createGroupCommit, type GroupWrite } from './group-commit.ts';
import { createEntitlement, type Decision } from './entitlement.ts';
import { retainedIsCurrent, type DeviceSettings, type OfflinePlanner } from './device-config.ts';
import { createCommands } from './commands.ts';
import { createLeaseSigner, loadOrCreateLeaseKey } from './leases.ts';
import type { MembershipChange, MembershipStatus } from '../mosques/memberships.ts';
import type { ChangePublisher } from '../platform/changes.ts';
import type { Duties } from '../platform/store/duties.ts';
import type { DeviceInfo } from './devices.ts';
import type { AdminStore } from '../mosques/admins.ts';
import type { TelemetryIngest } from './telemetry/telemetry.ts';
import { createDeviceAccess } from './plane/access.ts';
import { createDescriber } from './plane/describe.ts';
import { createCommandEffects } from './plane/command-effects.ts';
import { createDeviceVerbs } from './plane/verbs.ts';
import { inTransaction } from '../platform/store/after-commit.ts';
import { coalescedPass } from '../platform/flow/coalesced-pass.ts';

export const SWEEP_INTERVAL_MS = 1000;
export const FLUSH_INTERVAL_MS = 2000;
export const PRUNE_INTERVAL_MS = 60 * 60 * 1000;
export const LEASE_CHECK_INTERVAL_MS = 30_000;
/** Rows read per query by the start pass over every device. */
const START_PAGE = 256;

/**
 * The device plane: registry, telemetry (presence, heartbeats, logs), timeline, entitlement and commands,
 * plus the one sweep for stale devices, the batched flush and the timeline pruning. It offers verbs
 * (src/devices/plane/verbs.ts) and one narrow port per room that asks it something (`ports`); its stores stay
 * inside, so every rule about a device is kept here whichever door a request comes through.
 */
export async function createDevicePlane(deps: {
  /** The store port (src/platform/store/): every device table is read and written through it. */
  store: Store;
  clock: Clock;
  config: Config;
  logger: Logger;
  faults: Faults;
  mosques: MosqueStore;
  activity: ActivityLog;
  /** Who is an admin or a manager of a mosque: they see and change its devices (src/devices/plane/access.ts). */
  admins: Pick<AdminStore, 'find' | 'listForUser'>;
  /** The owner's membership, read through `q` (src/devices/entitlement.ts). */
  membershipStatus: (mosqueId: string, userId: string, q: Queries) => Promise<MembershipStatus | null>;
  membershipRemoved: (mosqueId: string, userId: string, q: Queries) => Promise<boolean>;
  /** Where registry and lease writes are announced (src/platform/changes.ts). */
  changes?: ChangePublisher;
  /** Where the deployment's periodic duties are claimed, so the timeline's pruning runs once across nodes. */
  duties: Pick<Duties, 'add'>;
  /** The stream address configs carry (src/devices/entitlement.ts); default the mosque's own stream_url. */
  streamUrl?: (mosque: MosqueRow, lease: string | null) => string | null;
}) {
  const { store, clock, logger } = deps;
  const devices = await createDeviceStore(store, clock, deps.changes);
  // One process alone: no broker holds a connection left in a row by a process that stopped (claimsConnections).
  if (!deps.config.redisUrl) await devices.releaseAllConnections();
  // One group commit for the device writes of a turn: statuses, connected notes, the configs of the devices that connected.
  const commits = createGroupCommit(store, (err) => deps.faults.report('device group commit', err));
  const timeline = createTimeline(store, clock, commits.flush);
  const { localPlays } = createDeliveryStatuses(store);
  // Told of every written status transition (src/devices/stories/presence.ts listens).
  const statusListeners: Array<(change: StatusChange) => void> = [];
  const telemetry = await createTelemetry({ store, clock, devices, timeline, logger, faults: deps.faults, commits, onStatusChange: (c) => {
    for (const l of statusListeners) l(c);
  } });
  const signer = createLeaseSigner(loadOrCreateLeaseKey(deps.config.dataDir));
  let offlinePlanner: OfflinePlanner | null = null;
  const entitlement = await createEntitlement({ offline: () => offlinePlanner, store, clock, devices, mosques: deps.mosques, membershipStatus: deps.membershipStatus, membershipRemoved: deps.membershipRemoved, signer, ttlHours: deps.config.leaseTtlHours, ...(deps.changes && { changes: deps.changes }), ...(deps.streamUrl && { streamUrl: deps.streamUrl }) });
  let link: DeviceLink | null = null;
  /**
   * Players whose password was rotated and who have not connected since (docs/firmware.md, section 5): their next
   * connection is given a config with a fresh lease before its CONNACK (configureRotated).
   */
  const rotated = new Set<string>();
  const service = createDeviceService({
    store, devices, timeline, telemetry, logger, activity: deps.activity,
    resolveBinding: entitlement.binding,
    onDeleted: async (q, id) => {
      rotated.delete(id);
      await entitlement.forget(q, id);
      commands.deviceDeleted(id);
    },
    // A lease signed while the old password was valid goes with it: whoever copied both must not keep listening
    // (the audio gate admits only the lease a player holds now). The player gets a new one when it reconnects.
    onRotated: (trx, id) => {
      if (devices.info(id)?.kind === 'stream_player') rotated.add(id);
      return entitlement.forget(trx, id);
    },
    maxPlayersPerOwner: deps.config.maxPlayersPerUser,
    link: () => {
      if (!link) throw new Error('device link used before the broker was attached');
      return link;
    },
  });

  const commands = createCommands({
    link: () => service.link(), timeline, clock, logger,
    mosqueOf: (id) => devices.info(id)?.mosqueId ?? null,
    effects: createCommandEffects({ store, devices, timeline, clock, unbind: (row, actorId) => service.update(row, { mosqueId: null }, actorId) }),
  });
  const access = createDeviceAccess({ findById: (id) => devices.findById(id), mosques: deps.mosques, admins: deps.admins, membershipStatus: (m, u) => deps.membershipStatus(m, u, store) });
  const verbs = createDeviceVerbs({
    devices, service, commands, timeline, access, admins: deps.admins, jwks: signer.jwks,
    describer: createDescriber({ telemetry, entitlement, membershipStatus: deps.membershipStatus, store, clock }),
  });

  /** Pushes a new config to every player whose entitlement no longer matches the lease it holds. */
  const reconcile = async (rows: DeviceRow[], reason: string) => {
    for (const row of rows) if (row.kind === 'stream_player' && (await entitlement.isStale(row))) await service.refreshConfig(row.id, reason);
  };
  const renewLeases = async () => {
    for (const id of entitlement.dueForRenewal()) if (telemetry.isConnected(id)) await service.refreshConfig(id, 'lease_renewal');
  };

  const every = (ms: number, what: string, fn: () => unknown) => {
    const timer = setInterval(() => {
      try {
        const done = fn();
        if (done instanceof Promise) done.catch((err: unknown) => deps.faults.report(what, err));
      } catch (err) {
        deps.faults.report(what, err); // a timer never throws out: that would end the process
      }
    }, ms);
    timer.unref();
    return timer;
  };
  /** One pass at a time: a pass runs in slices between the devices' packets, and may outlast the next tick. */
  let pruning: Promise<void> | null = null;
  let started = false;
  const prune = (): Promise<void> => {
    return pruning ??= timeline
      .prune(deps.config.deviceEventsRetentionDays, deps.config.deviceEventsMaxPerDevice, { stopped: () => !started })
      .then(
        (removed) => {
          if (removed > 0) logger.info({ removed }, 'device timeline pruned');
        },
        (err: unknown) => {
          deps.faults.report('timeline prune', err);
        },
      )
      .finally(() => {
        pruning = null;
      });
  };
  // Hourly and once across nodes (src/platform/store/duties.ts); the first check runs it as the service starts.
  deps.duties.add('timeline prune', PRUNE_INTERVAL_MS, prune);
  let timers: NodeJS.Timeout[] = [];

  /** Rotated, deleted or disabled elsewhere, a live connection here is closed at once. */
  const cutOffIfRevoked = (id: string, before: DeviceInfo) => {
    const after = devices.info(id);
    if (after && after.enabled && after.secretHash.equals(before.secretHash)) return;
    // A player rotated by another process: that one cleared its retained config; its next connection here gets a fresh one.
    if (after && after.kind === 'stream_player' && !after.secretHash.equals(before.secretHash)) {
      rotated.add(id);
      service.forgetPublished(id);
    }
    if (!after) {
      commands.deviceDeleted(id);
      telemetry.forget(id);
    }
    link?.disconnect(id);
  };

  /** A player's entitlement, read once for all a CONNECT or the start pass decides about it; null for a transmitter. */
  const decisionOf = (row: DeviceRow, q: Queries): Promise<Decision> | null => (row.kind === 'stream_player' ? entitlement.decisionFor(row, q) : null);
  /**
   * Whether the broker retains the config this device would be given now (read back from it: in Redis mode it
   * outlives this process, and another process may have published it). Then nothing is built or published.
   */
  const retainsCurrentConfig = async (row: DeviceRow, decision: Decision | null): Promise<boolean> => {
    if (!link?.retained) return false;
    const [held, retained] = await Promise.all([
      entitlement.heldBinding(store, row, decision),
      link.retained(topics.config(row.id)).catch(() => null), // unreadable: published again
    ]);
    return held !== null && retained !== null && retainedIsCurrent(retained, row.kind, row.config_version, JSON.parse(row.config) as DeviceSettings, held);
  };
  /**
   * A player whose lease is missing, stale or half spent gets a fresh config; any other its retained one. Built
   * (its lease and config_version written) in `trx`; what to publish once that committed, or null.
   */
  const configureArrival = async (trx: StoreTransaction, id: string): Promise<{ id: string; payload: Buffer | Record<string, unknown> } | null> => {
    const row = await devices.findById(id, trx);
    if (!row) return null;
    const decision = await decisionOf(row, trx);
    if (decision && (entitlement.isDue(id) || entitlement.staleFor(id, decision))) return service.buildConfig(trx, row, 'reconnected', decision);
    return service.ensureConfigPublished(trx, id, row, decision ?? undefined);
  };
  /**
   * A device that authenticated and whose lease must change is configured after its CONNACK, in the turn's group
   * commit: its lease write shares the commit of its connected note and of the turn's statuses, and its config is
   * published once that committed. Still before it can subscribe: a SUBSCRIBE needs the CONNACK's round trip.
   */
  const arrivalWrite = (id: string): GroupWrite => {
    let built: { id: string; payload: Buffer | Record<string, unknown> } | null = null;
    return {
      write: async (trx) => {
        // In a savepoint (standard SQL, as PostgreSQL has it): only the disk refusing may fail the turn's batch
        // (and its statuses' PUBACKs with it).
        await sql`SAVEPOINT arrival`.execute(trx);
        try {
          built = await configureArrival(trx, id);
          await sql`RELEASE SAVEPOINT arrival`.execute(trx);
        } catch (err) {
          built = null;
          if (storageFaultOf(err)) throw err;
          await sql`ROLLBACK TO SAVEPOINT arrival`.execute(trx);
          await sql`RELEASE SAVEPOINT arrival`.execute(trx);
          telemetry.writeFailed(id, 'connect', err);
        }
      },
      settle: (err) => {
        if (!err) {
          if (built) void service.publishConfig(built.id, built.payload);
          return;
        }
        // Rolled back (the disk refused this batch): on its own, so the others of the batch do not decide.
        inTransaction(store, (trx) => configureArrival(trx, id)).then(
          (again) => void (again && service.publishConfig(again.id, again.payload)),
          (again: unknown) => telemetry.writeFailed(id, 'connect', again), // it keeps the retained config it has
        );
      },
    };
  };
  /**
   * Set once the start pass retained every device's config (memory mode). From then on the broker holds each
   * device's current config, as every change that alters one republishes it whether the device is connected or
   * not (reconcile, refreshConfig, update), so a CONNECT asks memory only: a lease past half its life, or a
   * config whose publish failed, is still seen to after the CONNACK as before.
   */
  let retainedAtStart = false;
  /**
   * Most arrivals write nothing: the device's row and its owner's membership are read on the pool, outside the
   * turn's group commit, and only a player whose lease must change joins it (arrivalWrite). In a reconnect storm
   * on PostgreSQL the reads then run side by side instead of one after another inside the batch's transaction,
   * between savepoints of their own. What a config still writes when built here (a lease signed with a key no
   * longer in use, the lease left in the row of a player no longer entitled) is one statement of its own, so it
   * commits before the config is published all the same.
   */
  const readArrival = async (id: string): Promise<void> => {
    const row = await devices.findById(id);
    if (!row) return;
    const decision = await decisionOf(row, store);
    if (decision && (entitlement.isDue(id) || entitlement.staleFor(id, decision))) return void commits.add(arrivalWrite(id));
    if (service.isPublished(id)) return;
    // The return after a restart (docs/decisions.md, "Device configs are rebuilt at start, not on connect"): a config
    // the broker already retains as it would be built now is neither rebuilt nor published again.
    if (await retainsCurrentConfig(row, decision)) return service.notePublished(id);
    const config = await service.ensureConfigPublished(store, id, row, decision ?? undefined);
    if (config) await service.publishConfig(config.id, config.payload);
  };
  /**
   * A player's first connection after its password was rotated: the lease signed under the old password went with
   * it and its retained config was cleared (src/devices/device-service.ts), so a config with a freshly signed lease
   * is built, committed and retained before the CONNACK. aedes holds any packet sent before the CONNACK, so the
   * config the player receives on its SUBSCRIBE is this one and no other comes first. Its own transaction, not
   * the turn's group commit: the CONNACK waits on it alone, and a rotation is a person's rare act, not a storm.
   */
  const configureRotated = async (id: string): Promise<void> => {
    try {
      const built = await inTransaction(store, async (trx) => {
        const row = await devices.findById(id, trx);
        return row ? service.buildConfig(trx, row, 'credentials_rotated') : null;
      });
      if (built) await service.publishConfig(built.id, built.payload);
    } catch (err) {
      rotated.add(id); // its next connection tries again; this one is let in without a config, as a failed write allows
      throw err;
    }
  };
  /** Answers a promise only for a rotated player: the broker then sends the CONNACK once it settled. */
  const configureAfterConnect = (id: string): Promise<void> | undefined => {
    if (rotated.delete(id)) return configureRotated(id);
    if (entitlement.isDue(id)) return void commits.add(arrivalWrite(id));
    if (retainedAtStart && service.isPublished(id)) return;
    readArrival(id).catch((err: unknown) => telemetry.writeFailed(id, 'connect', err)); // it keeps the retained config it has
    return undefined;
  };

  /**
   * Every device's retained config, once, before the broker listens (docs/decisions.md, "Device configs are rebuilt at start, not on connect"): after a restart the
   * in-memory broker holds none, and rebuilding each on its first CONNECT put that work (and any lease
   * signing) in the middle of the reconnect storm the restart causes. The rules are configureArrival's: a
   * player whose lease is missing, stale or half spent gets a new config (version and timeline note, reason
   * `service_start`) with a newly signed lease; any other device its config with the lease it holds. The
   * writes go in one transaction and nothing is published before it committed; should the disk refuse it,
   * memory is read back from the rows and each device is configured on its CONNECT as before.
   */
  // A page of rows at a time, each config kept only as its bytes: objects that all survive the pass made V8
  // grow its young generation to the maximum, and idle RSS stayed ~30 MiB higher when that was not given back.
  const buildAll = () => inTransaction(store, async (trx) => {
    const built: Array<{ id: string; payload: Buffer }> = [];
    let renewed = 0;
    for (let rows = await devices.listPage(trx, '', START_PAGE); rows.length > 0; rows = await devices.listPage(trx, rows.at(-1)!.id, START_PAGE)) {
      for (const row of rows) {
        const decision = await decisionOf(row, trx);
        const fresh = decision !== null && (entitlement.isDue(row.id) || entitlement.staleFor(row.id, decision));
        if (fresh) renewed++;
        built.push(await service.buildConfig(trx, row, fresh ? 'service_start' : null, decision ?? undefined));
      }
    }
    return { built, renewed };
  });
  async function retainAllConfigs(): Promise<{ devices: number; renewed: number }> {
    let pass: { built: Array<{ id: string; payload: Buffer }>; renewed: number };
    try {
      pass = await buildAll();
    } catch (err) {
      if (!storageFaultOf(err)) throw err;
      await entitlement.reloadAll(); // the leases of the rolled-back writes leave memory too
      await devices.reloadAll(); // and the config versions memory read back inside it
      deps.faults.report('device configs at start', err);
      return { devices: 0, renewed: 0 };
    }
    // A page at a time too: the broker's objects for a publish in flight are short-lived only if few are in flight.
    for (let i = 0; i < pass.built.length; i += START_PAGE) {
      await Promise.all(pass.built.slice(i, i + START_PAGE).map((c) => service.publishConfig(c.id, c.payload)));
    }
    retainedAtStart = true;
    return { devices: pass.built.length, renewed: pass.renewed };
  }

  return {
    ...verbs,

    /** A mosque's players' local plays whose status arrived in [from, until] (docs/schedule.md, "Covered locally"). */
    localPlays: (mosqueId: string, from: number, until: number) => localPlays({ mosque: mosqueId, from, until }),

    /** The mosque a device belongs to now (memory), for events that name it. */
    mosqueOf: (id: string): string | null => devices.info(id)?.mosqueId ?? null,

    /**
     * Every device a person owns goes (the address their account rested on was proven by another), each noted in
     * its mosque's feed with `reason` in its delete's transaction: the rows removed.
     */
    async removeOwnedBy(userId: string, reason: string): Promise<DeviceRow[]> {
      const rows = await devices.listForOwner(userId);
      for (const row of rows) await service.delete(row, null, reason);
      return rows;
    },

    /** What each other room may ask of the devices, and nothing more (ARCHITECTURE.md, "Dependency rule"). */
    ports: {
      /** The broker's hooks (broker/hooks/deps.ts): who a device is, its password, its lease, what it reports. */
      broker: {
        telemetry: telemetry as TelemetryIngest,
        device: devices.info,
        /** For a device memory does not know (registered through another process): read from the row first. */
        loadDevice: devices.load,
        verifySecret: devices.verifySecret,
        /**
         * A device authenticated: its config, when memory says it needs one, at the end of this turn with the turn's
         * other writes; a rotated player's before its CONNACK (a promise then).
         */
        onAuthenticated: configureAfterConnect,
        entitled: (device: { id: string }, mosqueId: string) => entitlement.holdsLease(device.id, mosqueId),
        onAck: commands.onAck,
      },
      /** A broadcast's fan-out (src/broadcasts/broadcast-fanout.ts): the link, a mosque's transmitters and a command to each. */
      fanout: {
        link: () => service.link(),
        devices: { listTransmitters: devices.listTransmitters },
        commands: { dispatch: commands.dispatch },
      },
      /** Whether a mosque can sound the azaan (src/schedule/readiness.ts): its devices with their presence and leases. */
      readiness: {
        listForMosque: devices.listForMosque,
        presence: telemetry.presence,
        lastSeenMs: telemetry.lastSeenMs,
        holdsLease: entitlement.holdsLease,
      },
      /**
       * A firmware rollout's runner (src/firmware/runner.ts): the devices of a kind and hardware revision, their rows
       * as last reported (read per tick, never per status), presence every process agrees on, and the offer.
       */
      firmware: {
        listForHardware: devices.listForHardware,
        listByIds: devices.listByIds,
        connected: (row: DeviceRow) => telemetry.presence(row).connected,
        dispatch: commands.dispatch,
      },
      /** The facts of the one lease rule (src/audio/lease-admission.ts), which the audio gate and the recording download ask. */
      // From memory, which follows the change feed: the gate answers synchronously (a player registered through
      // another process is known here once the feed told of it, before it can hold a config with a lease).
      audio: {
        devices: { info: devices.info, verifySecret: devices.verifySecret, ownedBy: devices.idsOwnedBy },
        verifyLease: signer.verify,
        lease: entitlement.lease,
      },
    },

    attach(deviceLink: DeviceLink): void {
      link = deviceLink;
    },
    /** The offline plan's port (src/devices/device-config.ts), handed in once the schedule and recordings exist. */
    planOffline(planner: OfflinePlanner): void {
      offlinePlanner = planner;
    },
    /**
     * The mosque's azaans or recording changed (docs/firmware.md, "The azaan without the network"): each of its
     * players holding a lease gets a config with the new plan, connected or not (the broker retains it).
     */
    async offlinePlanChanged(mosqueId: string, reason: string): Promise<void> {
      const leased = (await devices.listForMosque(mosqueId)).filter((row) => row.kind === 'stream_player' && entitlement.lease(row.id));
      await service.refreshConfigs(leased.map((row) => row.id), reason);
    },
    /** Adds a listener told of every status transition once it is written. */
    onStatusChange: (listener: (change: StatusChange) => void) => void statusListeners.push(listener),
    retainAllConfigs,
    start(): void {
      started = true;
      timers = [every(SWEEP_INTERVAL_MS, 'stale sweep', () => telemetry.sweep()), every(FLUSH_INTERVAL_MS, 'telemetry flush', () => telemetry.flush()), every(LEASE_CHECK_INTERVAL_MS, 'lease renewal', renewLeases)];
    },
    async stop(): Promise<void> {
      started = false;
      commands.close();
      for (const t of timers) clearInterval(t);
      timers = [];
      await telemetry.flush(true);
    },

    /** A mosque is going away: its transmitters go with it; its players become unbound (config pushed). */
    async beforeMosqueDelete(mosqueId: string): Promise<() => Promise<void>> {
      const rows = await devices.listForMosque(mosqueId);
      for (const row of rows) if (row.kind === 'transmitter') await service.delete(row, null);
      const players = rows.filter((r) => r.kind === 'stream_player').map((r) => r.id);
      return async () => {
        for (const id of players) await service.refreshConfig(id, 'mosque_deleted');
      };
    },

    /** A user is going away: the database removes their devices; cut those off and forget them. */
    async beforeUserDelete(userId: string): Promise<() => Promise<void>> {
      const owned = (await devices.listForOwner(userId)).map((r) => r.id);
      return () => service.forgetRemoved(owned);
    },

    /** A mosque's stream_url changed: its transmitters' and entitled players' configs carry it. */
    async mosqueUpdated(before: MosqueRow, after: MosqueRow): Promise<void> {
      if (before.stream_url === after.stream_url) return;
      for (const row of await devices.listForMosque(after.id)) {
        if (row.kind === 'transmitter' || entitlement.lease(row.id)) await service.refreshConfig(row.id, 'stream_url_changed');
      }
    },

    /**
     * Approval, ban, rejection, removal: the owner's players in that mosque get their new config at once. The
     * memberships' listeners are synchronous: the work runs on, and a failure is reported.
     */
    membershipChanged(change: MembershipChange): void {
      const { user_id, mosque_id } = change.membership;
      const run = async () => {
        const players = (await devices.listForOwner(user_id)).filter((r) => r.mosque_id === mosque_id);
        // The member's notify toggles decide which slots their players' offline plans carry.
        if (change.togglesChanged) {
          for (const row of players) if (row.kind === 'stream_player' && entitlement.lease(row.id)) await service.refreshConfig(row.id, 'notify_toggles_changed');
          return;
        }
        await reconcile(players, change.removed ? 'membership_removed' : `membership_${change.membership.status}`);
      };
      run().catch((err: unknown) => deps.faults.report('membership change', err));
    },

    /**
     * Another process changed this device (the change feed said so): its registry entry and lease are read
     * again, without announcing anything (that process did), and a connection here is cut if it no longer holds.
     */
    async deviceChangedElsewhere(id: string): Promise<void> {
      const before = devices.info(id);
      await devices.reload(id);
      await entitlement.reloadOne(id);
      if (before) cutOffIfRevoked(id, before);
    },

    /**
     * Everything again from the database (the feed was away, or the safety-net poll), with the same cut-offs.
     * One pass at a time: on a large fleet a pass (a membership read per leased player) can outlast the
     * SHARED_CACHE_RELOAD_S poll that asks for it, and passes piled up behind one another starved the devices'
     * own writes. Asked while one runs, one more pass follows it (what changed after it read a row is not in it).
     */
    reloadAll: coalescedPass(async () => {
      const before = devices.snapshot();
      await devices.reloadAll();
      await entitlement.reloadAll();
      for (const [id, info] of before) if (telemetry.isConnected(id) || devices.info(id)?.secretHash.equals(info.secretHash) === false) cutOffIfRevoked(id, info);
    }),
  };
}

export type DevicePlane = Awaited<ReturnType<typeof createDevicePlane>>;
