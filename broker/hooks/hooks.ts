import type { AedesOptions, AedesPublishPacket, AuthenticateError, Client, PublishPacket, Subscription } from 'aedes';
import type { ConnectPacket } from 'aedes';
import type { DeviceInfo } from '../../src/devices/devices.ts';
import type { Clock } from '../../src/platform/clock.ts';
import type { Faults } from '../../src/platform/faults.ts';
import type { Logger } from '../../src/platform/log.ts';
import { LOG_MIN_INTERVAL_MS, type Telemetry } from '../../src/devices/telemetry/telemetry.ts';
import { createBudgets, type BudgetChannel, type Rate } from '../budgets.ts';
import { createFlapDetector, type FlapRule } from '../flapping.ts';
import type { AckReport } from '../payloads.ts';
import { createForwardCheck, maySubscribe, publishChannel, type DeviceIdentity } from '../topics.ts';
import { guarded, refuse } from './guarded.ts';
import { createIngest, drop, storedWillOf } from './ingest.ts';

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

/** The broker's hooks, one adapter each over src/. Every check is answered from memory. */
export type Hooks = Required<Pick<AedesOptions, 'preConnect' | 'authenticate' | 'authorizePublish' | 'authorizeSubscribe' | 'authorizeForward'>>;

export function createHooks(deps: HookDeps): Hooks {
  const wills = new WeakMap<Client, string | null>();
  const entitled = deps.entitled ?? (() => false);
  const mayForward = createForwardCheck(entitled);
  const budgets = createBudgets({ ...deps.budgets, log: LOG_RATE, broadcast: BROADCAST_RATE }, deps.floodWindowMs);
  const flapping = createFlapDetector(deps.flap);
  const banNote = { window_s: deps.flap.windowMs / 1000, ban_s: deps.flap.banMs / 1000 };
  const { ingest, clientless, storedWill } = createIngest(deps);


  /** A device 10x over a budget for the flood window: banned like a flapping one (noted once per ban). */
  function floodedOut(id: string, channel: BudgetChannel): void {
    // Packets already read from the socket still come through while the connection closes: once per ban.
    if (!flapping.ban(id, deps.clock())) return;
    deps.telemetry.banned(id, 'flood', { channel, flood_window_s: deps.floodWindowMs / 1000, ...banNote });
    deps.logger.warn({ device_id: id, channel }, 'device flooding: disconnected and banned');
  }

  /** The budget's answer for one publish: null to go on, else what authorizePublish answers (the packet is dropped). */
  function overBudget(info: DeviceInfo, channel: BudgetChannel, packet: PublishPacket): Error | 'dropped' | null {
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
      const banned = flapRefusal(id);
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
