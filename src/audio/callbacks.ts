import type { Logger } from '../platform/log.ts';
import { admitListener, admitSource, type AdmissionFacts } from './admission/admission.ts';
import type { ListenerSessions } from './listener-sessions.ts';
import { parseMount } from './mounts.ts';
import type { OnAir } from './on-air.ts';

/** A callback of Icecast 2.4's URL authentication, its form fields already checked for shape (api/audio/hooks.ts). */
export interface HookRequest {
  action: 'stream_auth' | 'listener_add' | 'listener_remove' | 'mount_add' | 'mount_remove';
  mount: string;
  client?: number | undefined;
  user?: string | undefined;
  pass?: string | undefined;
  ip?: string | undefined;
  duration?: number | undefined;
  bytes?: number | undefined;
  admin?: boolean | undefined;
}

/**
 * `admit`: answer with `icecast-auth-user: 1` (and the time limit); `refuse`: anything else, with the reason
 * (Icecast logs `icecast-auth-message`); `noted`: a notice (mount or listener left) was recorded.
 */
export type HookAnswer = { kind: 'admit'; timelimitS?: number } | { kind: 'refuse'; reason: string } | { kind: 'noted' };

export const ACTIONS = ['stream_auth', 'listener_add', 'listener_remove', 'mount_add', 'mount_remove'] as const;
/** Where Minaret answers them (`POST <path>/<action>`), and the user name of their HTTP basic; the password is ICECAST_HOOK_SECRET. */
export const HOOK_PATH = '/api/v1/audio/hooks';
export const HOOK_USER = 'icecast';

/** The five callbacks, answered from the admission rules and recorded in the audio tables. */
export function createCallbacks(deps: {
  facts: () => AdmissionFacts; sessions: ListenerSessions; onAir: OnAir; logger: Logger;
  /** A listener of the mosque was admitted or left (the console's live count). */
  onListeners?: (mosqueId: string) => void;
}) {
  const { sessions, onAir, logger } = deps;
  /** stream_auth's admitted transmitter per mount, until its mount_add names it in the on-air interval. */
  const pendingSource = new Map<string, string>();

  const streamAuth = async (r: HookRequest): Promise<HookAnswer> => {
    const decision = await admitSource({ mount: r.mount, user: r.user ?? '', pass: r.pass ?? '', admin: r.admin === true }, deps.facts());
    if (!decision.ok) {
      await sessions.refuse({ mosqueId: decision.mosqueId, kind: 'source', reason: decision.reason, deviceId: decision.deviceId ?? null });
      logger.info({ mount: r.mount.split('?', 1)[0], reason: decision.reason, device_id: decision.deviceId }, 'audio source refused');
      return { kind: 'refuse', reason: decision.reason };
    }
    pendingSource.set(decision.mosqueId, decision.deviceId);
    return { kind: 'admit' };
  };

  const listenerAdd = async (r: HookRequest): Promise<HookAnswer> => {
    const facts = deps.facts();
    const decision = await admitListener(r.mount, facts);
    if (!decision.ok) {
      await sessions.refuse({ mosqueId: decision.mosqueId, kind: 'listener', reason: decision.reason, deviceId: decision.deviceId ?? null, userId: decision.userId ?? null });
      return { kind: 'refuse', reason: decision.reason };
    }
    // Icecast always sends `client` with listener_add; without it the session could never be closed or cut.
    if (r.client === undefined) return { kind: 'refuse', reason: 'no_client_id' };
    await sessions.open({ mosqueId: decision.mosqueId, clientId: r.client, listener: decision.listener, ip: r.ip ?? null });
    deps.onListeners?.(decision.mosqueId);
    return { kind: 'admit', timelimitS: Math.max(1, decision.untilSeconds - facts.nowSeconds) };
  };

  const listenerRemove = async (r: HookRequest): Promise<HookAnswer> => {
    const parsed = parseMount(r.mount);
    const open = parsed && r.client !== undefined ? await sessions.findOpen(parsed.mosqueId, r.client) : null;
    if (open) {
      await sessions.close(open, 'left', { seconds: r.duration, bytes: r.bytes });
      deps.onListeners?.(open.mosque_id);
    }
    return { kind: 'noted' };
  };

  const mountAdd = async (r: HookRequest): Promise<HookAnswer> => {
    const parsed = parseMount(r.mount);
    if (parsed && (await deps.facts().mosqueExists(parsed.mosqueId))) {
      const deviceId = pendingSource.get(parsed.mosqueId) ?? null;
      pendingSource.delete(parsed.mosqueId);
      await onAir.start(parsed.mosqueId, deviceId);
    }
    return { kind: 'noted' };
  };

  const mountRemove = async (r: HookRequest): Promise<HookAnswer> => {
    const parsed = parseMount(r.mount);
    if (parsed) await onAir.stop(parsed.mosqueId, 'source_left');
    return { kind: 'noted' };
  };

  const handlers = { stream_auth: streamAuth, listener_add: listenerAdd, listener_remove: listenerRemove, mount_add: mountAdd, mount_remove: mountRemove } satisfies Record<HookRequest['action'], (r: HookRequest) => Promise<HookAnswer>>;
  return { handle: (r: HookRequest): Promise<HookAnswer> => handlers[r.action](r) };
}
