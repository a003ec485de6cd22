import type { AedesPublishPacket, Client, ConnectPacket, PublishPacket, Subscription } from 'aedes';
import type { DeviceInfo } from '../../src/devices/devices.ts';
import { LOG_MIN_INTERVAL_MS } from '../../src/devices/telemetry/telemetry.ts';
import { createBudgets, type BudgetChannel, type Rate } from '../budgets.ts';
import { createFlapDetector } from '../flapping.ts';
import { createForwardCheck, maySubscribe, publishChannel } from '../topics.ts';
import type { HookDeps } from './deps.ts';
import { createIngest, storedWillOf, type PublishAnswer } from './ingest.ts';
import type { ConnectRefusal, ForwardRefusal, PublishRefusal, SubscribeRefusal } from './refusals.ts';

/**
 * Budgets without a setting. Logs keep telemetry's rule (one a second, dropped there) and are budgeted
 * here only for the flood rule. A transmitter's broadcast event goes to every leased player of its
 * mosque: a start and a stop per broadcast is all a real one sends.
 */
const LOG_RATE: Rate = { perSecond: 1000 / LOG_MIN_INTERVAL_MS, burst: 1 };
const BROADCAST_RATE: Rate = { perSecond: 1, burst: 5 };
const FORWARD_DENIED: ForwardRefusal = { kind: 'forward_denied' };

/**
 * The broker's rules for devices, one per aedes hook, each answering with a value: null to let the device
 * on, else a DeviceRefusal. broker/hooks/adapter.ts turns those into aedes's answers. Every check is
 * answered from memory.
 */
export interface DeviceHooks {
  preConnect(client: Client, packet: ConnectPacket): void;
  /** Answered from memory; only a device memory does not know is read from the store first (a promise then). */
  authenticate(client: Client, username: string | undefined, password: Buffer | undefined): ConnectRefusal | null | Promise<ConnectRefusal | null>;
  authorizePublish(client: Client | null, packet: PublishPacket, answer: PublishAnswer): void;
  authorizeSubscribe(client: Client, sub: Subscription): SubscribeRefusal | null;
  /** Synchronous, on every delivery: a subscription made while allowed stops delivering once it is not. */
  authorizeForward(client: Client, packet: AedesPublishPacket): ForwardRefusal | null;
}

export function createDeviceHooks(deps: HookDeps): DeviceHooks {
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

  /** The budget's answer for one publish: null to go on, else the refusal. A log over budget still goes on to telemetry's own rule. */
  function overBudget(info: DeviceInfo, channel: BudgetChannel): PublishRefusal | null {
    const verdict = budgets.spend(info.id, channel, deps.clock());
    if (verdict === 'ok' || (verdict === 'over' && channel === 'log')) return null;
    if (verdict === 'flood') {
      floodedOut(info.id, channel);
      return { kind: 'flooding', deviceId: info.id, channel };
    }
    deps.telemetry.overBudget(info.id, channel as Exclude<BudgetChannel, 'log'>);
    return { kind: 'over_budget', deviceId: info.id, channel };
  }

  /** A device banned, or reconnecting too often: the refusal, else null (and the connect is counted). */
  function flapRefusal(id: string): ConnectRefusal | null {
    const now = deps.clock();
    if (flapping.isBanned(id, now)) {
      deps.telemetry.connectRefused(id);
      return { kind: 'banned' };
    }
    if (!flapping.connect(id, now)) return null;
    deps.telemetry.connectRefused(id);
    deps.telemetry.banned(id, 'flapping', { connects: deps.flap.maxConnects + 1, ...banNote });
    return { kind: 'flapping' };
  }

  /** The rest of a CONNECT's check, for a device memory knows (or that was just read from the store). */
  function admit(client: Client, id: string, password: Buffer): ConnectRefusal | null | Promise<ConnectRefusal | null> {
    if (!deps.verifySecret(id, password.toString('utf8'))) return { kind: 'bad_credentials' };
    const will = wills.get(client) ?? null;
    if (will !== null && will !== `devices/${id}/status`) return { kind: 'will_denied', topic: will };
    const banned = flapRefusal(id);
    if (banned) return banned;
    // The new connection becomes the device's current one now, before aedes closes a taken-over one:
    // that old connection's will and disconnect must not mark the device OFFLINE.
    deps.telemetry.connected(id, client, deps.claimsConnections ? (client as unknown as { broker: { id: string } }).broker.id : undefined);
    // A config push that could not be written (disk full) must not keep the device out: it has its retained one.
    const letIn = (err: unknown) => {
      deps.telemetry.writeFailed(id, 'connect', err);
      return null;
    };
    let configuring: Promise<void> | void;
    try {
      configuring = deps.onAuthenticated(id);
    } catch (err) {
      return letIn(err);
    }
    // The CONNACK waits for a config that must be retained before the device subscribes (docs/firmware.md,
    // section 5): aedes holds the packets a client sends before its CONNACK, its SUBSCRIBE among them.
    return configuring ? configuring.then(() => null, letIn) : null;
  }

  return {
    /** Notes the will topic of the CONNECT so authenticate can refuse a will aimed anywhere but the own status topic. */
    preConnect(client, packet) {
      wills.set(client, packet.will?.topic ?? null);
    },

    // [MQTT-3.1.4-2] aedes lets a second connection with this clientId take over the first once it
    // authenticates: binding clientId = username = device id to the password is what stops hijacking.
    authenticate(client, username, password) {
      const id = client.id;
      if (!username || !password) return { kind: 'credentials_missing' };
      if (username !== id) return { kind: 'client_id_mismatch' };
      if (!deps.device(id) && deps.loadDevice) return deps.loadDevice(id).then(() => admit(client, id, password));
      return admit(client, id, password);
    },

    authorizePublish(client, packet, answer) {
      if (!client) return clientless(packet, answer);
      const stored = storedWillOf(client, packet);
      if (stored) {
        // In memory the stored will is the live client's own will object: it keeps an untouched copy for
        // its real goodbye, as a refusal rewrites the packet in place (broker/hooks/refusals.ts).
        const own = client as unknown as { will?: unknown };
        if (own.will === packet) own.will = { ...packet };
        return storedWill(packet, client.id, stored.brokerId, answer);
      }
      const info = deps.device(client.id);
      if (!info) return answer({ kind: 'unknown_device', deviceId: client.id });
      if (!deps.telemetry.isCurrent(info.id, client)) return answer({ kind: 'superseded', deviceId: info.id });
      const channel = publishChannel(info, packet.topic);
      if (!channel) {
        deps.telemetry.rejected(info.id, 'publish', 'topic_not_allowed', true);
        deps.logger.warn({ device_id: info.id, topic: packet.topic.slice(0, 200) }, 'device publish refused');
        return answer({ kind: 'topic_denied', deviceId: info.id, topic: packet.topic });
      }
      // A closing connection's will comes once per connection (flapping bounds those): no budget.
      const refused = client.closed ? null : overBudget(info, channel);
      if (refused) return answer(refused);
      ingest(info, channel, packet, answer);
    },

    authorizeSubscribe(client, sub) {
      const info = deps.device(client.id);
      if (info && maySubscribe(info, sub.topic, entitled)) return null;
      if (info) deps.telemetry.rejected(info.id, 'subscribe', 'filter_not_allowed', true);
      return { kind: 'filter_denied', filter: sub.topic };
    },

    authorizeForward(client, packet) {
      const info = deps.device(client.id);
      return info && mayForward(info, packet.topic) ? null : FORWARD_DENIED;
    },
  };
}
