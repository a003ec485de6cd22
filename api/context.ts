import type { Context } from 'hono';
import type { AccessClaims } from '../src/tokens.ts';
import type { Logger } from '../src/log.ts';
import type { Standing } from '../src/admins.ts';
import type { MosqueRow } from '../src/mosques.ts';

/** What every handler may read from the context. */
export type AppEnv = {
  Variables: {
    requestId: string;
    logger: Logger;
    user: AccessClaims;
    /** Set by mosqueGate: the mosque named by :id and the caller's standing there. */
    mosque: MosqueRow;
    standing: Standing;
  };
};

export type AppContext = Context<AppEnv>;
