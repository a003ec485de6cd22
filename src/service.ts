import http from 'node:http';
import { getRequestListener } from '@hono/node-server';
import { pino } from 'pino';
import { createApi, handlerRoutes } from '../api/index.ts';
import { createMosqueEvents } from '../api/mosques/events.ts';
import { answerClientError } from '../api/errors.ts';
import { httpServerOptions, limitHttpServer } from '../api/http-server.ts';
import { buildAsyncApi } from '../broker/asyncapi.ts';
import { createBroker, type Broker } from '../broker/index.ts';
import { createIcecastAdminClient } from '../icecast/admin-client.ts';
import { createTransport } from '../notify/index.ts';
import { loadOrCreateVapidKeys, webPushSender, type PushNetwork } from '../notify/webpush.ts';
import { systemClock, type Clock } from './platform/clock.ts';
import type { Config } from './platform/config.ts';
import { logListening, shownStore, type Logger, type StartupFacts } from './platform/log.ts';
import type { Notifier, PageUrl, Transport } from './platform/notify.ts';
import { closeInOrder, type Closer } from './platform/shutdown.ts';
import { buildPlatform } from './platform/boot/platform.ts';
import { StartupError } from './platform/boot/startup-error.ts';
import { openStorage } from './platform/boot/storage.ts';
import { resolveJwtSecret } from './platform/keys/jwt-secret.ts';
import { closeHttp, listen, listeningPort, shownHost } from './platform/net/listening.ts';
import { readTlsAtStart, reloadTls } from './platform/net/tls-files.ts';
import { buildPeople, peopleDataSteps } from './people/build.ts';
import { createPasswordHasher } from './people/passwords.ts';
import { buildMosques } from './mosques/build.ts';
import { buildDevices } from './devices/build.ts';
import { createAddressClaims } from './devices/stories/address-claims.ts';
import { buildAudio } from './audio/build.ts';
import { streamAddresses } from './audio/mounts.ts';
import { buildBroadcasts } from './broadcasts/build.ts';
import type { Broadcasts } from './broadcasts/broadcasts.ts';
import type { PushSender } from './broadcasts/push-outbox.ts';
import { buildSchedule } from './schedule/build.ts';
import type { Scheduler } from './schedule/scheduler.ts';
import { buildFirmware } from './firmware/firmware.ts';
import { ROLLOUT_TICK_MS } from './firmware/runner.ts';

export { StartupError };

export interface ServiceOptions {
  clock?: Clock;
  logger?: Logger;
  /** Replaces the transport chosen by NOTIFY_TRANSPORT (tests point it at their own peer). */
  transport?: Transport;
  notifyRetryBaseMs?: number;
  /** Replaces the Web Push sender (tests may point it elsewhere; by default it is the real one). */
  pushSender?: PushSender & { close?(): void };
  /** How the real sender reaches push services (tests: a local https server; see notify/webpush.ts). */
  pushNetwork?: PushNetwork;
  /**
   * How often the broker tells the other processes (REDIS_URL) it is alive; a silent one's stored wills
   * are published 3-4 periods later. aedes's default (60 s) unless a test needs it short.
   */
  brokerHeartbeatMs?: number;
}

export interface Service {
  httpPort: number;
  mqttPort: number;
  /** The MQTT-over-TLS port, or null when MQTTS_PORT is unset. */
  mqttsPort: number | null;
  httpUrl: string;
  /** What a person starting it needs first: the console, the setup link, ports, store, audio (main.ts prints it). */
  summary: StartupFacts;
  mqttUrl: string;
  notifier: Notifier;
  /** Reads TLS_CERT_FILE and TLS_KEY_FILE again (SIGHUP after a renewal); a bad pair leaves the old one in use. */
  reloadTls(): { ok: true; validTo: string } | { ok: false; error: string };
  /** Every HTTP route with a handler, as `{method, path}` (Hono path syntax). */
  routes: Array<{ method: string; path: string }>;
  /** The broker's counters (open connections, what it refused or dropped) and a device's stored session. */
  broker: Pick<Broker, 'counters' | 'session'>;
  /** The one azaan scheduler (tests that move a manual clock call `schedule.runDue()`). */
  schedule: Pick<Scheduler, 'runDue'>;
  /** Told of every broadcast start and stop once committed, after the fan-out began (the benches time starts with it). */
  broadcasts: Pick<Broadcasts, 'listen'>;
  close(): Promise<void>;
}

