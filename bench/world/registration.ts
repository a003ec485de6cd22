/**
 * A bench's world, registered through the real HTTP API of a running service: the superadmin (its row
 * written straight into SQLite, as the operator CLI does, then the real two-step login), an owner, mosques,
 * members and devices. bench/devices.ts, bench/broadcast.ts, bench/hostile.ts and bench/cluster/ build
 * theirs with it; only the device registrations are timed here.
 */
import crypto from 'node:crypto';
import { performance } from 'node:perf_hooks';
import bcrypt from 'bcryptjs';
import { systemClock } from '../../src/platform/clock.ts';
import { migrate, openDatabase } from '../../src/platform/db.ts';
import { identifierHash, sha256Hex } from '../../src/platform/identifiers.ts';
import { createUserStore } from '../../src/people/users.ts';
import { sqliteStore } from '../../src/platform/store/store.ts';
import { pool } from '../support.ts';

/** One JSON request; any answer but 2xx throws with its status and the start of its body. */
export async function api<T = any>(base: string, method: string, p: string, body?: unknown, token?: string): Promise<T> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (token) headers['authorization'] = `Bearer ${token}`;
  const res = await fetch(`${base}${p}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  if (res.status < 200 || res.status > 299) throw new Error(`${method} ${p}: HTTP ${res.status} ${text.slice(0, 300)}`);
  return (text ? JSON.parse(text) : null) as T;
}

const ROOT_EMAIL = 'root@bench.example';
const ROOT_PASSWORD = 'bench root password';

/** The superadmin row, written into the SQLite file; migrates it first when no service has yet (a no-op otherwise). */
export async function createFirstSuperadminRow(dbPath: string): Promise<void> {
  const db = openDatabase(dbPath);
  try {
    migrate(db);
    await (await createUserStore(sqliteStore(db), systemClock)).create({
      email: ROOT_EMAIL, emailHash: identifierHash(ROOT_EMAIL), phone: null, phoneHash: null,
      // bcrypt cost 4: the row is the bench's, not a stored secret.
      passwordBcrypt: bcrypt.hashSync(sha256Hex(ROOT_PASSWORD), 4), role: 'superadmin',
    });
  } finally {
    db.close();
  }
}

/** The seeded superadmin's access token through the real two-step login; `nextOtp` reads the OTP the service sent. */
export async function superadminToken(base: string, nextOtp: () => Promise<string>): Promise<string> {
  const step1 = await api<{ session_token: string }>(base, 'POST', '/api/v1/auth/superadmin-2fa', { identifier_hash: identifierHash(ROOT_EMAIL), password_hash: sha256Hex(ROOT_PASSWORD) });
  const otp = await nextOtp();
  const timestamp = Math.floor(Date.now() / 1000);
  const hmac = crypto.createHmac('sha256', step1.session_token).update(`${otp}|${timestamp}`).digest('hex');
  const root = await api<{ access_token: string }>(base, 'POST', '/api/v1/auth/superadmin-2fa/verify', { session_token: step1.session_token, timestamp, hmac });
  return root.access_token;
}

/** Signs up a person by email (password `pw <email>`); returns the token response. */
export const signup = (base: string, email: string) =>
  api<{ access_token: string; user: { id: string } }>(base, 'POST', '/api/v1/auth/signup', { email, password_hash: sha256Hex(`pw ${email}`) });

export type DeviceKind = 'transmitter' | 'stream_player';

export interface WorldPlan {
  /** All owned by one owner (owner@bench.example); every member joins every mosque. */
  mosques: Array<{ name: string; stream_url?: string; auto_approve_members?: boolean }>;
  /** member1@bench.example...: each signs up and joins; a membership left pending is approved by the owner. */
  members: number;
  /** Device i is bound to mosque i % mosques; a transmitter is the owner's, a stream player member i % members's. */
  devices: number;
  isTransmitter?: (i: number) => boolean;
  /** HTTP requests in flight. */
  concurrency: number;
  /** Given a line on progress every 10 s. */
  progress?: (line: string) => void;
  /**
   * The next one-time code the service delivered (its notifier's): each person proves their address with it, as
   * an account that has proven nothing holds no mosque and no device (docs/decisions.md).
   */
  nextOtp: () => Promise<string>;
}

export interface RegisteredDevice {
  id: string;
  password: string;
  kind: DeviceKind;
  /** A stream player's owner's membership of the player's mosque; null for a transmitter. */
  membershipId: string | null;
}

export interface RegisteredWorld {
  ownerToken: string;
  mosqueIds: string[];
  devices: RegisteredDevice[];
  /** How long the device registrations took, after the people and mosques. */
  deviceSeconds: number;
}

/**
 * Signs a person up and proves their email with the code the service sends. One at a time (`proving` chains them):
 * the codes come through one channel, so each must be the one this person asked for.
 */
function createProver(base: string, nextOtp: () => Promise<string>) {
  let proving: Promise<unknown> = Promise.resolve();
  return (email: string) => {
    const proven = proving.then(async () => {
      const person = await signup(base, email);
      await api(base, 'POST', '/api/v1/me/addresses/confirm', { channel: 'email' }, person.access_token);
      await api(base, 'POST', '/api/v1/me/addresses/verify', { code: await nextOtp() }, person.access_token);
      return person;
    });
    proving = proven.catch(() => undefined);
    return proven;
  };
}

/** Registers the plan's owner, mosques, members and devices as the superadmin `rootToken` and those people. */
export async function registerWorld(base: string, rootToken: string, plan: WorldPlan): Promise<RegisteredWorld> {
  const provenSignup = createProver(base, plan.nextOtp);
  const owner = await provenSignup('owner@bench.example');
  const mosqueIds: string[] = [];
  for (const m of plan.mosques) mosqueIds.push((await api<{ id: string }>(base, 'POST', '/api/v1/mosques', { ...m, owner_user_id: owner.user.id }, rootToken)).id);

  let membersDone = 0;
  let devicesDone = 0;
  const progress = plan.progress && setInterval(() => plan.progress!(`setup: ${membersDone}/${plan.members} members, ${devicesDone}/${plan.devices} devices`), 10_000);
  try {
    const members: Array<{ token: string; membershipIds: string[] }> = new Array(plan.members);
    await pool(plan.members, plan.concurrency, async (i) => {
      const token = (await provenSignup(`member${i + 1}@bench.example`)).access_token;
      const membershipIds: string[] = [];
      for (const mosqueId of mosqueIds) {
        const joined = await api<{ id: string; status: string }>(base, 'POST', `/api/v1/mosques/${mosqueId}/join`, {}, token);
        if (joined.status === 'pending') await api(base, 'PATCH', `/api/v1/memberships/${joined.id}`, { status: 'approved' }, owner.access_token);
        membershipIds.push(joined.id);
      }
      members[i] = { token, membershipIds };
      membersDone++;
    });

    const devices: RegisteredDevice[] = new Array(plan.devices);
    const t0 = performance.now();
    await pool(plan.devices, plan.concurrency, async (i) => {
      const at = i % mosqueIds.length;
      const mosqueId = mosqueIds[at]!;
      type Answer = { credentials: { client_id: string; password: string } };
      if (plan.isTransmitter?.(i)) {
        const r = await api<Answer>(base, 'POST', `/api/v1/mosques/${mosqueId}/devices`, { kind: 'transmitter', name: `tx ${i}` }, owner.access_token);
        devices[i] = { id: r.credentials.client_id, password: r.credentials.password, kind: 'transmitter', membershipId: null };
      } else {
        const member = members[i % members.length]!;
        const r = await api<Answer>(base, 'POST', '/api/v1/devices', { kind: 'stream_player', mosque_id: mosqueId, name: `player ${i}` }, member.token);
        devices[i] = { id: r.credentials.client_id, password: r.credentials.password, kind: 'stream_player', membershipId: member.membershipIds[at]! };
      }
      devicesDone++;
    });
    return { ownerToken: owner.access_token, mosqueIds, devices, deviceSeconds: (performance.now() - t0) / 1000 };
  } finally {
    if (progress) clearInterval(progress);
  }
}
