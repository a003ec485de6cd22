import { Hono, type MiddlewareHandler } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { bodyLimit } from 'hono/body-limit';
import type { AddressChange } from '../src/people/addresses/address-change.ts';
import type { PeopleAuth } from '../src/people/auth.ts';
import type { FirstSuperadmin } from '../src/people/admin/first-superadmin.ts';
import type { Clock } from '../src/platform/clock.ts';
import type { TrustProxy } from '../src/platform/net/client-address.ts';
import { storageFaultOf, type Faults } from '../src/platform/faults.ts';
import type { Logger } from '../src/platform/log.ts';
import type { SuperadminAuth } from '../src/people/superadmin.ts';
import type { AccessTokens } from '../src/people/tokens.ts';
import type { UserStore } from '../src/people/users.ts';
import type { ActivityLog } from '../src/mosques/activity.ts';
import type { AdminStore } from '../src/mosques/admins.ts';
import type { BroadcastRow, Broadcasts, DeliveryReport } from '../src/broadcasts/broadcasts.ts';
import type { Invites } from '../src/mosques/invites.ts';
import type { Memberships } from '../src/mosques/memberships.ts';
import type { MosqueOps } from '../src/mosques/mosque-ops.ts';
import type { MosqueStore } from '../src/mosques/mosques.ts';
import type { PushSubscriptions } from '../src/broadcasts/push-subscriptions.ts';
import type { UserAdmin } from '../src/people/admin/user-admin.ts';
import { broadcastRoutes } from './broadcasts/broadcasts.ts';
import { inviteRoutes } from './mosques/invites.ts';
import { JOIN_LOOKUP_PATH, membershipRoutes } from './mosques/memberships.ts';
import { mosqueRoutes } from './mosques/mosques.ts';
import { userRoutes } from './people/users.ts';
import { deviceRoutes } from './devices/devices.ts';
import { pairingRoutes } from './devices/pairing.ts';
import type { Pairings } from '../src/devices/pairing/pairing.ts';
import type { DevicePlane } from '../src/devices/device-plane.ts';
import { buildOpenApi } from './openapi.ts';
import { scheduleRoutes } from './schedule/schedule.ts';
import type { Scheduler } from '../src/schedule/scheduler.ts';
import type { ScheduleStore } from '../src/schedule/schedule-store.ts';
import { CONSOLE_PATHS, consoleRoutes } from './console/static.ts';
import { eventRoutes, type MosqueEvents } from './mosques/events.ts';
import { authRoutes, authSecurityHeaders } from './people/auth.ts';
import type { AppEnv } from './context.ts';
import { withRequestContext } from './request-context.ts';
import { ApiError, errorBody, httpStatus } from './errors.ts';
import { requireUser } from './guards.ts';
import { meRoutes } from './people/me.ts';
import { passwordRoutes, signOutRoutes } from './people/sessions.ts';
import type { ConsoleSessions, Sessions } from '../src/people/sessions.ts';
import { consoleSessionRoutes } from './people/console-session.ts';
import type { LimiterStore } from './rate-limit.ts';
import type { ChangeFeed } from '../src/platform/changes.ts';
import type { Audio } from '../src/audio/audio.ts';
import { HOOK_PATH } from '../src/audio/callbacks.ts';
import { hookRoutes } from './audio/hooks.ts';
import { listenRoutes } from './audio/listen.ts';
import type { AdmitRecording, Recordings } from '../src/audio/recordings.ts';
import { RECORDING_DOWNLOAD_PATH, RECORDING_UPLOAD_PATH, recordingRoutes } from './audio/recordings.ts';
import { FIRMWARE_DOWNLOAD_PATH, FIRMWARE_UPLOAD_PATH, firmwareImageRoutes } from './firmware/images.ts';
import type { FirmwareImages } from '../src/firmware/images.ts';
import type { Firmware } from '../src/firmware/firmware.ts';
import { firmwareRolloutRoutes } from './firmware/rollouts.ts';
import type { DeviceInfo } from '../src/devices/devices.ts';

export const BODY_LIMIT_BYTES = 64 * 1024;

