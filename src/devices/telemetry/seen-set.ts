import type { Store, StoreTransaction } from '../../platform/store/store.ts';
import { textStatements } from '../../platform/store/prepared.ts';
import type { HeartbeatReport } from '../device-config.ts';

/**
 * The heartbeat flush's rows as columns: per device, its last-seen time (Unix seconds) and the heartbeat fields
 * merged in memory since the last flush (null: the row keeps its value).
 */
export class SeenColumns {
  readonly id: string[] = [];
  readonly seen: Array<number | null> = [];
  readonly rssi: Array<number | null> = [];
  readonly ip: Array<string | null> = [];
  readonly uptime: Array<number | null> = [];
  readonly heap: Array<number | null> = [];
  readonly volume: Array<number | null> = [];
  readonly cfg: Array<number | null> = [];

  push(id: string, seen: number | null, hb: HeartbeatReport | null): void {
    this.id.push(id);
    this.seen.push(seen);
    this.rssi.push(hb?.rssi ?? null);
    this.ip.push(hb?.ip ?? null);
    this.uptime.push(hb?.uptime_s ?? null);
    this.heap.push(hb?.free_heap ?? null);
    this.volume.push(hb?.volume ?? null);
    this.cfg.push(hb?.config_version ?? null);
  }

  get length(): number {
    return this.id.length;
  }
}

/** The columns in the order both dialects bind them. */
const COLUMNS = ['id', 'seen', 'rssi', 'ip', 'uptime', 'heap', 'volume', 'cfg'] as const;
const PG_TYPES = ['text', 'bigint', 'bigint', 'text', 'bigint', 'bigint', 'bigint', 'bigint'];

/** How the row takes the flush's values `v`: a field the heartbeats did not carry keeps the row's value. */
const SET = `last_seen_at = COALESCE(v.seen, devices.last_seen_at), rssi = COALESCE(v.rssi, devices.rssi),
  ip = COALESCE(v.ip, devices.ip), uptime_s = COALESCE(v.uptime, devices.uptime_s), free_heap = COALESCE(v.heap, devices.free_heap),
  volume = COALESCE(v.volume, devices.volume), reported_config_version = COALESCE(v.cfg, devices.reported_config_version)`;

/** PostgreSQL: every device of the flush in ONE statement, its text the same for every flush, a column per array (unnest). */
const PG_FLUSH = `UPDATE devices SET ${SET}
  FROM unnest(${PG_TYPES.map((type, i) => `$${i + 1}::${type}[]`).join(', ')}) AS v(${COLUMNS.join(', ')})
  WHERE devices.id = v.id`;

/** SQLite: one multi-row statement per chunk of these sizes (a handful of texts, each prepared once by the connection). */
const CHUNKS = [256, 64, 16, 4, 1];
const ROW = `(${COLUMNS.map(() => '?').join(', ')})`;
const sqliteText = new Map<number, string>();
const chunkText = (n: number): string => {
  let text = sqliteText.get(n);
  if (text) return text;
  text = `WITH v(${COLUMNS.join(', ')}) AS (VALUES ${Array.from({ length: n }, () => ROW).join(', ')}) UPDATE devices SET ${SET} FROM v WHERE devices.id = v.id`;
  sqliteText.set(n, text);
  return text;
};

/**
 * Writes a flush's columns in the caller's transaction, the values bound by position (no map of parameter names
 * per device): on SQLite synchronously, a few statements; on PostgreSQL one statement, one round trip.
 */
export function createSeenWriter(store: Store) {
  const statements = textStatements(store);
  return (trx: StoreTransaction, c: SeenColumns): Promise<void> | void => {
    if (c.length === 0) return;
    if (!statements.sqlite) return statements.run(trx, PG_FLUSH, COLUMNS.map((name) => c[name])).then(() => undefined);
    statements.runInChunks(trx, CHUNKS, chunkText, c.length, (out, i) => {
      for (const name of COLUMNS) out.push(c[name][i]);
    });
  };
}
