/**
 * The restart storm on one host (bench/devices.ts): a broker process started again and every device back at once,
 * at most `concurrency` CONNECTs in flight. On Minaret each does what firmware does after its CONNACK
 * (docs/firmware.md): SUBSCRIBE its config and wait for it (a stream player's with its lease), a player also its
 * mosque's broadcast topic, then publish its status ONLINE (QoS 1, retained) and wait for the PUBACK, which the
 * service sends once the row is written. The baseline is bare aedes's CONNECT and the same SUBSCRIBEs, each answered
 * by its SUBACK: what a bare broker does for a device's return.
 */
import mqtt from 'mqtt';
import { pool } from '../support.ts';

export interface StormDevice {
  id: string;
  password: string;
  kind: 'transmitter' | 'stream_player';
  /** A stream player's mosque broadcast topic; null for a transmitter (it publishes there, never subscribes). */
  broadcastTopic: string | null;
}

const nowS = () => Math.floor(Date.now() / 1000);
const online = () => Buffer.from(JSON.stringify({ v: '1.0', status: 'ONLINE', prev: 'OFFLINE', reason: 'boot', ts: nowS() }));

/** One device's return; `full`: wait for its config and publish ONLINE (Minaret), else CONNECT and SUBSCRIBE only. */
async function rejoin(url: string, d: StormDevice, full: boolean): Promise<mqtt.MqttClient> {
  const client = await mqtt.connectAsync(url, {
    protocolVersion: 4, clientId: d.id, username: d.id, password: d.password, clean: true, keepalive: 300,
    reconnectPeriod: 0, connectTimeout: 60_000, resubscribe: false,
  });
  client.on('error', () => undefined);
  const topic = `devices/${d.id}/config`;
  const configured = full
    ? new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${d.id}: no config within 60 s of the storm`)), 60_000);
      client.on('message', (t, payload) => {
        if (t === topic && (d.kind === 'transmitter' || payload.includes('"lease"'))) (clearTimeout(timer), resolve());
      });
    })
    : Promise.resolve();
  configured.catch(() => undefined); // awaited below; a failed SUBSCRIBE must not leave it unhandled
  await client.subscribeAsync(topic, { qos: 1 });
  await configured;
  if (d.broadcastTopic) await client.subscribeAsync(d.broadcastTopic, { qos: 1 });
  if (full) await client.publishAsync(`devices/${d.id}/status`, online(), { qos: 1, retain: true });
  return client;
}

/** Every device's return; resolves with the wall time and the clients, still connected (the caller ends them). */
export async function restartStorm(url: string, devices: StormDevice[], concurrency: number, full: boolean): Promise<{ seconds: number; clients: mqtt.MqttClient[] }> {
  const clients: mqtt.MqttClient[] = new Array(devices.length);
  const t0 = performance.now();
  await pool(devices.length, concurrency, async (i) => {
    clients[i] = await rejoin(url, devices[i]!, full);
  });
  return { seconds: (performance.now() - t0) / 1000, clients };
}

export async function endStorm(clients: mqtt.MqttClient[]): Promise<void> {
  await Promise.race([
    Promise.all(clients.map((c) => c.endAsync(false).catch(() => undefined))),
    new Promise((r) => setTimeout(r, 15_000).unref()),
  ]);
  for (const c of clients) if (!c.disconnected) c.end(true);
}
