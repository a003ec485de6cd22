import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/platform/config.ts';
import { httpServerOptions } from '../../api/http-server.ts';

test('the HTTP door and guessing settings default to 10 s, 30 s, 5 s, 1000 sockets, a queue of 64 and 20 guesses an hour', () => {
  const r = loadConfig({});
  assert.ok(r.ok);
  const c = r.config;
  assert.deepEqual(
    [c.httpHeadersTimeoutS, c.httpRequestTimeoutS, c.httpKeepAliveTimeoutS, c.httpMaxConnections, c.bcryptMaxQueue, c.authMaxWrongGuessesPerHour],
    [10, 30, 5, 1000, 64, 20],
  );
});

const refused: Array<[Record<string, string>, RegExp]> = [
  [{ HTTP_HEADERS_TIMEOUT_S: '40' }, /^HTTP_HEADERS_TIMEOUT_S: must not exceed HTTP_REQUEST_TIMEOUT_S \(30\)$/],
  [{ HTTP_HEADERS_TIMEOUT_S: '0' }, /^HTTP_HEADERS_TIMEOUT_S: /],
  [{ HTTP_MAX_CONNECTIONS: 'many' }, /^HTTP_MAX_CONNECTIONS: /],
  [{ BCRYPT_MAX_QUEUE: '0' }, /^BCRYPT_MAX_QUEUE: /],
  [{ AUTH_MAX_WRONG_GUESSES_PER_HOUR: '-1' }, /^AUTH_MAX_WRONG_GUESSES_PER_HOUR: /],
  [{ HTTP_KEEP_ALIVE_TIMEOUT_S: '1.5' }, /^HTTP_KEEP_ALIVE_TIMEOUT_S: /],
];

for (const [env, line] of refused) {
  test(`${Object.entries(env).map(([k, v]) => `${k}=${v}`).join(' ')} stops the start with one line naming the setting`, () => {
    const r = loadConfig(env);
    assert.equal(r.ok, false);
    if (!r.ok) assert.match(r.error, line);
  });
}

test('Node sweeps for timed-out requests at least every second, so the headers timeout really holds', () => {
  const options = httpServerOptions({ httpHeadersTimeoutS: 10, httpRequestTimeoutS: 30, httpKeepAliveTimeoutS: 5, httpMaxConnections: 1000 });
  assert.equal(options.connectionsCheckingInterval, 1000);
  assert.equal(options.headersTimeout, 10_000);
  assert.equal(options.requestTimeout, 30_000);
  assert.equal(httpServerOptions({ httpHeadersTimeoutS: 1, httpRequestTimeoutS: 1, httpKeepAliveTimeoutS: 1, httpMaxConnections: 1 }).connectionsCheckingInterval, 500);
});
