import crypto from 'node:crypto';
import { Hono } from 'hono';
import type { BroadcastEvent } from '../../src/broadcasts/broadcast-story.ts';
import type { ListenersEvent, OnAirEvent } from '../../src/broadcasts/on-air-story.ts';
import type { DeviceStatusEvent } from '../../src/devices/stories/presence.ts';
import type { AdminStore } from '../../src/mosques/admins.ts';
import type { ScheduleEvent } from '../../src/schedule/scheduler.ts';
import type { Memberships } from '../../src/mosques/memberships.ts';
import type { MosqueStore } from '../../src/mosques/mosques.ts';
import type { ChangeFeed } from '../../src/platform/changes.ts';
import type { Clock } from '../../src/platform/clock.ts';
import type { ConsoleSessions } from '../../src/people/sessions.ts';
import type { AccessTokens } from '../../src/people/tokens.ts';
import type { AppEnv } from '../context.ts';
import { ApiError } from '../errors.ts';
import { bearerToken, mosqueGate } from '../guards.ts';

/**
 * Live updates of one mosque for its admins, as Server-Sent Events (the console's only live source: people
 * never see MQTT). EventSource cannot send an Authorization header, so the stream opens with a ticket:
 * 30 s, single use, bound to one user, one mosque and the bearer token it was issued under (or the console
 * session that token was minted from), kept in memory as SHA-256 only. A ticket in a URL is short-lived and useless once redeemed; the request log records the
 * path without the query.
 */
export const TICKET_TTL_S = 30;
export const HEARTBEAT_MS = 25_000;
/**
 * How often an open stream re-checks its token (revoked, expired) and the admin row it was opened with: the
 * safety net. A change the feed names (an admin row removed, a token revoked) re-checks at once, in every
 * process (src/platform/changes.ts).
 */
export const RECHECK_MS = 5_000;
export const MAX_STREAMS_PER_USER = 3;
export const MAX_STREAMS = 200;
/** Unredeemed tickets kept at once (each lives 30 s): a flood of ticket requests cannot grow memory. */
export const MAX_OPEN_TICKETS = 10_000;

/** Each message is built by the story that tells it (docs/architecture.md, "Where each story lives"). */
export type MosqueEvent = DeviceStatusEvent | BroadcastEvent | ScheduleEvent | OnAirEvent | ListenersEvent;

/** `sessionId`: the console session the token was minted from (docs/api.md "Console sessions"), or null. */
interface Ticket { userId: string; role: string; mosqueId: string; token: string; sessionId: string | null; expiresAt: number }
interface Stream { userId: string; mosqueId: string; send(e: MosqueEvent): void; close(): void; recheck(): void }

/** The hub the stories announce to (device status, broadcast start/stop, slots, on air, listeners). */
export function createMosqueEvents() {
  const streams = new Set<Stream>();
  return {
    streams,
    /**
     * `event` is built only when a stream of that mosque is open: publishers run on hot paths (every status
     * transition of every device) while streams are few and usually none.
     */
    publish(mosqueId: string | null, event: () => MosqueEvent): void {
      if (!mosqueId || streams.size === 0) return;
      let built: MosqueEvent | null = null;
      for (const s of streams) if (s.mosqueId === mosqueId) s.send((built ??= event()));
    },
    /** Whether a stream of that mosque is open now (a publisher whose event needs a query asks first). */
    listens: (mosqueId: string): boolean => [...streams].some((s) => s.mosqueId === mosqueId),
    closeAll(): void {
      for (const s of [...streams]) s.close();
    },
  };
}
export type MosqueEvents = ReturnType<typeof createMosqueEvents>;

interface Deps {
  clock: Clock;
  tokens: AccessTokens;
  consoleSessions: Pick<ConsoleSessions, 'isLive'>;
  mosques: MosqueStore;
  admins: AdminStore;
  memberships: Memberships;
  mosqueEvents: MosqueEvents;
  changes: Pick<ChangeFeed, 'subscribe'>;
}

const sha256 = (s: string) => crypto.createHash('sha256').update(s).digest('hex');

