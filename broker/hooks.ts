import type { AedesOptions, AedesPublishPacket, AuthenticateError, Client, PublishPacket, Subscription } from 'aedes';
import type { ConnectPacket } from 'aedes';
import type { DeviceInfo } from '../src/devices/devices.ts';
import type { Clock } from '../src/platform/clock.ts';
import type { Faults } from '../src/platform/faults.ts';
import type { Logger } from '../src/platform/log.ts';
import { LOG_MIN_INTERVAL_MS, type Telemetry } from '../src/devices/telemetry.ts';
import { createBudgets, type BudgetChannel, type Rate } from './budgets.ts';
import { createFlapDetector, type FlapRule } from './flapping.ts';
import { MAX_PAYLOAD_BYTES, parseAck, parseBroadcast, parseHeartbeat, parseLog, parseStatus, type AckReport, type BroadcastEvent } from './payloads.ts';
import { createForwardCheck, maySubscribe, parseDeviceTopic, publishChannel, type DeviceIdentity } from './topics.ts';

export interface HookDeps {
  logger: Logger;
  /** Where a hook that threw is counted and logged (at most once a minute), instead of ending the process. */
  faults: Faults;
  telemetry: Telemetry;
  device: (id: string) => DeviceInfo | null;
  /** As `device`, falling back to the store: for the rare stored will of a device another process registered. */
  loadDevice?: (id: string) => DeviceInfo | null;
  verifySecret: (id: string, password: string) => boolean;
  /** A device authenticated: make sure its retained config is there before it subscribes. */
  onAuthenticated: (id: string) => void;
  onAck?: (deviceId: string, ack: AckReport) => void;
  /** Whether a stream player may hear its mosque's broadcasts right now (entitlement issue). */
  entitled?: (device: DeviceIdentity, mosqueId: string) => boolean;
  /** The mosque's own stream_url: the only one a transmitter's broadcast event may carry (issue 9). */
  mosqueStreamUrl?: (mosqueId: string) => string | null;
  clock: Clock;
  /** Publish budgets per device (DEVICE_*_RATE, DEVICE_*_BURST) and the flood window (DEVICE_FLOOD_WINDOW_S). */
  budgets: Record<'status' | 'heartbeat' | 'ack', Rate>;
  floodWindowMs: number;
  /** Benchmarks only: no publish budgets and no flap bans (their cost is measured against this). */
  withoutBudgets?: boolean;
  /** Reconnect flapping (MQTT_FLAP_*). */
  flap: FlapRule;
  /**
   * Several processes share the devices (REDIS_URL): each CONNECT names its broker process in the device's
   * row, for the stored-will check. A single process keeps that in memory only (issue 13: no UPDATE per CONNECT).
   */
  claimsConnections?: boolean;
  /** A transmitter announced its own mosque's broadcast (issue 11: it may serve a scheduled azaan). */
  onDeviceBroadcast?: (mosqueId: string, event: { broadcast_id: string; kind: string; action: 'start' | 'stop' }) => void;
}

/**
 * Budgets without a setting. Logs keep telemetry's rule (one a second, dropped there) and are budgeted
 * here only for the flood rule. A transmitter's broadcast event goes to every leased player of its
 * mosque: a start and a stop per broadcast is all a real one sends.
 */
const LOG_RATE: Rate = { perSecond: 1000 / LOG_MIN_INTERVAL_MS, burst: 1 };
const BROADCAST_RATE: Rate = { perSecond: 1, burst: 5 };

// 3 "server unavailable" for a flapping device, not 5 "not authorized": its credentials are good and the
// refusal ends by itself; firmware backs off and retries on 3, while 5 reads as "re-provision me".
const refuse = (returnCode: 3 | 4 | 5, message: string) => Object.assign(new Error(message), { returnCode }) as AuthenticateError;

/**
 * A payload that must not become state: acknowledged (MQTT 3.1.1 has no negative ack, and a device that
 * sends one bad payload must not be disconnected) but rerouted to a topic nobody can subscribe to, never
 * retained.
 */
function drop(packet: PublishPacket, deviceId: string): void {
  packet.topic = `$dropped/${deviceId}`;
  packet.retain = false;
  packet.payload = Buffer.alloc(0);
}

/**
 * What could not be written is not acknowledged either: qos 0 makes aedes send no PUBACK, so a status
 * (QoS 1) stays in the device's flight window and is sent again; an acknowledged status is a written one.
 */
function unwritten(packet: PublishPacket, deviceId: string): void {
  drop(packet, deviceId);
  packet.qos = 0;
}

const payloadOf = (packet: PublishPacket) => (Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload));

/**
 * aedes republishes a stored will of a broker process whose heartbeat stopped (REDIS_URL; or this one's,
 * after a long stall), passing the device's client here if it has one. That client is open and alive, so
 * the will is not its dying word: persistence stamped the will with the broker id that stored it. A
 * connection's own will comes while it closes, and a packet off the wire carries no broker id.
 */
