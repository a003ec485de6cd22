import { toJsonSchema } from '@valibot/to-json-schema';
import type * as v from 'valibot';
import { HEARTBEAT } from '../src/devices/device-config.ts';
import { MAX_PAYLOAD_BYTES, PAYLOAD_SCHEMAS, type PayloadName } from './payloads.ts';

/**
 * The AsyncAPI 3 document of every device topic (docs/firmware.md#topics), written from the device's side: what firmware
 * sends and receives. Payload schemas come from the valibot schemas the broker validates with
 * (broker/payloads.ts). Served at GET /api/v1/asyncapi.json (handed to api/ by src/service.ts) and kept in
 * docs/asyncapi.json (`npm run docs`).
 */

// v.undefined() (a player must not send temp_c) has no JSON Schema of its own: "no value allowed".
const payloadOf = (s: v.GenericSchema) => {
  const converted = toJsonSchema(s, {
    errorMode: 'ignore',
    overrideSchema: ({ valibotSchema }) => (valibotSchema.type === 'undefined' ? { not: {} } : undefined),
  }) as Record<string, unknown>;
  const { $schema: _drop, ...rest } = converted;
  return rest;
};

const MESSAGES: Record<PayloadName, { title: string; summary: string }> = {
  transmitterStatus: { title: 'Transmitter status', summary: 'Every transition of a transmitter, and once after every (re)connect; the will carries OFFLINE.' },
  playerStatus: { title: 'Stream player status', summary: 'Every transition of a stream player (UNBOUND and MUTED carry detail.reason), and once after every (re)connect.' },
  transmitterHeartbeat: { title: 'Transmitter heartbeat', summary: `First at once, then every heartbeat_secs (default ${HEARTBEAT.transmitter.default} s). v, status and ts are required: without them the heartbeat is dropped and the device goes stale.` },
  playerHeartbeat: { title: 'Stream player heartbeat', summary: `First at once, then every heartbeat_secs (default ${HEARTBEAT.stream_player.default} s). v, status and ts are required.` },
  log: { title: 'Log line', summary: 'At most 1 a second and 512 bytes; the rest is dropped and counted. Accepted only while logging is enabled or raised by set_log_level.' },
  ack: { title: 'Command acknowledgement', summary: 'The answer to a command: the same id and name as the command, ok, and result (ok: true) or error (ok: false).' },
  config: { title: 'Device config', summary: 'Retained; re-read on every connect. An entitled stream player gets stream_url and a lease; an unbound one gets unbound_reason.' },
  command: { title: 'Command', summary: 'A diagnostic command (both kinds), set_log_level and unbind_mosque (players), broadcast_start and broadcast_stop (transmitters), update (both kinds; docs/firmware.md 4.4: its url must be on the device\'s own server, the only place its credentials go, else the ack error is untrusted_url).' },
  broadcast: { title: 'Broadcast event', summary: "A mosque's broadcast started or stopped; retained. Delivered to a stream player only while it holds a valid lease for that mosque." },
};

const deviceId = { description: 'The device id: also its MQTT clientId and username.' };
const mosqueId = { description: "The mosque id (the config's mosque_id, and the lease's mosque_id claim)." };
const channel = (address: string, description: string, messages: PayloadName[], parameters: Record<string, object>) => ({
  address,
  description,
  parameters,
  messages: Object.fromEntries(messages.map((m) => [m, { $ref: `#/components/messages/${m}` }])),
});

const CHANNELS = {
  status: channel('devices/{device_id}/status', 'Device -> backend. QoS 1, retained. Also the only topic a will may use.', ['transmitterStatus', 'playerStatus'], { device_id: deviceId }),
  heartbeat: channel('devices/{device_id}/heartbeat', 'Device -> backend. QoS 0. Three missed heartbeats mark the device OFFLINE (stale).', ['transmitterHeartbeat', 'playerHeartbeat'], { device_id: deviceId }),
  log: channel('devices/{device_id}/log', 'Device -> backend. QoS 0.', ['log'], { device_id: deviceId }),
  ack: channel('devices/{device_id}/ack', 'Device -> backend. QoS 1.', ['ack'], { device_id: deviceId }),
  config: channel('devices/{device_id}/config', 'Backend -> device. QoS 1, retained.', ['config'], { device_id: deviceId }),
  cmd: channel('devices/{device_id}/cmd', 'Backend -> device. QoS 1.', ['command'], { device_id: deviceId }),
  broadcast: channel('mosques/{mosque_id}/broadcast', "Backend -> leased stream players (and a mosque's own transmitter may publish a local start or stop). QoS 1, retained.", ['broadcast'], { mosque_id: mosqueId }),
} as const;

