import crypto from 'node:crypto';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { DeviceLink } from './device-link.ts';
import { topics } from './device-link.ts';
import { fail, invalid, ok, type Result } from '../platform/failure.ts';
import type { DeviceKind } from './device-config.ts';
import type { Logger } from '../platform/log.ts';
import type { Timeline } from './timeline.ts';

export const COMMANDS = {
  transmitter: ['get_state', 'ping', 'play_test', 'identify', 'diag_bundle'],
  stream_player: ['get_state', 'ping', 'play_test', 'identify', 'diag_bundle', 'set_log_level', 'unbind_mosque'],
} as const;
export const DEFAULT_TIMEOUT_MS = 10_000;

/** Whether a device of this kind takes the command (docs/firmware.md, "4.2 Commands"). */
export function commandFits(kind: DeviceKind, name: string): Result<void> {
  return (COMMANDS[kind] as readonly string[]).includes(name) ? ok(undefined) : invalid('name', `not a ${kind} command`);
}
export const MAX_TIMEOUT_MS = 30_000;

export interface Ack {
  id: string;
  name: string;
  ok: boolean;
  result?: unknown;
  error?: unknown;
}

export interface CommandOutcome {
  command_id: string;
  name: string;
  ok: boolean;
  result: unknown;
  rtt_ms: number;
}

/**
 * What the backend records once a device acknowledged a command with ok: true (the log escalation's expiry, the
 * cleared binding). A failure ends the command with it (the device was deleted while the ack was on its way).
 */
export type CommandEffects = (deviceId: string, name: string, args: Record<string, unknown>, actorUserId: string | null, result: unknown) => Promise<Result<void>>;

/** How a wait ends: the ack, no ack in time (null), or the device was deleted meanwhile. */
type Settled = Ack | null | 'deleted';

interface Pending {
  deviceId: string;
  name: string;
  sentAt: number;
  settle: (outcome: Settled) => void;
}

/**
 * Commands to devices and their acknowledgements (docs/api.md, "Devices, from the app's side"; docs/firmware.md, "4.2 Commands"): published at QoS 1 on the device's
 * cmd topic and correlated by id; a late, duplicate or foreign ack is ignored. Every command and its
 * outcome goes to the device timeline with the actor.
 */
