/**
 * `minaret-device run`: the firmware (device/contract/firmware.ts) on this board, with its credentials from
 * device.json (device/state/store.ts), real audio through ffmpeg (device/audio/), and a clean goodbye on SIGTERM
 * (OFFLINE reason shutdown, so no will fires: docs/firmware.md, "3.1 Status"). The process stays small when idle:
 * one MQTT socket, a heartbeat timer, a lease timer, a player's slot timer (device/offline.ts), and no ffmpeg unless
 * something plays.
 */
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { Firmware, type AudioPort } from './contract/firmware.ts';
import { redactUrl } from './contract/link.ts';
import { LinuxBoard } from './board.ts';
import { SoundCard, type OutputTarget } from './audio/output.ts';
import { openPlayer } from './audio/player.ts';
import { openSource, type AudioSource } from './audio/source.ts';
import { readState } from './state/store.ts';
import { OfflineAzaan } from './offline.ts';
import { boardUpdatePort, installedFw, pinnedKey, takeBootReason } from './state/firmware.ts';

export interface RunOptions {
  stateDir: string;
  output: OutputTarget;
  input: AudioSource;
  fw: string;
  ca?: string;
  ffmpeg?: string;
  /** Test hooks: shorter stream retries (docs/firmware.md, "3.1 Status" keeps its 3-retry rule). */
  audioTiming?: { retryMs: number; retryMaxMs: number; stallMs: number };
  reconnectMaxMs?: number;
  /** docs/firmware.md, "4.4": the public key updates must be signed by (a file, or base64 / PEM), pinned in DIR. */
  firmwareKey?: string;
  /** Run with the verified image's path to install it; exit 0 = installed. */
  installCommand?: string;
  /** Every update's image rolls back after the reboot (tests and rehearsals of a failed rollout). */
  failUpdate?: boolean;
  /** How an update reboots: 'process' restarts the firmware in this process; 'exit' ends it (exit 0) for systemd. */
  reboot?: 'process' | 'exit';
  print: (line: string) => void;
}

/** Never a password or a lease in a log line: the device's own secrets by value, any JWT and any lease= query by shape. */
export function redactor(secrets: () => string[]): (line: string) => string {
  return (line) => {
    let out = line;
    for (const s of secrets()) if (s.length >= 8) out = out.split(s).join('[redacted]');
    return out.replace(/eyJ[\w-]+\.[\w-]+\.[\w-]+/g, '[redacted]').replace(/([?&]lease=)[^&\s"]+/g, '$1[redacted]');
  };
}

function audioPort(kind: Firmware['kind'], card: SoundCard, o: RunOptions): AudioPort {
  const port: AudioPort = {
    sound: (what, ms) => {
      card.sound(what, ms);
      return null;
    },
    setVolume: (v) => card.setVolume(v),
  };
  if (kind === 'stream_player') port.player = (url) => (h) => openPlayer(url, card, o.fw, h);
  else port.source = (url, user, password) => (h) => openSource({ url, user, password, source: o.input, userAgent: o.fw, ...(o.ffmpeg && { ffmpeg: o.ffmpeg }) }, h);
  return port;
}

/** Runs until SIGTERM or SIGINT; resolves with the exit code. */
export async function runDevice(o: RunOptions): Promise<number> {
  const loaded = readState(o.stateDir);
  if (!loaded.ok) {
    o.print(`minaret-device: ${loaded.error}`);
    return 1;
  }
  const ffmpeg = o.ffmpeg ?? 'ffmpeg';
  if (spawnSync(ffmpeg, ['-version'], { stdio: 'ignore' }).status !== 0) {
    o.print(`minaret-device: ${ffmpeg} is missing: install it (apt install ffmpeg)`);
    return 1;
  }
  const key = pinnedKey(o.stateDir, o.firmwareKey);
  if (!key.ok) {
    o.print(`minaret-device: ${key.error}`);
    return 1;
  }
  const { state } = loaded;
  const creds = state.credentials;
  const kind = state.device.kind === 'transmitter' ? 'transmitter' : 'stream_player';
  // docs/firmware.md, "1. Credentials and connecting": use mqtts_url whenever it is there.
  const mqttUrl = creds.mqtts_url ?? creds.mqtt_url;
  const card = new SoundCard(o.output, ffmpeg);
  // The version an update installed, else this package's own.
  const fwVersion = installedFw(o.stateDir) ?? o.fw;
  let firmware: Firmware | null = null;
  const redact = redactor(() => [creds.password, firmware?.config?.lease?.token ?? ''].filter(Boolean));
  const say = (line: string): void => o.print(redact(`${new Date().toISOString()} ${line}`));
  // The process ends on SIGTERM or SIGINT, or, with --reboot exit, when an update reboots the board.
  let rebooted: () => void = () => {};
  const ended = new Promise<string>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
    rebooted = () => resolve('reboot');
  });
  firmware = new Firmware({
    kind, id: creds.username, password: creds.password, mqttUrl, fw: fwVersion, hardware: new LinuxBoard(kind),
    // docs/firmware.md, "4.4": the device's credentials go only to the server it paired with (or its broker's host).
    serverOrigins: [state.server, creds.api_url ?? ''].filter((s) => s !== ''),
    update: boardUpdatePort(o.stateDir, key.key, {
      say: (line) => say(line), ...(o.reboot === 'exit' && { exit: () => rebooted() }), ...(o.installCommand !== undefined && { installCommand: o.installCommand }), ...(o.failUpdate && { failUpdate: true }),
    }),
    bootReason: takeBootReason(o.stateDir), audio: audioPort(kind, card, o), logger: say, startTimeoutMs: 0, retryRefused: true,
    reconnect: { minMs: 1000, maxMs: o.reconnectMaxMs ?? 60_000 },
    ...(o.ca !== undefined && { ca: fs.readFileSync(o.ca) }),
    ...(o.audioTiming && { audioTiming: o.audioTiming }),
  });
  const fw = firmware;
  say(`minaret-device ${fwVersion}: ${kind} ${fw.id} connecting to ${redactUrl(mqttUrl)}`);
  // A player's azaan without the network (docs/firmware.md, "4.1 Config": offline): armed from DIR before any connect.
  const offline = kind === 'stream_player' ? new OfflineAzaan(fw, card, o.stateDir, say) : null;
  offline?.start();
  if (!key.key) say('no firmware key pinned (--firmware-key): updates are refused');
  fw.start().catch((err: Error) => say(`connect: ${err.message}`));
  const signal = await ended;
  say(signal === 'reboot' ? 'update installed: exiting for the service manager to start this board again' : `${signal}: going offline`);
  offline?.stop();
  await fw.stop({ graceful: true });
  card.close();
  return 0;
}
