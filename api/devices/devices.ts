import { Hono } from 'hono';
import * as v from 'valibot';
import { standingOf, type AdminStore } from '../../src/mosques/admins.ts';
import { HEARTBEAT, MAX_HEARTBEAT_SECS, type DeviceKind } from '../../src/devices/device-config.ts';
import type { DevicePlane } from '../../src/devices/device-plane.ts';
import { toDevice, type DeviceRow } from '../../src/devices/devices.ts';
import type { Clock } from '../../src/platform/clock.ts';
import { explain } from '../../src/devices/why.ts';
import type { Audio } from '../../src/audio/audio.ts';
import { COMMANDS, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS } from '../../src/devices/commands.ts';
import { parseOrThrow } from '../validate.ts';
import type { MosqueStore } from '../../src/mosques/mosques.ts';
import type { AppContext, AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { actorOf, mosqueGate, type GateDeps } from '../guards.ts';
import { before, freeText, id, limit } from '../schemas.ts';
import { readJson, readQuery } from '../validate.ts';

const deviceName = v.optional(v.nullable(freeText(100)));
const hhmm = v.pipe(v.string(), v.regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'must be HH:MM'));
export const TransmitterCreate = v.object({ kind: v.literal('transmitter'), name: deviceName });
export const PlayerCreate = v.object({ kind: v.literal('stream_player'), mosque_id: v.optional(v.nullable(id)), name: deviceName });
export const DeviceUpdate = v.object({
  name: deviceName,
  mosque_id: v.optional(v.nullable(id)),
  config: v.optional(
    v.object({
      heartbeat_secs: v.optional(v.pipe(v.number(), v.integer('must be whole seconds'), v.maxValue(MAX_HEARTBEAT_SECS, `must be at most ${MAX_HEARTBEAT_SECS}`))),
      log_enabled: v.optional(v.boolean()),
      volume: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0, 'must be 0..100'), v.maxValue(100, 'must be 0..100'))),
      quiet_hours: v.optional(v.nullable(v.object({ start: hhmm, end: hhmm }))),
    }),
  ),
});
export const DeviceListQuery = v.object({ mosque_id: v.optional(id) });
export const EventsQuery = v.object({
  limit: limit(50, 500),
  before: before('an event id'),
});
export const LogsQuery = v.object({ limit: limit(100, 500) });
export const CommandRequest = v.object({
  name: v.picklist(['get_state', 'ping', 'play_test', 'identify', 'diag_bundle', 'set_log_level', 'unbind_mosque']),
  // valibot's record takes an array (and turns it into {"0": ...}); docs/firmware.md, "4.2 Commands" publishes `args` as an object.
  args: v.optional(v.pipe(v.custom<unknown>((a) => typeof a === 'object' && a !== null && !Array.isArray(a), 'must be an object'), v.record(v.string(), v.unknown()))),
  timeout_ms: v.optional(v.pipe(v.number(), v.integer(), v.minValue(100, 'must be at least 100'), v.maxValue(MAX_TIMEOUT_MS, `must be at most ${MAX_TIMEOUT_MS}`))),
});
const SetLogLevelArgs = v.object({
  level: v.picklist(['error', 'warn', 'info', 'debug']),
  ttl_s: v.pipe(v.number(), v.integer('must be whole seconds'), v.minValue(1, 'must be at least 1'), v.maxValue(3600, 'must be at most 3600')),
});

interface Deps extends GateDeps {
  /** The audio gate, null while ICECAST_URL is unset. */
  audio: Pick<Audio, 'isOnAir'> | null;
  mosques: MosqueStore;
  admins: AdminStore;
  plane: DevicePlane;
  mqttPort: () => number;
  /** MQTTS_PORT once listening, else null: credentials then name the TLS door too. */
  mqttsPort: () => number | null;
  publicUrl: string | null;
  clock: Clock;
}

