import { HW_REV } from '../device-config.ts';
import crypto from 'node:crypto';
import type { Actor, AdminStore } from '../../mosques/admins.ts';
import type { MosqueStore } from '../../mosques/mosques.ts';
import { toUnixSeconds, type Clock } from '../../platform/clock.ts';
import { fail, failUntil, ok, type Result } from '../../platform/failure.ts';
import { keyedHash, randomToken } from '../../platform/secret-codes.ts';
import type { Store } from '../../platform/store/store.ts';
import type { DeviceKind } from '../device-config.ts';
import type { DeviceBody } from '../plane/describe.ts';
import type { Credentials, DeviceVerbs } from '../plane/verbs.ts';
import { formatUserCode, normalizeUserCode, randomUserCode } from './user-code.ts';

/** RFC 8628 §3.2: how long the codes live, and the least wait between two polls. docs/api.md, "Pairing a device". */
export const PAIRING_TTL_SECONDS = 600;
export const PAIRING_INTERVAL_SECONDS = 5;
/** RFC 8628 §3.5: a device told slow_down waits this much longer from then on; the pairing remembers it. */
export const SLOW_DOWN_STEP_SECONDS = 5;
const MAX_INTERVAL_SECONDS = 60;
/**
 * A pending poll is held up to its interval and answered the moment a person approves or denies (docs/api.md,
 * "Pairing a device"). The device counts its interval from when it sent the poll (RFC 8628 §3.5 asks only for the
 * wait between requests), so a held answer is followed by the next poll at once and an approval reaches the device
 * in milliseconds, not after up to one interval. The row is read again this often, for an approval on another node.
 */
const HELD_RECHECK_MS = 500;
/** Seconds are whole in the store: a poll sent `interval` after the last one may land a second short of it. */
const POLL_TOLERANCE_SECONDS = 1;

export interface PairingStart {
  deviceCode: string;
  /** As shown: XXXX-XXXX. */
  userCode: string;
  expiresIn: number;
  interval: number;
}

/** What the refusal of a person's code says: the same whether the code is unknown or not theirs to approve. */
const NO_PAIRING = 'No pairing waits under that code for you: check the code the device shows, or start again on the device.';

/**
 * Pairing a device by a short code (docs/api.md, "Pairing a device"; RFC 8628). Both codes are stored as HMACs
 * under `key`, never as typed; the device is registered at approval through the device verbs, and its password
 * is generated only when its poll takes it, then answered once and the pairing deleted.
 */
