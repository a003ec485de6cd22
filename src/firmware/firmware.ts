import type { Config } from '../platform/config.ts';
import type { Clock } from '../platform/clock.ts';
import type { Store } from '../platform/store/store.ts';
import { createFirmwareImages, type FirmwareImages } from './images.ts';

/**
 * Firmware updates (docs/api.md, "Firmware updates"): the images, and the offers the download is gated by. Off
 * (no images) until FIRMWARE_PUBLIC_KEY is set.
 */
export function buildFirmware(deps: { store: Store; clock: Clock; config: Pick<Config, 'firmware'> }) {
  const key = deps.config.firmware.publicKey;
  const images: FirmwareImages | null = key ? createFirmwareImages({ store: deps.store, clock: deps.clock, key }) : null;
  return {
    images,
    /** Until a rollout offers an image, no device holds an offer and no rollout names an image. */
    offers: { holds: async (_deviceId: string, _imageId: string) => false, inUse: async (_imageId: string) => false },
  };
}

export type Firmware = ReturnType<typeof buildFirmware>;
