/**
 * device.json: what pairing gave this device (the server, the device record, its MQTT credentials), in its
 * state folder. The password is a secret: the folder is made 0700 and the file 0600, written whole by a rename
 * so a power cut never leaves half a file.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface Credentials {
  client_id: string;
  username: string;
  password: string;
  mqtt_url: string;
  mqtts_url: string | null;
  ws_url?: string;
  api_url?: string;
}

export interface DeviceState {
  server: string;
  device: { id: string; kind?: string; [key: string]: unknown };
  credentials: Credentials;
}

export const STATE_FILE = 'device.json';

/** $XDG_DATA_HOME/minaret-device, else ~/.local/share/minaret-device (the XDG Base Directory default). */
export function defaultStateDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env['XDG_DATA_HOME'] && path.isAbsolute(env['XDG_DATA_HOME']) ? env['XDG_DATA_HOME'] : path.join(env['HOME'] ?? os.homedir(), '.local', 'share');
  return path.join(base, 'minaret-device');
}

const isText = (v: unknown): v is string => typeof v === 'string' && v !== '';
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The credentials as the server gave them, or null when their shape is not Minaret's (docs/firmware.md, "1. Credentials"). */
export function credentialsOf(v: unknown): Credentials | null {
  if (!isRecord(v)) return null;
  const { client_id, username, password, mqtt_url, mqtts_url } = v;
  if (!isText(client_id) || !isText(username) || !isText(password) || !isText(mqtt_url)) return null;
  if (mqtts_url !== undefined && mqtts_url !== null && !isText(mqtts_url)) return null;
  return { ...(v as unknown as Credentials), mqtts_url: isText(mqtts_url) ? mqtts_url : null };
}

export function readState(dir: string): { ok: true; state: DeviceState } | { ok: false; error: string } {
  const file = path.join(dir, STATE_FILE);
  let raw: string;
  try {
    raw = fs.readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { ok: false, error: code === 'ENOENT' ? `${file} does not exist: pair this device first (minaret-device pair --server <url> --kind player|transmitter)` : `cannot read ${file}: ${code}` };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return { ok: false, error: `${file} is not JSON` };
  }
  if (!isRecord(parsed) || !isRecord(parsed['device']) || !isText(parsed['device']['id'])) return { ok: false, error: `${file} names no device id` };
  const credentials = credentialsOf(parsed['credentials']);
  if (!credentials) return { ok: false, error: `${file} holds no usable credentials` };
  return { ok: true, state: { server: isText(parsed['server']) ? parsed['server'] : '', device: parsed['device'] as DeviceState['device'], credentials } };
}

export function writeState(dir: string, state: DeviceState): string {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = path.join(dir, STATE_FILE);
  const partial = `${file}.${process.pid}.partial`;
  fs.writeFileSync(partial, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  fs.chmodSync(partial, 0o600); // a umask cannot widen it, but an existing file keeps its mode: set it
  fs.renameSync(partial, file);
  return file;
}
