import { Hono, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { FirmwareImages } from '../../src/firmware/images.ts';
import { HW_REV, SEMVER, toImage } from '../../src/firmware/images.ts';
import type { DeviceKind } from '../../src/devices/device-config.ts';
import type { DeviceInfo } from '../../src/devices/devices.ts';
import type { AppEnv } from '../context.ts';
import { requestHeader } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { superadminOnly } from '../guards.ts';
import { mediaTypeOf } from '../../src/audio/recordings.ts';
import { parseRange } from '../audio/recordings.ts';
import { createFailureLimiter, type LimiterStore } from '../rate-limit.ts';

/** The one other route whose body is raw bytes past 64 KiB: api/index.ts leaves it out of the global body limit. */
export const FIRMWARE_UPLOAD_PATH = /^\/api\/v1\/firmware\/images\/[^/]+\/[^/]+\/[^/]+$/;
/** A device downloads with HTTP Basic authentication by its MQTT credentials, never a bearer token. */
export const FIRMWARE_DOWNLOAD_PATH = /^\/api\/v1\/firmware\/images\/[^/]+\/download$/;
const NOTES_MAX = 2000;
/**
 * docs/api.md, "Firmware updates": refused downloads (no, wrong or unknown credentials) one client address may make in
 * FIRMWARE_DOWNLOAD_WINDOW_S before 429, as wrong join codes are counted: guessing a device's password here is no
 * cheaper than over MQTT, and an unknown username stops costing a device lookup once the address is out of tries.
 */
export const FIRMWARE_DOWNLOAD_REFUSALS_PER_ADDRESS = 10;
const FIRMWARE_DOWNLOAD_WINDOW_S = 600;
const KINDS: readonly DeviceKind[] = ['stream_player', 'transmitter'];

interface Deps {
  /** null: FIRMWARE_PUBLIC_KEY is unset, and updates are off. */
  firmwareImages: FirmwareImages | null;
  firmwareMaxBytes: number;
  /** The device plane's credential check (the one MQTT uses) and its memory of devices. */
  firmwareDevices: { load(id: string): Promise<unknown>; info(id: string): DeviceInfo | null; verifySecret(id: string, password: string): boolean };
  /** Whether an unfinished rollout offers this image to this device (src/firmware/rollouts.ts), and whether one names it. */
  firmwareOffers: { holds(deviceId: string, imageId: string): Promise<boolean>; inUse(imageId: string): Promise<boolean> };
  /** With REDIS_URL, where refused downloads are counted, so every process counts one budget per address. */
  rateLimitStore: LimiterStore;
}

const OFF = 'Firmware updates are off: set FIRMWARE_PUBLIC_KEY (docs/api.md, "Firmware updates").';

/** RFC 7617: the user-id and password of an `Authorization: Basic` header, or null. */
export function basicCredentials(header: string | undefined): { user: string; pass: string } | null {
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '');
  if (!m) return null;
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = text.indexOf(':');
  return colon < 1 ? null : { user: text.slice(0, colon), pass: text.slice(colon + 1) };
}