export function createCommands(deps: { link: () => DeviceLink; timeline: Timeline; clock: Clock; logger: Logger; mosqueOf: (id: string) => string | null; effects?: CommandEffects }) {
  const pending = new Map<string, Pending>();

  /**
   * Every ack that settles a command comes here, whether a person waits for it (send) or not (dispatch), and
   * whichever door brought it (today the broker's ack topic, through onAck): noted in the timeline, then its
   * effects. A late, duplicate or foreign ack settles nothing, so it has none.
   */
  async function acknowledged(c: { deviceId: string; mosqueId: string | null; id: string; name: string; args: Record<string, unknown>; actorUserId: string | null; rttMs: number | null }, ack: Ack): Promise<Result<void>> {
    const detail = { command_id: c.id, name: c.name, ok: ack.ok, ...(c.rttMs !== null && { rtt_ms: c.rttMs }) };
    const reason = ack.ok ? null : String(ack.error ?? 'failed');
    await deps.timeline.note({ deviceId: c.deviceId, mosqueId: c.mosqueId, kind: 'command_acked', actorUserId: c.actorUserId, reason, detail });
    return ack.ok && deps.effects ? deps.effects(c.deviceId, c.name, c.args, c.actorUserId, ack.result) : ok(undefined);
  }

  function publish(deviceId: string, id: string, name: string, args: Record<string, unknown>, ttlSeconds: number) {
    const ts = toUnixSeconds(deps.clock());
    return deps.link().publish(topics.cmd(deviceId), { v: '1.0', id, name, args, ts, expires_at: ts + ttlSeconds }, { qos: 1, retain: false });
  }

  return {
    /** Sends and waits for the ack: device_offline at once when not connected, device_timeout when no ack comes. */
    async send(deviceId: string, name: string, args: Record<string, unknown>, opts: { timeoutMs: number; actorUserId: string | null }): Promise<Result<CommandOutcome>> {
      const mosqueId = deps.mosqueOf(deviceId);
      if (!deps.link().isConnected(deviceId)) return fail('device_offline');
      const id = crypto.randomUUID();
      await deps.timeline.note({ deviceId, mosqueId, kind: 'command_sent', actorUserId: opts.actorUserId, detail: { command_id: id, name, args } });
      const started = performance.now();
      const acked = new Promise<Settled>((resolve) => {
        const timer = setTimeout(() => settle(null), opts.timeoutMs);
        const settle = (outcome: Settled) => {
          clearTimeout(timer);
          pending.delete(id);
          resolve(outcome);
        };
        pending.set(id, { deviceId, name, sentAt: started, settle });
      });
      await publish(deviceId, id, name, args, Math.ceil(opts.timeoutMs / 1000));
      const ack = await acked;
      const rtt = Math.round(performance.now() - started);
      // Its timeline went with it: nothing to record, and the caller learns the device is gone
      // (docs/decisions.md, "A command to a device deleted while it waits for the ack").
      if (ack === 'deleted') return fail('not_found', 'The device was deleted while the command waited for its acknowledgement.');
      if (!ack) {
        await deps.timeline.note({ deviceId, mosqueId, kind: 'command_timeout', actorUserId: opts.actorUserId, detail: { command_id: id, name, timeout_ms: opts.timeoutMs } });
        return fail('device_timeout');
      }
      const applied = await acknowledged({ deviceId, mosqueId, id, name, args, actorUserId: opts.actorUserId, rttMs: rtt }, ack);
      if (!applied.ok) return applied;
      return ok({ command_id: id, name, ok: ack.ok, result: ack.ok ? ack.result ?? null : { error: ack.error ?? null }, rtt_ms: rtt });
    },

    /**
     * Fire and forget (broadcast_start to a transmitter): the ack, if any, is noted in the timeline, and handed
     * to `onAck` when it reaches this process (a firmware offer's `busy`).
     */
    dispatch(deviceId: string, name: string, args: Record<string, unknown>, ttlSeconds = 60, onAck?: (ack: Ack) => void): void {
      const id = crypto.randomUUID();
      const mosqueId = deps.mosqueOf(deviceId);
      const failed = (what: string) => (err: Error) => deps.logger.warn({ device_id: deviceId, name, err: err.message }, what);
      pending.set(id, {
        deviceId, name, sentAt: performance.now(),
        settle: (ack) => {
          pending.delete(id);
          if (!ack || ack === 'deleted') return;
          acknowledged({ deviceId, mosqueId, id, name, args, actorUserId: null, rttMs: null }, ack).catch(failed('command ack not noted'));
          onAck?.(ack);
        },
      });
      setTimeout(() => pending.get(id)?.settle(null), ttlSeconds * 1000).unref();
      // Published at once, as the caller goes on; the note is asked for first, and notes are written in the
      // order asked (each after the group commit's pending writes), so it lands before its ack's.
      deps.timeline.note({ deviceId, mosqueId, kind: 'command_sent', detail: { command_id: id, name, args } }).catch(failed('command note not written'));
      publish(deviceId, id, name, args, ttlSeconds).catch(failed('command publish failed'));
    },

    /** An ack from the broker: only the device the command went to, with the same id and name, settles it. */
    onAck(deviceId: string, ack: Ack): void {
      const p = pending.get(ack.id);
      if (!p || p.deviceId !== deviceId || p.name !== ack.name) return;
      p.settle(ack);
    },

    /** The device was deleted: its waiting commands end now, without touching its (deleted) timeline. */
    deviceDeleted(deviceId: string): void {
      for (const p of [...pending.values()]) if (p.deviceId === deviceId) p.settle('deleted');
    },

    /** Settles everything still waiting (shutdown). */
    close(): void {
      for (const p of pending.values()) p.settle(null);
    },
  };
}

export type Commands = ReturnType<typeof createCommands>;
