import { CHANGE_KINDS, type Change, type ChangeKind } from '../changes.ts';
import type { Store } from './store.ts';

/**
 * The durable, numbered change log (docs/decisions.md, "The change log"): the entries the change feed sends
 * over Redis, also kept in the store, so a process that missed messages reads them back by number.
 */
export interface LoggedChange extends Change {
  seq: number;
  /** The writing process's id for its current start. */
  origin: string;
}

export interface ChangeLog {
  /** Appends one turn's changes; answers the numbers they were given (as a set: no order is promised). */
  append(origin: string, changes: readonly Change[], atMs: number): Promise<number[]>;
  /** The highest number written so far (0 for an empty log). */
  head(): Promise<number>;
  /** The entries numbered above `after`, lowest first, at most `limit`. */
  since(after: number, limit: number): Promise<LoggedChange[]>;
  /** Deletes the entries written before `beforeMs`; answers how many. */
  prune(beforeMs: number): Promise<number>;
}

/** Rows per INSERT: 5 parameters each, well inside both engines' bound on parameters per statement. */
const ROWS_PER_INSERT = 500;

export function createChangeLog(store: Store): ChangeLog {
  return {
    async append(origin, changes, atMs) {
      const seqs: number[] = [];
      for (let i = 0; i < changes.length; i += ROWS_PER_INSERT) {
        const rows = changes.slice(i, i + ROWS_PER_INSERT).map((c) => ({ kind: c.kind, entity_id: c.id, origin, at: atMs }));
        const inserted = await store.insertInto('change_log').values(rows).returning('seq').execute();
        for (const r of inserted) seqs.push(Number(r.seq));
      }
      return seqs;
    },
    async head() {
      const row = await store.selectFrom('change_log').select((eb) => eb.fn.max('seq').as('seq')).executeTakeFirst();
      return Number(row?.seq ?? 0);
    },
    async since(after, limit) {
      const rows = await store.selectFrom('change_log').select(['seq', 'kind', 'entity_id', 'origin'])
        .where('seq', '>', after).orderBy('seq').limit(limit).execute();
      const out: LoggedChange[] = [];
      for (const r of rows) {
        // A kind this version does not know (written by a newer node during an upgrade) is skipped, as the feed skips it.
        if (!CHANGE_KINDS.includes(r.kind as ChangeKind)) continue;
        out.push({ seq: Number(r.seq), kind: r.kind as ChangeKind, id: r.entity_id, origin: r.origin });
      }
      return out;
    },
    async prune(beforeMs) {
      const result = await store.deleteFrom('change_log').where('at', '<', beforeMs).executeTakeFirst();
      return Number(result.numDeletedRows);
    },
  };
}
