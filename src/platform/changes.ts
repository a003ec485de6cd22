/**
 * The change feed (docs/decisions.md, "Several processes"): every write that an in-memory cache depends on names what changed,
 * right after its commit, and every process reloads just that entry from the store. One process: the
 * feed only tells this process's own listeners (the /me cache). Several (REDIS_URL): the same changes also
 * travel on one Redis channel (src/platform/net/redis-changes.ts), and are numbered in the store's change log
 * (src/platform/store/change-log.ts), where a process that missed messages reads them back.
 *
 * A change carries a kind and an id, never a secret or a value: the receiver reads the row itself, so a lost,
 * repeated or late message can never make a cache wrong, only stale until the next message or full reload.
 */
export type ChangeKind =
  /** The users row: token version (sign-out, password, role), contact fields, deletion. */
  | 'user'
  /** A user's memberships or admin rows (id: the user's id). */
  | 'standing'
  /** A devices row that the registry or the leases mirror: created, rotated, rebound, settings, lease, deleted. */
  | 'device'
  /** A mosque's row changed or it went away (its memberships and admin rows with it). */
  | 'mosque'
  /** One access token was signed out (id: the SHA-256 of its jti, as revoked_tokens keys it). */
  | 'token';

export const CHANGE_KINDS: readonly ChangeKind[] = ['user', 'standing', 'device', 'mosque', 'token'];

export interface Change {
  kind: ChangeKind;
  id: string;
}

/** `local`: committed by this process, whose caches are already current; `remote`: by another process. */
export type ChangeOrigin = 'local' | 'remote';

export interface ChangeListener {
  changed(change: Change, origin: ChangeOrigin): void;
  /** Anything may have changed (the feed was away, or the safety-net poll ran): reload everything. */
  resync(): void;
}

/** What the domains get: they only ever announce. */
export interface ChangePublisher {
  publish(change: Change): void;
}

export interface ChangeFeed extends ChangePublisher {
  subscribe(listener: ChangeListener): void;
  /** Tells every listener to reload everything (the poll kept as a safety net calls it). */
  resync(): void;
  /** `ok`, or `down` while the Redis connection is lost (then the change log and the poll keep processes in step). */
  state(): 'ok' | 'down';
  close(): Promise<void>;
}

/** For tools that write outside the running service (the CLI, benchmark seeding): nobody listens. */
export const noChanges: ChangePublisher = { publish() {} };

/**
 * The listeners of one process. Own changes are delivered at once, synchronously, so a cache is current
 * before the request that made the change has answered; a listener that throws is reported, not rethrown:
 * the write it follows has been committed and must not look failed.
 */
export function createListeners(onError: (err: unknown) => void) {
  const listeners: ChangeListener[] = [];
  const each = (fn: (l: ChangeListener) => void) => {
    for (const l of listeners) {
      try {
        fn(l);
      } catch (err) {
        onError(err);
      }
    }
  };
  return {
    add: (l: ChangeListener) => void listeners.push(l),
    changed: (change: Change, origin: ChangeOrigin) => each((l) => l.changed(change, origin)),
    resync: () => each((l) => l.resync()),
  };
}

/** No REDIS_URL: one process, so the feed is its own listeners. */
export function createLocalChangeFeed(onError: (err: unknown) => void): ChangeFeed {
  const listeners = createListeners(onError);
  return {
    publish: (change) => listeners.changed(change, 'local'),
    subscribe: listeners.add,
    resync: listeners.resync,
    state: () => 'ok',
    close: async () => {},
  };
}

/** One message on the channel: the changes of one event-loop turn of one process. */
export interface ChangeMessage {
  v: 1;
  /** The sending process (a random id per start), so it skips its own messages. */
  from: string;
  /** `resync`: the sender could not publish, nor log, for a while; everyone reloads everything. */
  resync?: true;
  /** `catchUp`: the sender could not publish for a while, but logged its changes; everyone reads the log. */
  catchUp?: true;
  changes: Change[];
  /** The numbers these changes were given in the change log (src/platform/store/change-log.ts), when logged. */
  seqs?: number[];
}

export function encodeChanges(message: ChangeMessage): string {
  return JSON.stringify(message);
}

/** null for anything that is not a well-formed message (another program on the channel, a newer version). */
export function decodeChanges(text: string): ChangeMessage | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  const m = parsed as Partial<ChangeMessage> | null;
  if (!m || m.v !== 1 || typeof m.from !== 'string' || !Array.isArray(m.changes)) return null;
  const changes = m.changes.filter(
    (c): c is Change => typeof c === 'object' && c !== null && CHANGE_KINDS.includes(c.kind) && typeof c.id === 'string' && c.id.length > 0 && c.id.length <= 200,
  );
  const seqs = Array.isArray(m.seqs) ? m.seqs.filter((n): n is number => Number.isSafeInteger(n) && n > 0) : [];
  return {
    v: 1, from: m.from, ...(m.resync === true && { resync: true }), ...(m.catchUp === true && { catchUp: true }), changes,
    ...(seqs.length > 0 && { seqs }),
  };
}
