import crypto from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Store } from '../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import { inTransaction } from '../platform/store/after-commit.ts';
import type { FirmwareOffersTable, FirmwareRolloutsTable } from '../../generated/tables.ts';

/**
 * Rollouts and their offers (docs/api.md, "Firmware updates"), the rows of migration 026. Every change of state is
 * one conditional update on the state it leaves, so two runners (two nodes, or a node's own tick and a request's)
 * never both move one device or one rollout, and an offer is written before its command is sent.
 */
export type RolloutStatus = 'running' | 'paused' | 'paused_by_errors' | 'cancelled' | 'done';
export type OfferState = 'waiting' | 'offered' | 'updating' | 'succeeded' | 'failed';
export type RolloutRow = Selectable<FirmwareRolloutsTable>;
export type OfferRow = Selectable<FirmwareOffersTable>;
/** A group as the request names it: a number of devices, or a percentage of those targeted. */
export type GroupSpec = { devices: number } | { percent: number };
export const UNFINISHED: readonly RolloutStatus[] = ['running', 'paused', 'paused_by_errors'];
export const OPEN_OFFER: readonly OfferState[] = ['offered', 'updating'];

/** Group sizes over `total` targeted devices, in order; the last group takes every device the others left. */
export function groupSizes(specs: readonly GroupSpec[], total: number): number[] {
  let left = total;
  return specs.map((spec, i) => {
    const wanted = i === specs.length - 1 ? left : 'devices' in spec ? spec.devices : Math.ceil((spec.percent * total) / 100);
    const size = Math.min(left, Math.max(0, wanted));
    left -= size;
    return size;
  });
}

export interface NewRollout {
  image: { id: string; kind: string; hw_rev: string; version: string };
  mosqueIds: string[] | null;
  fwRange: string | null;
  groups: GroupSpec[];
  successThresholdPct: number;
  errorThresholdPct: number;
  maxConcurrent: number;
  timeoutS: number;
  by: string;
}

