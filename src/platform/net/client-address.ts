import net from 'node:net';

/**
 * TRUST_PROXY: whether X-Forwarded-For names the client (for rate limits and logs). Pure, so both doors
 * (the HTTP API and the broker's WebSocket upgrade) can resolve a client the same way.
 * - off: the socket address, always; a forged header changes nothing.
 * - hops N: N proxies in front of us, each appending the address it saw; the client is the Nth entry
 *   from the right of the header (as Express's `trust proxy = N`).
 * - list: only these addresses/CIDRs are proxies; walk from the socket address leftwards, skipping them.
 */
export type TrustProxy =
  | { kind: 'off' }
  | { kind: 'hops'; hops: number }
  | { kind: 'list'; entries: string[]; proxies: net.BlockList };

export type TrustProxyParse = { ok: true; value: TrustProxy } | { ok: false; error: string };

const OFF = new Set(['', 'off', 'false', '0', 'no']);

/** Parses the TRUST_PROXY setting; an error names what is wrong (the caller adds the setting's name). */
export function parseTrustProxy(text: string): TrustProxyParse {
  const trimmed = text.trim().toLowerCase();
  if (OFF.has(trimmed)) return { ok: true, value: { kind: 'off' } };
  if (/^\d+$/.test(trimmed)) {
    const hops = Number(trimmed);
    if (hops > 10) return { ok: false, error: 'a hop count must be from 1 to 10' };
    return { ok: true, value: { kind: 'hops', hops } };
  }
  const proxies = new net.BlockList();
  const entries = trimmed.split(',').map((s) => s.trim()).filter(Boolean);
  for (const entry of entries) {
    if (!addEntry(proxies, entry)) {
      return { ok: false, error: 'must be off, a hop count, or a comma-separated list of IP addresses or CIDR ranges' };
    }
  }
  return { ok: true, value: { kind: 'list', entries, proxies } };
}

function addEntry(list: net.BlockList, entry: string): boolean {
  const [address, prefixText, extra] = entry.split('/');
  if (extra !== undefined || !address) return false;
  const family = net.isIP(address);
  if (family === 0) return false;
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (prefixText === undefined) {
    list.addAddress(address, type);
    return true;
  }
  if (!/^\d+$/.test(prefixText) || Number(prefixText) > (family === 4 ? 32 : 128)) return false;
  list.addSubnet(address, Number(prefixText), type);
  return true;
}

/**
 * The client address of a request that arrived from `socketAddress` with this X-Forwarded-For value.
 * An entry that is not an IP address ends the walk: the address to its right (a hop we trust) is the answer,
 * so a garbled header never yields a key the sender can choose freely.
 */
export function resolveClientAddress(socketAddress: string | undefined, forwardedFor: string | undefined, trust: TrustProxy): string {
  const socket = normalizeAddress(socketAddress ?? '') ?? 'unknown';
  if (trust.kind === 'off' || !forwardedFor) return socket;
  const hops = forwardedFor.split(',').map((s) => s.trim()).filter(Boolean);
  if (trust.kind === 'list' && !isTrusted(trust.proxies, socket)) return socket;
  let client = socket;
  for (let i = hops.length - 1, seen = 1; i >= 0; i--, seen++) {
    const address = normalizeAddress(hops[i]!);
    if (address === null) return client;
    client = address;
    if (trust.kind === 'hops' ? seen >= trust.hops : !isTrusted(trust.proxies, address)) return client;
  }
  // Fewer entries than trusted hops: the leftmost one is as far as the chain goes (Express does the same).
  return client;
}

function isTrusted(list: net.BlockList, address: string): boolean {
  const family = net.isIP(address);
  return family !== 0 && list.check(address, family === 6 ? 'ipv6' : 'ipv4');
}

/** An IP address without port or brackets, IPv4-mapped IPv6 as plain IPv4; null when it is not one. */
export function normalizeAddress(raw: string): string | null {
  let text = raw.trim();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(text);
  if (bracketed) text = bracketed[1]!;
  else if (/^[\d.]+:\d+$/.test(text)) text = text.slice(0, text.lastIndexOf(':'));
  const family = net.isIP(text);
  if (family === 0) return null;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(text);
  if (mapped) return mapped[1]!;
  return family === 6 ? text.toLowerCase() : text;
}
