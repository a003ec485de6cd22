import type { Config } from '../platform/config.ts';
import { toIsoString, type Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { Store } from '../platform/store/store.ts';
import { fail, invalid, ok, type Result } from '../platform/failure.ts';
import type { DeviceKind } from '../devices/device-config.ts';
import type { DeviceRow } from '../devices/devices.ts';
import { createFirmwareImages, type FirmwareImages } from './images.ts';
import { createRolloutStore, UNFINISHED, type GroupSpec, type RolloutRow, type RolloutStatus } from './rollouts.ts';
import { countGroups, createRunner, type FirmwareDevices } from './runner.ts';
import { compareVersions, isRange, satisfies } from './versions.ts';
import type { WindowDeps } from './windows.ts';

export interface RolloutRequest {
  image_id: string;
  mosque_ids?: string[] | undefined;
  fw_range?: string | undefined;
  groups: GroupSpec[];
  success_threshold_pct?: number | undefined;
  error_threshold_pct?: number | undefined;
  max_concurrent?: number | undefined;
  timeout_s?: number | undefined;
}

/** The moves a person makes (docs/api.md, "Firmware updates"), each from the statuses it may leave. */
const MOVES: Record<'pause' | 'resume' | 'cancel', { from: readonly RolloutStatus[]; to: RolloutStatus }> = {
  pause: { from: ['running'], to: 'paused' },
  resume: { from: ['paused', 'paused_by_errors'], to: 'running' },
  cancel: { from: UNFINISHED, to: 'cancelled' },
};

/**
 * Firmware updates (docs/api.md, "Firmware updates"): the images, the rollouts, the runner that offers them, and
 * the offers the download is gated by. Off (no images, no rollouts) until FIRMWARE_PUBLIC_KEY is set.
 */
export function buildFirmware(deps: {
  store: Store; clock: Clock; logger: Logger; config: Pick<Config, 'firmware'>;
  devices: FirmwareDevices & { listForHardware(kind: DeviceKind, hwRev: string): Promise<DeviceRow[]> };
  windows: Omit<WindowDeps, 'quietMs'>;
  downloadUrl: (imageId: string) => string;
}) {
  const key = deps.config.firmware.publicKey;
  const images: FirmwareImages | null = key ? createFirmwareImages({ store: deps.store, clock: deps.clock, key }) : null;
  const rollouts = createRolloutStore(deps.store, deps.clock);
  const windows = { ...deps.windows, quietMs: deps.config.firmware.quietMinutes * 60_000 };
  const runner = images ? createRunner({ rollouts, images, devices: deps.devices, windows, clock: deps.clock, logger: deps.logger, downloadUrl: deps.downloadUrl }) : null;
  const kick = () => void runner?.tick().catch((err: unknown) => deps.logger.warn({ err: String(err) }, 'firmware rollout tick failed'));

  const describe = async (row: RolloutRow) => ({
    id: row.id,
    image: { id: row.image_id, kind: row.kind, hw_rev: row.hw_rev, version: row.target_fw },
    status: row.status,
    mosque_ids: row.mosque_ids ? (JSON.parse(row.mosque_ids) as string[]) : null,
    fw_range: row.fw_range,
    success_threshold_pct: row.success_threshold_pct, error_threshold_pct: row.error_threshold_pct,
    max_concurrent: row.max_concurrent, timeout_s: row.timeout_s,
    groups: countGroups(row, await rollouts.offersOf(row.id)).map(({ accepted: _accepted, ...g }) => g),
    created_at: toIsoString(row.created_at), updated_at: toIsoString(row.updated_at),
  });

  /** The devices a new rollout names: the image's kind and hw_rev, in its mosques, in its range, never offered it. */
  async function targetsOf(req: RolloutRequest, image: { id: string; kind: string; hw_rev: string; version: string }) {
    const named = await rollouts.devicesNamedFor(image.id);
    const inRange = (fw: string | null) => fw !== null && fw !== image.version && (req.fw_range ? satisfies(fw, req.fw_range) : (compareVersions(fw, image.version) ?? 0) < 0);
    return (await deps.devices.listForHardware(image.kind as DeviceKind, image.hw_rev))
      .filter((d) => !named.has(d.id) && (!req.mosque_ids || (d.mosque_id !== null && req.mosque_ids.includes(d.mosque_id))) && inRange(d.fw))
      .sort((a, b) => (a.id < b.id ? -1 : 1));
  }

  return {
    images,
    rollouts: {
      async create(req: RolloutRequest, by: string): Promise<Result<Awaited<ReturnType<typeof describe>>>> {
        const image = await images?.find(req.image_id);
        if (!image) return invalid('image_id', 'no firmware image has that id');
        if (req.fw_range !== undefined && !isRange(req.fw_range)) return invalid('fw_range', 'a semver range such as ">=1.2.0 <1.5.0"');
        const targets = await targetsOf(req, image);
        const row = await rollouts.create({
          image, mosqueIds: req.mosque_ids ?? null, fwRange: req.fw_range ?? null, groups: req.groups, by,
          successThresholdPct: req.success_threshold_pct ?? 100, errorThresholdPct: req.error_threshold_pct ?? 20,
          maxConcurrent: req.max_concurrent ?? 10, timeoutS: req.timeout_s ?? 1800,
        }, targets);
        kick();
        return ok(await describe(row));
      },
      list: async () => Promise.all((await rollouts.list()).map(describe)),
      async find(id: string) {
        const row = await rollouts.find(id);
        return row ? describe(row) : null;
      },
      async move(id: string, verb: keyof typeof MOVES): Promise<Result<Awaited<ReturnType<typeof describe>>>> {
        const row = await rollouts.find(id);
        if (!row) return fail('not_found', 'No rollout has that id.');
        if (!(await rollouts.setStatus(id, MOVES[verb].from, MOVES[verb].to))) return fail('conflict', `A ${row.status} rollout cannot ${verb}.`);
        if (verb === 'resume') kick();
        return ok(await describe((await rollouts.find(id))!));
      },
      /** A device's firmware history (GET /devices/{id}/firmware). */
      history: async (deviceId: string) => (await rollouts.history(deviceId)).map((h) => ({
        rollout_id: h.rollout_id, image_id: h.image_id, target_fw: h.target_fw, rollout_status: h.rollout_status, from_fw: h.from_fw,
        state: h.state, error: h.error, offered_at: h.offered_at === null ? null : toIsoString(h.offered_at),
        finished_at: h.finished_at === null ? null : toIsoString(h.finished_at), created_at: toIsoString(h.created_at),
      })),
    },
    /** The runner's tick, for the periodic duty (src/service.ts); nothing while updates are off. */
    tick: async () => runner?.tick(),
    offers: { holds: rollouts.holds, inUse: rollouts.inUse },
  };
}

export type Firmware = ReturnType<typeof buildFirmware>;
