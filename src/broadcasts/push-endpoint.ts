import net from 'node:net';

/**
 * Which push endpoints the server may POST to (docs/decisions.md, "Push endpoints": a push subscription must not turn the server into
 * a proxy onto its own network). Pure: the URL rule runs without DNS when subscribing and again before
 * every send; the address rule runs on every address a push host resolves to, at connect time.
 */

// IPv4 ranges that are not reachable on the public internet (IANA special-purpose registry, RFC 6890).
const V4_BLOCKED: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local (cloud metadata services live here)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation (TEST-NET-1)
  ['192.88.99.0', 24], // deprecated 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation (TEST-NET-2)
  ['203.0.113.0', 24], // documentation (TEST-NET-3)
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, and the broadcast address
];

// IPv6 is judged by allow-list: only global unicast (2000::/3) is public, which leaves out ::, ::1, fc00::/7,
// fe80::/10, ff00::/8 and the rest at once; inside it, these are not reachable hosts either.
const V6_BLOCKED_GLOBAL: Array<[string, number]> = [
  ['2001::', 23], // IETF protocol assignments (Teredo, benchmarking, ORCHID)
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4: embeds an IPv4 address, possibly a private one
  ['3fff::', 20], // documentation (RFC 9637)
];

const v4Blocked = new net.BlockList();
for (const [a, p] of V4_BLOCKED) v4Blocked.addSubnet(a, p, 'ipv4');
const v6Global = new net.BlockList();
v6Global.addSubnet('2000::', 3, 'ipv6');
const v6Blocked = new net.BlockList();
for (const [a, p] of V6_BLOCKED_GLOBAL) v6Blocked.addSubnet(a, p, 'ipv6');
const v6Mapped = new net.BlockList();
v6Mapped.addSubnet('::ffff:0:0', 96, 'ipv6');
const v6Nat64 = new net.BlockList();
v6Nat64.addSubnet('64:ff9b::', 96, 'ipv6'); // RFC 6052: the gateway forwards to the embedded IPv4 address

/** Whether an IP address (v4 or v6, no brackets) is a public unicast address a push service may live at. */
export function isPublicAddress(address: string): boolean {
  const family = net.isIP(address);
  if (family === 4) return !v4Blocked.check(address, 'ipv4');
  if (family !== 6) return false;
  if (v6Mapped.check(address, 'ipv6') || v6Nat64.check(address, 'ipv6')) return isPublicAddress(embeddedIpv4(address));
  return v6Global.check(address, 'ipv6') && !v6Blocked.check(address, 'ipv6');
}

/** The IPv4 address in the last 32 bits of an IPv6 address. */
function embeddedIpv4(address: string): string {
  const url = new URL(`http://[${address}]/`); // normalises to hex groups, e.g. [::ffff:7f00:1]
  const groups = url.hostname.slice(1, -1).split(':');
  const last = Number.parseInt(groups.at(-1) || '0', 16);
  const before = Number.parseInt(groups.at(-2) || '0', 16);
  return [before >> 8, before & 255, last >> 8, last & 255].join('.');
}

// Names that never lead to a public host: RFC 6761 localhost, mDNS, the ICANN-reserved private TLD, home networks.
const PRIVATE_SUFFIXES = ['localhost', 'local', 'internal', 'home.arpa'];

export type EndpointCheck = { ok: true; url: URL; host: string } | { ok: false; reason: string };

/**
 * The URL rule for a push endpoint: https on port 443, a public host, no user name or password. The WHATWG
 * parser runs first, so `2130706433`, `0x7f.1` and `017700000001` arrive here as `127.0.0.1`, and
 * `[::ffff:127.0.0.1]` as `[::ffff:7f00:1]`. `host` is the name or address to connect to (no brackets).
 */
export function checkPushEndpoint(raw: string): EndpointCheck {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, reason: 'must be a URL' };
  }
  if (url.protocol !== 'https:') return { ok: false, reason: 'must be an https URL' };
  if (url.username !== '' || url.password !== '') return { ok: false, reason: 'must not carry a user name or password' };
  if (url.port !== '') return { ok: false, reason: 'must use port 443' };
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (net.isIP(host) !== 0) return isPublicAddress(host) ? { ok: true, url, host } : { ok: false, reason: 'must not be a private, loopback or reserved address' };
  const name = host.replace(/\.$/, '');
  if (!name.includes('.')) return { ok: false, reason: 'must be a public host name' };
  if (PRIVATE_SUFFIXES.some((s) => name === s || name.endsWith(`.${s}`))) return { ok: false, reason: 'must be a public host name' };
  return { ok: true, url, host };
}
