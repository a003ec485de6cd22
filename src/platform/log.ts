/**
 * The logging port. pino satisfies it; src/ never imports pino (dependency rule), it receives a Logger.
 * Never put a password, hash, code, OTP or token into a log field.
 */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  child(bindings: Record<string, unknown>): Logger;
  /** Whether a line at this level would be written; lets a hot path skip building it (pino has it). */
  isLevelEnabled?(level: 'debug' | 'info' | 'warn' | 'error'): boolean;
}

export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
  isLevelEnabled() {
    return false;
  },
};

export interface StartupFacts {
  /** Where the console answers: PUBLIC_URL, else this process's own address. */
  consoleUrl: string;
  /** The first superadmin's link while none exists (docs/operator.md, "The first superadmin"), else null. */
  setupUrl: string | null;
  httpPort: number;
  mqttPort: number;
  mqttsPort: number | null;
  /** `SQLite data/minaret.db` or `PostgreSQL <host>/<database>`: never a password. */
  store: string;
  /** ICECAST_URL, or null while the audio gate is off. */
  audioUrl: string | null;
  notifyTransport: 'console' | 'smtp' | 'webhook';
}

/** The same facts as fields of the 'minaret is listening' JSON line. */
export function startupFields(f: StartupFacts): Record<string, unknown> {
  return {
    console_url: f.consoleUrl, http_port: f.httpPort, mqtt_port: f.mqttPort, mqtts_port: f.mqttsPort,
    store: f.store, audio: f.audioUrl ?? 'off', notify: f.notifyTransport,
  };
}

/**
 * The start's two lines: where it listens, and while no superadmin exists the setup link, in the message itself
 * too so a person reading the raw JSON sees it (docs/operator.md, "Reading the log").
 */
export function logListening(logger: Logger, f: StartupFacts, host: string): void {
  logger.info({ ...startupFields(f), host }, 'minaret is listening');
  if (f.setupUrl) logger.warn({ setup_url: f.setupUrl }, `no superadmin yet: open ${f.setupUrl} in a browser to create the first one (valid until used or this process stops)`);
}

/**
 * A plain-text block for a person at a terminal, written to stderr in development so stdout stays JSON
 * lines a collector can parse: among the request lines of a first trial, the link and the addresses were lost.
 */
export function startupSummary(f: StartupFacts): string {
  const rows: Array<[string, string]> = [
    ['Console', `${f.consoleUrl}/`],
    ...(f.setupUrl ? [['Set up', `${f.setupUrl}   <- open this once to create the first superadmin`] as [string, string]] : []),
    ['HTTP', `port ${f.httpPort} (API, console, MQTT over WebSocket at /mqtt)`],
    ['MQTT', `port ${f.mqttPort}${f.mqttsPort === null ? '; MQTT over TLS off (MQTTS_PORT)' : `; MQTT over TLS on port ${f.mqttsPort}`}`],
    ['Store', f.store],
    ['Audio', f.audioUrl ? `Icecast at ${f.audioUrl}` : 'off: players get each mosque\'s own stream address (ICECAST_URL)'],
    ['Codes', f.notifyTransport === 'console' ? 'printed in this log: look for "one-time code" lines (NOTIFY_TRANSPORT=console)' : `sent by ${f.notifyTransport} (NOTIFY_TRANSPORT)`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  const body = rows.map(([k, value]) => `  ${k.padEnd(width)}  ${value}`);
  const rule = '='.repeat(72);
  return ['', rule, '  Minaret is running', rule, ...body, rule, ''].join('\n') + '\n';
}

/** DATABASE_URL shown without its password: `postgres://minaret@db:5432/minaret`. */
export function shownStore(databasePath: string, postgresUrl: string | null): string {
  if (!postgresUrl) return `SQLite ${databasePath}`;
  const url = new URL(postgresUrl);
  url.password = '';
  return `PostgreSQL ${url.toString()}`;
}
