import type { Context } from 'hono';
import type { AccessClaims } from '../src/tokens.ts';
import type { Logger } from '../src/log.ts';

/** What every handler may read from the context. */
export type AppEnv = {
  Variables: {
    requestId: string;
    logger: Logger;
    user: AccessClaims;
  };
};

export type AppContext = Context<AppEnv>;
