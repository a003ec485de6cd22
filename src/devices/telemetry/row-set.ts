import type { Store, StoreTransaction } from '../../platform/store/store.ts';
import { textStatements } from '../../platform/store/prepared.ts';
import type { RowSet } from '../group-commit.ts';
import type { Live, Transition } from './live.ts';

/** What a row of a set is: a device's own status, a transition the backend decided, a connected note. */
export const STATUS = 0;
export const HEARTBEAT = 1;
export const STALE = 2;
export const CONNECTED = 3;

/**
 * The device writes of one batch as arrays, one entry per row in the order added (src/devices/group-commit.ts):
 * statuses and transitions become one UPDATE of the devices they name (merged per device) and their timeline rows
 * one multi-row INSERT; a connected note is a timeline row and, with a broker id, the row's claim.
 */
export class DeviceRowSet implements RowSet {
  readonly ids: string[] = [];
  readonly kinds: number[] = [];
  readonly froms: string[] = [];
  readonly reports: Array<Transition | null> = [];
  /** A status's acknowledgement (its PUBACK), called once the batch settled. */
  readonly acks: Array<((err: unknown) => void) | null> = [];
  readonly lives: Live[] = [];
  /** A connected note's time (Unix seconds) and claim. */
  readonly ats: number[] = [];
  readonly brokers: Array<string | null> = [];
  /** Per row, whether `write` wrote it (a device deleted meanwhile has no row to write). */
  readonly written: boolean[] = [];
  readonly #sink: RowSink;

  constructor(sink: RowSink) {
    this.#sink = sink;
  }

  /** Adds a row; answers its index. */
  push(id: string, kind: number, live: Live, from: string, report: Transition | null, ack: ((err: unknown) => void) | null, at = 0, broker: string | null = null): number {
    this.ids.push(id);
    this.kinds.push(kind);
    this.lives.push(live);
    this.froms.push(from);
    this.reports.push(report);
    this.acks.push(ack);
    this.ats.push(at);
    this.brokers.push(broker);
    return this.ids.length - 1;
  }

  write(trx: StoreTransaction): Promise<void> | void {
    return this.#sink.write(this, trx);
  }
  writeAlone(store: Store): Promise<void> | null {
    return this.#sink.writeAlone(this, store);
  }
  settle(err: unknown): void {
    this.#sink.settle(this, err);
  }
}

export interface RowSink {
  write(set: DeviceRowSet, trx: StoreTransaction): Promise<void> | void;
  writeAlone(set: DeviceRowSet, store: Store): Promise<void> | null;
  settle(set: DeviceRowSet, err: unknown): void;
}

type Cell = string | number | null;

/** A batch's rows as the statements bind them: the timeline's in order, the devices' one per device. */
export class Columns {
  // mosque_device_events, one entry per row, and the index of its device in the device columns.
  readonly tDevice: string[] = [];
  readonly tMosque: Array<string | null> = [];
  readonly tAt: number[] = [];
  readonly tKind: string[] = [];
  readonly tFrom: Array<string | null> = [];
  readonly tTo: Array<string | null> = [];
  readonly tReason: Array<string | null> = [];
  readonly tDetail: string[] = [];
  readonly tOf: number[] = [];
  // devices, one entry per device: its newest status (null: none in this batch) and the fields laid over the row.
  readonly byId = new Map<string, number>();
  readonly dId: string[] = [];
  readonly d: Record<(typeof DEVICE_FIELDS)[number], Cell[]> = Object.fromEntries(DEVICE_FIELDS.map((f) => [f, []])) as never;
  readonly dAdded: number[] = [];

  /** The device's index, a new entry (every field null: the row keeps its value) the first time. */
  device(id: string): number {
    let i = this.byId.get(id);
    if (i !== undefined) return i;
    i = this.dId.length;
    this.byId.set(id, i);
    this.dId.push(id);
    for (const f of DEVICE_FIELDS) this.d[f].push(null);
    this.dAdded.push(0);
    return i;
  }

  /** A later value of a field over an earlier one of the same batch, as the row's COALESCE would lay it. */
  set(i: number, field: (typeof DEVICE_FIELDS)[number], value: Cell | undefined): void {
    if (value !== undefined && value !== null) this.d[field][i] = value;
  }

