/**
 * The `update` command (docs/firmware.md, "4.4 Firmware updates"): its arguments, the public key pinned on the
 * device, and one update's run from the first byte to the verified image. The firmware (device/contract/
 * firmware.ts) answers the command and moves the states; what installing and rebooting mean is the host's
 * (UpdatePort): `minaret-device` keeps the image in its state folder and may run an install command
 * (device/state/firmware.ts), the simulator only pretends.
 *
 * Nothing is installed before the image has the announced length, the announced SHA-256 and an Ed25519
 * signature (RFC 8032) of that digest by the pinned key. The key is never one that came over the network.
 */
import crypto from 'node:crypto';
import { download, memorySink, DEFAULT_DOWNLOAD_TIMING, type DownloadTiming, type ImageSink } from './download.ts';
import { isInt } from './config.ts';

export interface UpdateOffer {
  url: string;
  size: number;
  sha256: string;
  signature: string;
  target_fw: string;
}

/** What a verified image is when it reaches the host: its file (a file sink) or its bytes. */
export interface VerifiedImage {
  offer: UpdateOffer;
  file: string | null;
  bytes(): Buffer;
}

export type InstallOutcome = { ok: true; fw: string; rolledBack: boolean } | { ok: false; error: string; why: string };

export interface UpdatePort {
  /** The pinned public key; null refuses every update (ack error no_firmware_key). */
  readonly key: crypto.KeyObject | null;
  /** Where an image is kept while it downloads (a file survives a dropped connection); absent: memory. */
  sink?(offer: UpdateOffer): ImageSink;
  /** Installs a verified image; says which fw the device runs after the reboot (the old one when it rolled back). */
  install(image: VerifiedImage, currentFw: string): Promise<InstallOutcome>;
  /**
   * The reboot, after the graceful OFFLINE (reason reboot): absent, the firmware restarts in the process; a host that
   * ends the process instead (for its service manager to start the new code) does it here.
   */
  reboot?(fw: string, bootReason: string): Promise<void>;
  timing?: Partial<DownloadTiming>;
  /** Least time between two UPDATING progress statuses (docs/firmware.md, "4.4": at most every few seconds). */
  progressEveryMs?: number;
}

export type UpdateError = 'hash_mismatch' | 'bad_signature' | 'download_failed' | 'install_failed' | 'interrupted';
export type RunOutcome = { ok: true; image: VerifiedImage } | { ok: false; error: UpdateError; why: string };

const SEMVER = /^v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]*)?$/;
/** The SPKI DER prefix of an Ed25519 public key (RFC 8410 §4): what turns 32 raw bytes into a key object. */
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
const DEFAULT_PROGRESS_EVERY_MS = 3000;

/** The pinned key as an operator gives it: a PEM public key, or the base64 of its 32 raw bytes; else an error. */
export function parsePinnedKey(text: string): crypto.KeyObject | string {
  const trimmed = text.trim();
  try {
    if (trimmed.includes('-----BEGIN')) {
      const key = crypto.createPublicKey(trimmed);
      return key.asymmetricKeyType === 'ed25519' ? key : `an ${key.asymmetricKeyType ?? 'unknown'} key, not Ed25519`;
    }
    const raw = Buffer.from(trimmed, 'base64');
    if (raw.length !== 32) return 'not the base64 of 32 bytes, nor a PEM public key';
    return crypto.createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
  } catch (err) {
    return `not a public key: ${(err as Error).message}`;
  }
}

