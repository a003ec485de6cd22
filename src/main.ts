import { loadConfig } from './platform/config.ts';
import { createLogger, startService, StartupError } from './service.ts';

/** Process edge: settings from the environment, start, a graceful stop on SIGINT/SIGTERM, SIGHUP reloads TLS. */
async function main(): Promise<void> {
  const loaded = loadConfig(process.env);
  if (!loaded.ok) {
    process.stderr.write(`minaret: ${loaded.error}\n`);
    process.exit(1);
  }
  const logger = createLogger(loaded.config);
  for (const warning of loaded.warnings) logger.warn({}, warning);

  let service;
  try {
    service = await startService(loaded.config, { logger });
  } catch (err) {
    if (!(err instanceof StartupError)) throw err;
    process.stderr.write(`minaret: ${err.message}\n`);
    process.exit(1);
  }

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    await service.close();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  // A renewed certificate (certbot's deploy hook, `systemctl reload`) takes effect for new connections;
  // the default action of SIGHUP would end the process instead.
  process.on('SIGHUP', () => {
    const reloaded = service.reloadTls();
    if (reloaded.ok) logger.info({ valid_to: reloaded.validTo }, 'mqtts certificate reloaded');
    else logger.error({ error: reloaded.error }, 'mqtts certificate not reloaded');
  });
}

main().catch((err: Error) => {
  process.stderr.write(`minaret: failed to start: ${err.message}\n`);
  process.exit(1);
});
