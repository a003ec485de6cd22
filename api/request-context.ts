import type { IncomingMessage } from 'node:http';
import type { Http2Bindings, HttpBindings } from '@hono/node-server';
import type { Logger } from '../src/platform/log.ts';
import { resolveClientAddress, type TrustProxy } from '../src/platform/net/client-address.ts';
import { rawHeader, type RequestBindings } from './context.ts';

/** hono/request-id's rule: an inbound X-Request-Id of up to 255 word characters, `-` and `=` is kept. */
const REQUEST_ID = /^[\w\-=]{1,255}$/;

type Fetch = (request: Request, env: RequestBindings) => Response | Promise<Response>;

/** The client of a request as TRUST_PROXY decides (whether X-Forwarded-For counts). */
function clientAddressOf(incoming: IncomingMessage, trust: TrustProxy): string {
  return resolveClientAddress(incoming.socket.remoteAddress, rawHeader(incoming, 'x-forwarded-for'), trust);
}

/**
 * What every request gets, before Hono sees it: its request id (kept from an inbound X-Request-Id, else a
 * random UUID, and echoed in the response), its client address (resolved when first asked for), and the
 * request line in the log once the response is done.
 *
 * The request line is at `debug` unless LOG_REQUESTS is on (docs/settings.md): every static file of the console
 * is a request, and at `info` they buried the setup link and the start-up summary an operator reads
 * (docs/operator.md, "Reading the log"). An answer of 500 or more is written at `info` either way, and the error
 * behind it keeps its own `error` line (api/index.ts).
 *
 * Outside Hono, not a `use('*')` middleware: one middleware on every path gave every route a
 * compose chain, so even a route with one handler answered through a promise and a microtask, and a header
 * set through Hono made it build an undici Headers for every response. Here the header goes on Node's
 * response (Node merges it into whatever writeHead is given: errors and streams included) and a route with
 * one handler answers in the parser's own callback, as a bare Hono route does.
 */
export function withRequestContext(fetch: Fetch, logger: Logger, trust: TrustProxy, logRequests = false) {
  return (request: Request, env: HttpBindings | Http2Bindings): Response | Promise<Response> => {
    // The service's server is HTTP/1.1 (src/service.ts: createAdaptorServer without http2).
    const { incoming, outgoing } = env as HttpBindings;
    const inbound = rawHeader(incoming, 'x-request-id');
    const requestId = inbound && REQUEST_ID.test(inbound) ? inbound : crypto.randomUUID();
    outgoing.setHeader('X-Request-Id', requestId);
    let client: string | undefined;
    const bindings: RequestBindings = { incoming, outgoing, requestId, clientAddress: () => (client ??= clientAddressOf(incoming, trust)) };
    // The line a child logger bound to req_id would write, without one per request; not even a listener
    // when info is off. On 'close', which every response ends with, sent in full or not.
    if (logger.isLevelEnabled?.('info') !== false) {
      const every = logRequests || logger.isLevelEnabled?.('debug') !== false;
      const started = performance.now();
      outgoing.once('close', () => {
        const status = outgoing.statusCode;
        if (!every && status < 500) return;
        const path = incoming.url?.split('?', 1)[0];
        const line = { req_id: requestId, method: incoming.method, path, client: bindings.clientAddress(), status, ms: Math.round(performance.now() - started) };
        if (logRequests || status >= 500) logger.info(line, 'request');
        else logger.debug(line, 'request');
      });
    }
    return fetch(request, bindings);
  };
}
