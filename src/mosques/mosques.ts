import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';

export interface MosqueRow {
  id: string;
  name: string;
  timezone: string;
  auto_approve_members: number;
  stream_url: string | null;
  join_code: string;
  created_at: number;
  updated_at: number;
  latitude: number | null;
  longitude: number | null;
  prayer_times: string | null;
  azaan: string;
  iqamah: string;
  jumuah: string;
  auto_start: number;
  schedule_since: number | null;
}

/** The five daily prayers, in the order of the day. */
export const PRAYERS = ['fajr', 'dhuhr', 'asr', 'maghrib', 'isha'] as const;
export type Prayer = (typeof PRAYERS)[number];
export const CALCULATION_METHODS = [
  'muslim_world_league', 'egyptian', 'karachi', 'umm_al_qura', 'dubai', 'qatar', 'kuwait',
  'moonsighting_committee', 'singapore', 'turkey', 'tehran', 'north_america', 'other',
] as const;
export const HIGH_LATITUDE_RULES = ['middle_of_the_night', 'seventh_of_the_night', 'twilight_angle'] as const;

/** How the starts are computed (docs/schedule.md, "Setting a mosque's times"; shape checked at the edge). */
export interface PrayerTimesSettings {
  method: (typeof CALCULATION_METHODS)[number];
  madhab: 'shafi' | 'hanafi';
  high_latitude_rule?: (typeof HIGH_LATITUDE_RULES)[number] | undefined;
  fajr_angle?: number | undefined;
  isha_angle?: number | undefined;
  adjustments?: Partial<Record<Prayer, number>> | undefined;
}
export type AzaanRule = { offset_minutes: number } | { fixed: string };
export type IqamahRule = { after_minutes: number } | { fixed: string };

/** A mosque's schedule fields, as the API shows and takes them. */
export interface ScheduleFields {
  latitude: number | null;
  longitude: number | null;
  prayer_times: PrayerTimesSettings | null;
  azaan: Partial<Record<Prayer, AzaanRule>>;
  iqamah: Partial<Record<Prayer, IqamahRule>>;
  jumuah: string[];
  auto_start: boolean;
}

export function scheduleFieldsOf(row: MosqueRow): ScheduleFields {
  return {
    latitude: row.latitude,
    longitude: row.longitude,
    prayer_times: row.prayer_times === null ? null : (JSON.parse(row.prayer_times) as PrayerTimesSettings),
    azaan: JSON.parse(row.azaan) as ScheduleFields['azaan'],
    iqamah: JSON.parse(row.iqamah) as ScheduleFields['iqamah'],
    jumuah: JSON.parse(row.jumuah) as string[],
    auto_start: row.auto_start === 1,
  };
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
export function toMosque(row: MosqueRow, opts: { showJoinCode: boolean }): Mosque & ScheduleFields {
  return {
    id: row.id,
    name: row.name,
    timezone: row.timezone,
    auto_approve_members: row.auto_approve_members === 1,
    stream_url: row.stream_url,
    join_code: opts.showJoinCode ? row.join_code : null,
    created_at: toIsoString(row.created_at),
    ...scheduleFieldsOf(row),
  };
}

/**
 * docs/api.md, "Flags decide": a stream address players will fetch must be https, or plain http only to a
 * host the operator listed (STREAM_HTTP_HOSTS): an admin must not be able to send every player to any server.
 * Returns why not, or null when it may be used.
 */
export function streamUrlProblem(url: string, httpHosts: readonly string[]): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'must be an https URL';
  }
  if (parsed.username || parsed.password) return 'must not carry a user name or password';
  if (parsed.protocol === 'https:') return null;
  if (parsed.protocol === 'http:' && httpHosts.includes(parsed.hostname.toLowerCase())) return null;
  return httpHosts.length > 0 ? `must be https, or http to one of ${httpHosts.join(', ')}` : 'must be an https URL';
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
  /** Any of these changes the mosque's times (and moves schedule_since). */
  schedule?: Partial<ScheduleFields>;
}

