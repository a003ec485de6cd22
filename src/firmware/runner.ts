import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { DeviceRow } from '../devices/devices.ts';
import type { Ack } from '../devices/commands.ts';
import type { FirmwareImages } from './images.ts';
import { outcomeOf } from './outcomes.ts';
import type { OfferRow, RolloutRow, RolloutStore } from './rollouts.ts';
import { windowsAt, type WindowDeps } from './windows.ts';

/** How often the deployment's rollouts are looked at (a duty, claimed once across nodes). */
export const ROLLOUT_TICK_MS = 5000;
/** How long an update command waits on the broker for its device (docs/firmware.md, 4.2 `expires_at`). */
const OFFER_TTL_S = 60;

/** The device plane's firmware port (src/devices/device-plane.ts): rows read per tick, never a status hook. */
export interface FirmwareDevices {
  listByIds(ids: readonly string[]): Promise<DeviceRow[]>;
  connected(row: DeviceRow): boolean;
  dispatch(deviceId: string, name: string, args: Record<string, unknown>, ttlSeconds?: number, onAck?: (ack: Ack) => void): void;
}

export interface GroupCounts { size: number; waiting: number; waiting_for_window: number; offered: number; updating: number; succeeded: number; failed: number; accepted: number }

/** Each group's counts (docs/api.md, GET /firmware/rollouts/{id}). */
export function countGroups(rollout: RolloutRow, offers: readonly OfferRow[]): GroupCounts[] {
  const groups = (JSON.parse(rollout.groups) as Array<{ size: number }>).map(({ size }) => ({ size, waiting: 0, waiting_for_window: 0, offered: 0, updating: 0, succeeded: 0, failed: 0, accepted: 0 }));
  for (const o of offers) {
    const g = groups[o.group_index];
    if (!g) continue;
    // Failures before the last resume were accepted by the person who resumed: they count in no threshold.
    if (o.state === 'failed' && rollout.resumed_at !== null && (o.finished_at ?? 0) <= rollout.resumed_at) g.accepted++;
    if (o.state === 'waiting' && o.waiting_for_window === 1) g.waiting_for_window++;
    else g[o.state as 'waiting']++;
  }
  return groups;
}

/**
 * The runner (docs/api.md, "Firmware updates"): per running rollout, reads its devices' rows, moves each offer by
 * what the device reported, applies the error threshold (paused_by_errors) and the success threshold (the next
 * group starts), and offers the update to waiting devices of the started groups, up to max_concurrent, inside
 * their mosque's window. The offer is written before the command goes out: a node dying between the two leaves a
 * device that was never asked and times out, never one asked twice.
 */
export function createRunner(deps: { rollouts: RolloutStore; images: FirmwareImages; devices: FirmwareDevices; windows: WindowDeps; clock: Clock; logger: Logger; downloadUrl: (imageId: string) => string }) {
  const { rollouts } = deps;

  const onAck = (offer: OfferRow) => (ack: Ack) => {
    if (ack.ok) return;
    const error = String(ack.error ?? 'failed');
    const now = toUnixSeconds(deps.clock());
    const move = error === 'busy' ? { state: 'waiting' as const, offered_at: null } : error === 'already_installed' ? { state: 'succeeded' as const, finished_at: now } : { state: 'failed' as const, error, finished_at: now };
    rollouts.moveOffer(offer, 'offered', move).catch((err: unknown) => deps.logger.warn({ device_id: offer.device_id, err: String(err) }, 'firmware offer ack not recorded'));
  };

  async function offer(rollout: RolloutRow, o: OfferRow, now: number): Promise<boolean> {
    const image = await deps.images.find(rollout.image_id);
    if (!image) return false;
    if (!(await rollouts.moveOffer(o, 'waiting', { state: 'offered', offered_at: now, waiting_for_window: 0, progress_pct: null }))) return false;
    const args = { url: deps.downloadUrl(image.id), size: image.size, sha256: image.sha256, signature: image.signature, target_fw: image.version };
    deps.devices.dispatch(o.device_id, 'update', args, OFFER_TTL_S, onAck({ ...o, state: 'offered' }));
    return true;
  }

  /** One rollout's tick; the offers it moved are re-read on the next. */
  async function step(rollout: RolloutRow, isOpen: (mosqueId: string | null) => Promise<boolean>): Promise<void> {
    const now = toUnixSeconds(deps.clock());
    const offers = await rollouts.offersOf(rollout.id);
    const rows = new Map((await deps.devices.listByIds(offers.map((o) => o.device_id))).map((r) => [r.id, r]));
    for (const [i, o] of offers.entries()) {
      const move = outcomeOf(o, rows.get(o.device_id) ?? null, rollout.target_fw, now, rollout.timeout_s);
      if (move && (await rollouts.moveOffer(o, o.state as 'waiting', move))) offers[i] = { ...o, ...move };
    }
    // Paused or cancelled: a device offered already finishes on its own, and is recorded; nothing new is offered.
    if (rollout.status !== 'running') return;
    const groups = countGroups(rollout, offers);
    const met = (g: GroupCounts) => g.succeeded * 100 >= rollout.success_threshold_pct * (g.size - g.accepted);
    const finished = (g: GroupCounts) => g.waiting + g.waiting_for_window + g.offered + g.updating === 0;
    // A group's failures at the error threshold stop everything; so does a group that finished short of success.
    const failing = (g: GroupCounts) => g.failed > g.accepted && (g.failed - g.accepted) * 100 >= rollout.error_threshold_pct * g.size;
    if (groups.some((g) => failing(g) || (finished(g) && !met(g)))) {
      if (await rollouts.setStatus(rollout.id, ['running'], 'paused_by_errors')) deps.logger.warn({ rollout_id: rollout.id }, 'firmware rollout paused by errors');
      return;
    }
    if (groups.every(finished)) return void (await rollouts.setStatus(rollout.id, ['running'], 'done'));
    let started = 0;
    while (started + 1 < groups.length && met(groups[started]!)) started++;
    let free = rollout.max_concurrent - offers.filter((o) => o.state === 'offered' || o.state === 'updating').length;
    for (const o of offers) {
      if (free <= 0) break;
      if (o.state !== 'waiting' || o.group_index > started) continue;
      const row = rows.get(o.device_id);
      if (!row || !deps.devices.connected(row) || row.status === 'PLAYING' || row.status === 'UPDATING') continue;
      if (!(await isOpen(row.mosque_id))) {
        if (o.waiting_for_window === 0) await rollouts.moveOffer(o, 'waiting', { waiting_for_window: 1 });
        continue;
      }
      if (await offer(rollout, o, now)) free--;
    }
  }

  let running: Promise<void> | null = null;
  /** Every watched rollout, once; a tick asked for while one runs joins it. */
  function tick(): Promise<void> {
    running ??= (async () => {
      try {
        const isOpen = windowsAt(deps.windows, deps.clock());
        for (const r of await rollouts.listWatched()) await step(r, isOpen);
      } finally {
        running = null;
      }
    })();
    return running;
  }
  return { tick };
}

export type Runner = ReturnType<typeof createRunner>;
