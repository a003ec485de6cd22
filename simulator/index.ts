/**
 * Device simulator: registers (or reuses) Minaret devices over the HTTP API and plays their firmware
 * over MQTT with simulator/device.ts. Self-contained: talks to a running service from outside only.
 *
 *   MINARET_TOKEN=<bearer> npm run simulate -- --url http://127.0.0.1:8080 --mosque <mosque id> \
 *       --transmitters 2 --players 10 [--save devices.json] [--heartbeat 5] [--duration 60]
 *   npm run simulate -- --credentials devices.json [--mqtt mqtt://127.0.0.1:1883] [--crash-after 10]
 *
 * Flags
 *   --url <base>          HTTP API base (default http://127.0.0.1:8080); registration only
 *   --mqtt <url>          broker URL (default: the mqtt_url the registration returned, else
 *                         mqtt://<host of --url>:1883)
 *   --token-file <path>   a file holding a person's access token (registration only); or set
 *                         MINARET_TOKEN. --token is refused: arguments show in `ps`, shell history
 *                         and npm's banner line
 *   --mosque <id>         mosque for transmitters (required with --transmitters) and players (optional:
 *                         a player without one stays UNBOUND reason no_mosque)
 *   --transmitters N      register N transmitters: POST /api/v1/mosques/{mosque}/devices (a manager's token)
 *   --players M           register M stream players: POST /api/v1/devices (the token's user owns them)
 *   --credentials <file>  skip registration: a JSON array of {id, kind, password[, mqtt_url]}
 *   --save <file>         write the credentials of the devices registered here (same format), mode 0600
 *                         A bare file name means .minaret/<file> (git-ignored, created 0700), for
 *                         --credentials too when that file exists: device passwords stay out of the tree
 *   --heartbeat <secs>    heartbeat period override (ignores the config's heartbeat_secs)
 *   --duration <secs>     stop gracefully after this long (default: run until SIGINT/SIGTERM, then
 *                         stop gracefully; a second SIGINT quits at once)
 *   --crash-after <secs>  after this long, cut every connection without DISCONNECT (the broker then
 *                         publishes each device's will: OFFLINE reason lwt) and exit
 *   --quiet               print no per-transition / per-command lines, only the summary
 *   --follow-schedule     the first transmitter plays the azaan itself at each azaan_at of --mosque's
 *                         schedule (GET /mosques/{id}/schedule with the token): it publishes its own
 *                         broadcast start on mosques/{id}/broadcast, and a stop after --azaan-secs
 *   --miss <prayers>      with --follow-schedule, leave these out (e.g. fajr,isha): the service then
 *                         alerts the trigger admins of a missed azaan after the grace
 *   --azaan-secs <secs>   how long a followed azaan lasts before its stop (default 120)
 *   --source tone|<file>  transmitters send real audio when on air (broadcast_start, --on-air,
 *                         --follow-schedule): ffmpeg encodes a 440 Hz tone or the file (looped) to MP3
 *                         and it goes to the config's stream_url as an Icecast source (user = device id,
 *                         password = device password); PLAYING only while it flows, STREAM_ERROR after
 *                         3 failed retries (1, 2, 4 s apart, then every 8 s)
 *   --on-air              with --source, each transmitter goes on air as soon as it is connected
 *   --listen              players open their stream address on a broadcast start and are PLAYING only
 *                         while audio bytes arrive; STREAM_ERROR after 3 failed retries. Without it a
 *                         player declares PLAYING on the start event alone (no HTTP, for load tests)
 *   --firmware-key <k>    the Ed25519 public key every device pins for firmware updates (a file, or
 *                         base64 / PEM): the update command is then downloaded with each device's own
 *                         credentials, checked and "installed" (docs/firmware.md, "4.4"); without it
 *                         every update is refused with no_firmware_key
 *   --fail-update         every device's update rolls back after its reboot (old fw, reason rolled_back)
 *
 * Output: one line per status transition and per command, `[d3k2abcd...] UNBOUND -> ONLINE (entitled)`,
 * `[d3k2abcd...] cmd ping <command id> -> ok`, plus connection changes; a summary table at the end.
 * Exit status: 0; 1 when registration fails (one line with the HTTP status and error code), when the
 * credentials file is unusable, or when no device could connect; 2 on bad flags.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { SimDevice, SimConnectError, type DeviceKind, type DeviceStatus } from './device.ts';
import { followSchedule } from './follow-schedule.ts';
import type { AudioSource } from '../device/audio/source.ts';
import { parsePinnedKey } from '../device/contract/update.ts';

interface Credential {
  id: string;
  kind: DeviceKind;
  password: string;
  mqtt_url?: string;
  name?: string;
}

interface Options {
  url: string;
  mqtt: string | undefined;
  token: string | undefined;
  mosque: string | undefined;
  transmitters: number;
  players: number;
  credentials: string | undefined;
  save: string | undefined;
  heartbeat: number | undefined;
  duration: number | undefined;
  crashAfter: number | undefined;
  quiet: boolean;
  followSchedule: boolean;
  miss: Set<string>;
  azaanSecs: number;
  source: AudioSource | undefined;
  onAir: boolean;
  listen: boolean;
  firmwareKey: string | undefined;
  failUpdate: boolean;
}

class UsageError extends Error {}
class FatalError extends Error {}

/** --firmware-key: a file holding the key, or the key itself; its shape is checked once, here. */
function firmwareKeyText(raw: string): string {
  const text = fs.existsSync(raw) ? fs.readFileSync(raw, 'utf8') : raw;
  const key = parsePinnedKey(text);
  if (typeof key === 'string') throw new UsageError(`--firmware-key: ${key}`);
  return text;
}

