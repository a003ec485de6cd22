import type { Context } from 'hono';
import type { AccessClaims } from '../src/people/tokens.ts';
import type { Logger } from '../src/platform/log.ts';
import type { Standing } from '../src/mosques/admins.ts';
import type { MosqueRow } from '../src/mosques/mosques.ts';

/** What every handler may read from the context. */
export type AppEnv = {
  Variables: {
    requestId: string;
    logger: Logger;
    /** The client's address as TRUST_PROXY resolves it: what rate limits key on and logs show. */
    clientAddress: string;
    user: AccessClaims;
    /** Set by mosqueGate: the mosque named by :id and the caller's standing there. */
    mosque: MosqueRow;
    standing: Standing;
  };
};

export type AppContext = Context<AppEnv>;