  timeline(dev: number, mosque: string | null, at: number, kind: string, from: string | null, to: string | null, reason: string | null, detail: string): void {
    this.tDevice.push(this.dId[dev]!);
    this.tMosque.push(mosque);
    this.tAt.push(at);
    this.tKind.push(kind);
    this.tFrom.push(from);
    this.tTo.push(to);
    this.tReason.push(reason);
    this.tDetail.push(detail);
    this.tOf.push(dev);
    this.dAdded[dev]!++;
  }
}

/** The device columns a batch sets, in the order both dialects bind them (after the device id). */
export const DEVICE_FIELDS = ['status', 'reason', 'detail', 'status_at', 'seen', 'fw', 'mac', 'ssid', 'ip', 'rssi', 'temp', 'uptime', 'cfg', 'broker'] as const;
const PG_TYPES = ['text', 'text', 'text', 'bigint', 'bigint', 'text', 'text', 'text', 'text', 'bigint', 'float8', 'bigint', 'bigint', 'text'];

/**
 * How the row takes a batch's values `u` (both dialects): a field the batch did not carry keeps the row's value; a
 * device's status, reason and detail go together, the reason even when null.
 */
const SET = `status = COALESCE(u.status, devices.status),
  status_reason = CASE WHEN u.status IS NULL THEN devices.status_reason ELSE u.reason END,
  status_detail = COALESCE(u.detail, devices.status_detail), status_at = COALESCE(u.status_at, devices.status_at),
  last_seen_at = COALESCE(u.seen, devices.last_seen_at), fw = COALESCE(u.fw, devices.fw), mac = COALESCE(u.mac, devices.mac),
  ssid = COALESCE(u.ssid, devices.ssid), ip = COALESCE(u.ip, devices.ip), rssi = COALESCE(u.rssi, devices.rssi),
  temp_c = COALESCE(u.temp, devices.temp_c), uptime_s = COALESCE(u.uptime, devices.uptime_s),
  reported_config_version = COALESCE(u.cfg, devices.reported_config_version), connected_broker = COALESCE(u.broker, devices.connected_broker),
  timeline_head = COALESCE(u.head, devices.timeline_head), timeline_seq = devices.timeline_seq + u.added`;

/**
 * PostgreSQL: the whole batch in ONE statement (one round trip), its text the same for every batch, each column
 * bound as one array (unnest). The timeline rows take ids reserved from the table's sequence, handed out in the
 * rows' order, so a row that follows its device's previous one in the same batch points to it (migration 012's
 * chain: ids only fall along it); a device's first row of the batch points to the head its row held. The device
 * row then moves its head to its newest row of the batch and counts what was added.
 */
const PG_BATCH = `WITH t AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
      WITH ORDINALITY AS t(device_id, mosque_id, at, kind, from_status, to_status, reason, detail, n)
  ), ids AS (
    SELECT row_number() OVER (ORDER BY id) AS n, id FROM (SELECT nextval(pg_get_serial_sequence('mosque_device_events', 'id')::regclass) AS id FROM t) s
  ), r AS (
    SELECT ids.id, t.*, lag(ids.id) OVER (PARTITION BY t.device_id ORDER BY t.n) AS prev_in_batch FROM t JOIN ids ON ids.n = t.n
  ), ins AS (
    INSERT INTO mosque_device_events (id, device_id, prev_id, mosque_id, at, kind, from_status, to_status, reason, detail)
    SELECT r.id, r.device_id, COALESCE(r.prev_in_batch, d.timeline_head), r.mosque_id, r.at, r.kind, r.from_status, r.to_status, r.reason, r.detail
    FROM r JOIN devices d ON d.id = r.device_id
    RETURNING id, device_id
  ), heads AS (
    SELECT device_id, max(id) AS head, count(*) AS added FROM ins GROUP BY device_id
  ), u AS (
    SELECT v.*, heads.head, COALESCE(heads.added, 0) AS added
    FROM unnest($9::text[], ${PG_TYPES.map((type, i) => `$${i + 10}::${type}[]`).join(', ')}) AS v(id, ${DEVICE_FIELDS.join(', ')})
    LEFT JOIN heads ON heads.device_id = v.id
  )
  UPDATE devices SET ${SET} FROM u WHERE devices.id = u.id`;