const storedWillOf = (client: Client | null, packet: PublishPacket): { brokerId: string } | null => {
  const brokerId = (packet as { brokerId?: unknown }).brokerId;
  return (client === null || !client.closed) && typeof brokerId === 'string' ? { brokerId } : null;
};

/** The broker's hooks, one adapter each over src/. Every check is answered from memory. */
type Hooks = Required<Pick<AedesOptions, 'preConnect' | 'authenticate' | 'authorizePublish' | 'authorizeSubscribe' | 'authorizeForward'>>;

export function createHooks(deps: HookDeps): Hooks {
  const wills = new WeakMap<Client, string | null>();
  const entitled = deps.entitled ?? (() => false);
  const mayForward = createForwardCheck(entitled);
  const budgets = createBudgets({ ...deps.budgets, log: LOG_RATE, broadcast: BROADCAST_RATE }, deps.floodWindowMs);
  const flapping = createFlapDetector(deps.flap);
  const banNote = { window_s: deps.flap.windowMs / 1000, ban_s: deps.flap.banMs / 1000 };

  /** Checks and records one publish, then answers it: a status only once its group commit settled. */
  function ingest(info: DeviceInfo, channel: string, packet: PublishPacket, done: (err?: Error | null) => void): void {
    const payload = payloadOf(packet);
    if (payload.length > MAX_PAYLOAD_BYTES) {
      deps.telemetry.rejected(info.id, channel, 'too_large');
      drop(packet, info.id);
      return done(null);
    }
    const parsed =
      channel === 'status' ? parseStatus(info.kind, payload)
      : channel === 'heartbeat' ? parseHeartbeat(info.kind, payload)
      : channel === 'log' ? parseLog(payload)
      : channel === 'broadcast' ? parseBroadcast(payload)
      : parseAck(payload);
    if (!parsed.ok) {
      deps.telemetry.rejected(info.id, channel, parsed.reason);
      drop(packet, info.id);
      return done(null);
    }
    if (channel === 'status') {
      // aedes sends the PUBACK (and stores the retained status) when `done` is called: after the commit.
      return deps.telemetry.status(info.id, parsed.value as Parameters<Telemetry['status']>[1], (err) => {
        if (err) unwritten(packet, info.id);
        done(null);
      });
    }
    if (channel === 'broadcast') forwardBroadcast(info, packet, parsed.value as BroadcastEvent);
    else record(info, channel, packet, parsed.value, payload.length);
    done(null);
  }

  function record(info: DeviceInfo, channel: string, packet: PublishPacket, value: unknown, bytes: number): void {
    // Only status is retained state; nothing else a device sends may linger on the broker.
    packet.retain = false;
    if (channel === 'heartbeat') deps.telemetry.heartbeat(info.id, value as Parameters<Telemetry['heartbeat']>[1]);
    else if (channel === 'log') {
      if (!deps.telemetry.log(info.id, value as Parameters<Telemetry['log']>[1], bytes)) drop(packet, info.id);
    } else deps.onAck?.(info.id, value as AckReport);
  }

  /**
   * A transmitter announcing its own mosque's broadcast, forwarded to leased players: never retained (a
   * retained start would replay to every player that subscribes later; the backend's own event is the
   * retained one), and with the mosque's own stream_url or none, so no transmitter can steer the players
   * elsewhere. Re-serialized from the checked value: players see the contract's fields only.
   */
  function forwardBroadcast(info: DeviceInfo, packet: PublishPacket, event: BroadcastEvent): void {
    packet.retain = false;
    const own = info.mosqueId ? (deps.mosqueStreamUrl?.(info.mosqueId) ?? null) : null;
    const { stream_url: claimed, ...rest } = event;
    if (claimed !== undefined && claimed !== own) deps.telemetry.rejected(info.id, 'broadcast', 'foreign_stream_url');
    packet.payload = Buffer.from(JSON.stringify(claimed !== undefined && own ? { ...rest, stream_url: own } : rest));
    // It may serve (or end) a scheduled azaan (issue 11); the budget above bounds how often this runs.
    if (info.mosqueId) deps.onDeviceBroadcast?.(info.mosqueId, { broadcast_id: event.broadcast_id, kind: event.kind, action: event.action });
  }

  /**
   * A publish without a client is the backend's own (configs, commands, broadcast events, clearing a
   * retained status with an empty payload) or a stored will (storedWillOf).
   */
  function clientless(packet: PublishPacket, done: (err?: Error | null) => void): void {
    const parsed = parseDeviceTopic(packet.topic);
    if (!parsed || parsed.channel !== 'status' || payloadOf(packet).length === 0) return done(null);
    storedWill(packet, parsed.deviceId, (packet as { brokerId?: string }).brokerId ?? null, done);
  }

  /**
   * A stored will is held to the same schema and ingested only when the device has no live connection
   * anywhere: none here, and the row names no other broker process as its holder (a dead process's
   * claim is its own will's broker id, so that one does not count).
   */
  function storedWill(packet: PublishPacket, deviceId: string, brokerId: string | null, done: (err?: Error | null) => void): void {
    const info = (deps.loadDevice ?? deps.device)(deviceId);
    const topic = parseDeviceTopic(packet.topic);
    if (!info || topic?.deviceId !== deviceId || topic.channel !== 'status') {
      drop(packet, deviceId);
      return done(null);
    }
    if (deps.telemetry.isConnected(info.id) || deps.telemetry.connectedElsewhere(info.id, brokerId)) {
      deps.logger.debug({ device_id: info.id, will_broker: brokerId }, 'stored will ignored: the device is connected');
      drop(packet, info.id);
      return done(null);
    }
    ingest(info, 'status', packet, done);
  }

  /** A device 10x over a budget for the flood window: banned like a flapping one (noted once per ban). */
  function floodedOut(id: string, channel: BudgetChannel): void {
    // Packets already read from the socket still come through while the connection closes: once per ban.
    if (!flapping.ban(id, deps.clock())) return;
    deps.telemetry.banned(id, 'flood', { channel, flood_window_s: deps.floodWindowMs / 1000, ...banNote });
    deps.logger.warn({ device_id: id, channel }, 'device flooding: disconnected and banned');
  }

  /** The budget's answer for one publish: null to go on, else what authorizePublish answers (the packet is dropped). */
  function overBudget(info: DeviceInfo, channel: BudgetChannel, packet: PublishPacket): Error | 'dropped' | null {
    if (deps.withoutBudgets) return null;
    const verdict = budgets.spend(info.id, channel, deps.clock());
    if (verdict === 'ok' || (verdict === 'over' && channel === 'log')) return null;
    drop(packet, info.id);
    if (verdict === 'flood') {
      floodedOut(info.id, channel);
      return new Error('publish flood');
    }
    deps.telemetry.overBudget(info.id, channel as Exclude<BudgetChannel, 'log'>);
    return 'dropped';
  }

  /** A device banned, or reconnecting too often: the refusal, else null (and the connect is counted). */
  function flapRefusal(id: string): AuthenticateError | null {
    const now = deps.clock();
    if (flapping.isBanned(id, now)) {
      deps.telemetry.connectRefused(id);
      return refuse(3, 'banned for reconnecting or publishing too often; try again later');
    }
    if (!flapping.connect(id, now)) return null;
    deps.telemetry.connectRefused(id);
    deps.telemetry.banned(id, 'flapping', { connects: deps.flap.maxConnects + 1, ...banNote });
    return refuse(3, 'reconnecting too often; try again later');
  }

  const hooks = {
    /** Notes the will topic of the CONNECT so authenticate can refuse a will aimed anywhere but the own status topic. */
    preConnect(client: Client, packet: ConnectPacket, done: (err: Error | null, ok: boolean) => void) {
      wills.set(client, packet.will?.topic ?? null);
      done(null, true);
    },

    // [MQTT-3.1.4-2] aedes lets a second connection with this clientId take over the first once it
    // authenticates: binding clientId = username = device id to the password is what stops hijacking.
    authenticate(client: Client, username: string | undefined, password: Buffer | undefined, done: (err: AuthenticateError | null, ok: boolean | null) => void) {
      const id = client.id;
      if (!username || !password) return done(refuse(4, 'username and password required'), false);
      if (username !== id) return done(refuse(5, 'clientId must equal username'), false);
      if (!deps.verifySecret(id, password.toString('utf8'))) return done(refuse(4, 'bad username or password'), false);
      const will = wills.get(client) ?? null;
      if (will !== null && will !== `devices/${id}/status`) return done(refuse(5, 'a will may only target the own status topic'), false);
      const banned = deps.withoutBudgets ? null : flapRefusal(id);
      if (banned) return done(banned, false);
      // The new connection becomes the device's current one now, before aedes closes a taken-over one:
      // that old connection's will and disconnect must not mark the device OFFLINE.
      deps.telemetry.connected(id, client, deps.claimsConnections ? (client as unknown as { broker: { id: string } }).broker.id : undefined);
      // A config push that could not be written (disk full) must not keep the device out: it has its retained one.
      try {
        deps.onAuthenticated(id);
      } catch (err) {
        deps.telemetry.writeFailed(id, 'connect', err);
      }
      done(null, true);
    },

    authorizePublish(client: Client | null, packet: PublishPacket, done: (err?: Error | null) => void) {
      if (!client) return clientless(packet, done);
      const stored = storedWillOf(client, packet);
      if (stored) {
        // In memory the stored will is the live client's own will object: it keeps an untouched copy for
        // its real goodbye, as drop() rewrites the packet in place.
        const own = client as unknown as { will?: unknown };
        if (own.will === packet) own.will = { ...packet };
        return storedWill(packet, client.id, stored.brokerId, done);
      }
      const info = deps.device(client.id);
      if (!info) return done(new Error('unknown device'));
      if (!deps.telemetry.isCurrent(info.id, client)) {
        drop(packet, info.id);
        return done(null);
      }
      const channel = publishChannel(info, packet.topic);
      if (!channel) {
        // A device writing where it must not is refused and cut off ([MQTT-3.3.5-2] allows closing).
        deps.telemetry.rejected(info.id, 'publish', 'topic_not_allowed', true);
        deps.logger.warn({ device_id: info.id, topic: packet.topic.slice(0, 200) }, 'device publish refused');
        return done(new Error('publish not authorized'));
      }
      // A closing connection's will comes once per connection (flapping bounds those): no budget.
      const refused = client.closed ? null : overBudget(info, channel, packet);
      if (refused) return done(refused === 'dropped' ? null : refused);
      ingest(info, channel, packet, done);
    },

    authorizeSubscribe(client: Client, sub: Subscription, done: (err: Error | null, sub?: Subscription | null) => void) {
      const info = deps.device(client.id);
      if (info && maySubscribe(info, sub.topic, entitled)) return done(null, sub);
      if (info) deps.telemetry.rejected(info.id, 'subscribe', 'filter_not_allowed', true);
      done(null, null); // SUBACK 0x80 for this filter; the connection stays up
    },

    /** Synchronous, from memory, on every delivery: a subscription made while allowed stops delivering once it is not. */
    authorizeForward(client: Client, packet: AedesPublishPacket): AedesPublishPacket | null {
      const info = deps.device(client.id);
      return info && mayForward(info, packet.topic) ? packet : null;
    },
  };
  return guarded(hooks, deps);
}

