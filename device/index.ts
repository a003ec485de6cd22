/**
 * `minaret-device`: the reference device for Linux boards (docs/devices/raspberry-pi.md). Two commands:
 *
 *   minaret-device pair --server <url> --kind player|transmitter [--name N] [--state DIR]
 *   minaret-device run [--state DIR] [--output FILE.wav | --audio-device alsa:<dev>|pulse[:<sink>]]
 *                      [--input tone|FILE|alsa:<dev>] [--ca FILE] [--server <url> --kind player|transmitter [--name N]]
 *                      [--firmware-key FILE|BASE64] [--install-command CMD] [--reboot process|exit] [--fail-update]
 *
 * `run` with --server and --kind pairs first when DIR holds no credentials yet, in the same process, so the device
 * is connecting within milliseconds of the approval (one systemd unit shows the code, then plays).
 *
 * Exit codes: 0 done, 1 failed (a message on stderr says why), 2 a usage error.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { boardModel } from './board.ts';
import { parseOutput } from './audio/output.ts';
import type { AudioSource } from './audio/source.ts';
import { pair } from './state/pair.ts';
import { defaultStateDir } from './state/store.ts';
import { runDevice } from './run.ts';

const USAGE = `usage:
  minaret-device pair --server <url> --kind player|transmitter [--name N] [--state DIR]
  minaret-device run [--state DIR] [--output FILE.wav | --audio-device alsa:<dev>|pulse[:<sink>]] [--input tone|FILE|alsa:<dev>] [--ca FILE]
                     [--server <url> --kind player|transmitter [--name N]]   (pairs first when DIR holds no credentials)
                     [--firmware-key FILE|BASE64] [--install-command CMD] [--reboot process|exit] [--fail-update]`;

class UsageError extends Error {}

/**
 * The version of this package, as fw in statuses and in the pairing request: plain semver, so a rollout's
 * range and its "older than the image" test (docs/firmware.md, "4.4 Firmware updates") can compare it.
 */
function firmwareVersion(): string {
  for (const rel of ['../package.json', '../../package.json', '../../../package.json']) {
    try {
      const pkg = JSON.parse(fs.readFileSync(new URL(rel, import.meta.url), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'minaret' && pkg.version) return pkg.version;
    } catch {
      // not this one
    }
  }
  return '0.0.0';
}

function inputOf(raw: string | undefined): AudioSource {
  if (raw === undefined || raw === 'tone') return { kind: 'tone', frequency: 440 };
  if (raw.startsWith('alsa:') && raw.length > 5) return { kind: 'alsa', device: raw.slice(5) };
  if (!fs.existsSync(raw)) throw new UsageError(`--input: expected tone, alsa:<device> or an audio file, and ${JSON.stringify(raw)} does not exist`);
  return { kind: 'file', path: path.resolve(raw) };
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: {
      server: { type: 'string' }, kind: { type: 'string' }, name: { type: 'string' }, state: { type: 'string' },
      output: { type: 'string' }, 'audio-device': { type: 'string' }, input: { type: 'string' }, ca: { type: 'string' },
      'firmware-key': { type: 'string' }, 'install-command': { type: 'string' }, 'fail-update': { type: 'boolean' }, reboot: { type: 'string' },
    },
    strict: true,
  });
  const stateDir = path.resolve(values.state ?? defaultStateDir());
  const fw = firmwareVersion();
  const err = (line: string): void => void process.stderr.write(`${line}\n`);
  const pairHere = async (): Promise<number> => {
    if (!values.server) throw new UsageError(`${command} needs --server <url>`);
    if (values.kind !== 'player' && values.kind !== 'transmitter') throw new UsageError(`${command} needs --kind player or --kind transmitter`);
    const outcome = await pair({
      server: values.server, kind: values.kind === 'player' ? 'stream_player' : 'transmitter', fw, hwRev: boardModel(), stateDir,
      ...(values.name !== undefined && { name: values.name }), print: (line) => void process.stdout.write(`${line}\n`),
    });
    if (!outcome.ok) {
      err(`minaret-device: ${outcome.error}`);
      return 1;
    }
    process.stdout.write(`Paired: device ${outcome.state.device.id}, credentials stored in ${outcome.file}\n`);
    return 0;
  };
  if (command === 'pair') return pairHere();
  if (command === 'run') {
    const output = parseOutput(values.output, values['audio-device']);
    if ('error' in output) throw new UsageError(output.error);
    if (values.reboot !== undefined && values.reboot !== 'process' && values.reboot !== 'exit') throw new UsageError('--reboot: process or exit');
    // Not paired yet, and told where to pair: pair, then run in this same process.
    if ((values.server !== undefined || values.kind !== undefined) && !fs.existsSync(path.join(stateDir, 'device.json'))) {
      const paired = await pairHere();
      if (paired !== 0) return paired;
    }
    const reconnectMax = Number(process.env['MINARET_DEVICE_RECONNECT_MAX_MS']);
    return runDevice({
      stateDir, output, input: inputOf(values.input), fw, print: (line) => void process.stdout.write(`${line}\n`),
      ...(values.ca !== undefined && { ca: values.ca }),
      ...(values['firmware-key'] !== undefined && { firmwareKey: values['firmware-key'] }),
      ...(values['install-command'] !== undefined && { installCommand: values['install-command'] }),
      ...(values['fail-update'] === true && { failUpdate: true }),
      ...(values.reboot === 'exit' && { reboot: 'exit' as const }),
      ...(Number.isInteger(reconnectMax) && reconnectMax >= 1000 && { reconnectMaxMs: reconnectMax }),
    });
  }
  throw new UsageError(command === undefined ? 'a command is needed' : `unknown command ${JSON.stringify(command)}`);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    const usage = e instanceof UsageError || (e as { code?: string }).code?.startsWith('ERR_PARSE_ARGS');
    process.stderr.write(`minaret-device: ${e instanceof Error ? e.message : String(e)}\n${usage ? `${USAGE}\n` : ''}`);
    process.exit(usage ? 2 : 1);
  },
);
