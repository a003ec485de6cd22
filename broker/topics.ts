/**
 * Topic rules of docs/firmware.md#topics, pure: what a device may publish and subscribe. Every answer comes from
 * the device's in-memory record; nothing here touches the store.
 */
export type DeviceChannel = 'status' | 'heartbeat' | 'log' | 'ack' | 'config' | 'cmd';
export type PublishChannel = 'status' | 'heartbeat' | 'log' | 'ack' | 'broadcast';

export interface DeviceIdentity {
  id: string;
  kind: 'transmitter' | 'stream_player';
  mosqueId: string | null;
}

const SUBSCRIBABLE: ReadonlySet<string> = new Set<DeviceChannel>(['config', 'cmd']);
const OWN_PREFIX = 'devices/';
const SLASH = 0x2f;

/** `devices/{id}/{channel}` -> its parts; anything else -> null. */
export function parseDeviceTopic(topic: string): { deviceId: string; channel: string } | null {
  const parts = topic.split('/');
  if (parts.length !== 3 || parts[0] !== 'devices' || !parts[1] || !parts[2]) return null;
  return { deviceId: parts[1], channel: parts[2] };
}

/** `mosques/{id}/broadcast` -> the mosque id; anything else -> null. */
export function parseBroadcastTopic(topic: string): string | null {
  const parts = topic.split('/');
  if (parts.length !== 3 || parts[0] !== 'mosques' || !parts[1] || parts[2] !== 'broadcast') return null;
  return parts[1];
}

/**
 * The channel a device may publish on this topic: only its own status, heartbeat, log and ack, and (a
 * transmitter) its own mosque's broadcast topic: no other device may publish there
 * (docs/firmware.md#topics).
 */
export function publishChannel(device: DeviceIdentity, topic: string): PublishChannel | null {
  // Asked on every publish (its cost: bench/RESULTS.md, "Devices"): the own prefix is compared in place instead of splitting the topic;
  // the channel names hold no '/', so `devices/{id}/{channel}` with a publishable channel is exactly three levels.
  const end = OWN_PREFIX.length + device.id.length;
  if (topic.startsWith(OWN_PREFIX) && topic.startsWith(device.id, OWN_PREFIX.length) && topic.charCodeAt(end) === SLASH) {
    // The channel is matched in place by its length and ending: no substring and no loop per publish
    // (the own channels' lengths: heartbeat 9, status 6, log and ack 3).
    const length = topic.length - end - 1;
    const channel = length === 9 ? 'heartbeat' : length === 6 ? 'status' : length === 3 ? (topic.endsWith('log') ? 'log' : 'ack') : null;
    return channel !== null && topic.endsWith(channel) ? channel : null;
  }
  const mosqueId = parseBroadcastTopic(topic);
  return mosqueId !== null && device.kind === 'transmitter' && device.mosqueId === mosqueId ? 'broadcast' : null;
}

const hasWildcard = (filter: string) => filter.includes('#') || filter.includes('+');

/**
 * Whether a device may subscribe to a filter: its own config and cmd, and (a stream player, while
 * `entitled` says so) its mosque's broadcast topic. Wildcards and `$` topics are always refused.
 */
export function maySubscribe(device: DeviceIdentity, filter: string, entitled: (device: DeviceIdentity, mosqueId: string) => boolean): boolean {
  if (filter.startsWith('$') || hasWildcard(filter)) return false;
  const own = parseDeviceTopic(filter);
  if (own) return own.deviceId === device.id && SUBSCRIBABLE.has(own.channel);
  const mosqueId = parseBroadcastTopic(filter);
  if (mosqueId === null) return false;
  return device.kind === 'stream_player' && device.mosqueId === mosqueId && entitled(device, mosqueId);
}

/** Whether a message on `topic` may be delivered to this device right now (re-checked on every delivery). */
export function mayReceive(device: DeviceIdentity, topic: string, entitled: (device: DeviceIdentity, mosqueId: string) => boolean): boolean {
  return maySubscribe(device, topic, entitled);
}

/** What a topic lets a device receive, read once from the topic alone. */
type Receivable = { own: string } | { mosqueId: string } | null;

function receivable(topic: string): Receivable {
  if (topic.startsWith('$') || hasWildcard(topic)) return null;
  const own = parseDeviceTopic(topic);
  if (own) return SUBSCRIBABLE.has(own.channel) ? { own: own.deviceId } : null;
  const mosqueId = parseBroadcastTopic(topic);
  return mosqueId === null ? null : { mosqueId };
}

/**
 * `mayReceive` for the broker's per-delivery check, with the topic read once per publish: aedes asks about
 * every subscriber of a publish in one synchronous walk before it writes to any (bench/RESULTS.md, "Broadcasts":
 * splitting the topic twice per subscriber made that walk for 10,000 players about twice bare aedes's). Entitlement is
 * still asked on every delivery.
 */
export function createForwardCheck(entitled: (device: DeviceIdentity, mosqueId: string) => boolean): (device: DeviceIdentity, topic: string) => boolean {
  let lastTopic: string | null = null;
  let last: Receivable = null;
  return (device, topic) => {
    if (topic !== lastTopic) {
      last = receivable(topic);
      lastTopic = topic;
    }
    if (last === null) return false;
    if ('own' in last) return last.own === device.id;
    return device.kind === 'stream_player' && device.mosqueId === last.mosqueId && entitled(device, last.mosqueId);
  };
}