/** Past this many bytes waiting for a stuck stdout reader (a paused pipe, a slow journald), lines are dropped. */
export const LOG_BUFFER_MAX_BYTES = 16 * 1024 * 1024;

/**
 * JSON lines on stdout, written asynchronously: pino's default is a synchronous write(2) per line, which
 * holds the event loop (HTTP and MQTT alike) whenever the reader of the pipe is slow. pino
 * flushes what is buffered, synchronously, when the process exits, process.exit() included.
 * `fatal` is for the process edge only (main.ts); the rest of the code gets a Logger.
 */
export function createLogger(config: Pick<Config, 'logLevel'>): Logger & { fatal(obj: object, msg?: string): void } {
  const stdout = pino.destination({ dest: 1, sync: false, maxLength: LOG_BUFFER_MAX_BYTES });
  return pino({ level: config.logLevel, base: { service: 'minaret' } }, stdout);
}

/**
 * The composition root, read as a list: the platform, then each domain's build in the order they depend on one
 * another, each handed its ports and registering its closers as it makes them; the broker; the stories that
 * cross a sibling or an edge; start; the API; listen. `close` stops in reverse. Each cross-domain story is a
 * named module of the later domain (docs/architecture.md, "Where each story lives").
 */
export async function startService(config: Config, opts: ServiceOptions = {}): Promise<Service> {
  const clock = opts.clock ?? systemClock;
  const logger = opts.logger ?? createLogger(config);
  const jwtSecret = resolveJwtSecret(config, logger);
  const tlsCredentials = readTlsAtStart(config, logger);
  // Closed in reverse order of creation; then `finals` in order (the last flush, then db.close), always.
  const closers: Closer[] = [];
  const finals: Closer[] = [];
  const closeAll = () => closeInOrder(closers.splice(0).reverse(), finals.splice(0), { deadlineMs: config.shutdownTimeoutS * 1000, logger });

  try {
    // The platform: the store (with the SQLite file's data step), the bcrypt workers, messages, duties, the change feed.
    const dataSteps = peopleDataSteps(clock, logger);
    const { store, faults, isOpen, checkpointer } = await openStorage(config, { clock, logger, dataSteps }, closers, finals);
    const hasher = await createPasswordHasher({ cost: config.bcryptCost, maxQueue: config.bcryptMaxQueue });
    closers.push({ name: 'password hasher', close: () => hasher.close() });
    const transport = opts.transport ?? createTransport(config, logger);
    const platform = await buildPlatform(config, { store, faults, clock, logger, transport, notifyRetryBaseMs: opts.notifyRetryBaseMs }, closers);
    const { notifier, afterAnswer, duties, changes } = platform;
    const onError = (what: string, err: unknown) => void faults.report(what, err);
    // The HTTP door exists from here on (its handler is attached once the API is built, before it listens): what
    // names this process's own address asks the server where it listens. PUBLIC_URL, else that address, is where
    // players fetch what Minaret serves itself (the recorded azaan, firmware) and where messages lead.
    const httpServer = http.createServer(httpServerOptions(config));
    const ownOrigin = () => `http://${shownHost(config.host)}:${listeningPort(httpServer, config.httpPort)}`;
    const publicOrigin = () => config.publicUrl ?? ownOrigin();
    const pageUrl: PageUrl = (path) => `${publicOrigin()}${path}`;
    const mosqueEvents = createMosqueEvents();
    const announce = mosqueEvents.publish;
    // With ICECAST_URL, every stream address is the mosque's mount, a player's with its lease (docs/operator.md#audio-icecast).
    const addresses = config.icecast ? streamAddresses(config.icecast.url) : null;

    // The domains.
    const people = await buildPeople(config, { store, clock, logger, jwtSecret, hasher, notifier, pageUrl, changes, afterAnswer, onError });
    const mosques = buildMosques({ store, clock, changes, users: people.users, notifier, pageUrl });
    const devices = await buildDevices(config, {
      store, clock, logger, faults, changes, duties, jwtSecret, hasher, people, mosques, announce,
      streamUrl: addresses ? (mosque, lease) => (lease ? addresses.withLease(mosque.id, lease) : addresses.mount(mosque.id)) : undefined,
    });
    const { plane } = devices;
    const { audio, recordings, admitRecording } = buildAudio(config, {
      store, clock, logger, jwtSecret, mosques, plane, onError,
      server: config.icecast ? createIcecastAdminClient({ adminUrl: config.icecast.adminUrl, user: config.icecast.adminUser, password: config.icecast.adminPassword }) : null,
    });
    const vapid = loadOrCreateVapidKeys(config.dataDir);
    const broadcasting = buildBroadcasts(config, {
      store, clock, logger, mosques, plane, audio, recordings, onError, publicOrigin, mountUrl: addresses?.mount, announce, listened: mosqueEvents.listens,
      sender: opts.pushSender ?? webPushSender(vapid, config.vapidSubject, opts.pushNetwork),
    }, closers);
    const { broadcasts, pushSubscriptions } = broadcasting;
    const slots = broadcasting.slotPorts;
    const schedule = await buildSchedule(config, { store, clock, logger, notifier, pageUrl, afterAnswer, people, mosques, plane, recordings, publicOrigin, onError, announce, slots });
    const { scheduler } = schedule;

    // The broker, then the stories whose parts span it, a sibling or a later domain: the devices reach the broker
    // through its link (once, for the plane and everything that asks the plane for it).
    const broker = await createBroker({
      logger, faults, redisUrl: config.redisUrl, tls: tlsCredentials, limits: config.mqtt, ...plane.ports.broker,
      mosqueStreamUrl: async (mosqueId) => (addresses ? addresses.mount(mosqueId) : ((await mosques.mosques.findById(mosqueId))?.stream_url ?? null)),
      clock, budgets: config.deviceBudgets, floodWindowMs: config.deviceFloodWindowS * 1000,
      flap: { maxConnects: config.mqttFlap.maxConnects, windowMs: config.mqttFlap.windowS * 1000, banMs: config.mqttFlap.banS * 1000 },
      ...(opts.brokerHeartbeatMs && { heartbeatIntervalMs: opts.brokerHeartbeatMs }),
      onDeviceBroadcast: schedule.onDeviceBroadcast,
    });
    plane.attach(broker.link);
    people.proof.listen(createAddressClaims({ store, ...mosques, plane, forgetPushSubscriptions: pushSubscriptions.removeAllFor }));
    broadcasting.connect(scheduler);

    // Start. The caches follow the change feed from here on: the leases the devices' start pass renewed are
    // this process's own writes, current already.
    await devices.start();
    if (audio) {
      audio.start();
      closers.push({ name: 'audio', close: () => audio.stop() });
    }
    platform.follow([audio?.followChanges, people.users.followChanges, people.revoked.followChanges, devices.followChanges, schedule.followChanges], closers);
    scheduler.start();
    closers.push({ name: 'azaan scheduler', close: () => scheduler.stop() });
    duties.start();
    closers.push({ name: 'periodic duties', close: () => duties.stop() });
    closers.push(broadcasting.startOutbox());
    // The broker closes before the last flush (its goodbyes land in the timeline), the flush before db.close.
    finals.unshift({ name: 'device plane (last telemetry flush)', close: () => plane.stop() });
    closers.push({ name: 'broker', close: () => broker.close() });

    // docs/api.md, "Firmware updates": the runner reads the devices through the plane's port, the windows through
    // the schedule and the broadcasts; one tick per period across nodes (a duty), plus one at a create or a resume.
    const firmware = buildFirmware({
      store, clock, logger, config, devices: plane.ports.firmware,
      windows: { findMosque: (id) => mosques.mosques.findById(id), slotsOn: scheduler.slotsOn, liveBroadcast: broadcasts.findLive },
      downloadUrl: (imageId) => `${publicOrigin()}/api/v1/firmware/images/${imageId}/download`,
    });
    if (firmware.images) duties.add('firmware rollouts', ROLLOUT_TICK_MS, firmware.tick); // off without FIRMWARE_PUBLIC_KEY

    // The API. Health reads whether the store is open without a query (a SELECT 1 told nothing more, at most of a
    // probe's cost) and whether it takes writes from faults (the last real write, a probe while degraded).
    const health = () => ({ db: isOpen() ? faults.storageState() : 'down', broker: broker.isHealthy() ? 'ok' : 'down', ...(audio && { audio: audio.health() }) });
    const api = createApi({
      ...people, ...mosques, ...devices, broadcasts, pushSubscriptions, audio, recordings, admitRecording, mosqueEvents, changes, logger, clock, health, faults,
      mosqueOps: schedule.mosqueOps, scheduler, scheduleStore: schedule.scheduleStore, rateLimitStore: platform.redis,
      icecastUrl: config.icecast?.url ?? null, hookSecret: config.icecast?.hookSecret ?? null, publicUrl: config.publicUrl, consoleDir: config.consoleDir,
      mqttPort: () => listeningPort(broker.tcpServer, config.mqttPort), mqttsPort: () => (broker.tlsServer ? listeningPort(broker.tlsServer, config.mqttsPort!) : null),
      deliveryReport: broadcasting.reports.report, reportFor: broadcasting.reports.reportFor, vapidPublicKey: vapid.publicKey, sendTestPush: broadcasting.outbox.sendTest,
      asyncApi: buildAsyncApi, consoleSessionSettings: config.consoleSessions, authRateLimit: config.authRateLimit, authIdentifierRateLimit: config.authIdentifierRateLimit,
      streamHttpHosts: config.streamHttpHosts, invitesPerMosquePerHour: config.invitesPerMosquePerHour, invitesPerAddressPerDay: config.invitesPerAddressPerDay,
      pairingLimits: config.pairing, trustProxy: config.trustProxy, logRequests: config.logRequests, graceMs: config.scheduleGraceMinutes * 60_000,
      recordingMaxBytes: config.recordingMaxBytes, firmwareMaxBytes: config.firmware.maxBytes,
      firmwareImages: firmware.images, firmwareOffers: firmware.offers, firmwareRollouts: firmware.rollouts,
      firmwareDevices: { load: plane.ports.broker.loadDevice, info: plane.ports.broker.device, verifySecret: plane.ports.broker.verifySecret },
    });
    httpServer.on('request', getRequestListener(api.fetch));
    limitHttpServer(httpServer, config);
    // Node's own parser errors (431, 408, malformed HTTP) are answered in the contract's error shape.
    httpServer.on('clientError', answerClientError);
    broker.attachWebSocket(httpServer);

    // Listen.
    const httpPort = await listen(httpServer, config.httpPort, config.host, 'HTTP_PORT');
    closers.push({ name: 'http server', close: () => {
      const stopped = closeHttp(httpServer);
      broker.dropWebSockets(); // else a device on MQTT-over-WebSocket keeps the HTTP server from closing
      return stopped;
    } });
    // Runs before the HTTP server's close (closers run in reverse): open event streams would hold it 2 s.
    closers.push({ name: 'event streams', close: () => mosqueEvents.closeAll() });
    // The same for device pairing polls held open for an approval (docs/api.md, "Pairing a device").
    closers.push({ name: 'held pairing polls', close: () => devices.pairings.close() });
    const mqttPort = await listen(broker.tcpServer, config.mqttPort, config.host, 'MQTT_PORT');
    const mqttsPort = broker.tlsServer ? await listen(broker.tlsServer, config.mqttsPort!, config.host, 'MQTTS_PORT') : null;
    platform.startFeed();
    // Once started, the checkpointer stops first of all (closers run in reverse): a part that hangs until the
    // stop's deadline must not keep it running past db.close. What is written meanwhile checkpoints inline.
    closers.push({ name: 'database checkpointer (first to stop)', close: () => checkpointer.close() });
    // The first start: the setup link (the token in the fragment never reaches a server's log).
    const setupToken = await people.firstSuperadmin.token();
    const summary: StartupFacts = {
      consoleUrl: publicOrigin(), setupUrl: setupToken ? `${publicOrigin()}/setup#token=${setupToken}` : null, httpPort, mqttPort, mqttsPort,
      store: shownStore(config.databasePath, config.postgres?.url ?? null), audioUrl: config.icecast?.url ?? null, notifyTransport: config.notifyTransport,
    };
    logListening(logger, summary, config.host);

    return {
      httpPort, mqttPort, mqttsPort, summary, notifier, httpUrl: ownOrigin(), mqttUrl: `mqtt://${shownHost(config.host)}:${mqttPort}`,
      routes: handlerRoutes(api),
      reloadTls: () => reloadTls(config, broker),
      broker: { counters: () => broker.counters(), session: (id) => broker.session(id) },
      schedule: { runDue: () => scheduler.runDue() },
      broadcasts: { listen: (l) => broadcasts.listen(l) },
      close: () => closeAll().then(() => logger.info({}, 'minaret stopped')),
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
