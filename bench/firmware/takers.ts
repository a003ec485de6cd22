/**
 * Child process of bench/firmware/firmware.ts: the devices that take the rollout, one plain mqtt.js client each,
 * answering the `update` command as docs/firmware.md "4.4 Firmware updates" has it, lighter than the simulator
 * (simulator/device.ts): ack, download the URL with HTTP Basic by the device's own MQTT username and password,
 * report UPDATING (0, then 100), check the length, the SHA-256 and the Ed25519 signature against the pinned key,
 * go OFFLINE (reason reboot), and come back on `target_fw`. `get_state` is answered with the hw_rev, so the service
 * learns it (docs/api.md, "Firmware updates"). They run apart from the players whose fan-out is timed, so the
 * downloads' reading does not queue behind the players' receipts in one event loop.
 *
 *   node --import tsx bench/firmware/takers.ts takers     (started by bench/firmware/firmware.ts, IPC required)
 *
 * IPC: parent -> {type:'start', mqttUrl, devices:[{id,password}], fw, hwRev, key, concurrency}; child ->
 * {type:'ready'} (the process), {type:'connected', seconds} (every device ONLINE), and per download
 * {type:'dl', phase:'start'|'end', device, at (epoch ms), bytes, ok}. Parent -> {type:'stats'}: child -> {type:'stats',
 * offers (update commands per device, as a list), updated, failed}. Parent -> {type:'rate', bytesPerS}: each download
 * from then on is read at most that fast (0: unthrottled). Parent -> {type:'stop'}: disconnects, exits.
 */
import crypto from 'node:crypto';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import { pool } from '../support.ts';

interface Start {
  mqttUrl: string;
  devices: Array<{ id: string; password: string }>;
  fw: string;
  hwRev: string;
  /** The pinned public key: the base64 of its 32 raw bytes. */
  key: string;
  concurrency: number;
}

const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const send = (msg: Record<string, unknown>): void => {
  if (process.connected) process.send?.(msg);
};
const epochMs = () => performance.timeOrigin + performance.now();
const ts = () => Math.floor(Date.now() / 1000);

class Taker {
  client: mqtt.MqttClient | null = null;
  offers = 0;
  result: 'updated' | 'failed' | null = null;

  constructor(readonly id: string, readonly password: string, public fw: string, private readonly run: Start, private readonly key: crypto.KeyObject) {}

  private publish(topic: string, body: Record<string, unknown>): Promise<void> {
    return new Promise((resolve, reject) => this.client!.publish(`devices/${this.id}/${topic}`, JSON.stringify({ v: '1.0', ts: ts(), ...body }), { qos: 1 }, (err) => (err ? reject(err) : resolve())));
  }

