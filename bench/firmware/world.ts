/**
 * The world of bench/firmware/firmware.ts, through the real API (bench/world/registration.ts): mosque A whose N
 * stream players take the broadcast, mosque B whose D stream players take the rollout, every player owned by an
 * approved member (so each holds a lease), both mosques' azaans hours away (docs/api.md, "Firmware updates":
 * prayer-aware windows), a signed image uploaded, and each update-taker's hw_rev learned through `get_state`.
 *
 * The update-takers are in a mosque of their own: the service offers nothing to a device whose mosque has a
 * broadcast live, and a device stops its download when its own mosque's azaan starts (docs/firmware.md, "4.4"), so
 * downloads in flight during a fan-out are downloads of other mosques' devices.
 */
import crypto from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { digestOf, newKeyPair, signDigest } from '../../src/platform/keys/signatures.ts';
import { pool } from '../support.ts';
import { api, registerWorld, superadminToken, type RegisteredDevice } from '../world/registration.ts';
import type { Webhook } from '../fanout/children.ts';

export const HW_REV = 'sp-rev-b';
export const FROM_FW = '1.0.0';
export const TARGET_FW = '1.1.0';
const STREAM_URL = 'https://radio.example.org/bench-noor';
const HOUR = 3_600_000;

export interface FirmwareWorld {
  base: string;
  rootToken: string;
  ownerToken: string;
  /** Mosque A: the broadcast's. */
  mosqueId: string;
  /** Mosque B: the rollout's. */
  updatesMosqueId: string;
  players: RegisteredDevice[];
  takers: RegisteredDevice[];
  image: { id: string; size: number; sha256: string };
  members: number;
  setupS: number;
}

/** The service's key pair: FIRMWARE_PUBLIC_KEY takes `publicRaw`, the bench signs with the private key. */
export const firmwareKeys = () => newKeyPair();

/** Five azaans at fixed times 3 to 7 hours from now, in UTC: no quiet period near during the bench. */
function farSchedule(now: number) {
  const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
  const prayers = ['fajr', 'dhuhr', 'asr', 'maghrib', 'isha'];
  return {
    timezone: 'UTC', latitude: 21.42, longitude: 39.83, prayer_times: { method: 'umm_al_qura', madhab: 'shafi' },
    azaan: Object.fromEntries(prayers.map((p, i) => [p, { fixed: hhmm(now + (3 + i) * HOUR) }])),
  };
}

/** PUT /firmware/images/{kind}/{hw_rev}/{version}: random bytes, signed as `minaret firmware sign` signs. */
async function upload(base: string, rootToken: string, privatePem: string, bytes: number) {
  const image = crypto.randomBytes(bytes);
  const res = await fetch(`${base}/api/v1/firmware/images/stream_player/${HW_REV}/${TARGET_FW}`, {
    method: 'PUT', body: image,
    headers: { authorization: `Bearer ${rootToken}`, 'content-type': 'application/octet-stream', 'x-firmware-signature': signDigest(privatePem, digestOf(image).raw) },
  });
  const body = (await res.json()) as { id: string; size: number; sha256: string };
  if (res.status !== 201) throw new Error(`image upload: HTTP ${res.status} ${JSON.stringify(body)}`);
  return { id: body.id, size: body.size, sha256: body.sha256 };
}

export async function buildFirmwareWorld(base: string, webhook: Webhook, o: { players: number; devices: number; imageBytes: number; playersPerMember: number; httpConcurrency: number; privatePem: string }): Promise<FirmwareWorld> {
  const t0 = performance.now();
  const rootToken = await superadminToken(base, () => webhook.nextCode('superadmin_otp', 30_000));
  const members = Math.ceil((o.players + o.devices) / o.playersPerMember);
  const world = await registerWorld(base, rootToken, {
    mosques: [{ name: 'Bench Masjid', stream_url: STREAM_URL }, { name: 'Bench Masjid of the updates', stream_url: `${STREAM_URL}-b` }],
    members, devices: o.players + o.devices, mosqueOf: (i) => (i < o.players ? 0 : 1), concurrency: o.httpConcurrency,
    confirmCode: (email) => webhook.nextCode('confirm_address', 60_000, email),
    progress: (line) => console.log(`  ${line}`),
  });
  const schedule = farSchedule(Date.now());
  for (const id of world.mosqueIds) await api(base, 'PATCH', `/api/v1/mosques/${id}`, schedule, rootToken);
  const image = await upload(base, rootToken, o.privatePem, o.imageBytes);
  return {
    base, rootToken, ownerToken: world.ownerToken, mosqueId: world.mosqueIds[0]!, updatesMosqueId: world.mosqueIds[1]!,
    players: world.devices.slice(0, o.players), takers: world.devices.slice(o.players), image, members, setupS: (performance.now() - t0) / 1000,
  };
}

/** Asks every update-taker `get_state` (its answer names its hw_rev, which the rollout targets by). */
export async function learnHardware(w: FirmwareWorld, concurrency: number): Promise<void> {
  await pool(w.takers.length, concurrency, async (i) => {
    await api(w.base, 'POST', `/api/v1/devices/${w.takers[i]!.id}/commands`, { name: 'get_state' }, w.rootToken);
  });
}