function parseOptions(argv: string[]): Options {
  try {
    return parseOptionsStrict(argv);
  } catch (err) {
    // node:util parseArgs throws TypeErrors (unknown option, missing value): those are usage errors too.
    if (err instanceof TypeError) throw new UsageError(err.message);
    throw err;
  }
}

function parseOptionsStrict(argv: string[]): Options {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      url: { type: 'string' },
      mqtt: { type: 'string' },
      token: { type: 'string' },
      'token-file': { type: 'string' },
      mosque: { type: 'string' },
      transmitters: { type: 'string' },
      players: { type: 'string' },
      credentials: { type: 'string' },
      save: { type: 'string' },
      heartbeat: { type: 'string' },
      duration: { type: 'string' },
      'crash-after': { type: 'string' },
      quiet: { type: 'boolean' },
      'follow-schedule': { type: 'boolean' },
      miss: { type: 'string' },
      'azaan-secs': { type: 'string' },
      source: { type: 'string' },
      'on-air': { type: 'boolean' },
      listen: { type: 'boolean' },
      'firmware-key': { type: 'string' },
      'fail-update': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    printUsage();
    process.exit(0);
  }
  if (positionals.length) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
  if (values.token !== undefined) {
    throw new UsageError('--token is refused: arguments show in the process list, the shell history and npm\'s banner; set MINARET_TOKEN or pass --token-file <path>');
  }
  const count = (flag: string, raw: string | undefined): number => {
    if (raw === undefined) return 0;
    if (!/^\d+$/.test(raw)) throw new UsageError(`--${flag}: expected a whole number, got ${JSON.stringify(raw)}`);
    return Number(raw);
  };
  const seconds = (flag: string, raw: string | undefined): number | undefined => {
    if (raw === undefined) return undefined;
    const n = Number(raw);
    if (!Number.isFinite(n) || n <= 0) throw new UsageError(`--${flag}: expected a positive number of seconds, got ${JSON.stringify(raw)}`);
    return n;
  };
  const opts: Options = {
    url: (values.url ?? 'http://127.0.0.1:8080').replace(/\/+$/, ''),
    mqtt: values.mqtt,
    token: readToken(values['token-file']),
    mosque: values.mosque,
    transmitters: count('transmitters', values.transmitters),
    players: count('players', values.players),
    credentials: values.credentials === undefined ? undefined : credentialsToRead(values.credentials),
    save: values.save === undefined ? undefined : inSecretsDir(values.save),
    heartbeat: seconds('heartbeat', values.heartbeat),
    duration: seconds('duration', values.duration),
    crashAfter: seconds('crash-after', values['crash-after']),
    quiet: values.quiet ?? false,
    followSchedule: values['follow-schedule'] ?? false,
    miss: new Set((values.miss ?? '').split(',').map((p) => p.trim().toLowerCase()).filter(Boolean)),
    azaanSecs: seconds('azaan-secs', values['azaan-secs']) ?? 120,
    source: audioSource(values.source),
    onAir: values['on-air'] ?? false,
    listen: values.listen ?? false,
    firmwareKey: values['firmware-key'] === undefined ? undefined : firmwareKeyText(values['firmware-key']),
    failUpdate: values['fail-update'] ?? false,
  };
  if (opts.onAir && !opts.source) throw new UsageError('--on-air needs --source tone|<file>');
  const prayers = ['fajr', 'dhuhr', 'jumuah', 'asr', 'maghrib', 'isha'];
  const unknown = [...opts.miss].find((p) => !prayers.includes(p));
  if (unknown) throw new UsageError(`--miss: ${JSON.stringify(unknown)} is not one of ${prayers.join(', ')}`);
  if (opts.miss.size > 0 && !opts.followSchedule) throw new UsageError('--miss needs --follow-schedule');
  if (opts.followSchedule && (!opts.token || !opts.mosque)) throw new UsageError('--follow-schedule needs an access token (MINARET_TOKEN or --token-file <path>) and --mosque <mosque id>');
  if (opts.credentials) {
    if (opts.transmitters || opts.players) throw new UsageError('--credentials replaces registration: drop --transmitters/--players');
  } else {
    if (!opts.transmitters && !opts.players) throw new UsageError('nothing to simulate: give --transmitters N and/or --players M, or --credentials <file>');
    if (!opts.token) throw new UsageError('registration needs a person\'s access token: set MINARET_TOKEN or pass --token-file <path>');
    if (opts.transmitters && !opts.mosque) throw new UsageError('--transmitters needs --mosque <mosque id>');
  }
  return opts;
}