export function createPairings(deps: {
  store: Store;
  clock: Clock;
  key: Buffer;
  /** PAIRING_MAX_PENDING: unexpired pairings at once, past it a new one is refused for a while. */
  maxPending: number;
  verbs: Pick<DeviceVerbs, 'mayBind' | 'registerPlayer' | 'registerTransmitter' | 'issuePairedPassword' | 'recordHwRev'>;
  mosques: Pick<MosqueStore, 'findById'>;
  admins: Pick<AdminStore, 'find'>;
}) {
  const { store, key } = deps;
  const now = () => toUnixSeconds(deps.clock());
  const deviceHash = (code: string) => keyedHash(key, `pairing_device|${code}`);
  const userHash = (letters: string) => keyedHash(key, `pairing_user|${letters}`);
  /** Pollers held on a pending pairing, woken by an approval or a denial made in this process. */
  const held = new Map<string, Set<() => void>>();
  const wake = (id: string) => {
    for (const w of held.get(id) ?? []) w();
  };
  let closed = false;
  const waitForAnswer = (id: string, ms: number) => new Promise<void>((resolve) => {
    const waiters = held.get(id) ?? new Set();
    held.set(id, waiters);
    const done = () => {
      clearTimeout(timer);
      waiters.delete(done);
      if (waiters.size === 0) held.delete(id);
      resolve();
    };
    const timer = setTimeout(done, ms);
    waiters.add(done);
  });
  const byId = (id: string) => store.selectFrom('device_pairings').selectAll().where('id', '=', id).executeTakeFirst();
  type Row = NonNullable<Awaited<ReturnType<typeof byId>>>;

  /** Denied or approved, the pairing is answered now and ends: taken by one delete, so two polls at once get it once. */
  const answer = async (row: Row): Promise<Result<Credentials>> => {
    const taken = await store.deleteFrom('device_pairings').where('id', '=', row.id).where('status', '=', row.status).executeTakeFirst();
    if (taken.numDeletedRows === 0n) return fail('expired_token');
    if (row.status === 'denied' || !row.device_id || !row.approved_by) return fail('access_denied');
    const issued = await deps.verbs.issuePairedPassword(row.device_id, row.approved_by);
    // Deleted between approval and this poll: the pairing is void.
    return issued ? ok(issued) : fail('access_denied');
  };
  const isWaiting = (row: Row) => row.status === 'pending' || row.status === 'approving';

  /** Holds a pending poll until the pairing is answered, it expires, `holdMs` passes or the process stops. */
  const hold = async (id: string, holdMs: number): Promise<Result<Credentials>> => {
    const until = Date.now() + holdMs;
    while (!closed && Date.now() < until) {
      await waitForAnswer(id, Math.min(HELD_RECHECK_MS, until - Date.now()));
      const row = await byId(id);
      if (!row || row.expires_at <= now()) return fail('expired_token');
      if (!isWaiting(row)) return answer(row);
    }
    return fail('authorization_pending');
  };

  const prune = async () => Number((await store.deleteFrom('device_pairings').where('expires_at', '<=', now()).executeTakeFirst()).numDeletedRows);

  /** The pending pairing a person's typed code names, unexpired; null for anything else. */
  const pendingByUserCode = async (typed: string) => {
    const letters = normalizeUserCode(typed);
    if (!letters) return null;
    const row = await store.selectFrom('device_pairings').selectAll().where('user_code_hash', '=', userHash(letters)).executeTakeFirst();
    return row && row.status === 'pending' && row.expires_at > now() ? row : null;
  };

  /**
   * A transmitter is a mosque's: only its managers (or a superadmin) pair one; a player binds where its owner-to-be
   * may bind one (docs/api.md, "Devices").
   */
  const mayPair = async (kind: string, actor: Actor, mosqueId: string) => {
    if (kind === 'stream_player') return (await deps.verbs.mayBind(actor, mosqueId)).ok;
    if (!(await deps.mosques.findById(mosqueId))) return false;
    return actor.isSuperadmin || (await deps.admins.find(mosqueId, actor.id))?.can_manage === 1;
  };

  /** Registers the device through the device verbs; a refusal to bind becomes the unknown-code answer. */
  const register = async (kind: string, actor: Actor, mosqueId: string, name: string | null): Promise<Result<DeviceBody>> => {
    if (kind === 'transmitter') return ok((await deps.verbs.registerTransmitter(mosqueId, name, actor.id)).device);
    const registered = await deps.verbs.registerPlayer(actor, name, mosqueId);
    if (registered.ok) return ok(registered.value.device);
    // Past the per-person limit of players: said plainly, the caller may bind here (docs/decisions.md, "Stream players per person").
    return registered.failure === 'conflict' ? registered : fail('not_found', NO_PAIRING);
  };

  return {
    prune,

    /** RFC 8628 §3.1-3.2: new codes for a device; full (PAIRING_MAX_PENDING), service_busy until the oldest expires. */
    async start(input: { kind: DeviceKind; name: string | null; fw: string | null; hwRev: string | null }): Promise<Result<PairingStart>> {
      await prune();
      const t = now();
      const pending = await store.selectFrom('device_pairings').select((eb) => [eb.fn.countAll<number | string>().as('n'), eb.fn.min('expires_at').as('first')]).executeTakeFirstOrThrow();
      if (Number(pending.n) >= deps.maxPending) return failUntil('service_busy', Number(pending.first ?? t + PAIRING_TTL_SECONDS) - t);
      const deviceCode = randomToken(32);
      // A user code already pending is drawn again: the UNIQUE index says so (one in 2.6 × 10^10 per pending pairing).
      for (let attempt = 0; ; attempt++) {
        const letters = randomUserCode();
        const inserted = await store.insertInto('device_pairings').values({
          id: crypto.randomUUID(), device_code_hash: deviceHash(deviceCode), user_code_hash: userHash(letters), kind: input.kind, name: input.name,
          fw: input.fw, hw_rev: input.hwRev, status: 'pending', device_id: null, approved_by: null, interval_s: PAIRING_INTERVAL_SECONDS,
          last_poll_at: null, created_at: t, expires_at: t + PAIRING_TTL_SECONDS,
        }).onConflict((oc) => oc.column('user_code_hash').doNothing()).executeTakeFirst();
        if (Number(inserted.numInsertedOrUpdatedRows ?? 0n) > 0) return ok({ deviceCode, userCode: formatUserCode(letters), expiresIn: PAIRING_TTL_SECONDS, interval: PAIRING_INTERVAL_SECONDS });
        if (attempt >= 3) throw new Error('four user codes in a row already pending: the random source is broken');
      }
    },

    /**
     * RFC 8628 §3.4-3.5: a device's poll. Unknown, expired or already answered: expired_token (a device learns
     * nothing of another's pairing). Approved: the credentials, once; the row goes with them. Pending: held up to
     * `holdMs` (at most the interval) for an answer, then authorization_pending.
     */
    async poll(deviceCode: string, holdMs = 0): Promise<Result<Credentials>> {
      const row = await store.selectFrom('device_pairings').selectAll().where('device_code_hash', '=', deviceHash(deviceCode)).executeTakeFirst();
      const t = now();
      if (!row || row.expires_at <= t) return fail('expired_token');
      if (row.last_poll_at !== null && t - row.last_poll_at < row.interval_s - POLL_TOLERANCE_SECONDS) {
        await store.updateTable('device_pairings').set({ last_poll_at: t, interval_s: Math.min(MAX_INTERVAL_SECONDS, row.interval_s + SLOW_DOWN_STEP_SECONDS) }).where('id', '=', row.id).execute();
        return fail('slow_down');
      }
      if (!isWaiting(row)) return answer(row);
      await store.updateTable('device_pairings').set({ last_poll_at: t }).where('id', '=', row.id).execute();
      return holdMs > 0 ? hold(row.id, Math.min(holdMs, row.interval_s * 1000)) : fail('authorization_pending');
    },

    /** Answers every held poll now (the process stops): each device polls again, elsewhere or later. */
    close(): void {
      closed = true;
      for (const id of [...held.keys()]) wake(id);
    },

    /**
     * A person approves (docs/api.md, "Pairing a device"): a stream player becomes theirs, bound to a mosque that
     * takes them (a pending or approved member, or a manager); a transmitter, a manager's mosque's. Anyone else
     * is answered as for an unknown code. The claim is one conditional write, so a code approves once.
     */
    async approve(actor: Actor, typed: string, mosqueId: string, name: string | null): Promise<Result<DeviceBody>> {
      const row = await pendingByUserCode(typed);
      if (!row) return fail('not_found', NO_PAIRING);
      if (!(await mayPair(row.kind, actor, mosqueId))) return fail('not_found', NO_PAIRING);
      const claimed = await store.updateTable('device_pairings').set({ status: 'approving' }).where('id', '=', row.id).where('status', '=', 'pending').executeTakeFirst();
      if (claimed.numUpdatedRows === 0n) return fail('not_found', NO_PAIRING);
      let registered: Result<DeviceBody>;
      try {
        registered = await register(row.kind, actor, mosqueId, name ?? row.name);
      } catch (err) {
        await store.updateTable('device_pairings').set({ status: 'pending' }).where('id', '=', row.id).execute();
        throw err;
      }
      if (!registered.ok) {
        await store.updateTable('device_pairings').set({ status: 'pending' }).where('id', '=', row.id).execute();
        return registered;
      }
      await store.updateTable('device_pairings').set({ status: 'approved', device_id: registered.value.id, approved_by: actor.id }).where('id', '=', row.id).execute();
      if (row.hw_rev && HW_REV.test(row.hw_rev)) await deps.verbs.recordHwRev(registered.value.id, row.hw_rev);
      wake(row.id);
      return registered;
    },

    /** RFC 8628 §3.5 access_denied: whoever holds the code may refuse it (the device's next poll is told). */
    async deny(typed: string): Promise<Result<void>> {
      const row = await pendingByUserCode(typed);
      if (!row) return fail('not_found', NO_PAIRING);
      const denied = await store.updateTable('device_pairings').set({ status: 'denied' }).where('id', '=', row.id).where('status', '=', 'pending').executeTakeFirst();
      if (denied.numUpdatedRows === 0n) return fail('not_found', NO_PAIRING);
      wake(row.id);
      return ok(undefined);
    },
  };
}

export type Pairings = ReturnType<typeof createPairings>;
