import type { TestContext } from 'node:test';
import crypto from 'node:crypto';
import type mqtt from 'mqtt';
import { connectDevice, publish, statusPayload, type Credentials } from '../support/devices.ts';

/**
 * Devices answering the `update` command (docs/firmware.md, "4.4 Firmware updates") over real MQTT and HTTP: each
 * acks, downloads with its own credentials, checks length, SHA-256 and the signature against its pinned key,
 * reports UPDATING with progress, and comes back on the new version, or on the old one (`rolled_back`).
 */
/** `silent`: accepts the offer and then says nothing more, as a device that lost its power or its network would. */
export type Behaviour = 'update' | 'roll_back' | 'silent';

export interface FakeDevice {
  id: string;
  fw: string;
  /** How many update commands reached it. */
  offers: number;
  /** What its checks said of the image it was offered. */
  refused: string[];
  client: mqtt.MqttClient;
}

export async function fakeDevice(t: TestContext, httpBase: string, creds: Credentials, opts: { fw: string; hwRev: string; publicKey: crypto.KeyObject; behaviour: Behaviour }): Promise<FakeDevice> {
  const id = creds.username;
  const device: FakeDevice = { id, fw: opts.fw, offers: 0, refused: [], client: null as unknown as mqtt.MqttClient };
  const online = (client: mqtt.MqttClient, extra: Record<string, unknown> = {}) =>
    publish(client, `devices/${id}/status`, statusPayload('ONLINE', { fw: device.fw, ...extra }), { qos: 1 });
  const connect = async () => {
    const client = await connectDevice(t, creds);
    await new Promise<void>((resolve, reject) => client.subscribe(`devices/${id}/cmd`, { qos: 1 }, (err) => (err ? reject(err) : resolve())));
    client.on('message', (_topic, payload) => void answer(client, JSON.parse(payload.toString())));
    device.client = client;
    return client;
  };
  const ack = (client: mqtt.MqttClient, cmd: { id: string; name: string }, body: Record<string, unknown>) =>
    publish(client, `devices/${id}/ack`, JSON.stringify({ v: '1.0', id: cmd.id, name: cmd.name, ts: Math.floor(Date.now() / 1000), ...body }), { qos: 1 });

  async function answer(client: mqtt.MqttClient, cmd: { id: string; name: string; args: Record<string, any> }) {
    if (cmd.name === 'get_state') return ack(client, cmd, { ok: true, result: { status: 'ONLINE', fw: device.fw, hw_rev: opts.hwRev } });
    if (cmd.name !== 'update') return;
    device.offers++;
    const { url, size, sha256, signature, target_fw: target } = cmd.args;
    await ack(client, cmd, { ok: true, result: { accepted: true, target_fw: target } });
    if (opts.behaviour === 'silent') return;
    const res = await fetch(url, { headers: { authorization: `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}` } });
    const image = Buffer.from(await res.arrayBuffer());
    await publish(client, `devices/${id}/status`, statusPayload('UPDATING', { reason: 'ota', fw: device.fw, detail: { progress_pct: 50, target_fw: target } }), { qos: 1 });
    const digest = crypto.createHash('sha256').update(image).digest();
    const error = res.status !== 200 || image.length !== size ? 'download_failed' : digest.toString('hex') !== sha256 ? 'hash_mismatch'
      : !crypto.verify(null, digest, opts.publicKey, Buffer.from(signature, 'base64')) ? 'bad_signature' : null;
    if (error) {
      device.refused.push(error);
      return online(client, { reason: 'update_failed', detail: { error, target_fw: target } });
    }
    // Install and reboot: the connection goes, and comes back on what it runs now.
    await new Promise<void>((resolve) => client.end(true, {}, () => resolve()));
    if (opts.behaviour === 'update') device.fw = target;
    const again = await connect();
    await online(again, opts.behaviour === 'roll_back' ? { reason: 'rolled_back' } : { reason: 'connected' });
  }

  const client = await connect();
  await online(client);
  return device;
}