export function eventRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const tickets = new Map<string, Ticket>();
  const nowS = () => Math.floor(deps.clock() / 1000);
  const sweep = () => {
    for (const [key, t] of tickets) if (t.expiresAt <= nowS()) tickets.delete(key);
  };
  /**
   * A token minted from a console session lives minutes, the console's stream for as long as the page is open: such
   * a stream lives with the session, which every revocation of the account or of that token ends too.
   */
  const credentialLive = async (t: Pick<Ticket, 'userId' | 'token' | 'sessionId'>) => {
    if (t.sessionId) return deps.consoleSessions.isLive(t.sessionId, t.userId);
    const claims = await deps.tokens.verify(t.token);
    return claims !== null && claims.id === t.userId;
  };
  const stillAllowed = async (t: Pick<Ticket, 'userId' | 'role' | 'mosqueId' | 'token' | 'sessionId'>) => {
    if (!(await credentialLive(t))) return false;
    return t.role === 'superadmin' || (await deps.admins.find(t.mosqueId, t.userId)) !== null;
  };
  recheckOnChange(deps.changes, deps.mosqueEvents);

  app.post('/:id/events/ticket', mosqueGate(deps, 'admin'), (c) => {
    sweep();
    if (tickets.size >= MAX_OPEN_TICKETS) throw new ApiError('rate_limited', 'Too many stream tickets outstanding', { headers: { 'Retry-After': String(TICKET_TTL_S) } });
    // The bearer token was checked by requireUser; the ticket remembers it so the stream dies with it.
    const token = bearerToken(c)!;
    const ticket = crypto.randomBytes(32).toString('base64url');
    tickets.set(sha256(ticket), { userId: c.var.user.id, role: c.var.user.role, mosqueId: c.var.mosque.id, token, sessionId: c.var.user.sid, expiresAt: nowS() + TICKET_TTL_S });
    return c.json({ ticket, expires_in: TICKET_TTL_S }, 201);
  });

  app.get('/:id/events/stream', async (c) => {
    sweep();
    const key = sha256(c.req.query('ticket') ?? '');
    const ticket = tickets.get(key);
    tickets.delete(key); // single use, whatever happens next
    if (!ticket || ticket.mosqueId !== c.req.param('id') || !(await stillAllowed(ticket))) throw new ApiError('unauthorized', 'A valid stream ticket is required (POST .../events/ticket)');
    const hub = deps.mosqueEvents;
    const mine = [...hub.streams].filter((s) => s.userId === ticket.userId).length;
    if (mine >= MAX_STREAMS_PER_USER || hub.streams.size >= MAX_STREAMS) throw new ApiError('rate_limited', 'Too many open event streams', { headers: { 'Retry-After': '30' } });
    return c.newResponse(openStream(ticket, hub, () => stillAllowed(ticket)), 200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
      'X-Accel-Buffering': 'no',
    });
  });
  return app;
}

/**
 * The streams a change may end, re-checked at once: the user's own (their admin rows or their token version),
 * the mosque's (gone), or every stream for a signed-out token (the feed names only its hash; streams are few).
 * A resync re-checks nothing: the RECHECK_MS poll already covers whatever a lost message hid.
 */
function recheckOnChange(changes: Pick<ChangeFeed, 'subscribe'>, hub: MosqueEvents): void {
  changes.subscribe({
    changed(change) {
      if (hub.streams.size === 0) return;
      for (const s of [...hub.streams]) {
        const affected = change.kind === 'token'
          || ((change.kind === 'standing' || change.kind === 'user') && s.userId === change.id)
          || (change.kind === 'mosque' && s.mosqueId === change.id);
        if (affected) s.recheck();
      }
    },
    resync() {},
  });
}

function openStream(ticket: Ticket, hub: MosqueEvents, allowed: () => Promise<boolean>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let stream: Stream;
  const timers: NodeJS.Timeout[] = [];
  return new ReadableStream<Uint8Array>({
    start(controller) {
      let open = true;
      const write = (text: string) => {
        if (!open) return;
        try {
          controller.enqueue(encoder.encode(text));
        } catch {
          stream.close();
        }
      };
      stream = {
        userId: ticket.userId,
        mosqueId: ticket.mosqueId,
        send: (e) => write(`event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`),
        close: () => {
          if (!open) return;
          open = false;
          hub.streams.delete(stream);
          timers.forEach(clearInterval);
          try {
            controller.close();
          } catch { /* already closed by the client */ }
        },
        recheck: () => void allowed().then((ok) => ok || stream.close()),
      };
      hub.streams.add(stream);
      // Comments keep proxies and NAT boxes from dropping a quiet connection.
      timers.push(setInterval(() => write(': heartbeat\n\n'), HEARTBEAT_MS));
      timers.push(setInterval(() => stream.recheck(), RECHECK_MS));
      timers.forEach((t) => t.unref());
      write(`retry: 5000\n: open\n\n`);
    },
    cancel() {
      stream.close();
    },
  });
}
