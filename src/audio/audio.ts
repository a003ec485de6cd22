import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { Change, ChangeListener } from '../platform/changes.ts';
import type { Store } from '../platform/store/store.ts';
import type { Logger } from '../platform/log.ts';
import type { DeviceInfo } from '../devices/devices.ts';
import type { Lease } from '../devices/entitlement.ts';
import type { LeaseClaims } from '../devices/leases.ts';
import type { MembershipStatus } from '../mosques/memberships.ts';
import type { AdmissionFacts } from './admission/admission.ts';
import type { AudioServer } from './audio-server.ts';
import { createCallbacks, type HookAnswer, type HookRequest } from './callbacks.ts';
import { leaseFacts } from './lease-admission.ts';
import { createListenTickets } from './admission/listen-tickets.ts';
import { createListenerSessions } from './listener-sessions.ts';
import { streamAddresses } from './mounts.ts';
import { createOnAir } from './on-air.ts';
import { reconcile, type Reconciled } from './reconciliation.ts';
import { createRevocation } from './admission/revocation.ts';

/** How often Icecast's admin API is asked whether it is there (/healthz names `audio` from the last answer). */
export const AUDIO_PROBE_INTERVAL_MS = 5_000;
/** The nightly pass: reconciliation with Icecast and pruning of old sessions and refusals. */
export const AUDIO_RECONCILE_INTERVAL_MS = 24 * 3600 * 1000;

export interface AudioDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  server: AudioServer;
  /** ICECAST_URL, no trailing slash. */
  publicBase: string;
  /** The key listen tickets are signed with (derived for that purpose only). */
  ticketKey: Buffer;
  retentionDays: number;
  mosqueExists(id: string): Promise<boolean>;
  devices: { info(id: string): DeviceInfo | null; verifySecret(id: string, password: string): boolean; ownedBy(userId: string): string[] };
  verifyLease(token: string): LeaseClaims | null;
  lease(deviceId: string): Lease | null;
  membershipStatus(mosqueId: string, userId: string): Promise<MembershipStatus | null>;
  isAdmin(mosqueId: string, userId: string): Promise<boolean>;
  onError(what: string, err: unknown): void;
}

/**
 * The audio domain (docs/operator.md#audio-icecast): Icecast's callbacks answered and recorded, listeners that no
 * longer stand removed, the store reconciled with Icecast, and its health. Built only when ICECAST_URL is set.
 */