/** docs/api.md, "Firmware updates": images uploaded, listed and removed by a superadmin; downloaded by the devices offered one. */
export function firmwareImageRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const images = (): FirmwareImages => {
    if (!deps.firmwareImages) throw new ApiError('conflict', OFF);
    return deps.firmwareImages;
  };
  const limit = bodyLimit({
    maxSize: deps.firmwareMaxBytes,
    onError: () => { throw new ApiError('payload_too_large', `The image is larger than ${deps.firmwareMaxBytes} bytes (FIRMWARE_MAX_BYTES).`); },
  });
  // Everything checked before the body is read: a caller, a name or a type refused never makes the service take an image in.
  const checkUpload: MiddlewareHandler<AppEnv> = async (c, next) => {
    images();
    if (!KINDS.includes(c.req.param('kind') as DeviceKind)) throw new ApiError('not_found', 'kind is stream_player or transmitter.');
    if (!HW_REV.test(c.req.param('hw_rev') ?? '')) throw new ApiError('validation_failed', undefined, { details: [{ path: 'hw_rev', message: 'must be 1 to 64 of A-Z a-z 0-9 . _ -' }] });
    if (!SEMVER.test(c.req.param('version') ?? '')) throw new ApiError('validation_failed', undefined, { details: [{ path: 'version', message: 'must be a semver version such as 1.5.0' }] });
    if (mediaTypeOf(c.req.header('content-type')) !== 'application/octet-stream') throw new ApiError('unsupported_media_type', 'Send the image as the raw body with Content-Type application/octet-stream.');
    if (!c.req.header('x-firmware-signature')) throw new ApiError('validation_failed', undefined, { details: [{ path: 'signature', message: 'the X-Firmware-Signature header is required: the base64 Ed25519 signature of the image\'s SHA-256 digest' }] });
    await next();
  };

  app.put('/firmware/images/:kind/:hw_rev/:version', superadminOnly, checkUpload, limit, async (c) => {
    const data = new Uint8Array(await c.req.arrayBuffer());
    if (data.byteLength === 0) throw new ApiError('validation_failed', undefined, { details: [{ path: 'body', message: 'the image is empty' }] });
    let notes: string | null = null;
    try {
      notes = decodeURIComponent(c.req.header('x-firmware-notes') ?? '') || null;
    } catch {
      throw new ApiError('validation_failed', undefined, { details: [{ path: 'notes', message: 'X-Firmware-Notes must be percent-encoded UTF-8' }] });
    }
    if (notes && notes.length > NOTES_MAX) throw new ApiError('validation_failed', undefined, { details: [{ path: 'notes', message: `at most ${NOTES_MAX} characters` }] });
    const { created, row } = unwrap(await images().save({
      kind: c.req.param('kind') as DeviceKind, hwRev: c.req.param('hw_rev'), version: c.req.param('version'), data,
      signature: c.req.header('x-firmware-signature')!, notes, by: c.var.user.id,
    }));
    return c.json(toImage(row), created ? 201 : 200);
  });

  app.get('/firmware/images', superadminOnly, async (c) => c.json((await images().list()).map(toImage)));

  app.delete('/firmware/images/:id', superadminOnly, async (c) => {
    unwrap(await images().remove(c.req.param('id'), deps.firmwareOffers.inUse));
    return c.body(null, 204);
  });

  // The device's own credentials, checked on every request (Range requests included), and an open offer of this image.
  // Checked before the credentials, so an address out of tries costs no device lookup; a device that signs in costs nothing.
  const refusals = createFailureLimiter(FIRMWARE_DOWNLOAD_REFUSALS_PER_ADDRESS, deps.rateLimitStore, 'firmware-download-address', FIRMWARE_DOWNLOAD_WINDOW_S);
  app.get('/firmware/images/:id/download', async (c) => {
    const address = c.env.clientAddress();
    await refusals.check(address);
    const presented = basicCredentials(c.req.header('authorization'));
    const refuse = async () => {
      await refusals.fail(address);
      return new ApiError('unauthorized', 'A device downloads its update with HTTP Basic authentication by its MQTT username and password.', { headers: { 'WWW-Authenticate': 'Basic realm="minaret firmware", charset="UTF-8"' } });
    };
    if (!presented) throw await refuse();
    if (!deps.firmwareDevices.info(presented.user)) await deps.firmwareDevices.load(presented.user);
    if (!deps.firmwareDevices.verifySecret(presented.user, presented.pass)) throw await refuse();
    const imageId = c.req.param('id');
    const stored = deps.firmwareImages ? await deps.firmwareImages.read(imageId) : null;
    const device = deps.firmwareDevices.info(presented.user);
    if (!stored || !device || device.kind !== stored.row.kind || !(await deps.firmwareOffers.holds(presented.user, imageId))) {
      throw new ApiError('not_found', 'No update of that image is offered to this device.');
    }
    const { row, data } = stored;
    const etag = `"${row.sha256}"`;
    const headers: Record<string, string> = { 'Content-Type': 'application/octet-stream', 'Cache-Control': 'no-store', 'Accept-Ranges': 'bytes', ETag: etag, 'X-Content-Type-Options': 'nosniff' };
    const ifRange = requestHeader(c, 'if-range');
    const range = ifRange === undefined || ifRange === etag ? parseRange(requestHeader(c, 'range'), data.byteLength) : null;
    if (range === 'unsatisfiable') throw new ApiError('range_not_satisfiable', `The image has ${data.byteLength} bytes.`, { headers: { 'Content-Range': `bytes */${data.byteLength}` } });
    const view = (start: number, end: number) => new Uint8Array(data.buffer as ArrayBuffer, data.byteOffset + start, end - start);
    if (range === null) return c.body(view(0, data.byteLength), 200, { ...headers, 'Content-Length': String(data.byteLength) });
    headers['Content-Range'] = `bytes ${range.start}-${range.end}/${data.byteLength}`;
    return c.body(view(range.start, range.end + 1), 206, { ...headers, 'Content-Length': String(range.end + 1 - range.start) });
  });

  return app;
}
