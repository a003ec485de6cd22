import { hmacHex, sha256, signupMember, type TestService } from './service.ts';
import { createSuperadmin } from './superadmin.ts';

/** Creates a superadmin and signs in through the real two-step flow; returns its access token and id. */
export async function signInSuperadmin(ts: TestService, email = 'root@example.com', password = 'root password 123') {
  const user = await createSuperadmin(ts, email, password);
  const step1 = await ts.http.post('/api/v1/auth/superadmin-2fa', { identifier_hash: sha256(email), password_hash: sha256(password) });
  if (step1.status !== 200) throw new Error(`superadmin step 1: ${step1.status}`);
  await ts.service.notifier.idle();
  const otp = ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!;
  const timestamp = Math.floor(ts.clock() / 1000);
  const hmac = hmacHex(step1.body.session_token, `${otp}|${timestamp}`);
  const step2 = await ts.http.post('/api/v1/auth/superadmin-2fa/verify', { session_token: step1.body.session_token, timestamp, hmac });
  if (step2.status !== 200) throw new Error(`superadmin step 2: ${step2.status}`);
  return { token: step2.body.access_token as string, id: user.id };
}

export interface Person {
  token: string;
  id: string;
  email: string;
}

export async function member(ts: TestService, email: string): Promise<Person> {
  const res = await signupMember(ts.http, email);
  return { token: res.access_token, id: res.user.id, email: res.user.email };
}

/** A mosque created by the superadmin with `owner` as its owner. */
export async function createMosque(ts: TestService, rootToken: string, owner: Person | null, extra: Record<string, unknown> = {}) {
  const res = await ts.http.post('/api/v1/mosques', { name: 'Masjid Al-Noor', ...(owner && { owner_user_id: owner.id }), ...extra }, rootToken);
  if (res.status !== 201) throw new Error(`create mosque: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { id: string; join_code: string; name: string; auto_approve_members: boolean };
}
