import type { TestContext } from 'node:test';
import http from 'node:http';
import { SimDevice, type CommandMessage } from '../../simulator/device.ts';
import type { Credentials } from '../support/devices.ts';

/**
 * Simulated players (simulator/device.ts: device/'s own firmware over real MQTT) that take the `update` command as
 * docs/firmware.md "4.4 Firmware updates" has it: the download with their own Basic credentials, Range after a
 * dropped connection, the checks against the pinned key, the reboot. Each counts the update commands it received,
 * on its own side of the wire.
 */
export interface SimPlayer {
  id: string;
  device: SimDevice;
  /** Update commands that reached this device. */
  updates: number;
  /** Each update command's download address, in the order they came (it names the node that sent it when nodes differ). */
  updateUrls: string[];
}

export async function simPlayer(t: TestContext, creds: Credentials, opts: { key: string; failUpdate?: boolean; mqttUrl?: string }): Promise<SimPlayer> {
  const device = new SimDevice({
    kind: 'stream_player', id: creds.username, password: creds.password, mqttUrl: opts.mqttUrl ?? creds.mqtt_url, fw: '1.0.0',
    firmwareKey: opts.key, failUpdate: opts.failUpdate ?? false, progressEveryMs: 500, startTimeoutMs: 20_000,
  });
  const player: SimPlayer = { id: creds.username, device, updates: 0, updateUrls: [] };
  device.on('command', (cmd: CommandMessage) => {
    if (cmd.name !== 'update') return;
    player.updates++;
    player.updateUrls.push(String(cmd.args.url));
  });
  // Bounded: a test that stopped its broker (a killed node) first must not wait on a goodbye no one can take.
  t.after(() => Promise.race([device.stop({ graceful: true }).catch(() => undefined), new Promise((r) => setTimeout(r, 3000))]));
  await device.start();
  return player;
}

export interface Forwarded {
  user: string | null;
  path: string;
  range: string | undefined;
  /** The status the service answered with (what reached the service, not what reached the device). */
  status: number;
  cut: boolean;
}

/**
 * An HTTP hop between the devices and the service (PUBLIC_URL names it, so the download URL of each offer does):
 * it passes every request on as it came, and cuts the connection of the first image download of `cutUser` once
 * `cutAfter` bytes of the body went through, as a dropped Wi-Fi link would.
 */
export async function cuttingHop(t: TestContext, cutAfter: number) {
  let target = '';
  let cutUser: string | null = null;
  let cutDone = false;
  const seen: Forwarded[] = [];
  const server = http.createServer((req, res) => {
    const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? '');
    const user = basic ? Buffer.from(basic[1]!, 'base64').toString().split(':')[0]! : null;
    const up = http.request(`${target}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
      const cut = !cutDone && user !== null && user === cutUser && (req.url ?? '').endsWith('/download') && answer.statusCode === 200;
      if (cut) cutDone = true;
      seen.push({ user, path: req.url ?? '', range: req.headers.range, status: answer.statusCode ?? 0, cut });
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      let sent = 0;
      answer.on('data', (chunk: Buffer) => {
        if (!cut) return void res.write(chunk);
        const room = cutAfter - sent;
        if (room > 0) res.write(chunk.subarray(0, room));
        sent += chunk.length;
        if (sent >= cutAfter) {
          answer.destroy();
          res.socket?.destroy();
        }
      });
      answer.on('end', () => res.end());
    });
    up.on('error', () => res.socket?.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  }));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    /** Where requests go (the service's own address, known once it listens). */
    forwardTo: (url: string) => void (target = url),
    cutFor: (user: string) => void (cutUser = user),
  };
}