/**
 * Every hook catches its own errors (issue 9): aedes calls them from its socket handlers, where a throw
 * (SQLITE_FULL, SQLITE_BUSY past the busy timeout, a bug) would end the process and every device with it.
 * A hook that threw before answering answers as below; one that threw after is only reported.
 */
function guarded(hooks: Hooks, deps: HookDeps): Hooks {
  const once = <A extends unknown[]>(done: (...args: A) => void) => {
    // A status answers later (after its group commit): a hook that threw after queueing it must not answer twice.
    const answer = Object.assign((...args: A) => {
      if (answer.answered) return;
      answer.answered = true;
      done(...args);
    }, { answered: false });
    return answer;
  };
  return {
    preConnect(client, packet, done) {
      const answer = once(done);
      try {
        hooks.preConnect(client, packet, answer);
      } catch (err) {
        deps.faults.report('mqtt preConnect hook', err);
        if (!answer.answered) answer(null, true);
      }
    },
    authenticate(client, username, password, done) {
      const answer = once(done);
      try {
        hooks.authenticate(client, username, password, answer);
      } catch (err) {
        deps.faults.report('mqtt authenticate hook', err, { client_id: client.id });
        if (!answer.answered) answer(refuse(3, 'server unavailable'), false);
      }
    },
    // What could not be written is not acknowledged either: qos 0 makes aedes send no PUBACK, so a status
    // (QoS 1) stays in the device's flight window and is sent again; an acknowledged status is a written one.
    // The connection stays: MQTT 3.1.1 has no negative acknowledgement, and closing it would not help a full disk.
    authorizePublish(client, packet, done) {
      const answer = once(done);
      try {
        hooks.authorizePublish(client, packet, answer);
      } catch (err) {
        // The topic is read here, on the rare throw, not before every publish (issue 13: per-packet work).
        const parsed = parseDeviceTopic(packet.topic);
        const deviceId = client?.id ?? parsed?.deviceId ?? null;
        if (deviceId) deps.telemetry.writeFailed(deviceId, parsed?.channel ?? 'publish', err);
        else deps.faults.report('mqtt publish hook', err);
        if (answer.answered) return;
        unwritten(packet, deviceId ?? 'unknown');
        answer(null);
      }
    },
    authorizeSubscribe(client, sub, done) {
      const answer = once(done);
      try {
        hooks.authorizeSubscribe(client, sub, answer);
      } catch (err) {
        deps.faults.report('mqtt subscribe hook', err, { client_id: client.id });
        if (!answer.answered) answer(null, null);
      }
    },
    authorizeForward(client, packet) {
      try {
        return hooks.authorizeForward(client, packet);
      } catch (err) {
        deps.faults.report('mqtt forward hook', err, { client_id: client.id });
        return null;
      }
    },
  };
}
