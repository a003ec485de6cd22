import { hmacHex, sha256, signupMember, type TestService } from './service.ts';
import { createSuperadmin } from './superadmin.ts';

/** Creates a superadmin and signs in through the real two-step flow; returns its access token and id. */
export async function signInSuperadmin(ts: TestService, email = 'root@example.com', password = 'root password 123') {
  const user = await createSuperadmin(ts, email, password);
  return { token: await superadminToken(ts, email, password), id: user.id };
}

/** A token of a superadmin who exists already, through its two steps (POST /auth/superadmin-2fa, then /verify). */
export async function superadminToken(ts: TestService, email: string, password: string): Promise<string> {
  const step1 = await ts.http.post('/api/v1/auth/superadmin-2fa', { identifier_hash: sha256(email), password_hash: sha256(password) });
  if (step1.status !== 200) throw new Error(`superadmin step 1: ${step1.status}`);
  await ts.service.notifier.idle();
  const otp = ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!;
  const timestamp = Math.floor(ts.clock() / 1000);
  const hmac = hmacHex(step1.body.session_token, `${otp}|${timestamp}`);
  const step2 = await ts.http.post('/api/v1/auth/superadmin-2fa/verify', { session_token: step1.body.session_token, timestamp, hmac });
  if (step2.status !== 200) throw new Error(`superadmin step 2: ${step2.status}`);
  return step2.body.access_token as string;
}

export interface Person {
  token: string;
  id: string;
  email: string;
}

/**
 * A member who signed up and confirmed their email while signed in (docs/api.md, "Addresses: claims and proof"),
 * as anyone who receives invitations has. `unproven` leaves the email a claim.
 */
export async function member(ts: TestService, email: string, opts: { unproven?: boolean } = {}): Promise<Person> {
  const res = await signupMember(ts.http, email);
  const person = { token: res.access_token, id: res.user.id, email: res.user.email };
  if (!opts.unproven) await confirmAddress(ts, person.token, 'email', person.email);
  return person;
}

/** Asks for a confirmation code while signed in and redeems it; fails unless the address ends up proven. */
export async function confirmAddress(ts: TestService, token: string, channel: 'email' | 'sms', to: string) {
  const asked = await ts.http.post('/api/v1/me/addresses/confirm', { channel }, token);
  if (asked.status !== 202) throw new Error(`confirm: ${asked.status} ${JSON.stringify(asked.body)}`);
  await ts.service.notifier.idle();
  const code = ts.messages.filter((m) => m.purpose === 'confirm_address' && m.to === to).at(-1)?.code;
  if (!code) throw new Error(`no confirmation code went to ${to}`);
  const verified = await ts.http.post('/api/v1/me/addresses/verify', { code }, token);
  if (verified.status !== 200) throw new Error(`verify: ${verified.status} ${JSON.stringify(verified.body)}`);
  return verified.body as { id: string; email_proven: boolean; phone_proven: boolean };
}

/** A mosque created by the superadmin with `owner` as its owner. */
export async function createMosque(ts: TestService, rootToken: string, owner: Person | null, extra: Record<string, unknown> = {}) {
  const res = await ts.http.post('/api/v1/mosques', { name: 'Masjid Al-Noor', ...(owner && { owner_user_id: owner.id }), ...extra }, rootToken);
  if (res.status !== 201) throw new Error(`create mosque: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { id: string; join_code: string; name: string; auto_approve_members: boolean };
}

// ---- helpers for the people-and-mosques tests ----

export const API = '/api/v1';

export interface AdminFlagsWanted {
  can_trigger?: boolean;
  can_manage?: boolean;
}

/** Gives `person` an admin row in the mosque, added by the superadmin, with the flags asked (false otherwise). */
export async function makeAdmin(ts: TestService, rootToken: string, mosqueId: string, person: Person, flags: AdminFlagsWanted = {}) {
  const res = await ts.http.post(`${API}/mosques/${mosqueId}/admins`, { user_id: person.id, ...flags }, rootToken);
  if (res.status !== 201) throw new Error(`add admin: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { user_id: string; email: string; is_owner: boolean; can_trigger: boolean; can_manage: boolean };
}

/** A self-service join of `person`; returns the membership (201 or 200 both accepted here). */
export async function joinMosque(ts: TestService, person: Person, mosqueId: string) {
  const res = await ts.http.post(`${API}/mosques/${mosqueId}/join`, {}, person.token);
  if (res.status !== 201 && res.status !== 200) throw new Error(`join: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { id: string; status: string; [k: string]: unknown };
}

/** Sets a membership's status as `token` (an admin of its mosque or the superadmin); fails unless 200. */
export async function setStatus(ts: TestService, token: string, membershipId: string, status: string) {
  const res = await ts.http.patch(`${API}/memberships/${membershipId}`, { status }, token);
  if (res.status !== 200) throw new Error(`set status: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { id: string; status: string; [k: string]: unknown };
}

/** The person's own membership of one mosque as GET /me/memberships shows it; undefined when there is none. */
export async function ownMembership(ts: TestService, person: Person, mosqueId: string) {
  const res = await ts.http.get(`${API}/me/memberships`, person.token);
  if (res.status !== 200) throw new Error(`me/memberships: ${res.status} ${JSON.stringify(res.body)}`);
  return (res.body as Array<Record<string, unknown> & { mosque_id: string }>).find((m) => m.mosque_id === mosqueId);
}

/** Every membership of a mosque as an admin (or the superadmin) reads them. */
export async function mosqueMemberships(ts: TestService, token: string, mosqueId: string) {
  const res = await ts.http.get(`${API}/mosques/${mosqueId}/memberships`, token);
  if (res.status !== 200) throw new Error(`mosque memberships: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as Array<Record<string, unknown> & { id: string; user_id: string; status: string; user_email: string }>;
}

/** The admin rows of a mosque as the superadmin reads them. */
export async function mosqueAdmins(ts: TestService, rootToken: string, mosqueId: string) {
  const res = await ts.http.get(`${API}/mosques/${mosqueId}/admins`, rootToken);
  if (res.status !== 200) throw new Error(`mosque admins: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as Array<{ user_id: string; email: string; is_owner: boolean; can_trigger: boolean; can_manage: boolean }>;
}

/** The mosque's activity feed (newest first) as the superadmin reads it. */
export async function mosqueActivity(ts: TestService, rootToken: string, mosqueId: string, query = '') {
  const res = await ts.http.get(`${API}/mosques/${mosqueId}/activity${query}`, rootToken);
  if (res.status !== 200) throw new Error(`activity: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as Array<{ id: string; at: string; actor_user_id: string | null; kind: string; subject_id: string | null; data: Record<string, unknown> }>;
}