export function createAudio(deps: AudioDeps) {
  const { clock, logger, server } = deps;
  const nowSeconds = () => toUnixSeconds(clock());
  const sessions = createListenerSessions(deps.store, clock);
  const onAir = createOnAir(deps.store, clock, (err) => deps.onError('audio on-air listener', err));
  const tickets = createListenTickets(deps.ticketKey);
  const addresses = streamAddresses(deps.publicBase);
  const facts = (): AdmissionFacts => ({
    ...leaseFacts({ nowSeconds: nowSeconds(), verifyLease: deps.verifyLease, device: deps.devices.info, lease: deps.lease, membershipStatus: deps.membershipStatus }),
    mosqueExists: deps.mosqueExists,
    verifySecret: deps.devices.verifySecret,
    isAdmin: deps.isAdmin,
    verifyTicket: (token) => tickets.verify(token, nowSeconds()),
  });
  const listenerWatchers: Array<(mosqueId: string) => void> = [];
  const callbacks = createCallbacks({ facts, sessions, onAir, logger, onListeners: (mosqueId) => listenerWatchers.forEach((fn) => fn(mosqueId)) });
  const revocation = createRevocation({ facts, sessions, server, logger, onError: deps.onError, sourcedBy: onAir.sourcedBy });

  let state: 'ok' | 'down' = 'ok';
  let probing: Promise<void> | null = null;
  const reconcileNow = (): Promise<Reconciled | null> => reconcile({ server, sessions, onAir, mosqueExists: deps.mosqueExists, logger, nowSeconds });
  /** One probe at a time; Icecast coming back is reconciled at once (what happened while it was away). */
  const probe = (): Promise<void> => (probing ??= (async () => {
    const answer = await server.listMounts();
    const was = state;
    state = answer.ok ? 'ok' : 'down';
    if (was !== state) {
      if (answer.ok) logger.info({}, 'audio server reachable again');
      else logger.warn({ problem: answer.problem, detail: answer.detail }, 'audio server unreachable: /healthz says audio down');
    }
    if (was === 'down' && answer.ok) await reconcileNow();
  })().catch((err: unknown) => deps.onError('audio probe', err)).finally(() => {
    probing = null;
  }));
  const nightly = async () => {
    await reconcileNow();
    await revocation.recheckAll();
    const pruned = await sessions.prune(nowSeconds() - deps.retentionDays * 86_400);
    if (pruned > 0) logger.info({ pruned }, 'audio sessions and refusals pruned');
  };
  let timers: NodeJS.Timeout[] = [];
  const every = (ms: number, what: string, fn: () => Promise<unknown>) => {
    const timer = setInterval(() => void fn().catch((err: unknown) => deps.onError(what, err)), ms);
    timer.unref();
    return timer;
  };

  function changed(change: Change): void {
    if (change.kind === 'device') revocation.deviceChanged(change.id);
    else if (change.kind === 'standing' || change.kind === 'user') revocation.standingChanged(change.id, deps.devices.ownedBy(change.id));
    else if (change.kind === 'mosque') revocation.mosqueChanged(change.id);
  }

  return {
    /** Answers one Icecast callback (api/audio/hooks.ts). */
    handleHook: (r: HookRequest): Promise<HookAnswer> => callbacks.handle(r),
    /** A short-lived listener address for the console (POST /api/v1/mosques/{id}/listen); the caller's standing is checked by the route. */
    listenUrl(userId: string, mosqueId: string): { url: string; expiresAt: number } {
      const ticket = tickets.issue(userId, mosqueId, nowSeconds());
      return { url: addresses.withTicket(mosqueId, ticket.token), expiresAt: ticket.expiresAt };
    },
    /**
     * The process's own committed changes (src/platform/changes.ts, origin `local`): exactly the process that made
     * a change rechecks the listeners it concerns; the others learn of it on the feed but leave it to that one.
     */
    changed,
    /** The safety net under the feed (every process, each SHARED_CACHE_RELOAD_S): every open session rechecked. */
    recheckAll: () => revocation.recheckAll(),
    /** The audio gate's subscription to the change feed: `changed` for this process's own, `recheckAll` on a resync. */
    followChanges: {
      changed: (change, origin) => {
        if (origin === 'local') changed(change);
      },
      resync: () => void revocation.recheckAll().catch((err: unknown) => deps.onError('audio recheck', err)),
    } satisfies ChangeListener,
    reconcile: reconcileNow,
    /** `ok`, or `down` while Icecast's admin API does not answer in time. */
    health: () => state,
    probe,
    isOnAir: onAir.isOnAir,
    listOnAir: onAir.listOnAir,
    currentOnAir: onAir.current,
    listOnAirIntervals: onAir.listIntervals,
    onAirChange: onAir.onAirChange,
    /** Told when a listener of a mosque is admitted or leaves, in the process Icecast asked. */
    onListenersChange: (fn: (mosqueId: string) => void) => void listenerWatchers.push(fn),
    listOpenSessions: sessions.listOpen,
    listSessions: sessions.listOverlapping,
    countRefusals: sessions.countRefusals,
    start(): void {
      void probe().then(() => (state === 'ok' ? nightly() : undefined)).catch((err: unknown) => deps.onError('audio start', err));
      timers = [every(AUDIO_PROBE_INTERVAL_MS, 'audio probe', probe), every(AUDIO_RECONCILE_INTERVAL_MS, 'audio nightly pass', nightly)];
    },
    async stop(): Promise<void> {
      for (const t of timers) clearInterval(t);
      timers = [];
      await probing;
    },
  };
}

export type Audio = ReturnType<typeof createAudio>;
