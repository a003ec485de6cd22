import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context } from 'hono';
import type { AccessClaims } from '../src/people/tokens.ts';
import type { Standing } from '../src/mosques/admins.ts';
import type { MosqueRow } from '../src/mosques/mosques.ts';

/**
 * What the door knows of a request before Hono routes it (api/request-context.ts), on the env object
 * @hono/node-server hands every request: Node's own messages, the request id, and the client address.
 */
export type RequestBindings = {
  incoming: IncomingMessage;
  outgoing: ServerResponse;
  requestId: string;
  /** The client's address as TRUST_PROXY resolves it: what rate limits key on and logs show. Resolved on first use. */
  clientAddress: () => string;
};

/** What every handler may read from the context. */
export type AppEnv = {
  Bindings: RequestBindings;
  Variables: {
    user: AccessClaims;
    /** Set by mosqueGate: the mosque named by :id and the caller's standing there. */
    mosque: MosqueRow;
    standing: Standing;
  };
};

export type AppContext = Context<AppEnv>;

/**
 * A request header as `Headers.get` gives it (repeated fields joined with ", "), read from Node's raw header
 * list. Hono's `c.req.header` builds a WHATWG Headers object for the request, and Node's `headers` or
 * `headersDistinct` an object of every field, only to read one; that cost more than a bare route.
 * Node's `headers` would also keep only the first of two Authorization lines: joined, they fail the bearer check.
 */
export function rawHeader(incoming: IncomingMessage, name: string): string | undefined {
  const raw = incoming.rawHeaders;
  const wanted = name.toLowerCase();
  let found: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const field = raw[i]!;
    if (field.length !== wanted.length || field.toLowerCase() !== wanted) continue;
    found = found === undefined ? raw[i + 1]! : `${found}, ${raw[i + 1]!}`;
  }
  return found;
}

export function requestHeader(c: AppContext, name: string): string | undefined {
  return rawHeader(c.env.incoming, name);
}
