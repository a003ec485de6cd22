import { test } from 'node:test';
import assert from 'node:assert/strict';
import { normalizeAddress, parseTrustProxy, resolveClientAddress, type TrustProxy } from '../../src/platform/net/client-address.ts';
import { loadConfig } from '../../src/platform/config.ts';

function trust(setting: string): TrustProxy {
  const parsed = parseTrustProxy(setting);
  assert.ok(parsed.ok, `TRUST_PROXY=${setting} parses`);
  return parsed.value;
}

// [TRUST_PROXY, socket address, X-Forwarded-For, expected client]
const cases: Array<[string, string, string | undefined, string]> = [
  // Off: the socket address always, whatever the header says.
  ['off', '203.0.113.7', undefined, '203.0.113.7'],
  ['off', '203.0.113.7', '198.51.100.1', '203.0.113.7'],
  ['', '10.0.0.2', '1.2.3.4, 5.6.7.8', '10.0.0.2'],
  ['false', '::ffff:10.0.0.2', '1.2.3.4', '10.0.0.2'],
  // Hop count N: the Nth address from the right.
  ['1', '10.0.0.2', '198.51.100.9', '198.51.100.9'],
  ['1', '10.0.0.2', '6.6.6.6, 198.51.100.9', '198.51.100.9'],
  ['2', '10.0.0.2', '6.6.6.6, 198.51.100.9, 10.0.0.3', '198.51.100.9'],
  ['2', '10.0.0.2', '198.51.100.9', '198.51.100.9'], // a shorter chain: its leftmost entry
  ['1', '10.0.0.2', undefined, '10.0.0.2'], // no header: the socket
  ['1', '10.0.0.2', '', '10.0.0.2'],
  ['1', '10.0.0.2', 'not-an-ip', '10.0.0.2'], // garbage never becomes a key the sender chooses
  ['2', '10.0.0.2', 'not-an-ip, 10.0.0.3', '10.0.0.3'],
  ['1', '10.0.0.2', '198.51.100.9:4711', '198.51.100.9'], // a port is dropped
  ['1', '10.0.0.2', '[2001:DB8::1]:443', '2001:db8::1'],
  ['1', '10.0.0.2', '2001:db8::1', '2001:db8::1'],
  // List: walk from the right skipping trusted proxies.
  ['10.0.0.0/8', '10.0.0.2', '198.51.100.9', '198.51.100.9'],
  ['10.0.0.0/8', '10.0.0.2', '6.6.6.6, 198.51.100.9, 10.1.2.3', '198.51.100.9'],
  ['10.0.0.0/8', '203.0.113.7', '198.51.100.9', '203.0.113.7'], // not from a trusted proxy: the header is ignored
  ['10.0.0.0/8', '10.0.0.2', '10.0.0.5, 10.0.0.4', '10.0.0.5'], // all trusted: the leftmost
  ['127.0.0.1, ::1', '::1', '198.51.100.9', '198.51.100.9'],
  ['127.0.0.1, ::1', '::ffff:127.0.0.1', '198.51.100.9', '198.51.100.9'],
  ['192.0.2.1,2001:db8::/32', '2001:db8::5', '6.6.6.6, 198.51.100.9, 192.0.2.1', '198.51.100.9'],
];

for (const [setting, socket, header, expected] of cases) {
  test(`with TRUST_PROXY=${JSON.stringify(setting)}, socket ${socket} and X-Forwarded-For ${JSON.stringify(header)} the client is ${expected}`, () => {
    assert.equal(resolveClientAddress(socket, header, trust(setting)), expected);
  });
}

test('an unknown socket address resolves to "unknown" and never trusts the header', () => {
  assert.equal(resolveClientAddress(undefined, '198.51.100.9', trust('10.0.0.0/8')), 'unknown');
});

const refused: Array<[string, RegExp]> = [
  ['11', /hop count must be from 1 to 10/],
  ['yes please', /comma-separated list/],
  ['10.0.0.0/33', /comma-separated list/],
  ['10.0.0.1/8/8', /comma-separated list/],
  ['localhost', /comma-separated list/],
  ['10.0.0.1, example.org', /comma-separated list/],
];

for (const [setting, message] of refused) {
  test(`TRUST_PROXY=${JSON.stringify(setting)} stops the start with one line naming the setting`, () => {
    const r = loadConfig({ TRUST_PROXY: setting });
    assert.equal(r.ok, false);
    if (r.ok) return;
    assert.match(r.error, /^TRUST_PROXY: /);
    assert.match(r.error, message);
    assert.ok(!r.error.includes('\n'));
  });
}

test('TRUST_PROXY is off unless set', () => {
  const r = loadConfig({});
  assert.ok(r.ok);
  assert.deepEqual(r.config.trustProxy, { kind: 'off' });
});

test('IPv4-mapped IPv6 addresses read as plain IPv4, and text that is no address reads as null', () => {
  assert.equal(normalizeAddress('::ffff:192.0.2.1'), '192.0.2.1');
  assert.equal(normalizeAddress(' 192.0.2.1 '), '192.0.2.1');
  assert.equal(normalizeAddress('192.0.2.1:80'), '192.0.2.1');
  assert.equal(normalizeAddress('unknown'), null);
  assert.equal(normalizeAddress('999.1.1.1'), null);
});
