import type { Logger } from '../src/platform/log.ts';
import type { Transport } from '../src/platform/notify.ts';

/**
 * Development only (refused when NODE_ENV=production): prints the message as one JSON log line with the
 * same keys a webhook receives. It is the one place a code may reach the log, because that is its job.
 */
export function consoleTransport(logger: Logger): Transport {
  return {
    name: 'console',
    async deliver(message) {
      // At warn, and the code in the message itself: a person trying the service reads it among the other lines
      // (docs/operator.md, "Reading the log").
      const what = message.code ? `one-time code ${message.code} for ${message.to}` : `message for ${message.to}`;
      logger.warn({ ...message }, `${what} (${message.purpose}; console transport, development only)`);
    },
  };
}