function audioSource(raw: string | undefined): AudioSource | undefined {
  if (raw === undefined) return undefined;
  if (raw === 'tone') return { kind: 'tone', frequency: 440 };
  if (!fs.existsSync(raw)) throw new UsageError(`--source: expected "tone" or an audio file, and ${JSON.stringify(raw)} does not exist`);
  return { kind: 'file', path: path.resolve(raw) };
}

function readToken(file: string | undefined): string | undefined {
  if (file === undefined) return process.env['MINARET_TOKEN']?.trim() || undefined;
  try {
    return fs.readFileSync(file, 'utf8').trim() || undefined;
  } catch (err) {
    throw new UsageError(`--token-file: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

/** Where device passwords go when no folder is named: git-ignored, readable by the owner only. */
const SECRETS_DIR = '.minaret';

function inSecretsDir(file: string): string {
  return path.basename(file) === file ? path.join(SECRETS_DIR, file) : file;
}

function credentialsToRead(file: string): string {
  const inDir = inSecretsDir(file);
  return fs.existsSync(inDir) ? inDir : file;
}

function printUsage(): void {
  const text = fs.readFileSync(new URL(import.meta.url), 'utf8');
  const block = text.slice(text.indexOf('/**') + 3, text.indexOf('*/'));
  console.log(block.split('\n').map((l) => l.replace(/^ \* ?/, '')).join('\n').trim());
}

// ---------------------------------------------------------------------------------------------------
// Registration

async function register(opts: Options): Promise<Credential[]> {
  const out: Credential[] = [];
  const stamp = new Date().toISOString().slice(11, 19).replace(/:/g, '');
  try {
    for (let i = 1; i <= opts.transmitters; i++) {
      const name = `sim-tx-${stamp}-${i}`;
      out.push(await registerOne(opts, `/api/v1/mosques/${encodeURIComponent(opts.mosque!)}/devices`, { kind: 'transmitter', name }, 'transmitter', name));
    }
    for (let i = 1; i <= opts.players; i++) {
      const name = `sim-sp-${stamp}-${i}`;
      const body: Record<string, unknown> = { kind: 'stream_player', name };
      if (opts.mosque) body['mosque_id'] = opts.mosque;
      out.push(await registerOne(opts, '/api/v1/devices', body, 'stream_player', name));
    }
  } catch (err) {
    // Keep what was registered before the failure, so those devices are not orphaned.
    if (opts.save && out.length) saveCredentials(opts.save, out);
    throw err;
  }
  return out;
}

async function registerOne(opts: Options, path: string, body: Record<string, unknown>, kind: DeviceKind, name: string): Promise<Credential> {
  let res: Response;
  try {
    res = await fetch(opts.url + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${opts.token}` },
      body: JSON.stringify(body),
    });
  } catch (err) {
    const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
    throw new FatalError(`registration failed: POST ${path} -> no answer from ${opts.url} (${err instanceof Error ? err.message : String(err)}${cause})`);
  }
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON; reported below
  }
  if (res.status !== 201) {
    const error = isRecord(json) && isRecord(json['error']) ? json['error'] : null;
    const code = typeof error?.['code'] === 'string' ? error['code'] : 'unknown_error';
    const message = typeof error?.['message'] === 'string' ? `: ${error['message']}` : text ? `: ${text.slice(0, 120)}` : '';
    throw new FatalError(`registration failed: POST ${path} -> HTTP ${res.status} ${code}${message}`);
  }
  const device = isRecord(json) && isRecord(json['device']) ? json['device'] : null;
  const creds = isRecord(json) && isRecord(json['credentials']) ? json['credentials'] : null;
  const id = typeof device?.['id'] === 'string' ? device['id'] : typeof creds?.['client_id'] === 'string' ? creds['client_id'] : null;
  const password = typeof creds?.['password'] === 'string' ? creds['password'] : null;
  if (!id || !password) throw new FatalError(`registration failed: POST ${path} -> HTTP 201 without device.id / credentials.password`);
  const cred: Credential = { id, kind, password, name };
  if (typeof creds?.['mqtt_url'] === 'string') cred.mqtt_url = creds['mqtt_url'];
  return cred;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function loadCredentials(file: string): Credential[] {
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    throw new FatalError(`--credentials ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!Array.isArray(raw) || raw.length === 0) throw new FatalError(`--credentials ${file}: expected a non-empty JSON array of {id, kind, password}`);
  return raw.map((entry, i) => {
    if (
      !isRecord(entry) ||
      typeof entry['id'] !== 'string' ||
      typeof entry['password'] !== 'string' ||
      (entry['kind'] !== 'transmitter' && entry['kind'] !== 'stream_player')
    ) {
      throw new FatalError(`--credentials ${file}: entry ${i} is not {id, kind: "transmitter"|"stream_player", password}`);
    }
    const cred: Credential = { id: entry['id'], kind: entry['kind'], password: entry['password'] };
    if (typeof entry['mqtt_url'] === 'string') cred.mqtt_url = entry['mqtt_url'];
    if (typeof entry['name'] === 'string') cred.name = entry['name'];
    return cred;
  });
}

function saveCredentials(file: string, creds: Credential[]): void {
  if (path.dirname(file) === SECRETS_DIR) fs.mkdirSync(SECRETS_DIR, { recursive: true, mode: 0o700 });
  // Written aside and renamed: `mode` applies only to a new file, and an older copy may be world-readable.
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(creds, null, 2) + '\n', { mode: 0o600 });
  fs.renameSync(tmp, file);
  console.log(`saved ${creds.length} device credential(s) to ${file} (mode 0600)`);
}

function brokerUrl(opts: Options, cred: Credential): string {
  if (opts.mqtt) return opts.mqtt;
  if (cred.mqtt_url) return cred.mqtt_url;
  try {
    return `mqtt://${new URL(opts.url).hostname}:1883`;
  } catch {
    return 'mqtt://127.0.0.1:1883';
  }
}

