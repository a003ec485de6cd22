import type { AedesPublishPacket, AuthenticateError, Client, PublishPacket, Subscription } from 'aedes';
import type { ConnectPacket } from 'aedes';
import type { DeviceInfo } from '../src/devices/devices.ts';
import type { Logger } from '../src/platform/log.ts';
import type { Telemetry } from '../src/devices/telemetry.ts';
import { MAX_PAYLOAD_BYTES, parseAck, parseBroadcast, parseHeartbeat, parseLog, parseStatus, type AckReport } from './payloads.ts';
import { mayReceive, maySubscribe, parseDeviceTopic, publishChannel, type DeviceIdentity } from './topics.ts';

export interface HookDeps {
  logger: Logger;
  telemetry: Telemetry;
  device: (id: string) => DeviceInfo | null;
  verifySecret: (id: string, password: string) => boolean;
  /** A device authenticated: make sure its retained config is there before it subscribes. */
  onAuthenticated: (id: string) => void;
  onAck?: (deviceId: string, ack: AckReport) => void;
  /** Whether a stream player may hear its mosque's broadcasts right now (entitlement issue). */
  entitled?: (device: DeviceIdentity, mosqueId: string) => boolean;
  /** A transmitter announced its own mosque's broadcast (issue 11: it may serve a scheduled azaan). */
  onDeviceBroadcast?: (mosqueId: string, event: { broadcast_id: string; kind: string; action: 'start' | 'stop' }) => void;
}

const refuse = (returnCode: 4 | 5, message: string) => Object.assign(new Error(message), { returnCode }) as AuthenticateError;

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

const payloadOf = (packet: PublishPacket) => (Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload));

/** The broker's hooks, one adapter each over src/. Every check is answered from memory. */
export function createHooks(deps: HookDeps) {
  const wills = new WeakMap<Client, string | null>();
  const entitled = deps.entitled ?? (() => false);

  function ingest(info: DeviceInfo, channel: string, packet: PublishPacket): void {
    const payload = payloadOf(packet);
    if (payload.length > MAX_PAYLOAD_BYTES) {
      deps.telemetry.rejected(info.id, channel, 'too_large');
      return drop(packet, info.id);
    }
    const parsed =
      channel === 'status' ? parseStatus(info.kind, payload)
      : channel === 'heartbeat' ? parseHeartbeat(info.kind, payload)
      : channel === 'log' ? parseLog(payload)
      : channel === 'broadcast' ? parseBroadcast(payload)
      : parseAck(payload);
    if (!parsed.ok) {
      deps.telemetry.rejected(info.id, channel, parsed.reason);
      return drop(packet, info.id);
    }
    // A transmitter announcing its own mosque's broadcast: forwarded to leased players as it is.
    if (channel === 'broadcast') {
      const event = parsed.value as { broadcast_id: string; kind: string; action: 'start' | 'stop' };
      if (info.mosqueId) deps.onDeviceBroadcast?.(info.mosqueId, event);
      return;
    }
    if (channel === 'status') return deps.telemetry.status(info.id, parsed.value as Parameters<Telemetry['status']>[1]);
    // Only status is retained state; nothing else a device sends may linger on the broker.
    packet.retain = false;
    if (channel === 'heartbeat') deps.telemetry.heartbeat(info.id, parsed.value as Parameters<Telemetry['heartbeat']>[1]);
    else if (channel === 'log') {
      if (!deps.telemetry.log(info.id, parsed.value as Parameters<Telemetry['log']>[1], payload.length)) drop(packet, info.id);
    } else deps.onAck?.(info.id, parsed.value as AckReport);
  }

  /**
   * A publish without a client is the backend's own (configs, commands, broadcast events, clearing a
   * retained status with an empty payload) or, with REDIS_URL, the will of a device whose broker process
   * died, which aedes publishes on that process's behalf. Such a will is held to the same schema and
   * ingested unless the device is connected here again.
   */
  function clientless(packet: PublishPacket): void {
    const parsed = parseDeviceTopic(packet.topic);
    if (!parsed || parsed.channel !== 'status' || payloadOf(packet).length === 0) return;
    const info = deps.device(parsed.deviceId);
    if (!info) return drop(packet, parsed.deviceId);
    if (deps.telemetry.isConnected(info.id)) return drop(packet, info.id);
    ingest(info, 'status', packet);
  }

  return {
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
      // The new connection becomes the device's current one now, before aedes closes a taken-over one:
      // that old connection's will and disconnect must not mark the device OFFLINE.
      deps.telemetry.connected(id, client);
      deps.onAuthenticated(id);
      done(null, true);
    },

    authorizePublish(client: Client | null, packet: PublishPacket, done: (err?: Error | null) => void) {
      if (!client) {
        clientless(packet);
        return done(null);
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
      ingest(info, channel, packet);
      done(null);
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
      return info && mayReceive(info, packet.topic, entitled) ? packet : null;
    },
  };
}
