import type { AuthenticateError, PublishPacket } from 'aedes';

/**
 * Every way the broker says no to a device, as a value. The hooks of broker/hooks/hooks.ts return these;
 * broker/hooks/adapter.ts alone turns them into aedes's answers through `mqttOutcome` below, the one table.
 * docs/firmware.md#2-what-the-broker-refuses-and-why lists them from the device's side.
 */

/** CONNECT, answered with a CONNACK return code ([MQTT-3.2.2.3]) and the connection closed ([MQTT-3.2.2-5]). */
export type ConnectRefusal =
  | { kind: 'credentials_missing' }
  | { kind: 'bad_credentials' }
  | { kind: 'client_id_mismatch' }
  | { kind: 'will_denied'; topic: string }
  | { kind: 'banned' }
  | { kind: 'flapping' }
  /** The authenticate hook threw (the store full or busy, a bug). */
  | { kind: 'server_busy' };

/** PUBLISH: dropped (acknowledged or not) or the connection closed. `deviceId` names the `$dropped/` topic. */
export type PublishRefusal = { deviceId: string } & (
  | { kind: 'unknown_device' }
  /** A connection another one with the same clientId took over ([MQTT-3.1.4-2]) is still sending. */
  | { kind: 'superseded' }
  | { kind: 'topic_denied'; topic: string }
  | { kind: 'over_budget'; channel: string }
  | { kind: 'flooding'; channel: string }
  | { kind: 'payload_too_large'; channel: string }
  | { kind: 'payload_invalid'; channel: string; reason: string }
  | { kind: 'log_throttled' }
  /** What the store could not write (disk full, busy), or a publish hook that threw. */
  | { kind: 'not_written' }
  /** A stored will of a device that is unknown, not on its own status topic, or connected. */
  | { kind: 'will_ignored' }
);

/** SUBSCRIBE: SUBACK 0x80 for that filter ([MQTT-3.9.3]); the connection stays. */
export type SubscribeRefusal = { kind: 'filter_denied'; filter: string } | { kind: 'subscribe_failed' };

/** A delivery to a subscriber that may no longer hear it (a lease expired, a device moved mosques). */
export type ForwardRefusal = { kind: 'forward_denied' };

export type DeviceRefusal = ConnectRefusal | PublishRefusal | SubscribeRefusal | ForwardRefusal;

/** aedes sets return codes 2 to 5 from a hook ("Handler: authenticate" in aedes's docs/Aedes.md); 1 is its own. */
type ConnackCode = 2 | 3 | 4 | 5;

export type MqttOutcome =
  | { connack: ConnackCode; message: string }
  | { suback: 0x80 }
  /** Acknowledged as its QoS asks (PUBACK at QoS 1), then never delivered nor retained. */
  | { publish: 'dropped' }
  /** Dropped without a PUBACK: a QoS 1 publish stays in the device's flight window and comes again. */
  | { publish: 'unacknowledged' }
  /** The connection is closed without an acknowledgement ([MQTT-3.3.5-2]). */
  | { publish: 'disconnect'; message: string }
  | { forward: 'withheld' };

/** DeviceRefusal -> MQTT, in one table. A new kind does not compile until it has a row here. */
export const mqttOutcome = {
  credentials_missing: { connack: 4, message: 'username and password required' },
  bad_credentials: { connack: 4, message: 'bad username or password' },
  // clientId = username = device id binds the session to the password: anything else is not authorized.
  client_id_mismatch: { connack: 5, message: 'clientId must equal username' },
  will_denied: { connack: 5, message: 'a will may only target the own status topic' },
  // 3 "server unavailable" for a banned or flapping device, not 5 "not authorized": its credentials are good and
  // the refusal ends by itself; firmware backs off and retries on 3, while 5 reads as "re-provision me".
  banned: { connack: 3, message: 'banned for reconnecting or publishing too often; try again later' },
  flapping: { connack: 3, message: 'reconnecting too often; try again later' },
  server_busy: { connack: 3, message: 'server unavailable' },

  // [MQTT-3.3.5-2] the server may close the connection of a client publishing where it is not authorized.
  unknown_device: { publish: 'disconnect', message: 'unknown device' },
  topic_denied: { publish: 'disconnect', message: 'publish not authorized' },
  // 10x over a budget for the whole flood window: closed, and banned (the next CONNECT meets `banned`).
  flooding: { publish: 'disconnect', message: 'publish flood' },
  // MQTT 3.1.1 has no negative acknowledgement, and one bad or surplus payload must not take a device offline.
  superseded: { publish: 'dropped' },
  over_budget: { publish: 'dropped' },
  payload_too_large: { publish: 'dropped' },
  payload_invalid: { publish: 'dropped' },
  log_throttled: { publish: 'dropped' },
  will_ignored: { publish: 'dropped' },
  // An acknowledged status is a written one: what could not be written is not acknowledged either. The
  // connection stays: closing it would not help a full disk.
  not_written: { publish: 'unacknowledged' },

  // [MQTT-3.8.4-5] a SUBSCRIBE is answered per filter: the device keeps the filters it may have.
  filter_denied: { suback: 0x80 },
  subscribe_failed: { suback: 0x80 },

  forward_denied: { forward: 'withheld' },
} as const satisfies Record<DeviceRefusal['kind'], MqttOutcome>;

/** The error aedes's authenticate callback takes: its `returnCode` becomes the CONNACK's. */
export function connackError(refusal: ConnectRefusal): AuthenticateError {
  const { connack, message } = mqttOutcome[refusal.kind];
  return Object.assign(new Error(message), { returnCode: connack }) as AuthenticateError;
}

/**
 * Applies a publish refusal to the packet and says what aedes's authorizePublish callback gets: an Error
 * closes the connection; null lets aedes go on with the packet as rewritten here. aedes has no other way
 * to drop a publish it authorized, nor to withhold its PUBACK: "Handler: authorizePublish" in aedes's
 * docs/Aedes.md has the hook change the packet in place, and its lib/handlers/publish.js sends a PUBACK
 * only for a packet still at QoS 1. So a dropped publish goes to `$dropped/{id}`, a topic no device may
 * subscribe to, empty and never retained; an unacknowledged one also goes down to QoS 0.
 */
export function applyPublishRefusal(packet: PublishPacket, refusal: PublishRefusal): Error | null {
  const outcome = mqttOutcome[refusal.kind];
  if (outcome.publish === 'disconnect') return new Error(outcome.message);
  dropPacket(packet, refusal.deviceId);
  if (outcome.publish === 'unacknowledged') packet.qos = 0;
  return null;
}

function dropPacket(packet: PublishPacket, deviceId: string): void {
  packet.topic = `$dropped/${deviceId}`;
  packet.retain = false;
  packet.payload = Buffer.alloc(0);
}

/**
 * What aedes's authorizeSubscribe callback gets for one filter: a null subscription is SUBACK 0x80 for that
 * filter, the connection kept ("Handler: authorizeSubscribe" in aedes's docs/Aedes.md); an error would close it.
 */
export function subscriptionAfter<S>(sub: S, refusal: SubscribeRefusal | null): S | null {
  if (!refusal) return sub;
  const code: 0x80 = mqttOutcome[refusal.kind].suback;
  return code === 0x80 ? null : sub;
}

/** What aedes's authorizeForward returns: null forwards nothing ("Handler: authorizeForward" in aedes's docs/Aedes.md). */
export function forwardedAfter<P>(packet: P, refusal: ForwardRefusal | null): P | null {
  return refusal && mqttOutcome[refusal.kind].forward === 'withheld' ? null : packet;
}
