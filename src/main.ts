import { loadConfig } from './platform/config.ts';
import { createLogger, startService, StartupError } from './service.ts';

/** Process edge: settings from the environment, start, and a graceful stop on SIGINT/SIGTERM. */
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
}

main().catch((err: Error) => {
  process.stderr.write(`minaret: failed to start: ${err.message}\n`);
  process.exit(1);
});
