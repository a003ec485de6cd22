import { Hono } from 'hono';
import * as v from 'valibot';
import { MAX_HEARTBEAT_SECS } from '../../src/devices/device-config.ts';
import type { DevicePlane } from '../../src/devices/device-plane.ts';
import type { Audio } from '../../src/audio/audio.ts';
import { DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS } from '../../src/devices/commands.ts';
import type { AppContext, AppEnv } from '../context.ts';
import { unwrap } from '../errors.ts';
import { actorOf, holderOnly, mosqueGate, type GateDeps } from '../guards.ts';
import type { UserStore } from '../../src/people/users.ts';
import { before, freeText, id, limit } from '../schemas.ts';
import { parseOrThrow, readJson, readQuery } from '../validate.ts';

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
  users: Pick<UserStore, 'findById'>;
  /** The audio gate, null while ICECAST_URL is unset. */
  audio: Pick<Audio, 'isOnAir'> | null;
  plane: DevicePlane;
  mqttPort: () => number;
  /** MQTTS_PORT once listening, else null: credentials then name the TLS door too. */
  mqttsPort: () => number | null;
  publicUrl: string | null;
}

/** Where this service is reached: PUBLIC_URL, else the request's own origin (behind a proxy, its X-Forwarded-Proto). */
export function originOf(c: AppContext, publicUrl: string | null): URL {
  const url = new URL(publicUrl ?? c.req.url);
  const secure = url.protocol === 'https:' || (publicUrl === null && c.req.header('x-forwarded-proto') === 'https');
  return new URL(`${secure ? 'https' : 'http'}://${url.host}`);
}

/**
 * A device and what firmware needs to connect and to reach the API (the lease JWKS), as POST /devices answers
 * it: the shape a pairing's token poll answers too (docs/api.md, "Pairing a device").
 */
export function credentialIssuer(deps: Pick<Deps, 'mqttPort' | 'mqttsPort' | 'publicUrl'>) {
  const credentials = (c: AppContext, deviceId: string, password: string) => {
    const origin = originOf(c, deps.publicUrl);
    const secure = origin.protocol === 'https:';
    return {
      client_id: deviceId,
      username: deviceId,
      password,
      mqtt_url: `mqtt://${origin.hostname}:${deps.mqttPort()}`,
      // Devices on the internet should use this one: MQTT over TLS, so their password never crosses in clear.
      mqtts_url: deps.mqttsPort() === null ? null : `mqtts://${origin.hostname}:${deps.mqttsPort()}`,
      ws_url: `${secure ? 'wss' : 'ws'}://${origin.host}/mqtt`,
      api_url: `${origin.origin}/api/v1`,
    };
  };
  return {
    issued: (c: AppContext, given: { device: { id: string }; password: string }) => ({ device: given.device, credentials: credentials(c, given.device.id, given.password) }),
  };
}

/**
 * The device registry over HTTP, its commands, logs and why (docs/api.md, "Devices, from the app's side"). Each
 * route reads the request's shape and calls a verb of the device plane (src/devices/plane/verbs.ts), where the
 * rules are: who may see or change a device, moving it, the heartbeat minimum, a command's effects.
 */
export function deviceRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const { plane } = deps;

  /** The device named by :id, opened before the body is read: one the caller may not see is a 404 whatever they sent. */
  const open = async (c: AppContext, need: 'view' | 'write') => unwrap(await plane.open(actorOf(c), c.req.param('id') ?? '', need));
  const { issued } = credentialIssuer(deps);

  app.post('/mosques/:id/devices', holderOnly(deps.users), mosqueGate(deps, 'manager'), async (c) => {
    const b = await readJson(c, TransmitterCreate);
    return c.json(issued(c, await plane.registerTransmitter(c.var.mosque.id, b.name ?? null, c.var.user.id)), 201);
  });

  app.post('/devices', holderOnly(deps.users), async (c) => {
    const b = await readJson(c, PlayerCreate);
    return c.json(issued(c, unwrap(await plane.registerPlayer(actorOf(c), b.name ?? null, b.mosque_id ?? null))), 201);
  });

  app.get('/devices', async (c) => {
    const q = readQuery(c, DeviceListQuery);
    return c.json(await plane.list(actorOf(c), q.mosque_id));
  });

  // Public: firmware checks leases offline against these keys. Registered before /devices/:id.
  app.get('/devices/lease-keys', (c) => {
    c.header('Cache-Control', 'public, max-age=3600');
    return c.json(plane.leaseKeys());
  });

  app.get('/devices/:id', async (c) => c.json(await plane.describe(await open(c, 'view'))));

  app.get('/devices/:id/why', async (c) => {
    const { audio } = deps;
    // docs/api.md, "Broadcasts and the audio server": a player ready but silent during a broadcast may be waiting for the source.
    return c.json(await plane.why(await open(c, 'view'), audio ? (mosqueId) => audio.isOnAir(mosqueId) : null));
  });

  app.patch('/devices/:id', async (c) => {
    const device = await open(c, 'write');
    const b = await readJson(c, DeviceUpdate);
    return c.json(unwrap(await plane.update(device, {
      ...(b.name !== undefined && { name: b.name }),
      ...(b.mosque_id !== undefined && { mosqueId: b.mosque_id }),
      ...(b.config !== undefined && { settings: b.config }),
    })));
  });

  app.delete('/devices/:id', async (c) => {
    await plane.remove(await open(c, 'write'));
    return c.body(null, 204);
  });

  app.post('/devices/:id/credentials', async (c) => c.json(issued(c, await plane.rotate(await open(c, 'write')))));

  // Remote diagnostics (docs/firmware.md, "4.2 Commands"): answerable while UNBOUND; the owner, a manager of its
  // mosque, or a superadmin (test/api/authorization-matrix.test.ts holds who).
  app.post('/devices/:id/commands', async (c) => {
    const device = await open(c, 'write');
    const b = await readJson(c, CommandRequest);
    unwrap(plane.commandFits(device, b.name)); // before its arguments: "not a transmitter command" says more
    const args = b.name === 'set_log_level' ? parseOrThrow(v.object({ args: SetLogLevelArgs }), { args: b.args ?? {} }).args : (b.args ?? {});
    return c.json(unwrap(await plane.sendCommand(device, b.name, args, b.timeout_ms ?? DEFAULT_TIMEOUT_MS)));
  });

  app.get('/devices/:id/events', async (c) => {
    const device = await open(c, 'view');
    const q = readQuery(c, EventsQuery);
    return c.json(await plane.events(device, q.limit, q.before ?? null));
  });

  app.get('/devices/:id/logs', async (c) => {
    const device = await open(c, 'view');
    const q = readQuery(c, LogsQuery);
    return c.json(await plane.logs(device, q.limit));
  });

  return app;
}