// ---------------------------------------------------------------------------------------------------
// Run

const label = (id: string): string => (id.length <= 12 ? id : `${id.slice(0, 8)}...`);

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

async function main(): Promise<number> {
  const opts = parseOptions(process.argv.slice(2));
  let creds: Credential[];
  if (opts.credentials) {
    creds = loadCredentials(opts.credentials);
  } else {
    creds = await register(opts);
    console.log(`registered ${creds.filter((c) => c.kind === 'transmitter').length} transmitter(s), ${creds.filter((c) => c.kind === 'stream_player').length} stream player(s)`);
    if (opts.save) saveCredentials(opts.save, creds);
  }

  const devices = creds.map(
    (c) =>
      new SimDevice({
        kind: c.kind,
        id: c.id,
        password: c.password,
        mqttUrl: brokerUrl(opts, c),
        ...(opts.heartbeat !== undefined && { heartbeatSecsOverride: opts.heartbeat }),
        logger: opts.quiet ? () => {} : (line) => console.log(`[${label(c.id)}] ${line}`),
        startTimeoutMs: 15_000,
        ...(c.kind === 'transmitter' && opts.source && { source: opts.source }),
        ...(c.kind === 'stream_player' && opts.listen && { listen: true }),
        ...(opts.firmwareKey !== undefined && { firmwareKey: opts.firmwareKey }),
        ...(opts.failUpdate && { failUpdate: true }),
      }),
  );

  const started: SimDevice[] = [];
  const failed: { dev: SimDevice; why: string }[] = [];
  const t0 = Date.now();
  await inBatches(devices, 50, async (dev) => {
    try {
      await dev.start();
      started.push(dev);
    } catch (err) {
      const why = err instanceof SimConnectError ? `${err.message}` : err instanceof Error ? err.message : String(err);
      failed.push({ dev, why });
      console.log(`[${label(dev.id)}] could not connect: ${why}`);
    }
  });
  if (started.length === 0) {
    console.log(`simulator: no device could connect to ${devices[0] ? brokerUrl(opts, creds[0]!) : 'the broker'}`);
    return 1;
  }
  console.log(
    `${started.length} device(s) connected in ${Date.now() - t0} ms` +
      (failed.length ? `, ${failed.length} failed` : '') +
      (opts.duration ? `; stopping in ${opts.duration} s` : opts.crashAfter ? '' : '; Ctrl-C to stop'),
  );

  if (opts.onAir) for (const tx of started.filter((d) => d.kind === 'transmitter')) await goOnAirWhenConfigured(tx);

  const transmitter = started.find((d) => d.kind === 'transmitter');
  if (opts.followSchedule && !transmitter) console.log('follow-schedule: no transmitter connected; nothing will play');
  const follower = opts.followSchedule && transmitter
    ? followSchedule({ url: opts.url, token: opts.token!, mosqueId: opts.mosque!, transmitter, miss: opts.miss, azaanSecs: opts.azaanSecs, log: (line) => console.log(`[${label(transmitter.id)}] ${line}`) })
    : null;

  const mode = await new Promise<'graceful' | 'crash'>((resolve) => {
    if (opts.duration) setTimeout(() => resolve('graceful'), opts.duration * 1000).unref();
    if (opts.crashAfter) setTimeout(() => resolve('crash'), opts.crashAfter * 1000).unref();
    let signals = 0;
    const onSignal = (sig: NodeJS.Signals): void => {
      signals++;
      if (signals > 1) {
        console.log(`${sig} again: quitting without a clean stop`);
        process.exit(130);
      }
      console.log(`${sig}: stopping ${started.length} device(s) gracefully (again to quit at once)`);
      resolve('graceful');
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });

  follower?.stop();
  if (mode === 'crash') console.log(`crash-after: cutting ${started.length} connection(s) without DISCONNECT (the broker publishes the wills)`);
  await inBatches(started, 100, (dev) => (mode === 'crash' ? dev.crash() : dev.stop({ graceful: true })));
  printSummary(devices, failed.map((f) => f.dev), Date.now() - t0);
  return 0;
}

/** --on-air: the stream address comes with the retained config, which follows the CONNACK. */
async function goOnAirWhenConfigured(tx: SimDevice): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!tx.config?.stream_url && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const outcome = tx.goOnAir(`sim-on-air-${Date.now().toString(36)}`);
  if (!outcome.ok) console.log(`[${label(tx.id)}] --on-air: cannot go on air (${outcome.error})`);
}

