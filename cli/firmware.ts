import fs from 'node:fs';
import path from 'node:path';
import { digestOf, newKeyPair, signDigest } from '../src/platform/keys/signatures.ts';

/**
 * `minaret firmware keygen|sign` (docs/api.md, "Firmware updates"): the offline half of signed images. Neither
 * command reads settings nor touches a database: run them on the machine that keeps the private key, not the server.
 */
export class FirmwareCliError extends Error {}

const valueOf = (args: string[], name: string): string | undefined => {
  const i = args.indexOf(name);
  if (i === -1) return undefined;
  const value = args[i + 1];
  if (value === undefined || value.startsWith('--')) throw new FirmwareCliError(`${name} needs a value`);
  return value;
};

/** keygen --out DIR: firmware-signing.key (0600, in a folder of its own) and firmware-signing.pub beside it. */
function keygen(args: string[]): string {
  const dir = valueOf(args, '--out');
  if (!dir) throw new FirmwareCliError('firmware keygen needs --out <dir>');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const privateFile = path.join(dir, 'firmware-signing.key');
  const publicFile = path.join(dir, 'firmware-signing.pub');
  // Never over a key already made: images signed with it would no longer verify on the devices that pin it.
  if (fs.existsSync(privateFile)) throw new FirmwareCliError(`${privateFile} exists already: a new key would orphan every device that pins the old one`);
  const pair = newKeyPair();
  fs.writeFileSync(privateFile, pair.privatePem, { mode: 0o600, flag: 'wx' });
  fs.writeFileSync(publicFile, pair.publicPem, { mode: 0o644 });
  return [
    `private key: ${privateFile} (keep it offline; it signs every image)`,
    `public key:  ${publicFile}`,
    `FIRMWARE_PUBLIC_KEY=${pair.publicRaw}`,
  ].join('\n');
}

/** sign --key KEY IMAGE: the base64 signature of the image's SHA-256 digest, for X-Firmware-Signature. */
function sign(args: string[]): string {
  const keyFile = valueOf(args, '--key');
  const image = args.filter((a, i) => !a.startsWith('--') && args[i - 1] !== '--key')[0];
  if (!keyFile || !image) throw new FirmwareCliError('firmware sign needs --key <private key file> and the image file');
  let pem: string;
  let data: Buffer;
  try {
    pem = fs.readFileSync(keyFile, 'utf8');
    data = fs.readFileSync(image);
  } catch (err) {
    throw new FirmwareCliError((err as Error).message);
  }
  try {
    return signDigest(pem, digestOf(data).raw);
  } catch (err) {
    throw new FirmwareCliError(`--key ${keyFile}: ${(err as Error).message}`);
  }
}

export function firmwareCommand(command: string | undefined, args: string[]): string {
  if (command === 'keygen') return keygen(args);
  if (command === 'sign') return sign(args);
  throw new FirmwareCliError('usage: minaret firmware keygen --out <dir> | minaret firmware sign --key <private key file> <image>');
}