/** The command's args as docs/firmware.md "4.4" lists them, or null (ack invalid_args). */
export function offerOf(args: Record<string, unknown>): UpdateOffer | null {
  const { url, size, sha256, signature, target_fw } = args;
  if (typeof url !== 'string' || !/^https?:\/\//.test(url)) return null;
  if (!isInt(size) || size <= 0) return null;
  if (typeof sha256 !== 'string' || !/^[0-9a-f]{64}$/i.test(sha256)) return null;
  if (typeof signature !== 'string' || signature.length > 200) return null;
  if (typeof target_fw !== 'string' || target_fw.length > 64 || !SEMVER.test(target_fw.replace(/^.*\//, ''))) return null;
  return { url, size, sha256: sha256.toLowerCase(), signature, target_fw };
}

/**
 * Whether two versions are the same release: Semantic Versioning 2.0.0 §10 (build metadata is ignored in precedence)
 * and §11 (equal precedence), with a leading `v` and a product prefix (`minaret-sp-sim/1.0.0`) kept as given. Two
 * strings that are not semver (after such a prefix) are the same only when they are equal.
 */
export function sameVersion(a: string, b: string): boolean {
  const release = (version: string): string => {
    const m = /^([^/]*\/)?v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)(?:\+[0-9A-Za-z.-]+)?$/.exec(version);
    return m ? `${m[1] ?? ''}${m[2]}` : version;
  };
  return release(a) === release(b);
}

/** Where a device may send its credentials: the servers it was given, and its MQTT broker's host. */
export interface OwnServers {
  /** The base it paired with (`--server`) and its `api_url`, as given; any that is not an http(s) URL is ignored. */
  origins: readonly string[];
  /**
   * The MQTT broker's URL (credentials.mqtt_url, mqtts_url or ws_url): any port on its host is the server's, over
   * https only when the broker is mqtts or wss.
   */
  brokerUrl: string;
}

const originOf = (url: string): URL | null => {
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:' ? parsed : null;
  } catch {
    return null;
  }
};

/**
 * docs/firmware.md, "4.4": whether `url` is on the device's own server, the only place its MQTT username and password
 * go as HTTP Basic. Anyone who can make a command name a URL would otherwise collect the device's password there.
 */
export function isOwnServer(url: string, own: OwnServers): boolean {
  const target = originOf(url);
  if (!target) return false;
  if (own.origins.some((o) => originOf(o)?.origin === target.origin)) return true;
  try {
    const broker = new URL(own.brokerUrl);
    // A password the broker connection keeps encrypted never crosses in clear to the same host.
    if (target.protocol === 'http:' && (broker.protocol === 'mqtts:' || broker.protocol === 'wss:')) return false;
    return broker.hostname === target.hostname;
  } catch {
    return false;
  }
}


export interface RunCredentials {
  user: string;
  password: string;
  userAgent: string;
}

/**
 * One update: download (progress as a percentage, throttled), then length, digest and signature. Resolves with
 * the verified image, or with why nothing may be installed; abort() ends it as 'interrupted'.
 */
export function runUpdate(offer: UpdateOffer, port: UpdatePort, creds: RunCredentials, progress: (pct: number) => void) {
  const key = port.key;
  if (!key) throw new Error('runUpdate without a pinned key');
  const sink = port.sink?.(offer) ?? memorySink();
  const every = port.progressEveryMs ?? DEFAULT_PROGRESS_EVERY_MS;
  let lastAt = Date.now();
  let lastPct = 0;
  let interrupted = false;
  const dl = download({ ...offer, ...creds }, sink, { ...DEFAULT_DOWNLOAD_TIMING, ...port.timing }, (have) => {
    const pct = Math.floor((have * 100) / offer.size);
    if (pct === lastPct || pct === 100 || Date.now() - lastAt < every) return;
    lastAt = Date.now();
    lastPct = pct;
    progress(pct);
  });
  const done = (async (): Promise<RunOutcome> => {
    const got = await dl.done;
    if (interrupted) return { ok: false, error: 'interrupted', why: 'a broadcast came first' };
    if (!got.ok) {
      if (got.error === 'hash_mismatch') sink.discard();
      return got;
    }
    progress(100);
    const checked = verify(offer, key, await sink.digest());
    if (!checked.ok) {
      sink.discard();
      return checked;
    }
    return { ok: true, image: { offer, file: sink.file, bytes: () => sink.bytes() } };
  })();
  return {
    done,
    abort(): void {
      interrupted = true;
      dl.abort();
    },
  };
}

/** docs/firmware.md, "4.4": the digest is the announced one, and the pinned key signed it. */
function verify(offer: UpdateOffer, key: crypto.KeyObject, digest: Buffer): { ok: true } | { ok: false; error: UpdateError; why: string } {
  if (digest.toString('hex') !== offer.sha256) return { ok: false, error: 'hash_mismatch', why: `sha256 ${digest.toString('hex')}, announced ${offer.sha256}` };
  const sig = Buffer.from(offer.signature.trim(), 'base64');
  if (sig.length !== 64 || !crypto.verify(null, digest, key, sig)) return { ok: false, error: 'bad_signature', why: 'not signed by the pinned key' };
  return { ok: true };
}
