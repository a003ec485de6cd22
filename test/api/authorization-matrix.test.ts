import crypto from 'node:crypto';
import { after, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import type { DeviceKind } from '../../src/devices/device-config.ts';
import { createMosque, member, signInSuperadmin, type Person } from '../support/people.ts';
import { copyServiceFiles, hmacHex, sha256, startTestService, type HttpResult, type TestService } from '../support/service.ts';
import { storeOf } from '../support/database.ts';
import { toneOnce } from '../audio/audio-files.ts';

/**
 * Who may do what (docs/walkthrough.md, "3. The mosque and its members"; docs/api.md, "Flags decide") as one table: every route x every caller standing -> the HTTP status it must get.
 * Each route runs against a world of its own; after every refused call (401/403/404) on a route that
 * changes state, the whole state (read back through the API as superadmin, plus every table of the
 * database and the outgoing messages) must be exactly what it was. The last test holds the table to the
 * routes the app really registers, so a new route without a row fails here.
 */

const STANDINGS = ['anonymous', 'member', 'admin', 'trigger', 'manager', 'owner', 'other_owner', 'superadmin'] as const;
type Standing = (typeof STANDINGS)[number];
type Expect = Record<Standing, number>;

const V1 = '/api/v1';

// ---------------------------------------------------------------------------------------------------
// The world: superadmin, mosque M with its owner, a member and three admins, and mosque N with its owner.
// Device rows add, on first use, a transmitter of M and a stream player of the member bound to M.

interface World {
  ts: TestService;
  root: Person;
  owner: Person;
  otherOwner: Person;
  member: Person;
  admin: Person;
  trigger: Person;
  manager: Person;
  M: { id: string; join_code: string };
  N: { id: string };
  /** The devices the rows share, made on first use (see sharedDevice). */
  devices: Partial<Record<DeviceKind, string>>;
  /** The person standing `s` (null for anonymous). */
  caller(s: Standing): Person | null;
  /** A new signed-up user with no relation to any mosque. */
  fresh(): Promise<Person>;
}

let serial = 0;
const unique = (label: string) => `${label}-${++serial}`;

async function must(res: Promise<HttpResult>, status: number, what: string): Promise<any> {
  const r = await res;
  if (r.status !== status) throw new Error(`${what}: expected ${status}, got ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** The people and mosques of the world, as the service reported them when the world was made. */
type Cast = Omit<World, 'ts' | 'devices' | 'caller' | 'fresh'>;

/** The operator's firmware signing key (docs/api.md, "Firmware updates"): its public half turns updates on. */
const FIRMWARE_KEYS = crypto.generateKeyPairSync('ed25519');
const FIRMWARE_PUBLIC_KEY = FIRMWARE_KEYS.publicKey.export({ format: 'der', type: 'spki' }).subarray(12).toString('base64');
const ICECAST_ENV = { ICECAST_URL: 'http://127.0.0.1:9', ICECAST_ADMIN_PASSWORD: 'matrix-admin-password', ICECAST_HOOK_SECRET: 'matrix-hook-secret-0123456789abcdefghij', FIRMWARE_PUBLIC_KEY };
/** A signed image, new bytes each time (an image never changes: a version is uploaded once). */
const signedImage = () => {
  const data = crypto.randomBytes(4096);
  return { data, signature: crypto.sign(null, crypto.createHash('sha256').update(data).digest(), FIRMWARE_KEYS.privateKey).toString('base64') };
};
/** An image stored as superadmin; its id. */
async function storedImage(w: World): Promise<string> {
  const image = signedImage();
  const res = await must(w.ts.http.request('PUT', `${V1}/firmware/images/stream_player/B2/${unique('1.0.0-m').replace(/[^0-9A-Za-z.-]/g, '')}`, {
    raw: image.data, headers: { 'content-type': 'application/octet-stream', 'x-firmware-signature': image.signature }, token: w.root.token,
  }), 201, 'upload an image');
  return res.id;
}

/**
 * Makes the world once, in a service of its own, and keeps its files (the database and DATA_DIR) as a template;
 * every row's world is a service started on a copy of them, so each row still begins from the same state without
 * paying for the sign-ups again. The tokens stay valid in every copy: they are checked against the copied rows
 * with the same JWT_SECRET.
 */
async function makeTemplate(t: TestContext): Promise<{ dir: string; cast: Cast }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-matrix-template-'));
  templateDirs.push(dir);
  // ICECAST_URL names a port nobody listens on: issuing a listen ticket asks nothing of Icecast.
  const ts = await startTestService(t, { logLevel: 'warn', env: { ...ICECAST_ENV, DATABASE_PATH: path.join(dir, 'minaret.db'), DATA_DIR: dir } });
  const root = await signInSuperadmin(ts);
  const [owner, otherOwner, memberP, admin, trigger, manager] = await Promise.all(
    ['owner-m', 'owner-n', 'member', 'admin', 'trigger', 'manager'].map((name) => member(ts, `${name}@matrix.test`)),
  );
  const M = await createMosque(ts, root.token, owner!, { name: 'Masjid M' });
  const N = await createMosque(ts, root.token, otherOwner!, { name: 'Masjid N' });
  const mPath = `${V1}/mosques/${M.id}`;
  const enrolled = await must(ts.http.post(`${mPath}/memberships`, { user_id: memberP!.id }, root.token), 201, 'enrol the member');
  assert.equal(enrolled.status, 'approved');
  await must(ts.http.post(`${mPath}/admins`, { user_id: admin!.id }, root.token), 201, 'add plain admin');
  await must(ts.http.post(`${mPath}/admins`, { user_id: trigger!.id, can_trigger: true }, root.token), 201, 'add trigger admin');
  await must(ts.http.post(`${mPath}/admins`, { user_id: manager!.id, can_manage: true }, root.token), 201, 'add manager');

  // The standings are what the table says they are, as the service itself reports them.
  const adminOf = async (p: Person) => (await must(ts.http.get(`${V1}/me`, p.token), 200, 'GET /me')).admin_of;
  assert.deepEqual(await adminOf(admin!), [{ mosque_id: M.id, is_owner: false, can_trigger: false, can_manage: false }]);
  assert.deepEqual(await adminOf(trigger!), [{ mosque_id: M.id, is_owner: false, can_trigger: true, can_manage: false }]);
  assert.deepEqual(await adminOf(manager!), [{ mosque_id: M.id, is_owner: false, can_trigger: false, can_manage: true }]);
  assert.deepEqual(await adminOf(owner!), [{ mosque_id: M.id, is_owner: true, can_trigger: true, can_manage: true }]);
  assert.deepEqual(await adminOf(otherOwner!), [{ mosque_id: N.id, is_owner: true, can_trigger: true, can_manage: true }]);
  assert.deepEqual(await adminOf(memberP!), []);
  // Closed, so the files are whole (the WAL checkpointed) before they are copied.
  await ts.service.close();
  return {
    dir,
    cast: { root: { ...root, email: 'root@example.com' }, owner: owner!, otherOwner: otherOwner!, member: memberP!, admin: admin!, trigger: trigger!, manager: manager!, M, N },
  };
}

let template: ReturnType<typeof makeTemplate> | null = null;
const templateDirs: string[] = [];
// Registered at the top level, so it runs once every row is done (inside a row it would run when that row ends).
after(() => { for (const dir of templateDirs) fs.rmSync(dir, { recursive: true, force: true }); });

/** A world of its own: a service on a fresh copy of the template's files. */
async function buildWorld(t: TestContext): Promise<World> {
  const { dir, cast } = await (template ??= makeTemplate(t));
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-matrix-world-'));
  t.after(() => fs.rmSync(copy, { recursive: true, force: true }));
  copyServiceFiles(dir, copy);
  const ts = await startTestService(t, { logLevel: 'warn', env: { ...ICECAST_ENV, DATABASE_PATH: path.join(copy, 'minaret.db'), DATA_DIR: copy } });
  const people: Record<Exclude<Standing, 'anonymous'>, Person> = {
    member: cast.member, admin: cast.admin, trigger: cast.trigger, manager: cast.manager, owner: cast.owner, other_owner: cast.otherOwner, superadmin: cast.root,
  };
  return {
    ...cast, ts, devices: {},
    caller: (s) => (s === 'anonymous' ? null : people[s]),
    fresh: () => member(ts, `${unique('fresh')}@matrix.test`),
  };
}

// Small world-changing steps the rows use to prepare their targets (always as superadmin).
const mosquePath = (w: World) => `${V1}/mosques/${w.M.id}`;

async function freshAdmin(w: World): Promise<Person> {
  const p = await w.fresh();
  await must(w.ts.http.post(`${mosquePath(w)}/admins`, { user_id: p.id }, w.root.token), 201, 'add target admin');
  return p;
}

/** A pending membership in M of a new user (M does not auto-approve). */
async function freshPendingMembership(w: World): Promise<string> {
  const p = await w.fresh();
  const m = await must(w.ts.http.post(`${mosquePath(w)}/join`, undefined, p.token), 201, 'target joins M');
  assert.equal(m.status, 'pending');
  return m.id;
}

async function stopLiveBroadcasts(w: World) {
  const list = await must(w.ts.http.get(`${mosquePath(w)}/broadcasts?limit=200`, w.root.token), 200, 'list broadcasts');
  for (const b of list) if (b.status === 'live') await must(w.ts.http.post(`${mosquePath(w)}/broadcasts/${b.id}/stop`, undefined, w.root.token), 200, 'stop');
}

async function liveBroadcast(w: World): Promise<string> {
  await stopLiveBroadcasts(w);
  return (await must(w.ts.http.post(`${mosquePath(w)}/broadcasts`, { kind: 'azaan', prayer: 'fajr' }, w.root.token), 201, 'start broadcast')).id;
}

/**
 * A new device of M: a transmitter registered by M's owner, or a stream player registered by the member
 * (approved in M), who owns it, bound to M.
 */
async function freshDevice(w: World, kind: DeviceKind): Promise<string> {
  const made = kind === 'transmitter'
    ? w.ts.http.post(`${mosquePath(w)}/devices`, { kind, name: unique('Transmitter') }, w.owner.token)
    : w.ts.http.post(`${V1}/devices`, { kind, name: unique('Player'), mosque_id: w.M.id }, w.member.token);
  return (await must(made, 201, `register a ${kind}`)).device.id;
}

/** The device of this kind every standing of a row uses (for rows whose success leaves it in place). */
async function sharedDevice(w: World, kind: DeviceKind): Promise<string> {
  return (w.devices[kind] ??= await freshDevice(w, kind));
}

/** A new pending pairing of a device of `kind`, started as the device starts one (no token); its user code. */
async function pendingPairing(w: World, kind: DeviceKind): Promise<string> {
  return (await must(w.ts.http.post(`${V1}/devices/pairing`, { kind, name: unique('Paired') }), 200, 'start a pairing')).user_code;
}

let mp3: Buffer | null = null;
/** A real MP3 (ffmpeg), made once for the rows of the recorded azaan. */
const recordingMp3 = () => (mp3 ??= toneOnce('mp3', 2));

/** Uploads M's recording as superadmin unless it has one; the path of its metadata. */
async function withRecording(w: World): Promise<string> {
  const p = `${mosquePath(w)}/recording`;
  if ((await w.ts.http.get(p, w.root.token)).status === 404) {
    await must(w.ts.http.request('PUT', p, { raw: recordingMp3(), headers: { 'content-type': 'audio/mpeg' }, token: w.root.token }), 201, 'upload the recording');
  }
  return p;
}

const pushKeys = { p256dh: 'BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM', auth: 'tBHItJI5svbpez7KI4CCXg' };
const pushEndpoint = () => `https://push.example.test/${unique('sub')}`;

// ---------------------------------------------------------------------------------------------------
// Expected statuses.

/** Every signed-in caller gets `ok`. */
const anyone = (ok: number): Expect => ({ anonymous: 401, member: ok, admin: ok, trigger: ok, manager: ok, owner: ok, other_owner: ok, superadmin: ok });

/** Gated at the route on the token's role: superadmin gets `ok`, every other signed-in caller 403. */
const superadminOnly = (ok: number): Expect => ({ anonymous: 401, member: 403, admin: 403, trigger: 403, manager: 403, owner: 403, other_owner: 403, superadmin: ok });

/** Who holds each per-mosque standing in M (superadmin passes every one). */
const HOLDERS = {
  admin: ['admin', 'trigger', 'manager', 'owner', 'superadmin'],
  trigger: ['trigger', 'owner', 'superadmin'],
  manager: ['manager', 'owner', 'superadmin'],
  owner: ['owner', 'superadmin'],
} as const satisfies Record<string, readonly Standing[]>;

/**
 * A per-mosque gate on M: the holders get `ok`; the member and admins lacking the flag get 403; the owner of
 * another mosque, a stranger to M, gets 404 as if M did not exist.
 */
function inMosque(gate: keyof typeof HOLDERS, ok: number): Expect {
  const holders: readonly Standing[] = HOLDERS[gate];
  const e = {} as Expect;
  for (const s of STANDINGS) e[s] = s === 'anonymous' ? 401 : s === 'other_owner' ? 404 : holders.includes(s) ? ok : 403;
  return e;
}

/**
 * Someone else's membership in M, named by its own id: the admins of M get `ok`. The record is visible
 * only to its member and to M's admins, so a fellow member of M is told 404 like a stranger (an unknown
 * id), not 403 as at M's own routes; test/api/memberships.test.ts holds the same line.
 */
/** Approved members of M and its admins (the schedule is for the mosque's people: docs/schedule.md, "The schedule, for apps"). */
const memberOrAdminOfM = (ok: number): Expect => ({ ...inMosque('admin', ok), member: ok });

/** One uploaded day; its minutes differ per call so every upload changes the stored month. */
const timetableDay = () => {
  const m = String(10 + (++serial % 40));
  return { day: 1, fajr: `04:${m}`, shuruk: '06:00', dhuhr: `12:${m}`, asr: `16:${m}`, maghrib: `20:${m}`, isha: `22:${m}` };
};

const membershipOfM = (ok: number): Expect => ({ ...inMosque('admin', ok), member: 404 });

/**
 * A device of M named by its own id: `view` (GET, why, events, logs) is for the admins of M,
 * `write` (PATCH, DELETE, credentials, commands) for its managers; the owner of a stream player holds both. Whoever
 * may not see the device is told 404 as for an unknown id, a member of M who does not own it included;
 * an admin who sees it but may not change it, 403.
 */
function deviceOfM(kind: DeviceKind, need: 'view' | 'write', ok: number): Expect {
  return { ...inMosque(need === 'view' ? 'admin' : 'manager', ok), member: kind === 'stream_player' ? ok : 404 };
}

const DEVICE_KINDS = ['transmitter', 'stream_player'] as const satisfies readonly DeviceKind[];

/**
 * Approving a pairing for M (docs/api.md, "Pairing a device"): a stream player where the caller may bind one (M's
 * member and admins, each an approved member of M, and superadmins); a transmitter for M's `can_manage` admins and
 * superadmins. Anyone else gets the unknown code's 404, never a 403: a code's existence is not revealed.
 */
function pairingApproval(kind: DeviceKind): Expect {
  if (kind === 'stream_player') return { ...anyone(200), other_owner: 404 };
  const e = {} as Expect;
  for (const s of STANDINGS) e[s] = s === 'anonymous' ? 401 : (HOLDERS.manager as readonly Standing[]).includes(s) ? 200 : 404;
  return e;
}

/**
 * A self-service join of M: open to any signed-in caller; an existing membership comes back as is. M's admins
 * are its members too (docs/decisions.md, "Owners and admins are members"), so for them, as for the member, that is a 200.
 */
const joinM: Expect = { ...anyone(201), member: 200, admin: 200, trigger: 200, manager: 200, owner: 200 };

// ---------------------------------------------------------------------------------------------------
// The table.

interface Call {
  path: string;
  body?: unknown;
  /** A body that is not JSON (the recorded azaan's raw audio) and its Content-Type. */
  raw?: { data: Uint8Array; type: string };
  /** Headers beyond the bearer token (the console's Origin, X-Minaret-Console and cookie). */
  headers?: Record<string, string>;
  /** Another bearer token of the caller than the world's (a fresh sign-in the call spends). */
  token?: string;
}

interface Row {
  /** `METHOD path` in Hono's syntax, exactly as the app registers it. */
  route: string;
  /** What the route is tried on, where one route has a row per kind of target (a device's kind). */
  target?: string;
  expect: Expect;
  /** The request for this standing; may first prepare a fresh target in the world (as superadmin). */
  request: (w: World, s: Standing, caller: Person | null) => Promise<Call> | Call;
  /** The route changes state: refused calls must change nothing, successful ones something. */
  mutates?: boolean;
  /** A success answers text (the ICS feed), not JSON. */
  answersText?: boolean;
  /** Whether a successful call with this status changes state (default: every success of a mutating route). */
  changesOnSuccess?: (status: number) => boolean;
  /** A successful call destroys the world (M itself): the next standing gets a new one. */
  destroysWorld?: boolean;
  /** Extra checks on a successful answer. */
  check?: (w: World, s: Standing, res: HttpResult) => void;
}

const ROWS: Row[] = [
  // --- me ---
  {
    route: `GET ${V1}/me`, expect: anyone(200), request: () => ({ path: `${V1}/me` }),
    check: (w, s, res) => assert.equal(res.body.user.id, w.caller(s)!.id),
  },
  { route: `GET ${V1}/me/memberships`, expect: anyone(200), request: () => ({ path: `${V1}/me/memberships` }) },
  {
    // Only the caller's own (docs/api.md, "Web Push, from a browser's side").
    route: `GET ${V1}/me/push-subscriptions`, expect: anyone(200), request: () => ({ path: `${V1}/me/push-subscriptions` }),
    check: (_w, _s, res) => assert.ok(Array.isArray(res.body)),
  },
  {
    route: `POST ${V1}/me/push-subscriptions`, expect: anyone(201), mutates: true,
    request: () => ({ path: `${V1}/me/push-subscriptions`, body: { endpoint: pushEndpoint(), keys: pushKeys } }),
  },
  {
    // Only the caller's own subscriptions (none here): queues nothing anyone else could receive.
    route: `POST ${V1}/me/push-subscriptions/test`, expect: anyone(202), request: () => ({ path: `${V1}/me/push-subscriptions/test` }),
    check: (_w, _s, res) => assert.equal(typeof res.body.queued, 'number'),
  },
  {
    // Every signed-in person changes their own address (docs/api.md, "Changing your email or phone").
    // A confirmed account's address moves only with its current password (docs/api.md, "Changing your email or phone").
    route: `PATCH ${V1}/me`, expect: anyone(200), mutates: true,
    request: (_w, s) => ({
      path: `${V1}/me`,
      body: { email: `${unique('moved')}@matrix.test`, current_password_hash: sha256(s === 'superadmin' ? 'root password 123' : 'correct horse battery staple') },
    }),
    check: (_w, _s, res) => assert.equal(typeof res.body.access_token, 'string'),
  },
  {
    route: `POST ${V1}/me/addresses/confirm`, expect: anyone(202), mutates: true,
    request: () => ({ path: `${V1}/me/addresses/confirm`, body: { channel: 'email' } }),
  },
  {
    // The caller's own code (anonymous: a guess), redeemed by the caller.
    route: `POST ${V1}/me/addresses/verify`, expect: anyone(200), mutates: true,
    request: async (w, _s, caller) => {
      if (!caller) return { path: `${V1}/me/addresses/verify`, body: { code: '000000' } };
      await must(w.ts.http.post(`${V1}/me/addresses/confirm`, { channel: 'email' }, caller.token), 202, 'ask for a code');
      await w.ts.service.notifier.idle();
      const code = w.ts.messages.filter((m) => m.purpose === 'confirm_address' && m.to === caller.email).at(-1)!.code!;
      return { path: `${V1}/me/addresses/verify`, body: { code } };
    },
    check: (_w, s, res) => assert.equal(res.body.email_proven, true, s),
  },
  {
    // The caller's own password, proved by the current one (the superadmin's differs from the members').
    route: `POST ${V1}/me/password`, expect: anyone(200), mutates: true,
    request: (_w, s) => ({
      path: `${V1}/me/password`,
      body: { current_password_hash: sha256(s === 'superadmin' ? 'root password 123' : 'correct horse battery staple'), new_password_hash: sha256(unique('new password')) },
    }),
    check: (w, s, res) => assert.equal(res.body.user.id, w.caller(s)!.id),
  },
  {
    route: `DELETE ${V1}/me/push-subscriptions`, expect: anyone(204), mutates: true,
    request: async (w, _s, caller) => {
      // The caller's own subscription (anonymous: the member's, which must survive the refused call).
      const holder = caller ?? w.member;
      const endpoint = pushEndpoint();
      await must(w.ts.http.post(`${V1}/me/push-subscriptions`, { endpoint, keys: pushKeys }, holder.token), 201, 'subscribe');
      return { path: `${V1}/me/push-subscriptions`, body: { endpoint } };
    },
  },

  // --- signing out (under /auth, yet the bearer token is required) ---
  { route: `POST ${V1}/auth/logout`, expect: anyone(204), mutates: true, request: () => ({ path: `${V1}/auth/logout` }) },
  { route: `POST ${V1}/auth/logout-all`, expect: anyone(204), mutates: true, request: () => ({ path: `${V1}/auth/logout-all` }) },

  // --- the console's session cookie (docs/api.md "Console sessions"); CSRF and revocation: test/people/console-session.test.ts ---
  {
    // Trades a fresh sign-in of the caller (the world's own tokens stay alive) for the cookie.
    route: `POST ${V1}/auth/session`, expect: anyone(201), mutates: true,
    request: async (w, _s, caller) => ({ path: `${V1}/auth/session`, headers: consoleHeaders(w), ...(caller && { token: await signInAgain(w, caller) }) }),
    check: (_w, _s, res) => {
      assert.equal(res.body.expires_in, 15 * 60);
      assert.match(res.headers.get('set-cookie') ?? '', /^minaret_console=[\w-]+\.[\w-]+; Path=\/api\/v1\/auth\/session; /);
    },
  },
  {
    // The cookie is the credential: the caller's own session mints a token for the caller; without one, 204 (nothing to restore).
    route: `POST ${V1}/auth/session/token`, expect: { ...anyone(200), anonymous: 204 },
    request: async (w, _s, caller) => ({ path: `${V1}/auth/session/token`, headers: { ...consoleHeaders(w), ...(caller && { cookie: await consoleCookie(w, caller) }) } }),
    check: (w, s, res) => assert.equal(res.status === 204 ? null : res.body.user.id, w.caller(s)?.id ?? null),
  },

  // --- firmware rollouts (docs/api.md, "Firmware updates"): superadmin only. A rollout of a stored image is made by
  // the create row; the others name one nobody made, so a superadmin is answered 404 and nothing changes ---
  // A device's own credentials as HTTP Basic, never a person's bearer token: every standing is refused.
  { route: `GET ${V1}/firmware/images/:id/download`, expect: { anonymous: 401, member: 401, admin: 401, trigger: 401, manager: 401, owner: 401, other_owner: 401, superadmin: 401 }, request: () => ({ path: `${V1}/firmware/images/x/download` }) },
  {
    route: `POST ${V1}/firmware/rollouts`, expect: superadminOnly(201), mutates: true,
    request: async (w) => ({ path: `${V1}/firmware/rollouts`, body: { image_id: await storedImage(w), groups: [{ devices: 1 }] } }),
  },
  { route: `GET ${V1}/firmware/rollouts`, expect: superadminOnly(200), request: () => ({ path: `${V1}/firmware/rollouts` }) },
  { route: `GET ${V1}/firmware/rollouts/:id`, expect: superadminOnly(404), request: () => ({ path: `${V1}/firmware/rollouts/x` }) },
  { route: `POST ${V1}/firmware/rollouts/:id/pause`, expect: superadminOnly(404), request: () => ({ path: `${V1}/firmware/rollouts/x/pause` }) },
  { route: `POST ${V1}/firmware/rollouts/:id/resume`, expect: superadminOnly(404), request: () => ({ path: `${V1}/firmware/rollouts/x/resume` }) },
  { route: `POST ${V1}/firmware/rollouts/:id/cancel`, expect: superadminOnly(404), request: () => ({ path: `${V1}/firmware/rollouts/x/cancel` }) },

  // --- users: superadmin only, all-or-nothing at the route ---
  { route: `GET ${V1}/users`, expect: superadminOnly(200), request: () => ({ path: `${V1}/users` }) },
  {
    route: `POST ${V1}/users`, expect: superadminOnly(201), mutates: true,
    request: () => ({ path: `${V1}/users`, body: { email: `${unique('created')}@matrix.test` } }),
  },
  { route: `GET ${V1}/users/:id`, expect: superadminOnly(200), request: (w) => ({ path: `${V1}/users/${w.member.id}` }) },
  {
    route: `PATCH ${V1}/users/:id`, expect: superadminOnly(200), mutates: true,
    request: async (w) => ({ path: `${V1}/users/${(await w.fresh()).id}`, body: { email: `${unique('renamed')}@matrix.test`, role: 'superadmin' } }),
  },
  {
    route: `DELETE ${V1}/users/:id`, expect: superadminOnly(204), mutates: true,
    request: async (w) => ({ path: `${V1}/users/${(await w.fresh()).id}` }),
  },

  // --- mosques ---
  {
    route: `POST ${V1}/mosques`, expect: superadminOnly(201), mutates: true,
    request: (w, _s, caller) => ({ path: `${V1}/mosques`, body: { name: unique('Masjid'), owner_user_id: caller?.id ?? w.member.id } }),
  },
  {
    route: `GET ${V1}/mosques`, expect: anyone(200), request: () => ({ path: `${V1}/mosques` }),
    check: (w, s, res) => {
      const ids = (res.body as Array<{ id: string }>).map((m) => m.id).sort();
      const sees = s === 'superadmin' ? [w.M.id, w.N.id] : s === 'other_owner' ? [w.N.id] : [w.M.id];
      assert.deepEqual(ids, sees.sort(), 'GET /mosques lists only the mosques the caller belongs to');
    },
  },
  {
    route: `GET ${V1}/mosques/:id`, expect: inMosque('admin', 200), request: (w) => ({ path: mosquePath(w) }),
    check: (w, _s, res) => assert.equal(res.body.join_code, w.M.join_code),
  },
  {
    // docs/api.md, "Flags decide": a mosque's settings are its managers'.
    route: `PATCH ${V1}/mosques/:id`, expect: inMosque('manager', 200), mutates: true,
    request: (w) => ({ path: mosquePath(w), body: { name: unique('Renamed'), auto_approve_members: true, stream_url: 'https://radio.example.test/live' } }),
  },
  {
    // docs/api.md, "Flags decide": deleting a mosque is its owner's or a superadmin's.
    route: `DELETE ${V1}/mosques/:id`, expect: inMosque('owner', 204), mutates: true, destroysWorld: true,
    request: (w) => ({ path: mosquePath(w) }),
  },
  {
    route: `POST ${V1}/mosques/:id/join-code`, expect: inMosque('manager', 200), mutates: true,
    request: (w) => ({ path: `${mosquePath(w)}/join-code` }),
  },

  // --- mosque admins ---
  { route: `GET ${V1}/mosques/:id/admins`, expect: inMosque('admin', 200), request: (w) => ({ path: `${mosquePath(w)}/admins` }) },
  {
    route: `POST ${V1}/mosques/:id/admins`, expect: inMosque('manager', 201), mutates: true,
    request: async (w) => ({ path: `${mosquePath(w)}/admins`, body: { user_id: (await w.fresh()).id, can_trigger: true, can_manage: true } }),
  },
  {
    route: `PATCH ${V1}/mosques/:id/admins/:user_id`, expect: inMosque('manager', 200), mutates: true,
    request: async (w) => ({ path: `${mosquePath(w)}/admins/${(await freshAdmin(w)).id}`, body: { can_trigger: true, can_manage: true } }),
  },
  {
    route: `DELETE ${V1}/mosques/:id/admins/:user_id`, expect: inMosque('manager', 204), mutates: true,
    request: async (w) => ({ path: `${mosquePath(w)}/admins/${(await freshAdmin(w)).id}` }),
  },

  // --- memberships ---
  { route: `GET ${V1}/mosques/:id/memberships`, expect: inMosque('admin', 200), request: (w) => ({ path: `${mosquePath(w)}/memberships` }) },
  {
    route: `POST ${V1}/mosques/:id/memberships`, expect: inMosque('admin', 201), mutates: true,
    request: async (w) => ({ path: `${mosquePath(w)}/memberships`, body: { user_id: (await w.fresh()).id } }),
  },
  {
    route: `POST ${V1}/mosques/:id/join`, expect: joinM, mutates: true, changesOnSuccess: (status) => status === 201,
    request: (w) => ({ path: `${mosquePath(w)}/join` }),
  },
  {
    // docs/api.md "Join links": whoever holds the code learns its mosque's name, signed in or not, and nothing else.
    route: `GET ${V1}/join/:code`, expect: { ...anyone(200), anonymous: 200 }, request: (w) => ({ path: `${V1}/join/${w.M.join_code}` }),
    check: (w, _s, res) => assert.deepEqual(res.body, { mosque_name: 'Masjid M' }),
  },
  {
    route: `POST ${V1}/join`, expect: joinM, mutates: true, changesOnSuccess: (status) => status === 201,
    request: (w) => ({ path: `${V1}/join`, body: { code: w.M.join_code } }),
  },
  {
    route: `POST ${V1}/invites`, expect: inMosque('admin', 201), mutates: true,
    request: (w) => ({ path: `${V1}/invites`, body: { mosque_id: w.M.id, email: `${unique('invited')}@matrix.test`, auto_approve: true } }),
  },
  {
    // One member as M's admins see them (the console's member page); a fellow member is told 404.
    route: `GET ${V1}/memberships/:id`, expect: membershipOfM(200),
    request: async (w) => ({ path: `${V1}/memberships/${await freshPendingMembership(w)}` }),
  },
  {
    // A status change on someone else's membership in M.
    route: `PATCH ${V1}/memberships/:id`, expect: membershipOfM(200), mutates: true,
    request: async (w) => ({ path: `${V1}/memberships/${await freshPendingMembership(w)}`, body: { status: 'approved' } }),
  },
  {
    // Removing someone else's membership in M (docs/decisions.md, "`DELETE /memberships/{id}`").
    route: `DELETE ${V1}/memberships/:id`, expect: membershipOfM(204), mutates: true,
    request: async (w) => ({ path: `${V1}/memberships/${await freshPendingMembership(w)}` }),
  },
  { route: `GET ${V1}/mosques/:id/activity`, expect: inMosque('admin', 200), request: (w) => ({ path: `${mosquePath(w)}/activity` }) },

  // --- live events (the console's stream; the stream itself takes a ticket, see EXEMPT) ---
  {
    route: `POST ${V1}/mosques/:id/events/ticket`, expect: inMosque('admin', 201),
    request: (w) => ({ path: `${mosquePath(w)}/events/ticket` }),
    check: (_w, _s, res) => assert.equal(res.body.expires_in, 30),
  },

  // --- listening in the console (the world runs with ICECAST_URL set: see buildWorld) ---
  {
    route: `POST ${V1}/mosques/:id/listen`, expect: memberOrAdminOfM(201),
    request: (w) => ({ path: `${mosquePath(w)}/listen` }),
    check: (w, _s, res) => assert.match(res.body.url, new RegExp(`/m/${w.M.id}\\?ticket=`)),
  },
  {
    route: `GET ${V1}/mosques/:id/on-air`, expect: inMosque('admin', 200),
    request: (w) => ({ path: `${mosquePath(w)}/on-air` }),
    check: (_w, _s, res) => assert.deepEqual([res.body.audio_server, res.body.on_air, res.body.listeners], [true, false, 0]),
  },

  // --- broadcasts ---
  {
    route: `POST ${V1}/mosques/:id/broadcasts`, expect: inMosque('trigger', 201), mutates: true,
    request: async (w) => {
      await stopLiveBroadcasts(w); // one live broadcast per mosque: each call starts from none
      return { path: `${mosquePath(w)}/broadcasts`, body: { kind: 'azaan', prayer: 'maghrib' } };
    },
  },
  {
    route: `POST ${V1}/mosques/:id/broadcasts/:bid/stop`, expect: inMosque('trigger', 200), mutates: true,
    request: async (w) => ({ path: `${mosquePath(w)}/broadcasts/${await liveBroadcast(w)}/stop` }),
    check: (_w, _s, res) => assert.equal(res.body.status, 'stopped'),
  },
  { route: `GET ${V1}/mosques/:id/broadcasts`, expect: inMosque('admin', 200), request: (w) => ({ path: `${mosquePath(w)}/broadcasts` }) },
  {
    route: `GET ${V1}/mosques/:id/broadcasts/:bid`, expect: inMosque('admin', 200),
    request: async (w) => ({ path: `${mosquePath(w)}/broadcasts/${await liveBroadcast(w)}` }),
  },

  // --- the azaan schedule (docs/schedule.md) ---
  {
    // The schedule fields of PATCH need can_manage; the rest of the mosque stays with its admins.
    route: `PATCH ${V1}/mosques/:id`, target: 'schedule fields', expect: inMosque('manager', 200), mutates: true,
    request: (w) => ({ path: mosquePath(w), body: { jumuah: [timetableDay().dhuhr], auto_start: false } }),
  },
  { route: `GET ${V1}/mosques/:id/schedule`, expect: memberOrAdminOfM(200), request: (w) => ({ path: `${mosquePath(w)}/schedule?days=2` }) },
  { route: `GET ${V1}/mosques/:id/schedule.ics`, expect: memberOrAdminOfM(200), answersText: true, request: (w) => ({ path: `${mosquePath(w)}/schedule.ics` }) },
  {
    // A preview shows what unsaved settings would give: the managers', like the settings themselves.
    route: `POST ${V1}/mosques/:id/schedule/preview`, expect: inMosque('manager', 200),
    request: (w) => ({ path: `${mosquePath(w)}/schedule/preview`, body: { timezone: 'Europe/London', latitude: 51.5, longitude: -0.1, prayer_times: { method: 'muslim_world_league', madhab: 'shafi' }, date: '2026-06-10' } }),
    check: (_w, _s, res) => assert.deepEqual(res.body.slots.map((s: { prayer: string }) => s.prayer), ['fajr', 'dhuhr', 'asr', 'maghrib', 'isha']),
  },
  {
    route: `PUT ${V1}/mosques/:id/timetable/:month`, expect: inMosque('manager', 200), mutates: true,
    request: (w) => ({ path: `${mosquePath(w)}/timetable/4`, body: [timetableDay()] }),
  },
  {
    route: `DELETE ${V1}/mosques/:id/timetable/:month`, expect: inMosque('manager', 204), mutates: true,
    request: async (w) => {
      await must(w.ts.http.request('PUT', `${mosquePath(w)}/timetable/5`, { body: [timetableDay()], token: w.root.token }), 200, 'upload May');
      return { path: `${mosquePath(w)}/timetable/5` };
    },
  },

  // --- the recorded azaan (docs/api.md, "Recorded azaan") ---
  {
    route: `PUT ${V1}/mosques/:id/recording`, expect: inMosque('manager', 201), mutates: true,
    request: async (w) => {
      await w.ts.http.delete(`${mosquePath(w)}/recording`, w.root.token); // each call starts from none: 201
      return { path: `${mosquePath(w)}/recording`, raw: { data: recordingMp3(), type: 'audio/mpeg' } };
    },
    check: (_w, _s, res) => assert.equal(res.body.content_type, 'audio/mpeg'),
  },
  {
    route: `GET ${V1}/mosques/:id/recording`, expect: inMosque('admin', 200),
    request: async (w) => ({ path: await withRecording(w) }),
    check: (_w, _s, res) => assert.equal(res.body.bytes, recordingMp3().length),
  },
  {
    route: `DELETE ${V1}/mosques/:id/recording`, expect: inMosque('manager', 204), mutates: true,
    request: async (w) => ({ path: await withRecording(w) }),
  },
  {
    // Opened by a player's lease only: no bearer token of any standing, the superadmin's included, is a lease.
    route: `GET ${V1}/audio/recordings/:mosque_id`, expect: { ...anyone(403), anonymous: 403 },
    request: async (w) => {
      await withRecording(w);
      return { path: `${V1}/audio/recordings/${w.M.id}` };
    },
  },

  // --- devices (docs/api.md, "Devices, from the app's side") ---
  {
    route: `POST ${V1}/mosques/:id/devices`, expect: inMosque('manager', 201), mutates: true,
    request: (w) => ({ path: `${mosquePath(w)}/devices`, body: { kind: 'transmitter', name: unique('Transmitter') } }),
    check: (w, _s, res) => {
      assert.deepEqual([res.body.device.kind, res.body.device.mosque_id, res.body.device.owner_user_id], ['transmitter', w.M.id, null]);
      assert.equal(res.body.credentials.username, res.body.device.id);
    },
  },
  {
    // Any signed-in person registers a stream player of their own; binding it to a mosque takes a place there
    // (docs/api.md, "Devices"): M's member and admins (each an approved member), not the owner of another mosque.
    route: `POST ${V1}/devices`, expect: { ...anyone(201), other_owner: 404 }, mutates: true,
    request: (w) => ({ path: `${V1}/devices`, body: { kind: 'stream_player', name: unique('Player'), mosque_id: w.M.id } }),
    check: (w, s, res) => {
      assert.deepEqual([res.body.device.kind, res.body.device.mosque_id, res.body.device.owner_user_id], ['stream_player', w.M.id, w.caller(s)!.id]);
      assert.equal(res.body.credentials.username, res.body.device.id);
    },
  },
  {
    route: `GET ${V1}/devices`, expect: anyone(200),
    request: async (w) => {
      for (const kind of DEVICE_KINDS) await sharedDevice(w, kind);
      return { path: `${V1}/devices` };
    },
    check: (w, s, res) => {
      const ids = (res.body as Array<{ id: string }>).map((d) => d.id).sort();
      const { transmitter, stream_player: player } = w.devices;
      const sees = s === 'member' ? [player] : s === 'other_owner' ? [] : [transmitter, player];
      assert.deepEqual(ids, sees.sort(), 'GET /devices lists own players and the devices of mosques the caller administers');
    },
  },
  ...DEVICE_KINDS.flatMap((kind): Row[] => [
    {
      route: `GET ${V1}/devices/:id`, target: kind, expect: deviceOfM(kind, 'view', 200),
      request: async (w) => ({ path: `${V1}/devices/${await sharedDevice(w, kind)}` }),
      check: (w, _s, res) => assert.equal(res.body.id, w.devices[kind]),
    },
    {
      route: `GET ${V1}/devices/:id/why`, target: kind, expect: deviceOfM(kind, 'view', 200),
      request: async (w) => ({ path: `${V1}/devices/${await sharedDevice(w, kind)}/why` }),
      check: (w, _s, res) => assert.equal(res.body.device_id, w.devices[kind]),
    },
    {
      route: `PATCH ${V1}/devices/:id`, target: kind, expect: deviceOfM(kind, 'write', 200), mutates: true,
      request: async (w) => ({ path: `${V1}/devices/${await sharedDevice(w, kind)}`, body: { name: unique('Renamed'), config: { log_enabled: true } } }),
    },
    {
      route: `DELETE ${V1}/devices/:id`, target: kind, expect: deviceOfM(kind, 'write', 204), mutates: true,
      request: async (w) => ({ path: `${V1}/devices/${await freshDevice(w, kind)}` }),
    },
    {
      // A refused rotation leaves the old password working: the devices table (secret_hash) is in the snapshot.
      route: `POST ${V1}/devices/:id/credentials`, target: kind, expect: deviceOfM(kind, 'write', 200), mutates: true,
      request: async (w) => ({ path: `${V1}/devices/${await freshDevice(w, kind)}/credentials` }),
      check: (_w, _s, res) => assert.equal(res.body.credentials.username, res.body.device.id),
    },
    {
      route: `GET ${V1}/devices/:id/events`, target: kind, expect: deviceOfM(kind, 'view', 200),
      request: async (w) => ({ path: `${V1}/devices/${await sharedDevice(w, kind)}/events` }),
      check: (_w, _s, res) => assert.ok((res.body as Array<{ kind: string }>).some((e) => e.kind === 'registered'), 'the registration is in the timeline'),
    },
    {
      // Gated as the timeline: whoever may view the device reads its firmware history.
      route: `GET ${V1}/devices/:id/firmware`, target: kind, expect: deviceOfM(kind, 'view', 200),
      request: async (w) => ({ path: `${V1}/devices/${await sharedDevice(w, kind)}/firmware` }),
      check: (_w, _s, res) => assert.deepEqual(res.body, []),
    },
    {
      route: `GET ${V1}/devices/:id/logs`, target: kind, expect: deviceOfM(kind, 'view', 200),
      request: async (w) => ({ path: `${V1}/devices/${await sharedDevice(w, kind)}/logs` }),
    },
    {
      // The write gate, like PATCH. The matrix's devices never connect, so a caller who passes the gate gets
      // 409 device_offline (docs/api.md, "Errors"), the "success" of this row, and nothing is sent or recorded. Refused
      // callers get their 401/403/404 instead of that 409: the gate is decided before the offline check (and
      // before the body). A connected device answering 200 is held in test/e2e/commands.test.ts.
      route: `POST ${V1}/devices/:id/commands`, target: kind, expect: deviceOfM(kind, 'write', 409), mutates: true,
      changesOnSuccess: (status) => status !== 409,
      request: async (w) => ({ path: `${V1}/devices/${await sharedDevice(w, kind)}/commands`, body: { name: 'ping', timeout_ms: 100 } }),
      check: (_w, _s, res) => assert.equal(res.body?.error?.code, 'device_offline'),
    },
  ]),

  // --- pairing a device by its code (docs/api.md, "Pairing a device"); the device's own start and poll: EXEMPT ---
  ...DEVICE_KINDS.flatMap((kind): Row[] => [
    {
      // A player becomes the caller's, bound to M, where the caller may bind one (a pending or approved member, a
      // manager, a superadmin: M's admins are its approved members); a transmitter becomes M's, for its managers and
      // superadmins. Everyone else is answered as for an unknown code.
      route: `POST ${V1}/devices/pairing/approve`, target: kind, expect: pairingApproval(kind), mutates: true,
      request: async (w) => ({ path: `${V1}/devices/pairing/approve`, body: { user_code: await pendingPairing(w, kind), mosque_id: w.M.id } }),
      check: (w, s, res) => assert.deepEqual(
        [res.body.device.kind, res.body.device.mosque_id, res.body.device.owner_user_id],
        [kind, w.M.id, kind === 'stream_player' ? w.caller(s)!.id : null],
      ),
    },
    {
      // Whoever holds the code may refuse it (RFC 8628 §3.5): the code is the credential, as the device shows it.
      route: `POST ${V1}/devices/pairing/deny`, target: kind, expect: anyone(204), mutates: true,
      request: async (w) => ({ path: `${V1}/devices/pairing/deny`, body: { user_code: await pendingPairing(w, kind) } }),
    },
  ]),

  // --- public documentation and keys (no bearer token needed, none refused) ---
  { route: `GET ${V1}/openapi.json`, expect: { ...anyone(200), anonymous: 200 }, request: () => ({ path: `${V1}/openapi.json` }) },
  { route: `GET ${V1}/asyncapi.json`, expect: { ...anyone(200), anonymous: 200 }, request: () => ({ path: `${V1}/asyncapi.json` }) },
  {
    // The JWKS firmware checks entitlement leases against: anyone may read it (docs/firmware.md, "5. The lease, and checking it offline").
    route: `GET ${V1}/devices/lease-keys`, expect: { ...anyone(200), anonymous: 200 }, request: () => ({ path: `${V1}/devices/lease-keys` }),
    check: (_w, _s, res) => assert.ok(Array.isArray(res.body.keys) && res.body.keys.length > 0, 'a JWKS with a key'),
  },
  {
    route: `PUT ${V1}/firmware/images/:kind/:hw_rev/:version`, expect: superadminOnly(201), mutates: true,
    request: () => {
      const image = signedImage();
      return { path: `${V1}/firmware/images/stream_player/B2/${unique('2.0.0-r').replace(/[^0-9A-Za-z.-]/g, '')}`, raw: { data: image.data, type: 'application/octet-stream' }, headers: { 'x-firmware-signature': image.signature } };
    },
    check: (_w, _s, res) => assert.match(res.body.sha256, /^[0-9a-f]{64}$/),
  },
  { route: `GET ${V1}/firmware/images`, expect: superadminOnly(200), request: () => ({ path: `${V1}/firmware/images` }) },
  {
    route: `DELETE ${V1}/firmware/images/:id`, expect: superadminOnly(204), mutates: true,
    request: async (w) => ({ path: `${V1}/firmware/images/${await storedImage(w)}` }),
  },
  {
    // The VAPID public key browsers subscribe to Web Push with: public, the same for everyone.
    route: `GET ${V1}/push/vapid-public-key`, expect: { ...anyone(200), anonymous: 200 }, request: () => ({ path: `${V1}/push/vapid-public-key` }),
    check: (_w, _s, res) => assert.match(res.body.public_key, /^[A-Za-z0-9_-]{80,}$/, 'a base64url P-256 public key'),
  },
];

/** Registered routes deliberately outside this matrix (no bearer token there: docs/api.md, "Base URL and conventions"). */
const EXEMPT = [
  'GET /healthz',
  `POST ${V1}/auth/signup`,
  `POST ${V1}/auth/login`,
  `POST ${V1}/auth/login-code`,
  `POST ${V1}/auth/login-code/verify`,
  `POST ${V1}/auth/forgot-password`,
  `POST ${V1}/auth/reset-password`,
  `POST ${V1}/auth/superadmin-2fa`,
  `POST ${V1}/auth/superadmin-2fa/verify`,
  `POST ${V1}/auth/superadmin-forgot`,
  `POST ${V1}/auth/superadmin-forgot/verify`,
  `POST ${V1}/auth/superadmin-reset-password`,
  // The first superadmin's setup link: a token the process logged, never a bearer token (test/people/first-superadmin.test.ts).
  `GET ${V1}/auth/setup`,
  `POST ${V1}/auth/setup`,
  // Opened with a single-use ticket, never a bearer token: test/e2e/events-stream.test.ts holds who gets one.
  `GET ${V1}/mosques/:id/events/stream`,
  // Icecast's callbacks: authenticated by the hook secret, never a person (test/audio/callbacks.test.ts).
  `POST ${V1}/audio/hooks/:action`,
  // Pairing a device (docs/api.md, "Pairing a device"): the device starts and polls with no token, its device code
  // being its only credential (test/devices/pairing.test.ts). Approve and deny are people's, rows of the table.
  `POST ${V1}/devices/pairing`,
  `POST ${V1}/devices/pairing/token`,
];

// ---------------------------------------------------------------------------------------------------
// State, read back as superadmin through the API, plus every table and the outgoing messages.

/** Every table's rows, through a second connection to the service's store (its SQLite file or its PostgreSQL). */
async function dumpDatabase(ts: TestService): Promise<Record<string, string[]>> {
  const { store, close } = await storeOf(ts);
  try {
    // duty_runs records which node ran a periodic duty when (src/platform/store/duties.ts): the clock's doing, never a caller's.
    const tables = (await store.introspection.getTables()).map((t) => t.name).filter((name) => name !== 'duty_runs').sort();
    const rows = await Promise.all(tables.map(async (name) => (await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(name)}`.execute(store)).rows.map((r) => JSON.stringify(r)).sort()));
    return Object.fromEntries(tables.map((name, i) => [name, rows[i]!]));
  } finally {
    await close();
  }
}

/** Where only part of an answer is state: a device's live fields (last seen, counters) are not. */
const KEPT: Record<string, (body: any) => unknown> = {
  devices: (list: Array<{ id: string; name: string | null; config_version: number }>) => list.map(({ id, name, config_version }) => ({ id, name, config_version })),
};

type Snapshot = Awaited<ReturnType<typeof snapshot>>;

async function snapshot(w: World) {
  await w.ts.service.notifier.idle();
  const m = mosquePath(w);
  const paths = {
    mosques: `${V1}/mosques`,
    mosque: m,
    admins: `${m}/admins`,
    memberships: `${m}/memberships`,
    broadcasts: `${m}/broadcasts?limit=200`,
    activity: `${m}/activity?limit=200`,
    users: `${V1}/users?limit=200`,
    devices: `${V1}/devices`,
  };
  const api = Object.fromEntries(
    await Promise.all(Object.entries(paths).map(async ([k, p]) => {
      const r = await w.ts.http.get(p, w.root.token);
      const keep = r.status === 200 ? KEPT[k] : undefined;
      return [k, { status: r.status, body: keep ? keep(r.body) : r.body }] as const;
    })),
  );
  return { api, db: await dumpDatabase(w.ts), messages: w.ts.messages.length };
}

/** Which parts of two snapshots differ (`api.users`, `db.mosques`, `messages`), for the failure message. */
function changedParts(before: Snapshot, after: Snapshot): string[] {
  const parts: string[] = [];
  for (const side of ['api', 'db'] as const) {
    const keys = new Set([...Object.keys(before[side]), ...Object.keys(after[side])]);
    for (const k of keys) if (JSON.stringify(before[side][k]) !== JSON.stringify(after[side][k])) parts.push(`${side}.${k}`);
  }
  if (before.messages !== after.messages) parts.push('messages');
  return parts;
}

// ---------------------------------------------------------------------------------------------------
// The console's session: the headers its page sends, and a session of the caller's own.

const consoleHeaders = (w: World) => ({ origin: new URL(w.ts.url).origin, 'x-minaret-console': '1' });

/** A new token of `p` from a sign-in now: the superadmin by the two-step flow, the others by password. */
async function signInAgain(w: World, p: Person): Promise<string> {
  if (p.id !== w.root.id) {
    const res = await must(w.ts.http.post(`${V1}/auth/login`, { identifier_hash: sha256(p.email), password_hash: sha256('correct horse battery staple') }), 200, 'login');
    return res.access_token;
  }
  const started = await must(w.ts.http.post(`${V1}/auth/superadmin-2fa`, { identifier_hash: sha256('root@example.com'), password_hash: sha256('root password 123') }), 200, 'superadmin step 1');
  await w.ts.service.notifier.idle();
  const otp = w.ts.messages.filter((m) => m.purpose === 'superadmin_otp').at(-1)!.code!;
  const timestamp = Math.floor(w.ts.clock() / 1000);
  const verified = await must(w.ts.http.post(`${V1}/auth/superadmin-2fa/verify`, { session_token: started.session_token, timestamp, hmac: hmacHex(started.session_token, `${otp}|${timestamp}`) }), 200, 'superadmin step 2');
  return verified.access_token;
}

/** `minaret_console=...` of a new console session of `p`. */
async function consoleCookie(w: World, p: Person): Promise<string> {
  const res = await w.ts.http.request('POST', `${V1}/auth/session`, { token: await signInAgain(w, p), headers: consoleHeaders(w) });
  if (res.status !== 201) throw new Error(`open a console session: ${res.status} ${JSON.stringify(res.body)}`);
  return res.headers.get('set-cookie')!.split(';')[0]!;
}

// ---------------------------------------------------------------------------------------------------

const ERROR_CODES: Record<number, string> = { 401: 'unauthorized', 403: 'forbidden', 404: 'not_found' };

/** A regular expression for a Hono path pattern: each `:param` is one path segment. */
const patternOf = (path: string) => new RegExp(`^${path.replace(/:[a-z_]+/g, '[^/?]+')}(\\?.*)?$`);

async function runStanding(w: World, row: Row, s: Standing): Promise<{ succeeded: boolean }> {
  const [method, pattern] = row.route.split(' ') as [string, string];
  const caller = w.caller(s);
  const call = await row.request(w, s, caller);
  assert.match(call.path, patternOf(pattern), `the request of ${row.route} must hit that route`);
  const before = row.mutates ? await snapshot(w) : null;
  const token = call.token ?? caller?.token;
  const res = await w.ts.http.request(method, call.path, {
    ...(call.body !== undefined && { body: call.body }), headers: { ...call.headers, ...(call.raw && { 'content-type': call.raw.type }) },
    ...(call.raw && { raw: call.raw.data }), ...(token && { token }),
  });
  const expected = row.expect[s];
  assert.equal(res.status, expected, `expected ${expected}, got ${res.status} ${JSON.stringify(res.body)}`);
  const refused = expected in ERROR_CODES;
  if (refused) {
    assert.equal(res.body?.error?.code, ERROR_CODES[expected], `error code of the ${expected}`);
  } else {
    if (expected === 204) assert.equal(res.body, null, '204 has no body');
    else if (row.answersText) assert.match(String(res.body), /^BEGIN:VCALENDAR\r\n/, 'success answers the calendar');
    else assert.equal(typeof res.body, 'object', 'success answers JSON');
    row.check?.(w, s, res);
  }
  if (before) {
    const after = await snapshot(w);
    if (refused) assert.deepEqual(after, before, `a refused call changed state: ${changedParts(before, after).join(', ')}`);
    else if (row.changesOnSuccess?.(res.status) ?? true) assert.notDeepEqual(after, before, 'a successful call changed nothing');
  }
  return { succeeded: !refused };
}

/** A row's name: its route, and its target where the route has one row per target. */
const labelOf = (row: Row) => (row.target ? `${row.route} (${row.target})` : row.route);

// Each row has a service of its own, so rows may run side by side; a few at a time keeps the load modest.
test('authorization matrix: every route x every standing', { concurrency: 4 }, async (t) => {
  await Promise.all(ROWS.map((row) =>
    t.test(labelOf(row), async (t) => {
      let world: World | null = null;
      const failures: string[] = [];
      for (const s of STANDINGS) {
        world ??= await buildWorld(t);
        try {
          const { succeeded } = await runStanding(world, row, s);
          if (succeeded && row.destroysWorld) world = null;
        } catch (err) {
          failures.push(`  ${s}: ${(err as Error).message.split('\n').slice(0, 12).join('\n    ')}`);
        }
      }
      assert.equal(failures.length, 0, `${labelOf(row)}\n${failures.join('\n')}`);
    }),
  ));
});

test('the matrix covers exactly the registered routes', async (t) => {
  const ROUTES_IN_APP = (await startTestService(t)).service.routes.map((r) => `${r.method} ${r.path}`);
  const labels = ROWS.map(labelOf);
  assert.equal(new Set(labels).size, labels.length, 'a route has two rows for the same target');
  const rows = [...new Set(ROWS.map((r) => r.route))];
  assert.equal(new Set([...rows, ...EXEMPT]).size, rows.length + EXEMPT.length, 'a route is both in the table and exempt');
  const covered = new Set([...rows, ...EXEMPT]);
  const registered = new Set(ROUTES_IN_APP);
  const withoutRow = ROUTES_IN_APP.filter((r) => !covered.has(r));
  const notRegistered = [...covered].filter((r) => !registered.has(r));
  assert.deepEqual(withoutRow, [], 'registered routes without a row in the authorization matrix: add one');
  assert.deepEqual(notRegistered, [], 'rows or exemptions for routes the app does not register');
});