function printSummary(devices: SimDevice[], failed: SimDevice[], elapsedMs: number): void {
  const rows = devices.map((d) => {
    const c = d.counters;
    const last = d.transitions.filter((t) => t.to !== 'OFFLINE').at(-1);
    return {
      device: label(d.id),
      kind: d.kind === 'transmitter' ? 'tx' : 'player',
      final: failed.includes(d) ? 'NOT CONNECTED' : `${d.status}`,
      last_live: last ? `${last.to} (${last.reason})` : '-',
      cfg: String(d.configVersion),
      conn: `${c.connects}/${c.disconnects}`,
      hb: String(c.heartbeats),
      cmds: `${c.commands}/${c.acks}`,
      logs: `${c.logsSent}/${c.logsDropped}`,
      bad: String(c.malformedConfigs + c.malformedCommands + c.malformedBroadcasts),
      audio: d.audio ? String(d.audio.bytes) : '-',
    };
  });
  const headers = { device: 'device', kind: 'kind', final: 'final', last_live: 'last live state', cfg: 'cfg v', conn: 'conn/disc', hb: 'hb', cmds: 'cmd/ack', logs: 'log sent/drop', bad: 'malformed', audio: 'audio bytes' };
  const keys = Object.keys(headers) as (keyof typeof headers)[];
  const width = (k: keyof typeof headers): number => Math.max(headers[k].length, ...rows.map((r) => r[k].length));
  const line = (r: Record<keyof typeof headers, string>): string => keys.map((k) => r[k].padEnd(width(k))).join('  ').trimEnd();
  console.log(`\nsummary after ${(elapsedMs / 1000).toFixed(1)} s`);
  console.log(line(headers));
  for (const r of rows) console.log(line(r));

  const byState = new Map<string, number>();
  for (const d of devices) {
    if (failed.includes(d)) continue;
    const last = d.transitions.filter((t) => t.to !== 'OFFLINE').at(-1);
    const s: DeviceStatus | '-' = last?.to ?? '-';
    byState.set(s, (byState.get(s) ?? 0) + 1);
  }
  const totals = devices.reduce(
    (acc, d) => {
      const c = d.counters;
      acc.transitions += c.transitions;
      acc.heartbeats += c.heartbeats;
      acc.commands += c.commands;
      acc.acks += c.acks;
      acc.logs += c.logsSent;
      acc.reconnects += c.reconnects;
      return acc;
    },
    { transitions: 0, heartbeats: 0, commands: 0, acks: 0, logs: 0, reconnects: 0 },
  );
  console.log(
    `\n${devices.length} device(s), ${failed.length} never connected; last live state: ` +
      ([...byState].map(([s, n]) => `${s} ${n}`).join(', ') || '-') +
      `\ntransitions ${totals.transitions}, heartbeats ${totals.heartbeats}, commands ${totals.commands} (acks ${totals.acks}), ` +
      `log lines ${totals.logs}, reconnects ${totals.reconnects}`,
  );
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof UsageError) {
      console.error(`simulator: ${err.message} (see --help)`);
      process.exit(2);
    }
    console.error(`simulator: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
