import { admitLease, playerStanding, type LeaseFacts, type LeaseRefusal } from '../lease-admission.ts';
import type { ListenTicket } from './listen-tickets.ts';
import type { Listener, ListenerSessionRow } from '../listener-sessions.ts';
import { parseMount } from '../mounts.ts';

/**
 * Who Icecast may let in (docs/operator.md#audio-icecast; SECURITY.md, "The audio gate"). Pure: every fact comes
 * through `AdmissionFacts`, read from memory (devices, leases) or the store (mosques, memberships, admins: those
 * answer a promise) at the moment of asking, never from the credential alone.
 */
export type SourceRefusal = 'admin_request' | 'not_a_mosque_mount' | 'unknown_mosque' | 'no_credentials' | 'bad_credentials' | 'not_a_transmitter' | 'other_mosque';
/** A lease's refusals are the one rule's (src/audio/lease-admission.ts); the rest are this door's own. */
export type ListenerRefusal = LeaseRefusal | 'not_a_mosque_mount' | 'unknown_mosque' | 'no_credential' | 'membership_not_approved' | 'bad_ticket';

/** A console listener is admitted for at most this long per ticket (a tab left open does not listen forever). */
export const TICKET_SESSION_MAX_S = 2 * 3600;

export interface AdmissionFacts extends LeaseFacts {
  mosqueExists(id: string): Promise<boolean>;
  /** The constant-time device credential check MQTT uses (src/devices/devices.ts verifySecret). */
  verifySecret(id: string, password: string): boolean;
  isAdmin(mosqueId: string, userId: string): Promise<boolean>;
  verifyTicket(token: string): ListenTicket | null;
}

type Refused<R> = { ok: false; reason: R; mosqueId: string | null; deviceId?: string; userId?: string };

/**
 * stream_auth: only the mosque's own transmitter, by its device credentials, may be the source of its mount. An
 * admin request (`admin=1`: Icecast asks the mount's auth when the global admin's credentials did not match) is
 * refused, or a transmitter's password would administer its mount.
 */
export async function admitSource(req: { mount: string; user: string; pass: string; admin: boolean }, facts: AdmissionFacts): Promise<{ ok: true; mosqueId: string; deviceId: string } | Refused<SourceRefusal>> {
  const parsed = parseMount(req.mount);
  const mosqueId = parsed?.mosqueId ?? null;
  if (req.admin) return { ok: false, reason: 'admin_request', mosqueId };
  if (!parsed || parsed.params.size > 0) return { ok: false, reason: 'not_a_mosque_mount', mosqueId: null };
  if (!(await facts.mosqueExists(parsed.mosqueId))) return { ok: false, reason: 'unknown_mosque', mosqueId: null };
  if (!req.user || !req.pass) return { ok: false, reason: 'no_credentials', mosqueId };
  // The check runs (and costs the same) whether or not the id exists.
  if (!facts.verifySecret(req.user, req.pass)) return { ok: false, reason: 'bad_credentials', mosqueId };
  const device = facts.device(req.user)!;
  if (device.kind !== 'transmitter') return { ok: false, reason: 'not_a_transmitter', mosqueId, deviceId: device.id };
  if (device.mosqueId !== parsed.mosqueId) return { ok: false, reason: 'other_mosque', mosqueId, deviceId: device.id };
  return { ok: true, mosqueId: parsed.mosqueId, deviceId: device.id };
}

export type ListenerAdmission = { ok: true; mosqueId: string; listener: Listener; untilSeconds: number } | Refused<ListenerRefusal>;

/**
 * listener_add: a stream player by the lease its config carries (`?lease=`), admitted by the one lease rule
 * (src/audio/lease-admission.ts), or a member by a console ticket (`?ticket=`); a player's stay ends when its lease does.
 */
export async function admitListener(mountField: string, facts: AdmissionFacts): Promise<ListenerAdmission> {
  const parsed = parseMount(mountField);
  if (!parsed) return { ok: false, reason: 'not_a_mosque_mount', mosqueId: null };
  const { mosqueId, params } = parsed;
  if (!(await facts.mosqueExists(mosqueId))) return { ok: false, reason: 'unknown_mosque', mosqueId: null };
  const lease = params.get('lease');
  const ticket = params.get('ticket');
  if (lease) return admitByLease(mosqueId, lease, facts);
  if (ticket) return admitByTicket(mosqueId, ticket, facts);
  return { ok: false, reason: 'no_credential', mosqueId };
}

async function admitByLease(mosqueId: string, token: string, facts: AdmissionFacts): Promise<ListenerAdmission> {
  const admitted = await admitLease(token, mosqueId, facts);
  if (!admitted.ok) return { ok: false, reason: admitted.reason, mosqueId, ...(admitted.deviceId !== undefined && { deviceId: admitted.deviceId }) };
  return { ok: true, mosqueId, listener: { deviceId: admitted.deviceId }, untilSeconds: admitted.expiresAt };
}

async function admitByTicket(mosqueId: string, token: string, facts: AdmissionFacts): Promise<ListenerAdmission> {
  const ticket = facts.verifyTicket(token);
  if (!ticket) return { ok: false, reason: 'bad_ticket', mosqueId };
  const userId = ticket.userId;
  if (ticket.mosqueId !== mosqueId) return { ok: false, reason: 'other_mosque', mosqueId, userId };
  if (!(await memberOrAdmin(mosqueId, userId, facts))) return { ok: false, reason: 'membership_not_approved', mosqueId, userId };
  return { ok: true, mosqueId, listener: { userId }, untilSeconds: facts.nowSeconds + TICKET_SESSION_MAX_S };
}

const memberOrAdmin = async (mosqueId: string, userId: string, facts: AdmissionFacts) =>
  (await facts.membershipStatus(mosqueId, userId)) === 'approved' || (await facts.isAdmin(mosqueId, userId));

/**
 * Why an admitted listener must go now, or null while it may stay: the device deleted, disabled or rebound, its
 * lease dropped (a ban, a removal, a rotated password), or the member's standing gone.
 */
export async function revocationOf(session: ListenerSessionRow, facts: AdmissionFacts): Promise<ListenerRefusal | 'device_deleted' | null> {
  if (session.user_id !== null) return (await memberOrAdmin(session.mosque_id, session.user_id, facts)) ? null : 'membership_not_approved';
  const device = facts.device(session.device_id!);
  if (!device) return 'device_deleted';
  const standing = await playerStanding(device, session.mosque_id, facts);
  if (standing) return standing;
  return facts.heldLease(device.id, session.mosque_id) === null ? 'lease_superseded' : null;
}