type ChannelName = keyof typeof CHANNELS;

const operation = (action: 'send' | 'receive', name: ChannelName, summary: string, qos: 0 | 1, retain: boolean) => ({
  action,
  channel: { $ref: `#/channels/${name}` },
  summary,
  messages: Object.keys(CHANNELS[name].messages).map((m) => ({ $ref: `#/channels/${name}/messages/${m}` })),
  bindings: { mqtt: { qos, retain, bindingVersion: '0.2.0' } },
});

const OPERATIONS = {
  sendStatus: operation('send', 'status', 'Publish the status on every transition and after every (re)connect', 1, true),
  sendHeartbeat: operation('send', 'heartbeat', 'Publish a heartbeat every heartbeat_secs', 0, false),
  sendLog: operation('send', 'log', 'Publish a log line', 0, false),
  sendAck: operation('send', 'ack', 'Acknowledge a command', 1, false),
  receiveConfig: operation('receive', 'config', 'Subscribe to the own config', 1, true),
  receiveCommand: operation('receive', 'cmd', 'Subscribe to the own commands', 1, false),
  receiveBroadcast: operation('receive', 'broadcast', "A leased stream player subscribes to its mosque's broadcast events", 1, true),
  sendBroadcast: operation('send', 'broadcast', "A transmitter announces a broadcast it started or stopped locally (its own mosque's topic only)", 1, true),
};

const CONNECT_RULES = [
  'clientId = username = the device id; password = the device password from the credentials (shown once at registration or rotation).',
  'CONNACK 4: missing or wrong username/password. CONNACK 5: clientId is not the username, a will aimed anywhere but the own status topic, or a disabled or deleted device.',
  `Publishing on any topic but the own status, heartbeat, log and ack (a transmitter: also its mosque's broadcast topic) closes the connection. A payload over ${MAX_PAYLOAD_BYTES} bytes or failing its schema is acknowledged, dropped and counted; the connection stays.`,
  'Subscribing to anything but the own config and cmd (a stream player while leased: its mosque\'s broadcast topic) gets SUBACK 0x80 for that filter; #, + and $SYS filters are always refused.',
].join('\n\n');

/** The document; `servers` name placeholder hosts, since firmware learns the real ones from its credentials. */
export function buildAsyncApi() {
  return {
    asyncapi: '3.0.0',
    info: {
      title: 'Minaret devices',
      version: '1.0.0',
      description: `The MQTT interface of a Minaret device (transmitter or stream player), from the device's side: what it sends and receives. Guide: docs/firmware.md.\n\n${CONNECT_RULES}`,
    },
    defaultContentType: 'application/json',
    servers: {
      mqtt: {
        host: '{host}:{port}',
        protocol: 'mqtt',
        protocolVersion: '3.1.1',
        description: 'MQTT 3.1.1 (and 3.1) over TCP: credentials.mqtt_url (MQTT_PORT, 1883 by default).',
        variables: { host: { default: 'localhost' }, port: { default: '1883' } },
        security: [{ $ref: '#/components/securitySchemes/devicePassword' }],
        bindings: { mqtt: { lastWill: { topic: 'devices/{device_id}/status', qos: 1, retain: true }, bindingVersion: '0.2.0' } },
      },
      websocket: {
        host: '{host}:{port}',
        pathname: '/mqtt',
        protocol: 'ws',
        description: 'MQTT over WebSocket on the HTTP port: credentials.ws_url (wss behind a TLS proxy).',
        variables: { host: { default: 'localhost' }, port: { default: '8080' } },
        security: [{ $ref: '#/components/securitySchemes/devicePassword' }],
      },
    },
    channels: CHANNELS,
    operations: OPERATIONS,
    components: {
      securitySchemes: { devicePassword: { type: 'userPassword', description: 'username = clientId = device id; password = the device password.' } },
      messages: Object.fromEntries(
        Object.entries(MESSAGES).map(([name, text]) => [name, { name, ...text, contentType: 'application/json', payload: payloadOf(PAYLOAD_SCHEMAS[name as PayloadName]) }]),
      ) as Record<PayloadName, { name: string; title: string; summary: string; contentType: string; payload: Record<string, unknown> }>,
    },
  };
}
