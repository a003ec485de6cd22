/**
 * A mosque's mount on the audio server is `/m/<mosque id>` (docs/operator.md#audio-icecast); its stream address is
 * that mount under ICECAST_URL, and a player's carries its lease as `?lease=` (docs/firmware.md, "4.1 Config").
 */
export const MOUNT_PREFIX = '/m/';
/** Mosque ids are UUIDs; anything else after /m/ names no mosque. */
const MOSQUE_ID = /^[A-Za-z0-9-]{1,64}$/;

export const mountOf = (mosqueId: string) => `${MOUNT_PREFIX}${mosqueId}`;

export interface ParsedMount {
  mount: string;
  mosqueId: string;
  /** The listener's query string: Icecast 2.4 puts it in the `mount` field of listener_add (`/m/x?lease=...`). */
  params: URLSearchParams;
}

/** The mosque a callback's `mount` names, or null for any other path (`/`, `/admin`, `/m/../x`). */
export function parseMount(field: string): ParsedMount | null {
  const q = field.indexOf('?');
  const mount = q === -1 ? field : field.slice(0, q);
  if (!mount.startsWith(MOUNT_PREFIX)) return null;
  const mosqueId = mount.slice(MOUNT_PREFIX.length);
  if (!MOSQUE_ID.test(mosqueId)) return null;
  return { mount, mosqueId, params: new URLSearchParams(q === -1 ? '' : field.slice(q + 1)) };
}

/** The addresses under ICECAST_URL (`base`, no trailing slash). */
export function streamAddresses(base: string) {
  return {
    /** What a transmitter sends to and a broadcast event names. */
    mount: (mosqueId: string) => `${base}${mountOf(mosqueId)}`,
    /** What a stream player's config carries: the mount with its lease. */
    withLease: (mosqueId: string, lease: string) => `${base}${mountOf(mosqueId)}?lease=${encodeURIComponent(lease)}`,
    /** What the console plays: the mount with a listen ticket. */
    withTicket: (mosqueId: string, ticket: string) => `${base}${mountOf(mosqueId)}?ticket=${encodeURIComponent(ticket)}`,
  };
}
