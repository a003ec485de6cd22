import type { Logger } from '../../platform/log.ts';
import { revocationOf, type AdmissionFacts } from './admission.ts';
import type { AudioServer } from '../audio-server.ts';
import type { ListenerSessionRow, ListenerSessions } from '../listener-sessions.ts';
import { mountOf } from '../mounts.ts';

/**
 * Removing listeners that no longer stand (docs/operator.md#audio-icecast, "Revocation"): a ban, a removal, a
 * rotated password or a deleted device is named on the change feed; the process that made the change rechecks
 * the open sessions it concerns (they are in the shared store) and removes each that fails through the admin API.
 * Rechecks wait for the end of the turn, when the change's transaction has committed.
 */
export function createRevocation(deps: {
  facts: () => AdmissionFacts; sessions: ListenerSessions; server: AudioServer; logger: Logger; onError: (what: string, err: unknown) => void;
  /** The mosques whose live source this device is (src/audio/on-air.ts). */
  sourcedBy: (deviceId: string) => Promise<Array<{ mosque_id: string }>>;
}) {
  const { sessions, server, logger } = deps;
  const devices = new Set<string>();
  const users = new Set<string>();
  const mosques = new Set<string>();
  let scheduled = false;

  /** Removes one listener from Icecast and ends its session; kept open (and retried by the next pass) if Icecast did not answer. */
  async function cut(session: ListenerSessionRow, reason: string): Promise<boolean> {
    const killed = await server.killClient(mountOf(session.mosque_id), session.client_id);
    if (!killed.ok) {
      logger.warn({ session_id: session.id, problem: killed.problem, detail: killed.detail }, 'audio: a revoked listener could not be removed yet');
      return false;
    }
    await sessions.close(session, 'revoked');
    logger.info({ session_id: session.id, mosque_id: session.mosque_id, device_id: session.device_id, user_id: session.user_id, reason }, 'audio listener removed');
    return true;
  }

  /** Every session in `list` that no longer stands is cut; how many were. */
  async function recheck(list: ListenerSessionRow[]): Promise<number> {
    const facts = deps.facts();
    const doomed: Array<{ s: ListenerSessionRow; reason: string }> = [];
    for (const s of list) {
      const reason = await revocationOf(s, facts);
      if (reason) doomed.push({ s, reason });
    }
    const done = await Promise.all(doomed.map(({ s, reason }) => cut(s, reason)));
    return done.filter(Boolean).length;
  }

  /** A mosque that is gone: its mount's listeners go (its session rows went with it). */
  async function cutMount(mosqueId: string): Promise<void> {
    const mount = mountOf(mosqueId);
    const listed = await server.listClients(mount);
    if (listed.ok && listed.value) await Promise.all(listed.value.map((c) => server.killClient(mount, c.id)));
    await server.killSource(mount);
  }

  /**
   * A transmitter deleted, disabled or moved to another mosque stops being its old mosque's source at once, as its
   * MQTT connection does (its Icecast source authenticated when it still stood).
   */
  async function cutSources(ids: string[]): Promise<void> {
    const facts = deps.facts();
    const sourced = await Promise.all(ids.map(async (id) => ({ id, rows: await deps.sourcedBy(id) })));
    await Promise.all(sourced.flatMap(({ id, rows }) => rows.map(async ({ mosque_id: mosqueId }) => {
      const device = facts.device(id);
      if (device && device.enabled && device.kind === 'transmitter' && device.mosqueId === mosqueId) return;
      const killed = await server.killSource(mountOf(mosqueId));
      logger.info({ mosque_id: mosqueId, device_id: id, ok: killed.ok }, 'audio source removed: its transmitter no longer stands');
    })));
  }

  async function run(): Promise<void> {
    scheduled = false;
    const changedDevices = [...devices];
    const list = new Map<string, ListenerSessionRow>();
    // Taken before the first await: a change noted while the sessions are read schedules the next run.
    const [deviceIds, userIds, mosqueIds] = [[...devices], [...users], [...mosques]];
    devices.clear();
    users.clear();
    mosques.clear();
    for (const id of deviceIds) for (const s of await sessions.listOpenForDevice(id)) list.set(s.id, s);
    for (const id of userIds) for (const s of await sessions.listOpenForUser(id)) list.set(s.id, s);
    const gone: string[] = [];
    for (const id of mosqueIds) if (!(await deps.facts().mosqueExists(id))) gone.push(id);
    await Promise.all([recheck([...list.values()]), ...gone.map(cutMount), cutSources(changedDevices)]);
  }

  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(() => void run().catch((err: unknown) => deps.onError('audio revocation', err)));
  };

  return {
    /** A device changed (deleted, rotated, rebound, lease dropped). */
    deviceChanged(id: string): void {
      devices.add(id);
      schedule();
    },
    /** A user's standing changed: their console sessions, and (`ownDevices`) their players'. */
    standingChanged(userId: string, ownDevices: string[]): void {
      users.add(userId);
      for (const id of ownDevices) devices.add(id);
      schedule();
    },
    mosqueChanged(id: string): void {
      mosques.add(id);
      schedule();
    },
    /** Every open session (the safety-net reload, reconciliation). */
    recheckAll: async () => recheck(await sessions.listOpen()),
  };
}

export type Revocation = ReturnType<typeof createRevocation>;