  /** Connects (retrying a refused handshake: a burst of reboots meets MQTT_MAX_HANDSHAKES_PER_ADDRESS), subscribes, says ONLINE. */
  async connect(extra: Record<string, unknown> = {}): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        this.client = await mqtt.connectAsync(this.run.mqttUrl, {
          protocolVersion: 4, clientId: this.id, username: this.id, password: this.password, clean: true, keepalive: 300, reconnectPeriod: 0, connectTimeout: 30_000,
        });
        break;
      } catch (err) {
        if (attempt >= 10) throw err;
        await new Promise((r) => setTimeout(r, 200 * attempt));
      }
    }
    const client = this.client;
    client.on('error', () => undefined);
    client.on('message', (_topic, payload) => void this.answer(client, JSON.parse(payload.toString('utf8'))).catch(() => undefined));
    await client.subscribeAsync(`devices/${this.id}/cmd`, { qos: 1 });
    await this.publish('status', { status: 'ONLINE', fw: this.fw, ...extra });
  }

  private ack(cmd: { id: string; name: string }, body: Record<string, unknown>): Promise<void> {
    return this.publish('ack', { id: cmd.id, name: cmd.name, ...body });
  }

  private async answer(client: mqtt.MqttClient, cmd: { id: string; name: string; args?: Record<string, any> }): Promise<void> {
    if (client !== this.client) return;
    if (cmd.name === 'get_state') return this.ack(cmd, { ok: true, result: { status: 'ONLINE', fw: this.fw, hw_rev: this.run.hwRev } });
    if (cmd.name !== 'update') return this.ack(cmd, { ok: false, error: 'unsupported' });
    this.offers++;
    const { url, size, sha256, signature, target_fw: target } = cmd.args ?? {};
    if (target === this.fw) return this.ack(cmd, { ok: false, error: 'already_installed' });
    await this.ack(cmd, { ok: true, result: { accepted: true, target_fw: target } });
    await this.publish('status', { status: 'UPDATING', reason: 'ota', fw: this.fw, detail: { progress_pct: 0, target_fw: target } });
    const image = await this.download(String(url));
    await this.publish('status', { status: 'UPDATING', reason: 'ota', fw: this.fw, detail: { progress_pct: 100, target_fw: target } });
    const digest = image ? crypto.createHash('sha256').update(image).digest() : null;
    const error = !image || !digest || image.length !== size ? 'download_failed' : digest.toString('hex') !== sha256 ? 'hash_mismatch'
      : !crypto.verify(null, digest, this.key, Buffer.from(String(signature), 'base64')) ? 'bad_signature' : null;
    if (error) {
      this.result = 'failed';
      return this.publish('status', { status: 'ONLINE', fw: this.fw, reason: 'update_failed', detail: { error, target_fw: target } });
    }
    // Install and reboot: a graceful OFFLINE first (no will), then back on what it runs now.
    await this.publish('status', { status: 'OFFLINE', fw: this.fw, reason: 'reboot' });
    await client.endAsync();
    this.fw = String(target);
    await this.connect({ reason: 'connected' });
    this.result = 'updated';
  }

  /**
   * The whole image with HTTP Basic by the device's own credentials (RFC 7617); null on any failure. On a connection
   * of its own, as a device opens one per download: a pooled keep-alive socket the service closed between two
   * downloads can be handed out again, and the download fails before it starts.
   */
  private async download(url: string): Promise<Buffer | null> {
    send({ type: 'dl', phase: 'start', device: this.id, at: epochMs() });
    let bytes = 0;
    const chunks: Buffer[] = [];
    try {
      const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.get(url, { agent: false, headers: { authorization: `Basic ${Buffer.from(`${this.id}:${this.password}`).toString('base64')}` } }, resolve);
        req.on('error', reject);
      });
      if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}`);
      const t0 = performance.now();
      for await (const chunk of res as AsyncIterable<Buffer>) {
        chunks.push(chunk);
        bytes += chunk.byteLength;
        // A device's own link: reading no faster than `rate` leaves the rest in the sockets (TCP backpressure).
        const ahead = rate > 0 ? (bytes * 1000) / rate - (performance.now() - t0) : 0;
        if (ahead > 1) await new Promise((r) => setTimeout(r, ahead));
      }
      send({ type: 'dl', phase: 'end', device: this.id, at: epochMs(), bytes, ok: true });
      return Buffer.concat(chunks);
    } catch (err) {
      send({ type: 'dl', phase: 'end', device: this.id, at: epochMs(), bytes, ok: false, error: String(err) });
      return null;
    }
  }
}

let takers: Taker[] = [];
/** Bytes per second each device reads its download at; 0: as fast as the host gives them. */
let rate = 0;

async function start(run: Start): Promise<void> {
  const key = crypto.createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, Buffer.from(run.key, 'base64')]), format: 'der', type: 'spki' });
  takers = run.devices.map((d) => new Taker(d.id, d.password, run.fw, run, key));
  const t0 = performance.now();
  await pool(takers.length, run.concurrency, (i) => takers[i]!.connect());
  send({ type: 'connected', seconds: (performance.now() - t0) / 1000 });
}

async function stop(): Promise<void> {
  await Promise.race([Promise.all(takers.map((t) => t.client?.endAsync().catch(() => undefined))), new Promise((r) => setTimeout(r, 10_000))]);
  process.exit(0);
}

if (!process.send) {
  console.error('bench/firmware/takers.ts is started by bench/firmware/firmware.ts (it needs an IPC channel)');
  process.exit(1);
}
process.on('disconnect', () => process.exit(0));
process.on('message', (msg: { type?: string } & Partial<Start>) => {
  if (msg.type === 'start') start(msg as Start).catch((err: unknown) => send({ type: 'error', message: err instanceof Error ? err.message : String(err) }));
  else if (msg.type === 'stats') send({ type: 'stats', offers: takers.map((t) => t.offers), updated: takers.filter((t) => t.result === 'updated').length, failed: takers.filter((t) => t.result === 'failed').length });
  else if (msg.type === 'rate') rate = Number((msg as { bytesPerS?: number }).bytesPerS ?? 0);
  else if (msg.type === 'stop') void stop();
});
send({ type: 'ready', pid: process.pid });
