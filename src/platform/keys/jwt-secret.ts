import type { Config } from '../config.ts';
import type { Logger } from '../log.ts';
import { loadOrCreateSecretFile } from '../secrets.ts';

/** JWT_SECRET, else a secret generated once and kept in the data folder (docs/settings.md), said in the log. */
export function resolveJwtSecret(config: Config, logger: Logger): string {
  if (config.jwtSecret) return config.jwtSecret;
  const { value, created } = loadOrCreateSecretFile(config.dataDir, 'jwt-secret');
  logger.warn(
    { file: `${config.dataDir}/jwt-secret`, created },
    'JWT_SECRET is not set: using a secret generated once and kept in the data folder (set JWT_SECRET in production)',
  );
  return value;
}