/** Paths under /api/v1 that need no bearer token. */
const PUBLIC_PATHS = new Set(['/api/v1/openapi.json', '/api/v1/asyncapi.json', '/api/v1/devices/lease-keys', '/api/v1/devices/pairing', '/api/v1/devices/pairing/token', '/api/v1/push/vapid-public-key']);
/** The event stream authenticates with its own ticket: EventSource cannot send an Authorization header. */
const STREAM_PATH = /^\/api\/v1\/mosques\/[^/]+\/events\/stream$/;
/** Icecast's callbacks carry the hook secret instead of a bearer token (api/audio/hooks.ts). */
const HOOKS_PREFIX = `${HOOK_PATH}/`;
const isPublic = (path: string) => path.startsWith('/api/v1/auth/') || PUBLIC_PATHS.has(path) || STREAM_PATH.test(path) || path.startsWith(HOOKS_PREFIX) || RECORDING_DOWNLOAD_PATH.test(path)
  || FIRMWARE_DOWNLOAD_PATH.test(path) || JOIN_LOOKUP_PATH.test(path);

/**
 * Whether a path names a route at all (any method), from Hono's route list: `:param` matches one segment.
 * One alternation, compiled once: it runs before the token check of every request.
 */
function pathMatcher(routes: Array<{ path: string }>): (path: string) => boolean {
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const patterns = [...new Set(routes.map((r) => r.path))]
    .filter((p) => !p.includes('*'))
    .map((p) => p.split('/').map((seg) => (seg.startsWith(':') ? '[^/]+' : escape(seg))).join('/'));
  const known = new RegExp(`^(?:${patterns.join('|')})/?$`);
  return (path) => known.test(path);
}

export interface ApiDeps {
  logger: Logger;
  clock: Clock;
  users: UserStore;
  tokens: AccessTokens;
  peopleAuth: PeopleAuth;
  addressChange: AddressChange;
  /** The setup link of a service without a superadmin (src/people/admin/first-superadmin.ts). */
  firstSuperadmin: FirstSuperadmin;
  superadminAuth: SuperadminAuth;
  /** The caller's own sessions: password change, logout, logout-all (src/people/sessions.ts). */
  sessions: Sessions;
  /** The console's session cookies (docs/api.md "Console sessions") and their absolute lifetime (the cookie's Max-Age). */
  consoleSessions: ConsoleSessions;
  consoleSessionSettings: { absoluteSeconds: number };
  userAdmin: UserAdmin;
  mosques: MosqueStore;
  admins: AdminStore;
  memberships: Memberships;
  mosqueOps: MosqueOps;
  invites: Invites;
  broadcasts: Broadcasts;
  activity: ActivityLog;
  pushSubscriptions: PushSubscriptions;
  plane: DevicePlane;
  /** Pairing a device by a short code (docs/api.md, "Pairing a device") and its limits (docs/settings.md, PAIRING_*). */
  pairings: Pairings;
  pairingLimits: { guessesPerPerson: number; guessesPerAddress: number; startsPerAddress: number; pollHoldSeconds: number };
  mqttPort: () => number;
  mqttsPort: () => number | null;
  deliveryReport: (b: BroadcastRow) => Promise<DeliveryReport>;
  vapidPublicKey: string;
  /** Queues a test notification to the user's own push subscriptions; returns how many. */
  sendTestPush: (userId: string) => Promise<number>;
  authRateLimit: number;
  /** STREAM_HTTP_HOSTS: hosts a mosque's stream address may name over plain http. */
  streamHttpHosts: readonly string[];
  authIdentifierRateLimit: number;
  /** POST /invites budgets (docs/settings.md): per mosque an hour, per invited address a day. */
  invitesPerMosquePerHour: number;
  invitesPerAddressPerDay: number;
  /** With REDIS_URL, the service's Redis connection: the auth rate limits are counted there, for all processes. */
  rateLimitStore: LimiterStore;
  /** What changed, in this process and (REDIS_URL) the others: the /me cache listens (src/platform/changes.ts). */
  changes: Pick<ChangeFeed, 'subscribe'>;
  trustProxy: TrustProxy;
  /** LOG_REQUESTS: every request line at `info` rather than `debug` (docs/settings.md). */
  logRequests: boolean;
  /** Builds the AsyncAPI document of the device topics (broker/, handed in by the composition root); called on its first request. */
  asyncApi: () => Record<string, unknown>;
  /** PUBLIC_URL: the origin devices and apps reach this service at; null derives it from each request. */
  publicUrl: string | null;
  /** The health of each part, for GET /healthz: 'ok', or what is wrong with it (db: 'full', say). */
  health: () => Record<string, string>;
  /** A write the database refused (disk full, busy) is a 503, not a 500: counted and logged there. */
  faults: Faults;
  scheduler: Scheduler;
  scheduleStore: ScheduleStore;
  graceMs: number;
  reportFor: (mosqueId: string, broadcastId: string) => Promise<unknown>;
  /** Live mosque events for the SSE stream, fed by the composition root. */
  mosqueEvents: MosqueEvents;
  /** The console's folder, served at `/`; null serves no console (API only). */
  consoleDir: string | null;
  /** ICECAST_URL: the console's page may play audio from it (its CSP's media-src). */
  icecastUrl: string | null;
  /** The audio gate (src/audio/audio.ts); null while ICECAST_URL is unset. */
  audio: Audio | null;
  /** ICECAST_HOOK_SECRET, which Icecast's callbacks carry; null while the audio gate is off. */
  hookSecret: string | null;
  /** Each mosque's recorded azaan (src/audio/recordings.ts) and who may download it. */
  recordings: Recordings;
  admitRecording: AdmitRecording;
  /** RECORDING_MAX_BYTES: the body limit of the recording upload, a route past BODY_LIMIT_BYTES. */
  recordingMaxBytes: number;
  /** Firmware images and who may download one (docs/api.md, "Firmware updates"); FIRMWARE_MAX_BYTES bounds an upload. */
  firmwareImages: FirmwareImages | null;
  firmwareMaxBytes: number;
  firmwareDevices: { load(id: string): Promise<unknown>; info(id: string): DeviceInfo | null; verifySecret(id: string, password: string): boolean };
  firmwareOffers: { holds(deviceId: string, imageId: string): Promise<boolean>; inUse(imageId: string): Promise<boolean> };
  /** Staged rollouts and a device's firmware history (src/firmware/firmware.ts). */
  firmwareRollouts: Firmware['rollouts'];
}

