import type { Selectable } from 'kysely';
import crypto from 'node:crypto';
import type { Queries, Store } from '../platform/store/store.ts';
import { prepared } from '../platform/store/prepared.ts';
import { within, type Work } from './work.ts';
import { toIsoString, toUnixSeconds, type Clock } from '../platform/clock.ts';
import { noChanges, type ChangePublisher } from '../platform/changes.ts';
import type { MosquesTable } from '../../generated/tables.ts';

/** A row of `mosques` (generated/tables.ts). */
export type MosqueRow = Selectable<MosquesTable>;

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

/**
 * The mosques table. Writers join the caller's `Work` when given one, else run alone.
 */
export interface MosqueStore {
  findById(id: string, q?: Queries): Promise<MosqueRow | null>;
  findByJoinCode(code: string): Promise<MosqueRow | null>;
  create(w: Work | undefined, fields: MosqueFields): Promise<MosqueRow>;
  update(w: Work | undefined, id: string, fields: Partial<MosqueFields>): Promise<MosqueRow>;
  /** Mosques whose times are calculated (a location and a method), by id; the schedule adds those with a timetable. */
  listCalculated(): Promise<MosqueRow[]>;
  /** The mosque's schedule changed (a timetable uploaded or removed): no event before now fires for it. */
  scheduleChanged(q: Queries, id: string, nowSeconds: number): Promise<void>;
  rotateJoinCode(w: Work | undefined, id: string): Promise<MosqueRow>;
  delete(id: string): Promise<void>;
  listAll(): Promise<MosqueRow[]>;
  /** Mosques where the user is an admin or has a membership of any status. */
  listForUser(userId: string): Promise<MosqueRow[]>;
}

/** A deletion is announced on `changes` (kind `mosque`): its memberships and admin rows went with it. */
export function createMosqueStore(store: Store, clock: Clock, changes: ChangePublisher = noChanges): MosqueStore {
  const now = () => toUnixSeconds(clock());
  // Compiled once: every mosque route reads its mosque first (api/guards.ts checkStanding).
  const byIdQuery = prepared<{ id: string }, MosqueRow>(store, ['id'], (v) => store.selectFrom('mosques').selectAll().where('id', '=', v.id));
  const byId = async (q: Queries, id: string): Promise<MosqueRow | undefined> => (await byIdQuery.run(q, { id })).rows[0];
  const byCode = async (q: Queries, code: string) =>
    (await q.selectFrom('mosques').selectAll().where('join_code', '=', code).executeTakeFirst()) as MosqueRow | undefined;

  /** A fresh code; a collision (1 in 8.5e11 per pair) simply draws again. */
  const unusedCode = async (q: Queries) => {
    for (;;) {
      const code = randomJoinCode();
      if (!(await byCode(q, code))) return code;
    }
  };

  async function setSchedule(q: Queries, row: MosqueRow, change: Partial<ScheduleFields>): Promise<void> {
    const merged = { ...scheduleFieldsOf(row), ...change };
    const at = now();
    await q.updateTable('mosques').set({
      latitude: merged.latitude, longitude: merged.longitude,
      prayer_times: merged.prayer_times === null ? null : JSON.stringify(merged.prayer_times),
      azaan: JSON.stringify(merged.azaan), iqamah: JSON.stringify(merged.iqamah), jumuah: JSON.stringify(merged.jumuah),
      auto_start: merged.auto_start ? 1 : 0, schedule_since: at, updated_at: at,
    }).where('id', '=', row.id).execute();
  }

  const calculated = (q: Queries) => q.selectFrom('mosques').selectAll()
    .where('latitude', 'is not', null).where('longitude', 'is not', null).where('prayer_times', 'is not', null).orderBy('id');

  return {
    findById: async (id, q = store) => (await byId(q, id)) ?? null,
    findByJoinCode: async (code) => (await byCode(store, normalizeJoinCode(code))) ?? null,
    create: (w, f) => within(store, w, async ({ q }) => {
      const id = crypto.randomUUID();
      const at = now();
      await q.insertInto('mosques').values({
        id, name: f.name, timezone: f.timezone, auto_approve_members: f.autoApproveMembers ? 1 : 0, stream_url: f.streamUrl,
        join_code: await unusedCode(q), created_at: at, updated_at: at,
      }).execute();
      if (f.schedule) await setSchedule(q, (await byId(q, id))!, f.schedule);
      return (await byId(q, id))!;
    }),
    update: (w, id, f) => within(store, w, async ({ q }) => {
      const row = (await byId(q, id))!;
      await q.updateTable('mosques').set({
        name: f.name ?? row.name,
        timezone: f.timezone ?? row.timezone,
        auto_approve_members: f.autoApproveMembers === undefined ? row.auto_approve_members : f.autoApproveMembers ? 1 : 0,
        stream_url: f.streamUrl === undefined ? row.stream_url : f.streamUrl,
        updated_at: now(),
      }).where('id', '=', id).execute();
      if (f.schedule) await setSchedule(q, (await byId(q, id))!, f.schedule);
      return (await byId(q, id))!;
    }),
    /** Mosques that have times: a location with a method, or an uploaded timetable. */
    listCalculated: async () => (await calculated(store).execute()) as MosqueRow[],
    async scheduleChanged(q, id, nowSeconds) {
      await q.updateTable('mosques').set({ schedule_since: nowSeconds, updated_at: nowSeconds }).where('id', '=', id).execute();
    },
    rotateJoinCode: (w, id) => within(store, w, async ({ q }) => {
      await q.updateTable('mosques').set({ join_code: await unusedCode(q), updated_at: now() }).where('id', '=', id).execute();
      return (await byId(q, id))!;
    }),
    async delete(id) {
      const { numDeletedRows } = await store.deleteFrom('mosques').where('id', '=', id).executeTakeFirst();
      if (numDeletedRows > 0n) changes.publish({ kind: 'mosque', id });
    },
    listAll: async () => (await store.selectFrom('mosques').selectAll().orderBy('name').orderBy('id').execute()) as MosqueRow[],
    listForUser: async (userId) => (await store.selectFrom('mosques').selectAll()
      .where('id', 'in', (eb) => eb.selectFrom('mosque_admins').select('mosque_id').where('user_id', '=', userId)
        .union(eb.selectFrom('memberships').select('mosque_id').where('user_id', '=', userId)))
      .orderBy('name').orderBy('id').execute()) as MosqueRow[],
  };
}