export function createRolloutStore(store: Store, clock: Clock) {
  const now = () => toUnixSeconds(clock());
  const find = async (id: string): Promise<RolloutRow | null> => (await store.selectFrom('firmware_rollouts').selectAll().where('id', '=', id).executeTakeFirst()) ?? null;

  return {
    find,
    list: (): Promise<RolloutRow[]> => store.selectFrom('firmware_rollouts').selectAll().orderBy('created_at', 'desc').orderBy('id').execute(),
    /** The rollouts a tick looks at: the unfinished, and a cancelled one while a device it offered is still on its way. */
    listWatched: (): Promise<RolloutRow[]> => store.selectFrom('firmware_rollouts').selectAll().where((eb) => eb.or([
      eb('status', 'in', UNFINISHED),
      eb.and([eb('status', '=', 'cancelled'), eb.exists(eb.selectFrom('firmware_offers').select('device_id').whereRef('firmware_offers.rollout_id', '=', 'firmware_rollouts.id').where('firmware_offers.state', 'in', OPEN_OFFER))]),
    ])).orderBy('created_at').execute(),
    offersOf: (rolloutId: string): Promise<OfferRow[]> =>
      store.selectFrom('firmware_offers').selectAll().where('rollout_id', '=', rolloutId).orderBy('group_index').orderBy('device_id').execute(),
    /** The devices some rollout already names for this image: docs/api.md, a device is offered an image at most once. */
    async devicesNamedFor(imageId: string): Promise<Set<string>> {
      const rows = await store.selectFrom('firmware_offers').select('device_id').where('image_id', '=', imageId).execute();
      return new Set(rows.map((r) => r.device_id));
    },

    /** The rollout and its devices, placed in groups in the order given, in one transaction. */
    async create(input: NewRollout, targets: Array<{ id: string; fw: string | null }>): Promise<RolloutRow> {
      const at = now();
      const sizes = groupSizes(input.groups, targets.length);
      const row: RolloutRow = {
        id: crypto.randomUUID(), image_id: input.image.id, kind: input.image.kind, hw_rev: input.image.hw_rev, target_fw: input.image.version,
        status: 'running', mosque_ids: input.mosqueIds ? JSON.stringify(input.mosqueIds) : null, fw_range: input.fwRange,
        groups: JSON.stringify(sizes.map((size) => ({ size }))), success_threshold_pct: input.successThresholdPct,
        error_threshold_pct: input.errorThresholdPct, max_concurrent: input.maxConcurrent, timeout_s: input.timeoutS,
        resumed_at: null, created_by: input.by, created_at: at, updated_at: at,
      };
      await inTransaction(store, async (trx) => {
        await trx.insertInto('firmware_rollouts').values(row).execute();
        let next = 0;
        for (const [group, size] of sizes.entries()) {
          for (const device of targets.slice(next, next + size)) {
            await trx.insertInto('firmware_offers').values({
              rollout_id: row.id, device_id: device.id, image_id: input.image.id, group_index: group, state: 'waiting', from_fw: device.fw, updated_at: at,
            }).onConflict((oc) => oc.columns(['image_id', 'device_id']).doNothing()).execute();
          }
          next += size;
        }
      });
      return row;
    },

    /** Moves the rollout from one of `from` to `to`; false when another runner or request moved it first. */
    async setStatus(id: string, from: readonly RolloutStatus[], to: RolloutStatus): Promise<boolean> {
      const at = now();
      const r = await store.updateTable('firmware_rollouts').set({ status: to, updated_at: at, ...(to === 'running' && { resumed_at: at }) }).where('id', '=', id).where('status', 'in', from).executeTakeFirst();
      return r.numUpdatedRows > 0n;
    },

    /** One offer's move from `from`; false when it was not in that state any more. */
    async moveOffer(o: Pick<OfferRow, 'rollout_id' | 'device_id'>, from: OfferState, set: Partial<Omit<OfferRow, 'rollout_id' | 'device_id' | 'image_id'>>): Promise<boolean> {
      const r = await store.updateTable('firmware_offers').set({ ...set, updated_at: now() })
        .where('rollout_id', '=', o.rollout_id).where('device_id', '=', o.device_id).where('state', '=', from).executeTakeFirst();
      return r.numUpdatedRows > 0n;
    },

    /** Whether an image is offered to the device now (the download's gate: docs/api.md, "Firmware updates"). */
    async holds(deviceId: string, imageId: string): Promise<boolean> {
      const row = await store.selectFrom('firmware_offers').select('state').where('device_id', '=', deviceId).where('image_id', '=', imageId).where('state', 'in', OPEN_OFFER).executeTakeFirst();
      return row !== undefined;
    },
    /** Whether an unfinished rollout names the image (its deletion is refused). */
    async inUse(imageId: string): Promise<boolean> {
      return (await store.selectFrom('firmware_rollouts').select('id').where('image_id', '=', imageId).where('status', 'in', UNFINISHED).executeTakeFirst()) !== undefined;
    },
    /** A device's firmware history: every rollout that named it, newest first. */
    history: (deviceId: string) => store.selectFrom('firmware_offers').innerJoin('firmware_rollouts', 'firmware_rollouts.id', 'firmware_offers.rollout_id')
      .select(['firmware_rollouts.id as rollout_id', 'firmware_rollouts.image_id', 'firmware_rollouts.target_fw', 'firmware_rollouts.status as rollout_status',
        'firmware_rollouts.created_at', 'firmware_offers.state', 'firmware_offers.from_fw', 'firmware_offers.error', 'firmware_offers.offered_at', 'firmware_offers.finished_at'])
      .where('firmware_offers.device_id', '=', deviceId).orderBy('firmware_rollouts.created_at', 'desc').execute(),
  };
}

export type RolloutStore = ReturnType<typeof createRolloutStore>;
