import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';

export interface MosqueRow {
  id: string;
  name: string;
  timezone: string;
  auto_approve_members: number;
  stream_url: string | null;
  join_code: string;
  created_at: number;
  updated_at: number;
}

export interface Mosque {
  id: string;
  name: string;
  timezone: string;
  auto_approve_members: boolean;
  stream_url: string | null;
  join_code: string | null;
  created_at: string;
}

/** The join code is shown to the mosque's admins only; members see null. */
export function toMosque(row: MosqueRow, opts: { showJoinCode: boolean }): Mosque {
  return {
    id: row.id,
    name: row.name,
    timezone: row.timezone,
    auto_approve_members: row.auto_approve_members === 1,
    stream_url: row.stream_url,
    join_code: opts.showJoinCode ? row.join_code : null,
    created_at: toIsoString(row.created_at),
  };
}

// No 0/O, 1/I/L: a code read aloud or copied from a poster must not be ambiguous.
const JOIN_CODE_ALPHABET = 'ABCDEFGHJKMNPQRSTUVWXYZ23456789';
const JOIN_CODE_LENGTH = 8;

export function randomJoinCode(): string {
  let code = '';
  for (let i = 0; i < JOIN_CODE_LENGTH; i++) code += JOIN_CODE_ALPHABET[crypto.randomInt(JOIN_CODE_ALPHABET.length)];
  return code;
}

/** What a person types: any case, with spaces or dashes. */
export function normalizeJoinCode(raw: string): string {
  return raw.toUpperCase().replace(/[\s-]/g, '');
}

export interface MosqueFields {
  name: string;
  timezone: string;
  autoApproveMembers: boolean;
  streamUrl: string | null;
}

export interface MosqueStore {
  findById(id: string): MosqueRow | null;
  findByJoinCode(code: string): MosqueRow | null;
  create(fields: MosqueFields): MosqueRow;
  update(id: string, fields: Partial<MosqueFields>): MosqueRow;
  rotateJoinCode(id: string): MosqueRow;
  delete(id: string): void;
  listAll(): MosqueRow[];
  /** Mosques where the user is an admin or has a membership of any status. */
  listForUser(userId: string): MosqueRow[];
}

export function createMosqueStore(db: Db, clock: Clock): MosqueStore {
  const byId = db.prepare<[string], MosqueRow>('SELECT * FROM mosques WHERE id = ?');
  const byCode = db.prepare<[string], MosqueRow>('SELECT * FROM mosques WHERE join_code = ?');
  const insert = db.prepare(
    `INSERT INTO mosques (id, name, timezone, auto_approve_members, stream_url, join_code, created_at, updated_at)
     VALUES (@id, @name, @timezone, @auto, @stream_url, @join_code, @now, @now)`,
  );
  const update = db.prepare(
    `UPDATE mosques SET name = @name, timezone = @timezone, auto_approve_members = @auto, stream_url = @stream_url, updated_at = @now WHERE id = @id`,
  );
  const setCode = db.prepare('UPDATE mosques SET join_code = ?, updated_at = ? WHERE id = ?');
  const remove = db.prepare('DELETE FROM mosques WHERE id = ?');
  const all = db.prepare<[], MosqueRow>('SELECT * FROM mosques ORDER BY name, id');
  const forUser = db.prepare<[string, string], MosqueRow>(
    `SELECT * FROM mosques WHERE id IN (SELECT mosque_id FROM mosque_admins WHERE user_id = ?
                                       UNION SELECT mosque_id FROM memberships WHERE user_id = ?)
     ORDER BY name, id`,
  );
  const now = () => toUnixSeconds(clock());

  /** A fresh code; a collision (1 in 8.5e11 per pair) simply draws again. */
  const unusedCode = () => {
    for (;;) {
      const code = randomJoinCode();
      if (!byCode.get(code)) return code;
    }
  };

  return {
    findById: (id) => byId.get(id) ?? null,
    findByJoinCode: (code) => byCode.get(normalizeJoinCode(code)) ?? null,
    create(f) {
      const id = crypto.randomUUID();
      insert.run({ id, name: f.name, timezone: f.timezone, auto: f.autoApproveMembers ? 1 : 0, stream_url: f.streamUrl, join_code: unusedCode(), now: now() });
      return byId.get(id)!;
    },
    update(id, f) {
      const row = byId.get(id)!;
      update.run({
        id,
        name: f.name ?? row.name,
        timezone: f.timezone ?? row.timezone,
        auto: f.autoApproveMembers === undefined ? row.auto_approve_members : f.autoApproveMembers ? 1 : 0,
        stream_url: f.streamUrl === undefined ? row.stream_url : f.streamUrl,
        now: now(),
      });
      return byId.get(id)!;
    },
    rotateJoinCode(id) {
      setCode.run(unusedCode(), now(), id);
      return byId.get(id)!;
    },
    delete: (id) => void remove.run(id),
    listAll: () => all.all(),
    listForUser: (userId) => forUser.all(userId, userId),
  };
}
