/**
 * Firmware updates on a Linux board (docs/firmware.md, "4.4 Firmware updates"; docs/devices/raspberry-pi.md,
 * "Firmware updates"), all in DIR/firmware/ (0700):
 *
 *   public.key        the pinned Ed25519 public key, written only from `--firmware-key` on this board's command line
 *   .<sha256>.partial an image while it downloads (a dropped connection or a restart continues it)
 *   <version>         the verified image installed last (0600); older ones are deleted once a newer one is in
 *   installed.json    {fw, previous_fw, image, installed_at}: the version the board runs, reported as fw from then on
 *   boot.json         {reason}: the first status's reason after a reboot that ended the process (`--reboot exit`)
 *
 * "Install" is: keep the verified image, run the optional install command with its path (exit 0 = installed),
 * record the new version. "Reboot" is the firmware's own restart in the process (device/contract/firmware.ts).
 */
import { spawn } from 'node:child_process';
import type crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileSink } from '../contract/download.ts';
import { parsePinnedKey, type InstallOutcome, type UpdatePort, type VerifiedImage } from '../contract/update.ts';

const KEY_FILE = 'public.key';
const INSTALLED_FILE = 'installed.json';
const BOOT_FILE = 'boot.json';
const INSTALL_TIMEOUT_MS = 10 * 60_000;

export interface BoardUpdateOptions {
  installCommand?: string;
  /** --fail-update: the installed image fails its own checks after the reboot and the board rolls back. */
  failUpdate?: boolean;
  /** --reboot exit: the reboot ends the process (its service manager starts it again, on the new code). */
  exit?: () => void;
  say: (line: string) => void;
}

const folderOf = (stateDir: string): string => path.join(stateDir, 'firmware');

function ensureFolder(stateDir: string): string {
  const dir = folderOf(stateDir);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}

function writePrivate(file: string, data: string | Buffer): void {
  const partial = `${file}.${process.pid}.partial`;
  fs.writeFileSync(partial, data, { mode: 0o600 });
  fs.chmodSync(partial, 0o600);
  fs.renameSync(partial, file);
}

/**
 * The key this board trusts: `given` (a file, or the key itself as base64 or PEM) is pinned in DIR/firmware/public.key
 * and replaces what was there; without it, the key pinned before, or none (updates are then refused).
 */
export function pinnedKey(stateDir: string, given: string | undefined): { ok: true; key: crypto.KeyObject | null } | { ok: false; error: string } {
  const file = path.join(folderOf(stateDir), KEY_FILE);
  let text: string;
  if (given !== undefined) text = fs.existsSync(given) ? fs.readFileSync(given, 'utf8') : given;
  else if (fs.existsSync(file)) text = fs.readFileSync(file, 'utf8');
  else return { ok: true, key: null };
  const key = parsePinnedKey(text);
  if (typeof key === 'string') return { ok: false, error: `${given !== undefined ? '--firmware-key' : file}: ${key}` };
  if (given !== undefined) {
    ensureFolder(stateDir);
    writePrivate(file, key.export({ format: 'pem', type: 'spki' }).toString());
  }
  return { ok: true, key };
}

/** The version an update installed on this board, or null (then the package's own version is fw). */
export function installedFw(stateDir: string): string | null {
  try {
    const v = JSON.parse(fs.readFileSync(path.join(folderOf(stateDir), INSTALLED_FILE), 'utf8')) as { fw?: unknown };
    return typeof v.fw === 'string' && v.fw !== '' ? v.fw : null;
  } catch {
    return null;
  }
}

/** The reason a reboot that ended the process left for the first status of this one (read once), else 'connected'. */
export function takeBootReason(stateDir: string): string {
  const file = path.join(folderOf(stateDir), BOOT_FILE);
  try {
    const v = JSON.parse(fs.readFileSync(file, 'utf8')) as { reason?: unknown };
    fs.rmSync(file, { force: true });
    return typeof v.reason === 'string' && /^[a-z_]{1,32}$/.test(v.reason) ? v.reason : 'connected';
  } catch {
    return 'connected';
  }
}

/** The image file name for a version: one path segment, whatever the version says. */
const imageName = (version: string): string => version.replace(/[^0-9A-Za-z._+-]/g, '_').replace(/^\.+/, '_');

export function boardUpdatePort(stateDir: string, key: crypto.KeyObject | null, o: BoardUpdateOptions): UpdatePort {
  return {
    key,
    sink: (offer) => fileSink(path.join(ensureFolder(stateDir), `.${offer.sha256}.partial`)),
    install: (image, currentFw) => install(stateDir, image, currentFw, o),
    ...(o.exit && {
      reboot: async (_fw: string, bootReason: string) => {
        writePrivate(path.join(ensureFolder(stateDir), BOOT_FILE), `${JSON.stringify({ reason: bootReason })}\n`);
        o.exit!();
      },
    }),
  };
}

async function install(stateDir: string, image: VerifiedImage, currentFw: string, o: BoardUpdateOptions): Promise<InstallOutcome> {
  const dir = ensureFolder(stateDir);
  const target = image.offer.target_fw;
  const file = path.join(dir, imageName(target));
  if (image.file) fs.renameSync(image.file, file);
  else writePrivate(file, image.bytes());
  fs.chmodSync(file, 0o600);
  if (o.installCommand) {
    const code = await runInstallCommand(o.installCommand, file, o.say);
    if (code !== 0) {
      fs.rmSync(file, { force: true });
      return { ok: false, error: 'install_failed', why: `install command exited ${code}` };
    }
  }
  if (o.failUpdate) {
    o.say(`update ${target}: the new image failed its checks after the reboot (--fail-update); rolled back to ${currentFw}`);
    fs.rmSync(file, { force: true });
    return { ok: true, fw: currentFw, rolledBack: true };
  }
  const record = { fw: target, previous_fw: currentFw, image: file, installed_at: Math.floor(Date.now() / 1000) };
  writePrivate(path.join(dir, INSTALLED_FILE), `${JSON.stringify(record)}\n`);
  for (const name of fs.readdirSync(dir)) {
    if (![path.basename(file), KEY_FILE, INSTALLED_FILE, BOOT_FILE].includes(name)) fs.rmSync(path.join(dir, name), { force: true });
  }
  return { ok: true, fw: target, rolledBack: false };
}

/** `sh -c '<command> "$1"' <image>`: the command as the operator wrote it, the image path as one argument. */
function runInstallCommand(command: string, file: string, say: (line: string) => void): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn('/bin/sh', ['-c', `${command} "$1"`, 'minaret-install', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    const timer = setTimeout(() => child.kill('SIGKILL'), INSTALL_TIMEOUT_MS);
    const relay = (b: Buffer): void => {
      for (const line of b.toString('utf8').split('\n')) if (line.trim()) say(`install: ${line.slice(0, 200)}`);
    };
    child.stdout.on('data', relay);
    child.stderr.on('data', relay);
    child.on('error', (err) => say(`install command: ${err.message}`));
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve(code ?? 1);
    });
  });
}