/** The routes that have handlers (method + Hono path), without middleware: for the OpenAPI and matrix tests. */
export function handlerRoutes(app: { routes: Array<{ method: string; path: string }> }): Array<{ method: string; path: string }> {
  const seen = new Map<string, { method: string; path: string }>();
  for (const r of app.routes) if (r.method !== 'ALL' && !r.path.endsWith('*') && !CONSOLE_PATHS.has(r.path)) seen.set(`${r.method} ${r.path}`, { method: r.method, path: r.path });
  return [...seen.values()];
}

/** The HTTP door: every route, the error table, request ids and the body limit; `fetch` is node-server's handler. */
export function createApi(deps: ApiDeps) {
  const app = new Hono<AppEnv>();

  // Before the body limit, so an oversized body refused there still gets the auth headers.
  app.use('/api/v1/auth/*', authSecurityHeaders);
  const limitBody = bodyLimit({ maxSize: BODY_LIMIT_BYTES, onError: () => { throw new ApiError('payload_too_large'); } });
  // Only where a body can come: @hono/node-server gives GET and HEAD none, and bodyLimit's look at
  // c.req.raw.body would build the full WHATWG Request (an AbortController, undici Headers) for every one of
  // them just to find that out. Registered by method, a GET does not even pass through it.
  // The recording and firmware uploads (raw bytes, RECORDING_MAX_BYTES, FIRMWARE_MAX_BYTES) are the exceptions: their routes set their own limits.
  const rawUpload = (path: string) => RECORDING_UPLOAD_PATH.test(path) || FIRMWARE_UPLOAD_PATH.test(path);
  app.on(['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'], '*', (c, next) => (c.req.method === 'PUT' && rawUpload(c.req.path) ? next() : limitBody(c, next)));
  // Outside the v1 group's bearer check and its JSON bodies: Icecast posts forms, authenticated by the hook secret.
  app.route(HOOK_PATH, hookRoutes(deps));

  // docs/operator.md, "Health": 503 only when this node cannot serve (its store or its broker), so a load balancer
  // takes out only such a node; an optional part's outage (the audio server) is named with 200, or every node would
  // go out with it and the API, the console and the audio callbacks with them.
  app.get('/healthz', (c) => {
    const parts = deps.health();
    const healthy = Object.values(parts).every((state) => state === 'ok');
    const serving = parts.db === 'ok' && parts.broker === 'ok';
    const body = { status: healthy ? 'ok' : 'degraded', ...parts };
    return c.json(body, serving ? 200 : 503);
  });

  const v1 = new Hono<AppEnv>();
  const signedIn = requireUser(deps.tokens);
  v1.route('/auth', authRoutes(deps));
  v1.route('/auth', signOutRoutes(deps));
  v1.route('/auth', consoleSessionRoutes(deps));
  // Everything but /auth needs a signed-in person; a device password never opens this door. A path that
  // names no route answers 404 with or without a token (docs/api.md, "Base URL and conventions"), so it skips the check.
  let isRoute: (path: string) => boolean = () => true;
  v1.use('*', (c, next) => (isPublic(c.req.path) || !isRoute(c.req.path) ? next() : signedIn(c, next)));
  // Built on their first request, not at start (~0.7 MiB of heap most services never serve).
  let openapi: Record<string, unknown> | null = null;
  let asyncapi: Record<string, unknown> | null = null;
  v1.get('/openapi.json', (c) => c.json((openapi ??= buildOpenApi())));
  v1.get('/asyncapi.json', (c) => c.json((asyncapi ??= deps.asyncApi())));
  // Public: a browser needs it to subscribe (applicationServerKey) before it can register the subscription.
  v1.get('/push/vapid-public-key', (c) => c.json({ public_key: deps.vapidPublicKey }));
  v1.route('/me', meRoutes(deps));
  v1.route('/me', passwordRoutes(deps));
  v1.route('/users', userRoutes(deps));
  v1.route('/mosques', mosqueRoutes(deps));
  v1.route('/mosques', broadcastRoutes(deps));
  v1.route('/mosques', scheduleRoutes(deps));
  v1.route('/mosques', eventRoutes(deps));
  v1.route('/mosques', listenRoutes(deps));
  v1.route('/invites', inviteRoutes(deps));
  v1.route('/', membershipRoutes(deps));
  // Before the registry: /devices/pairing is not a device id.
  v1.route('/', pairingRoutes(deps));
  v1.route('/', deviceRoutes(deps));
  v1.route('/', recordingRoutes(deps));
  v1.route('/', firmwareImageRoutes(deps));
  v1.route('/', firmwareRolloutRoutes({ ...deps, firmwareOn: deps.firmwareImages !== null }));
  app.route('/api/v1', v1);
  isRoute = pathMatcher(handlerRoutes(app));
  // After the API, so a console path never shadows a route; the console never sees /api/*.
  const consolePages = deps.consoleDir ? consoleRoutes(deps.consoleDir, deps.publicUrl, deps.recordingMaxBytes, deps.icecastUrl ? new URL(deps.icecastUrl).origin : null) : null;
  if (consolePages) app.route('/', consolePages.app);

  // A console page (its client-side routes) is what a path that names no route may still be.
  app.notFound((c) => consolePages?.pageFor(c) ?? c.json(errorBody('not_found'), 404));
  app.onError((err, c) => {
    if (err instanceof ApiError) {
      for (const [name, value] of Object.entries(err.headers ?? {})) c.header(name, value);
      return c.json(errorBody(err.failure, err.message, err.details), httpStatus[err.failure]);
    }
    if (err instanceof HTTPException && err.status === 413) return c.json(errorBody('payload_too_large'), 413);
    if (storageFaultOf(err)) {
      deps.faults.report('http write', err, { req_id: c.env.requestId, method: c.req.method, path: c.req.path });
      return c.json(errorBody('storage_unavailable'), 503);
    }
    // Never a stack trace to the client: the request id is what an operator needs to find it in the log.
    deps.logger.error({ req_id: c.env.requestId, err: { message: err.message, stack: err.stack } }, 'unhandled error');
    return c.json(errorBody('internal_error', `Internal error; request id ${c.env.requestId}`), 500);
  });
  return { routes: app.routes, fetch: withRequestContext(app.fetch, deps.logger, deps.trustProxy, deps.logRequests) };
}

