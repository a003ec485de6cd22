import { loadConfig, withEnvFile, type Config } from './platform/config.ts';
import { startupSummary, type Logger } from './platform/log.ts';
import { createLogger, startService, StartupError, type Service } from './service.ts';

/** After the graceful stop's own deadline, this much longer before the process ends regardless. */
const EXIT_BACKSTOP_MS = 5000;

/** Process edge: settings from the environment, start, a graceful stop on SIGINT/SIGTERM, the fatal-error policy, SIGHUP reloads TLS. */
async function main(): Promise<void> {
  const env = withEnvFile(process.env, process.cwd());
  const loaded = env.ok ? loadConfig(env.env) : env;
  if (!loaded.ok) {
    process.stderr.write(`minaret: ${loaded.error}\n`);
    process.exit(1);
  }
  const { config } = loaded;
  const logger = createLogger(config);
  if (env.ok && env.file) logger.info({ file: env.file }, 'settings read from the environment and this file');
  for (const warning of loaded.warnings) logger.warn({}, warning);

  let service: Service | undefined;
  let stopping = false;
  const stop = async (why: Record<string, unknown>, code: number) => {
    if (stopping) return;
    stopping = true;
    // Not unref'd: if the stop itself hangs past SHUTDOWN_TIMEOUT_S, this is what ends the process.
    setTimeout(() => process.exit(code), config.shutdownTimeoutS * 1000 + EXIT_BACKSTOP_MS);
    logger.info(why, 'shutting down');
    await service?.close();
    process.exit(code);
  };
  // docs/operator.md, "Faults": an error nothing caught is a bug, and the process may be in a state nobody planned for. Log it
  // as fatal, stop gracefully within SHUTDOWN_TIMEOUT_S (the last flush and db.close run), and exit 1 so
  // the supervisor (systemd, Docker) starts a fresh process.
  const fatal = (kind: string, err: unknown) => {
    logger.fatal({ kind, err: { message: (err as Error)?.message ?? String(err), stack: (err as Error)?.stack } }, 'fatal error; stopping');
    void stop({ reason: kind }, 1);
  };
  process.on('uncaughtException', (err) => fatal('uncaught_exception', err));
  process.on('unhandledRejection', (reason) => fatal('unhandled_rejection', reason));
  process.on('SIGINT', () => void stop({ signal: 'SIGINT' }, 0));
  process.on('SIGTERM', () => void stop({ signal: 'SIGTERM' }, 0));

  try {
    service = await startService(config, { logger });
  } catch (err) {
    if (!(err instanceof StartupError)) throw err;
    process.stderr.write(`minaret: ${err.message}\n`);
    process.exit(1);
  }
  const started = service;
  // docs/operator.md, "Reading the log": stdout stays JSON lines; in development (a first trial, NODE_ENV unset) a
  // person at a terminal also gets the addresses and the setup link as one plain block. Production and the test
  // runs keep stderr for what went wrong.
  if (config.nodeEnv === 'development') process.stderr.write(startupSummary(started.summary));
  // A renewed certificate (certbot's deploy hook, `systemctl reload`) takes effect for new connections;
  // the default action of SIGHUP would end the process instead.
  process.on('SIGHUP', () => {
    const reloaded = started.reloadTls();
    if (reloaded.ok) logger.info({ valid_to: reloaded.validTo }, 'mqtts certificate reloaded');
    else logger.error({ error: reloaded.error }, 'mqtts certificate not reloaded');
  });
  if (config.testFault) armTestFault(config.testFault, logger);
}

/** TEST_FAULT (NODE_ENV=test only, config refuses it otherwise): SIGUSR2 raises the fault, for the policy's test. */
function armTestFault(fault: NonNullable<Config['testFault']>, logger: Logger): void {
  logger.warn({ fault }, 'TEST_FAULT is armed: SIGUSR2 raises it');
  process.on('SIGUSR2', () => {
    if (fault === 'uncaught_exception') {
      setImmediate(() => {
        throw new Error('TEST_FAULT: an uncaught exception');
      });
    } else void Promise.reject(new Error('TEST_FAULT: an unhandled rejection'));
  });
}

main().catch((err: Error) => {
  process.stderr.write(`minaret: failed to start: ${err.message}\n`);
  process.exit(1);
});
