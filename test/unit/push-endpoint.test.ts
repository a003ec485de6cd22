import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkPushEndpoint, isPublicAddress } from '../../src/broadcasts/push-endpoint.ts';

// docs/decisions.md, "Push endpoints": a push endpoint must be an https URL on port 443 of a public host, so that subscribing cannot
// make the server POST into its own network.

const ADDRESSES: Array<[string, boolean]> = [
  ['8.8.8.8', true],
  ['142.250.74.10', true],
  ['100.63.255.255', true],
  ['100.128.0.0', true],
  ['172.32.0.1', true],
  ['0.0.0.0', false],
  ['0.1.2.3', false],
  ['10.1.2.3', false],
  ['100.64.0.1', false],
  ['100.127.255.254', false],
  ['127.0.0.1', false],
  ['127.255.255.254', false],
  ['169.254.169.254', false],
  ['172.16.0.1', false],
  ['172.31.255.255', false],
  ['192.0.0.8', false],
  ['192.0.2.1', false],
  ['192.168.1.1', false],
  ['198.18.0.1', false],
  ['198.19.255.255', false],
  ['198.51.100.7', false],
  ['203.0.113.9', false],
  ['224.0.0.251', false],
  ['239.255.255.250', false],
  ['240.0.0.1', false],
  ['255.255.255.255', false],
  ['2a00:1450:4001:82b::200a', true],
  ['2606:4700::6810:84e5', true],
  ['::', false],
  ['::1', false],
  ['::ffff:127.0.0.1', false],
  ['::ffff:7f00:1', false],
  ['::ffff:10.0.0.1', false],
  ['::ffff:8.8.8.8', true],
  ['::127.0.0.1', false],
  ['64:ff9b::7f00:1', false],
  ['64:ff9b::808:808', true],
  ['fc00::1', false],
  ['fd12:3456:789a::1', false],
  ['fe80::1', false],
  ['febf::1', false],
  ['ff02::1', false],
  ['ff0e::1', false],
  ['2001::1', false],
  ['2001:db8::1', false],
  ['2002:7f00:1::1', false],
  ['3fff::1', false],
  ['not an address', false],
  ['', false],
];

test('the address rule: only public unicast addresses pass, IPv4 and IPv6 alike', () => {
  for (const [address, expected] of ADDRESSES) assert.equal(isPublicAddress(address), expected, address);
});

const REFUSED: Array<[string, string]> = [
  ['http://fcm.googleapis.com/fcm/send/x', 'must be an https URL'],
  ['http://127.0.0.1:8080/', 'must be an https URL'],
  ['ftp://push.example.com/x', 'must be an https URL'],
  ['not a url', 'must be a URL'],
  ['https://user:pass@push.example.com/x', 'must not carry a user name or password'],
  ['https://user@push.example.com/x', 'must not carry a user name or password'],
  ['https://push.example.com:8443/x', 'must use port 443'],
  ['https://push.example.com:80/x', 'must use port 443'],
  ['https://127.0.0.1/x', 'must not be a private, loopback or reserved address'],
  ['https://10.1.2.3/x', 'must not be a private, loopback or reserved address'],
  ['https://100.64.1.1/x', 'must not be a private, loopback or reserved address'],
  ['https://169.254.169.254/latest/meta-data', 'must not be a private, loopback or reserved address'],
  ['https://2130706433/x', 'must not be a private, loopback or reserved address'],
  ['https://0x7f.1/x', 'must not be a private, loopback or reserved address'],
  ['https://017700000001/x', 'must not be a private, loopback or reserved address'],
  ['https://127.1/x', 'must not be a private, loopback or reserved address'],
  ['https://0/x', 'must not be a private, loopback or reserved address'],
  ['https://[::1]/x', 'must not be a private, loopback or reserved address'],
  ['https://[::ffff:127.0.0.1]/x', 'must not be a private, loopback or reserved address'],
  ['https://[fd00::1]/x', 'must not be a private, loopback or reserved address'],
  ['https://[fe80::1]/x', 'must not be a private, loopback or reserved address'],
  ['https://[ff02::1]/x', 'must not be a private, loopback or reserved address'],
  ['https://224.0.0.1/x', 'must not be a private, loopback or reserved address'],
  ['https://localhost/x', 'must be a public host name'],
  ['https://LOCALHOST./x', 'must be a public host name'],
  ['https://push.localhost/x', 'must be a public host name'],
  ['https://printer.local/x', 'must be a public host name'],
  ['https://metadata.google.internal/x', 'must be a public host name'],
  ['https://router.home.arpa/x', 'must be a public host name'],
  ['https://intranet/x', 'must be a public host name'],
];

const ACCEPTED = [
  'https://fcm.googleapis.com/fcm/send/abc:def',
  'https://updates.push.services.mozilla.com/wpush/v2/gAAAA',
  'https://web.push.apple.com/QGuQyavXutnMH',
  'https://push.example.com:443/x',
  'https://8.8.8.8/x',
  'https://[2a00:1450:4001:82b::200a]/x',
  'https://localhost.example.com/x',
];

test('the URL rule refuses non-https, other ports, userinfo, private literals in every spelling and private names', () => {
  for (const [url, reason] of REFUSED) assert.deepEqual(checkPushEndpoint(url), { ok: false, reason }, url);
});

test('the URL rule accepts https URLs of public push services on port 443', () => {
  for (const url of ACCEPTED) assert.equal(checkPushEndpoint(url).ok, true, url);
});

test('the URL rule names the host to connect to, without brackets', () => {
  const v6 = checkPushEndpoint('https://[2a00:1450:4001:82b::200a]/x');
  assert.ok(v6.ok);
  assert.equal(v6.host, '2a00:1450:4001:82b::200a');
  const named = checkPushEndpoint('https://Push.Example.com/x');
  assert.ok(named.ok);
  assert.equal(named.host, 'push.example.com');
});