/** SQLite: a few multi-row statements per table, in chunks of these sizes (a handful of statement texts, each prepared once). */
const CHUNKS = [64, 16, 4, 1];
const T_ROW = '(?, ?, COALESCE(?, (SELECT timeline_head FROM devices WHERE id = ?)), ?, ?, ?, ?, ?, ?, ?)';
const D_ROW = `(${Array.from({ length: DEVICE_FIELDS.length + 3 }, () => '?').join(', ')})`;
const sqliteText = new Map<string, string>();
const chunkText = (table: 't' | 'd', n: number): string => {
  const key = `${table}${n}`;
  let text = sqliteText.get(key);
  if (text) return text;
  const rows = Array.from({ length: n }, () => (table === 't' ? T_ROW : D_ROW)).join(', ');
  text = table === 't'
    ? `INSERT INTO mosque_device_events (id, device_id, prev_id, mosque_id, at, kind, from_status, to_status, reason, detail) VALUES ${rows}`
    : `WITH u(id, ${DEVICE_FIELDS.join(', ')}, head, added) AS (VALUES ${rows}) UPDATE devices SET ${SET} FROM u WHERE devices.id = u.id`;
  sqliteText.set(key, text);
  return text;
};
/** The last id handed out (AUTOINCREMENT never reuses one): the batch's rows take the next ones, in order. */
const SQLITE_LAST_ID = `SELECT max(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'mosque_device_events'), 0),
  COALESCE((SELECT max(id) FROM mosque_device_events), 0)) AS last`;

/** Writes a batch's columns: `sqlite` through a transaction of that store (synchronously), else PostgreSQL's one statement. */
export function createColumnWriter(store: Store) {
  const statements = textStatements(store);
  const sqlite = statements.sqlite;

  function pgParameters(c: Columns): unknown[] {
    return [c.tDevice, c.tMosque, c.tAt, c.tKind, c.tFrom, c.tTo, c.tReason, c.tDetail, c.dId, ...DEVICE_FIELDS.map((f) => c.d[f])];
  }

  /** Each chunk's parameters, row after row, as `fill` lays one row's out from index i. */
  const chunked = (trx: StoreTransaction, table: 't' | 'd', count: number, fill: (out: Cell[], i: number) => void): void =>
    statements.runInChunks(trx, CHUNKS, (n) => chunkText(table, n), count, fill as (out: unknown[], i: number) => void);

  function writeSqlite(trx: StoreTransaction, c: Columns): void {
    const head: Array<number | null> = c.dId.map(() => null);
    if (c.tDevice.length > 0) {
      const last = Number(statements.runNow<{ last: number }>(trx, SQLITE_LAST_ID, []).rows[0]!.last);
      chunked(trx, 't', c.tDevice.length, (out, i) => {
        const dev = c.tOf[i]!;
        const id = last + 1 + i;
        out.push(id, c.tDevice[i]!, head[dev] ?? null, c.tDevice[i]!, c.tMosque[i]!, c.tAt[i]!, c.tKind[i]!, c.tFrom[i]!, c.tTo[i]!, c.tReason[i]!, c.tDetail[i]!);
        head[dev] = id;
      });
    }
    chunked(trx, 'd', c.dId.length, (out, i) => {
      out.push(c.dId[i]!);
      for (const f of DEVICE_FIELDS) out.push(c.d[f][i]!);
      out.push(head[i] ?? null, c.dAdded[i]!);
    });
  }

  return {
    sqlite,
    /** Inside the batch's transaction: synchronous on SQLite (no turn of the microtask queue per batch). */
    write(trx: StoreTransaction, c: Columns): Promise<void> | void {
      if (c.dId.length === 0) return;
      if (sqlite) return writeSqlite(trx, c);
      return statements.run(trx, PG_BATCH, pgParameters(c)).then(() => undefined);
    },
    /** The batch alone on the store, outside a transaction: PostgreSQL's one statement; null on SQLite. */
    writeAlone(c: Columns): Promise<void> | null {
      if (sqlite) return null;
      if (c.dId.length === 0) return Promise.resolve();
      return statements.run(store, PG_BATCH, pgParameters(c)).then(() => undefined);
    },
  };
}
