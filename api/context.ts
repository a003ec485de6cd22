import type { IncomingMessage } from 'node:http';
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

/**
 * A request header, as `c.req.header(name)` gives it (repeated fields joined with ", "), read from Node's
 * parsed message when there is one. `c.req.header` builds a WHATWG Headers object for the request, which
 * cost more than the rest of a bare route together (issue 13); the middleware every request passes reads
 * its headers here. In-memory `app.request()` calls have no Node message and take Hono's path.
 */
export function requestHeader(c: Context, name: string): string | undefined {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (!incoming) return c.req.header(name);
  return incoming.headersDistinct[name.toLowerCase()]?.join(', ');
}
