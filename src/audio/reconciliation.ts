import type { Logger } from '../platform/log.ts';
import type { AudioServer } from './audio-server.ts';
import type { ListenerSessionRow, ListenerSessions } from './listener-sessions.ts';
import { mountOf, parseMount } from './mounts.ts';
import type { OnAir } from './on-air.ts';

export interface Reconciled {
  mountsStarted: number;
  mountsEnded: number;
  sessionsEnded: number;
  clientsRemoved: number;
}

/**
 * The store made to agree with what Icecast has (at start, when Icecast comes back, nightly): a lost
 * mount_remove or listener_remove leaves no ghost interval or session, a lost mount_add no gap, and a listener
 * Icecast has that Minaret never admitted (a callback answered after Icecast gave up on it) is removed.
 * Null when Icecast did not answer: nothing is changed on a guess.
 */
export async function reconcile(deps: { server: AudioServer; sessions: ListenerSessions; onAir: OnAir; mosqueExists: (id: string) => Promise<boolean>; logger: Logger; nowSeconds: () => number }): Promise<Reconciled | null> {
  const { server, sessions, onAir } = deps;
  const now = deps.nowSeconds();
  const mounts = await server.listMounts();
  if (!mounts.ok) return null;
  const live = new Set<string>();
  for (const m of mounts.value) {
    const parsed = parseMount(m);
    if (parsed && (await deps.mosqueExists(parsed.mosqueId))) live.add(parsed.mosqueId);
  }
  const out: Reconciled = { mountsStarted: 0, mountsEnded: 0, sessionsEnded: 0, clientsRemoved: 0 };
  for (const row of await onAir.listOnAir()) if (!live.has(row.mosque_id) && row.started_at <= now - SETTLE_S && (await onAir.stop(row.mosque_id, 'reconciled'))) out.mountsEnded++;
  for (const id of live) if (await onAir.start(id, null)) out.mountsStarted++;

  for (const id of live) {
    const listed = await server.listClients(mountOf(id));
    if (!listed.ok) return null;
    const ids = new Set((listed.value ?? []).map((c) => c.id));
    // Read after the listing: a listener admitted meanwhile is in both, never taken for an unadmitted one.
    const admitted = await sessions.listOpen(id);
    const known = new Set(admitted.map((s) => s.client_id));
    for (const clientId of ids) {
      if (known.has(clientId)) continue;
      const killed = await server.killClient(mountOf(id), clientId);
      if (killed.ok && killed.value) out.clientsRemoved++;
    }
    out.sessionsEnded += await endUnlisted(admitted.filter((s) => !ids.has(s.client_id)), sessions, now);
  }
  out.sessionsEnded += await endUnlisted((await sessions.listOpen()).filter((s) => !live.has(s.mosque_id)), sessions, now);
  if (out.mountsStarted + out.mountsEnded + out.sessionsEnded + out.clientsRemoved > 0) deps.logger.info({ ...out }, 'audio reconciled with Icecast');
  return out;
}

/** Icecast lists a client (or a mount) only after its callback was answered: one this young may not be listed yet. */
const SETTLE_S = 5;

async function endUnlisted(list: ListenerSessionRow[], sessions: ListenerSessions, now: number): Promise<number> {
  let ended = 0;
  for (const s of list) if (s.started_at <= now - SETTLE_S && (await sessions.close(s, 'reconciled'))) ended++;
  return ended;
}
