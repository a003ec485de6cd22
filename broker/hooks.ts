import type { AedesOptions, AedesPublishPacket, AuthenticateError, Client, PublishPacket, Subscription } from 'aedes';
import type { ConnectPacket } from 'aedes';
import type { DeviceInfo } from '../src/devices/devices.ts';
import type { Faults } from '../src/platform/faults.ts';
import type { Logger } from '../src/platform/log.ts';
import type { Telemetry } from '../src/devices/telemetry.ts';
import { MAX_PAYLOAD_BYTES, parseAck, parseBroadcast, parseHeartbeat, parseLog, parseStatus, type AckReport } from './payloads.ts';
import { mayReceive, maySubscribe, parseDeviceTopic, publishChannel, type DeviceIdentity } from './topics.ts';

export interface HookDeps {
  logger: Logger;
  /** Where a hook that threw is counted and logged (at most once a minute), instead of ending the process. */
  faults: Faults;
  telemetry: Telemetry;
  device: (id: string) => DeviceInfo | null;
  verifySecret: (id: string, password: string) => boolean;
  /** A device authenticated: make sure its retained config is there before it subscribes. */
  onAuthenticated: (id: string) => void;
  onAck?: (deviceId: string, ack: AckReport) => void;
  /** Whether a stream player may hear its mosque's broadcasts right now (entitlement issue). */
  entitled?: (device: DeviceIdentity, mosqueId: string) => boolean;
}

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

const payloadOf = (packet: PublishPacket) => (Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload));

/** The broker's hooks, one adapter each over src/. Every check is answered from memory. */
type Hooks = Required<Pick<AedesOptions, 'preConnect' | 'authenticate' | 'authorizePublish' | 'authorizeSubscribe' | 'authorizeForward'>>;

export function createHooks(deps: HookDeps): Hooks {
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
    if (channel === 'broadcast') return;
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
      // The new connection becomes the device's current one now, before aedes closes a taken-over one:
      // that old connection's will and disconnect must not mark the device OFFLINE.
      deps.telemetry.connected(id, client);
      // A config push that could not be written (disk full) must not keep the device out: it has its retained one.
      try {
        deps.onAuthenticated(id);
      } catch (err) {
        deps.telemetry.writeFailed(id, 'connect', err);
      }
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
  return guarded(hooks, deps);
}

/**
 * Every hook catches its own errors (issue 9): aedes calls them from its socket handlers, where a throw
 * (SQLITE_FULL, SQLITE_BUSY past the busy timeout, a bug) would end the process and every device with it.
 * A hook that threw before answering answers as below; one that threw after is only reported.
 */
function guarded(hooks: Hooks, deps: HookDeps): Hooks {
  const once = <A extends unknown[]>(done: (...args: A) => void) => {
    const answer = Object.assign((...args: A) => ((answer.answered = true), done(...args)), { answered: false });
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
      const parsed = parseDeviceTopic(packet.topic);
      try {
        hooks.authorizePublish(client, packet, answer);
      } catch (err) {
        const deviceId = client?.id ?? parsed?.deviceId ?? null;
        if (deviceId) deps.telemetry.writeFailed(deviceId, parsed?.channel ?? 'publish', err);
        else deps.faults.report('mqtt publish hook', err);
        if (answer.answered) return;
        drop(packet, deviceId ?? 'unknown');
        packet.qos = 0;
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
