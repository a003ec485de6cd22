import type { Config } from '../src/platform/config.ts';
import type { Logger } from '../src/platform/log.ts';
import type { Transport } from '../src/platform/notify.ts';
import { consoleTransport } from './console.ts';
import { smtpTransport } from './smtp.ts';
import { webhookTransport } from './webhook.ts';

/** NOTIFY_TRANSPORT -> the transport; the config schema already checked each one's settings. */
export function createTransport(config: Pick<Config, 'notifyTransport' | 'notifyWebhookUrl' | 'smtpUrl' | 'smtpFrom'>, logger: Logger): Transport {
  switch (config.notifyTransport) {
    case 'webhook':
      return webhookTransport(config.notifyWebhookUrl!);
    case 'smtp':
      return smtpTransport(config.smtpUrl!, config.smtpFrom!);
    case 'console':
      return consoleTransport(logger);
  }
}