/** A device as GET /devices/{id} answers it (the member's page lists a member's players in this shape too). */
export function deviceBody(plane: DevicePlane) {
  /** Players only: what the store decides and the lease the player holds (transmitters: null). */
  const entitlementOf = (row: DeviceRow) => {
    if (row.kind !== 'stream_player') return null;
    const decision = plane.entitlement.decisionFor(row);
    const lease = plane.entitlement.lease(row.id);
    return {
      entitled: decision.entitled,
      reason: decision.entitled ? null : decision.reason,
      mosque_id: row.mosque_id,
      lease_expires_at: lease ? new Date(lease.expiresAt * 1000).toISOString() : null,
    };
  };
  return (row: DeviceRow) => ({
    ...toDevice(row, { lastSeenAt: lastSeenOf(plane, row.id), connected: plane.telemetry.isConnected(row.id), heartbeat: plane.telemetry.lastHeartbeat(row.id) }),
    counters: plane.telemetry.counters(row.id),
    entitlement: entitlementOf(row),
  });
}

function lastSeenOf(plane: DevicePlane, deviceId: string): number | null {
  const ms = plane.telemetry.lastSeenMs(deviceId);
  return ms === null ? null : Math.floor(ms / 1000);
}

/** The device registry over HTTP, its commands, logs and why (docs/api.md, "Devices, from the app's side"). */
export function deviceRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const { plane } = deps;

  /** The caller's standing toward one device: owner of a player, admin or manager of its mosque, superadmin. */
  const access = (c: AppContext, row: DeviceRow) => {
    const actor = actorOf(c);
    const standing = standingOf(actor, row.mosque_id && !actor.isSuperadmin ? deps.admins.findSync(row.mosque_id, actor.id) : null);
    const owner = row.kind === 'stream_player' && row.owner_user_id === actor.id;
    const inMosque = row.mosque_id !== null || actor.isSuperadmin;
    return { owner, superadmin: actor.isSuperadmin, view: owner || (inMosque && standing.admin), write: owner || (inMosque && standing.manager) };
  };
  /** The device named by :id if the caller may see it (404 otherwise) and, for `write`, change it (403). */
  const load = (c: AppContext, need: 'view' | 'write') => {
    const row = plane.devices.findById(c.req.param('id') ?? '');
    if (!row) throw new ApiError('not_found');
    const a = access(c, row);
    if (!a.view) throw new ApiError('not_found');
    if (need === 'write' && !a.write) throw new ApiError('forbidden');
    return { row, access: a };
  };
  const body = deviceBody(plane);
  const lastSeenSeconds = (deviceId: string) => lastSeenOf(plane, deviceId);
  /** What firmware needs to connect and to reach the API (the lease JWKS): from PUBLIC_URL, else from the request. */
  const credentials = (c: AppContext, row: DeviceRow, password: string) => {
    const url = new URL(deps.publicUrl ?? c.req.url);
    const secure = url.protocol === 'https:' || (deps.publicUrl === null && c.req.header('x-forwarded-proto') === 'https');
    const origin = `${secure ? 'https' : 'http'}://${url.host}`;
    return {
      client_id: row.id,
      username: row.id,
      password,
      mqtt_url: `mqtt://${url.hostname}:${deps.mqttPort()}`,
      // Devices on the internet should use this one: MQTT over TLS, so their password never crosses in clear.
      mqtts_url: deps.mqttsPort() === null ? null : `mqtts://${url.hostname}:${deps.mqttsPort()}`,
      ws_url: `${secure ? 'wss' : 'ws'}://${url.host}/mqtt`,
      api_url: `${origin}/api/v1`,
    };
  };

  app.post('/mosques/:id/devices', mosqueGate(deps, 'manager'), async (c) => {
    const b = await readJson(c, TransmitterCreate);
    const { row, password } = plane.service.register('transmitter', b.name ?? null, c.var.mosque.id, null, c.var.user.id);
    return c.json({ device: body(row), credentials: credentials(c, row, password) }, 201);
  });

  /**
   * docs/api.md, "Devices": a player joins a mosque's list only by someone with a place in it: a member
   * (pending or approved), a manager, or a superadmin. To anyone else the mosque does not exist.
   */
  const requireBindable = (c: AppContext, mosqueId: string) => {
    if (!deps.mosques.findByIdSync(mosqueId)) throw new ApiError('not_found', 'No mosque has that mosque_id.');
    const actor = actorOf(c);
    if (actor.isSuperadmin) return;
    const admin = deps.admins.findSync(mosqueId, actor.id);
    const status = deps.memberships.findForSync(mosqueId, actor.id)?.status;
    if (admin?.can_manage === 1 || status === 'pending' || status === 'approved') return;
    if (admin || status) throw new ApiError('forbidden', 'Only a member or a manager of the mosque may bind a player to it.');
    throw new ApiError('not_found', 'No mosque has that mosque_id.');
  };

  app.post('/devices', async (c) => {
    const b = await readJson(c, PlayerCreate);
    if (b.mosque_id) requireBindable(c, b.mosque_id);
    const { row, password } = unwrap(plane.service.registerPlayer(b.name ?? null, b.mosque_id ?? null, actorOf(c)));
    return c.json({ device: body(row), credentials: credentials(c, row, password) }, 201);
  });

  app.get('/devices', (c) => {
    const q = readQuery(c, DeviceListQuery);
    const actor = actorOf(c);
    const visible = (row: DeviceRow) => access(c, row).view;
    const rows = q.mosque_id
      ? plane.devices.listForMosque(q.mosque_id)
      : actor.isSuperadmin
        ? plane.devices.listAll()
        : [...plane.devices.listForOwner(actor.id), ...deps.admins.listForUserSync(actor.id).flatMap((a) => plane.devices.listForMosque(a.mosque_id))];
    const unique = new Map(rows.filter(visible).map((r) => [r.id, r]));
    return c.json([...unique.values()].map(body));
  });

  // Public: firmware checks leases offline against these keys. Registered before /devices/:id.
  app.get('/devices/lease-keys', (c) => {
    c.header('Cache-Control', 'public, max-age=3600');
    return c.json(plane.signer.jwks());
  });

  app.get('/devices/:id', (c) => c.json(body(load(c, 'view').row)));

  app.get('/devices/:id/why', (c) => {
    const { row } = load(c, 'view');
    const lease = plane.entitlement.lease(row.id);
    const detail = JSON.parse(row.status_detail) as { detail?: Record<string, unknown> };
    const now = Math.floor(deps.clock() / 1000);
    const answer = explain({
      kind: row.kind,
      enabled: row.enabled === 1,
      mosqueId: row.mosque_id,
      decision: row.kind === 'stream_player' ? plane.entitlement.decisionFor(row) : null,
      membershipStatus: row.kind === 'stream_player' && row.mosque_id && row.owner_user_id ? deps.memberships.findForSync(row.mosque_id, row.owner_user_id)?.status ?? null : null,
      leaseExpiresAt: lease?.expiresAt ?? null,
      connected: plane.telemetry.isConnected(row.id),
      lastSeenAt: lastSeenSeconds(row.id) ?? row.last_seen_at,
      status: plane.telemetry.currentStatus(row.id) ?? row.status,
      statusReason: row.status_reason,
      statusDetail: detail.detail ?? {},
      now,
    });
    // docs/api.md, "Broadcasts and the audio server": a player ready but silent during a broadcast may be waiting for the source.
    const onAir = deps.audio && row.mosque_id ? deps.audio.isOnAir(row.mosque_id) : null;
    return c.json({ device_id: row.id, status: plane.telemetry.currentStatus(row.id) ?? row.status, ...answer, on_air: onAir, checked_at: new Date(now * 1000).toISOString() });
  });

  app.patch('/devices/:id', async (c) => {
    const { row, access: a } = load(c, 'write');
    const b = await readJson(c, DeviceUpdate);
    checkHeartbeat(row.kind, b.config?.heartbeat_secs);
    if (b.mosque_id !== undefined && b.mosque_id !== row.mosque_id) {
      // Rebinding a player is its owner's choice; a transmitter moves only by a superadmin.
      if (row.kind === 'stream_player' ? !a.owner && !a.superadmin : !a.superadmin) throw new ApiError('forbidden', 'You may not move this device to another mosque.');
      if (b.mosque_id === null && row.kind === 'transmitter') throw new ApiError('validation_failed', undefined, { details: [{ path: 'mosque_id', message: 'a transmitter belongs to a mosque' }] });
      if (b.mosque_id) requireBindable(c, b.mosque_id);
    }
    const updated = plane.service.update(row, {
      ...(b.name !== undefined && { name: b.name }),
      ...(b.mosque_id !== undefined && { mosqueId: b.mosque_id }),
      ...(b.config !== undefined && { settings: b.config }),
    }, c.var.user.id);
    return c.json(body(updated));
  });

  app.delete('/devices/:id', (c) => {
    plane.service.delete(load(c, 'write').row, c.var.user.id);
    return c.body(null, 204);
  });

  app.post('/devices/:id/credentials', (c) => {
    const { row } = load(c, 'write');
    const password = plane.service.rotateCredentials(row, c.var.user.id);
    return c.json({ device: body(row), credentials: credentials(c, row, password) });
  });

  // Remote diagnostics (docs/firmware.md, "4.2 Commands"): answerable while UNBOUND; the owner, a manager of its
  // mosque, or a superadmin (test/api/authorization-matrix.test.ts holds who).
  app.post('/devices/:id/commands', async (c) => {
    const { row } = load(c, 'write');
    const b = await readJson(c, CommandRequest);
    if (!(COMMANDS[row.kind] as readonly string[]).includes(b.name)) {
      throw new ApiError('validation_failed', undefined, { details: [{ path: 'name', message: `not a ${row.kind} command` }] });
    }
    const args = b.name === 'set_log_level' ? parseOrThrow(v.object({ args: SetLogLevelArgs }), { args: b.args ?? {} }).args : (b.args ?? {});
    const outcome = unwrap(await plane.commands.send(row.id, b.name, args, { timeoutMs: b.timeout_ms ?? DEFAULT_TIMEOUT_MS, actorUserId: c.var.user.id }));
    if (outcome.ok) applyCommandEffects(row.id, b.name, args, c.var.user.id);
    return c.json(outcome);
  });

  /** What the backend records when a command succeeded: the log escalation's expiry, the cleared binding. */
  const applyCommandEffects = (deviceId: string, name: string, args: Record<string, unknown>, actorId: string) => {
    // Read again: the row loaded before the wait may be stale (rebound) or gone (deleted meanwhile).
    const row = plane.devices.findById(deviceId);
    if (!row) throw new ApiError('not_found', 'The device was deleted while the command waited for its acknowledgement.');
    if (name === 'set_log_level') {
      const until = Math.floor(deps.clock() / 1000) + Number(args.ttl_s);
      plane.devices.setLogLevel(row.id, String(args.level), until);
      plane.timeline.record({ deviceId: row.id, mosqueId: row.mosque_id, kind: 'log_level_set', actorUserId: actorId, detail: { level: args.level, until } });
    }
    if (name === 'unbind_mosque' && row.mosque_id !== null) plane.service.update(row, { mosqueId: null }, actorId);
  };

  app.get('/devices/:id/events', (c) => {
    const { row } = load(c, 'view');
    const q = readQuery(c, EventsQuery);
    return c.json(plane.timeline.list(row.id, q.limit, q.before ?? null));
  });

  app.get('/devices/:id/logs', (c) => {
    const { row } = load(c, 'view');
    const q = readQuery(c, LogsQuery);
    plane.telemetry.flush();
    const lines = plane.telemetry.recentLogs(row.id, q.limit).map((l) => ({ at: new Date(l.at * 1000).toISOString(), ts: l.ts, level: l.level, msg: l.msg }));
    const logging = plane.telemetry.logging(row.id);
    const until = logging.until === null ? null : new Date(logging.until * 1000).toISOString();
    return c.json({ device_id: row.id, logging: { ...logging, until }, note: logsNote(row.kind, logging.enabled, until, lines.length, plane.telemetry.isConnected(row.id)), lines });
  });

  return app;
}

/**
 * Says in words why the list is what it is (docs/decisions.md, "`GET /devices/{id}/logs`": right after set_log_level the list is empty and a
 * person must learn that the device is expected to send, not that logging failed).
 */
function logsNote(kind: DeviceKind, enabled: boolean, until: string | null, count: number, connected: boolean): string | null {
  if (!enabled) {
    const how = kind === 'transmitter' ? 'set config.log_enabled to true' : 'send the set_log_level command';
    return `Logging is off for this device: ${how} to collect its logs.`;
  }
  if (count > 0) return null;
  const window = until ? ` until ${until}` : '';
  if (!connected) return `Logging is on${window}, but the device is not connected: it sends nothing while offline (lines are dropped, not queued).`;
  return `Logging is on${window}; waiting for the device's first line (at most one a second).`;
}

/** docs/firmware.md, "3.2 Heartbeat": a per-kind minimum. */
function checkHeartbeat(kind: DeviceKind, secs: number | undefined): void {
  if (secs === undefined || secs >= HEARTBEAT[kind].min) return;
  throw new ApiError('validation_failed', undefined, { details: [{ path: 'config.heartbeat_secs', message: `must be at least ${HEARTBEAT[kind].min} for a ${kind}` }] });
}