export interface MosqueStore {
  findById(id: string): MosqueRow | null;
  findByJoinCode(code: string): MosqueRow | null;
  create(fields: MosqueFields): MosqueRow;
  update(id: string, fields: Partial<MosqueFields>): MosqueRow;
  /** Mosques whose times are calculated (a location and a method), by id; the schedule adds those with a timetable. */
  listCalculated(): MosqueRow[];
  /** The mosque's schedule changed (a timetable uploaded or removed): no event before now fires for it. */
  scheduleChanged(id: string, nowSeconds: number): void;
  rotateJoinCode(id: string): MosqueRow;
  delete(id: string): void;
  listAll(): MosqueRow[];
  /** Mosques where the user is an admin or has a membership of any status. */
  listForUser(userId: string): MosqueRow[];
}

/** A deletion is announced on `changes` (kind `mosque`): its memberships and admin rows went with it. */
export function createMosqueStore(db: Db, clock: Clock, changes: ChangePublisher = noChanges): MosqueStore {
  const byId = db.prepare<[string], MosqueRow>('SELECT * FROM mosques WHERE id = ?');
  const byCode = db.prepare<[string], MosqueRow>('SELECT * FROM mosques WHERE join_code = ?');
  const insert = db.prepare(
    `INSERT INTO mosques (id, name, timezone, auto_approve_members, stream_url, join_code, created_at, updated_at)
     VALUES (@id, @name, @timezone, @auto, @stream_url, @join_code, @now, @now)`,
  );
  const update = db.prepare(
    `UPDATE mosques SET name = @name, timezone = @timezone, auto_approve_members = @auto, stream_url = @stream_url, updated_at = @now WHERE id = @id`,
  );
  const updateSchedule = db.prepare(
    `UPDATE mosques SET latitude = @latitude, longitude = @longitude, prayer_times = @prayer_times, azaan = @azaan, iqamah = @iqamah,
       jumuah = @jumuah, auto_start = @auto_start, schedule_since = @now, updated_at = @now WHERE id = @id`,
  );
  const withCalculation = db.prepare<[], MosqueRow>(
    'SELECT * FROM mosques WHERE latitude IS NOT NULL AND longitude IS NOT NULL AND prayer_times IS NOT NULL ORDER BY id',
  );
  const touchSchedule = db.prepare('UPDATE mosques SET schedule_since = ?, updated_at = ? WHERE id = ?');
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

  function setSchedule(row: MosqueRow, change: Partial<ScheduleFields>): void {
    const merged = { ...scheduleFieldsOf(row), ...change };
    updateSchedule.run({
      id: row.id, latitude: merged.latitude, longitude: merged.longitude,
      prayer_times: merged.prayer_times === null ? null : JSON.stringify(merged.prayer_times),
      azaan: JSON.stringify(merged.azaan), iqamah: JSON.stringify(merged.iqamah), jumuah: JSON.stringify(merged.jumuah),
      auto_start: merged.auto_start ? 1 : 0, now: now(),
    });
  }

  return {
    findById: (id) => byId.get(id) ?? null,
    findByJoinCode: (code) => byCode.get(normalizeJoinCode(code)) ?? null,
    create(f) {
      const id = crypto.randomUUID();
      insert.run({ id, name: f.name, timezone: f.timezone, auto: f.autoApproveMembers ? 1 : 0, stream_url: f.streamUrl, join_code: unusedCode(), now: now() });
      if (f.schedule) setSchedule(byId.get(id)!, f.schedule);
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
      if (f.schedule) setSchedule(byId.get(id)!, f.schedule);
      return byId.get(id)!;
    },
    /** Mosques that have times: a location with a method, or an uploaded timetable. */
    listCalculated: () => withCalculation.all(),
    scheduleChanged: (id, nowSeconds) => void touchSchedule.run(nowSeconds, nowSeconds, id),
    rotateJoinCode(id) {
      setCode.run(unusedCode(), now(), id);
      return byId.get(id)!;
    },
    delete(id) {
      if (remove.run(id).changes > 0) changes.publish({ kind: 'mosque', id });
    },
    listAll: () => all.all(),
    listForUser: (userId) => forUser.all(userId, userId),
  };
}
