import * as v from 'valibot';
import { BROADCAST_KINDS, type Broadcast as BroadcastRecord, type DeliveryReport } from '../src/broadcasts/broadcasts.ts';
import type { ActivityEntry as ActivityRecord } from '../src/mosques/activity.ts';
import type { Invite as InviteRecord } from '../src/mosques/invites.ts';
import { MEMBERSHIP_STATUSES, type Membership as MembershipRecord } from '../src/mosques/memberships.ts';
import type { Mosque as MosqueRecord } from '../src/mosques/mosques.ts';
import type { TokenResponse as TokenRecord } from '../src/people/tokens.ts';
import type { User as UserRecord } from '../src/people/users.ts';
import type { toTimelineEntry } from '../src/devices/timeline.ts';
import type { WhyAnswer } from '../src/devices/why.ts';
import type { toRecording } from '../src/audio/recordings.ts';
import { httpStatus } from './errors.ts';

/**
 * Response shapes, beside the request schemas: GET /api/v1/openapi.json is built from them
 * and test/api/openapi.test.ts holds real answers of the running service to them, so the document cannot
 * drift from what the mappers (toUser, toMosque, toDevice, ...) return.
 */
const isoTime = v.pipe(v.string(), v.isoTimestamp());
const nullable = <S extends v.GenericSchema>(s: S) => v.nullable(s);
const object = v.record(v.string(), v.unknown());
const count = v.pipe(v.number(), v.integer(), v.minValue(0));

export const ErrorResponse = v.object({
  error: v.object({
    code: v.picklist(Object.keys(httpStatus) as Array<keyof typeof httpStatus>),
    message: v.string(),
    details: v.optional(v.array(v.object({ path: v.string(), message: v.string() }))),
  }),
});

export const Status = <T extends string>(value: T) => v.object({ status: v.literal(value) });

/** Whether the first superadmin's setup link still works (docs/operator.md, "The first superadmin"). */
export const SetupState = v.object({ status: v.picklist(['open', 'closed']) });

export const TokenResponse = v.object({
  access_token: v.string(),
  token_type: v.literal('Bearer'),
  expires_in: count,
  user: v.object({ id: v.string(), email: v.string(), role: v.picklist(['member', 'superadmin']) }),
});
export const SessionStarted = v.object({ session_token: v.string(), expires_in: count });
export const SetupCreated = v.object({ user: v.object({ id: v.string(), email: v.string(), role: v.literal('superadmin') }) });
export const ResetTokenIssued = v.object({ reset_token: v.string(), expires_in: count });

export const User = v.object({
  id: v.string(),
  email: v.string(),
  phone: nullable(v.string()),
  role: v.picklist(['member', 'superadmin']),
  has_password: v.boolean(),
  email_is_placeholder: v.boolean(),
  email_proven: v.boolean(),
  phone_proven: v.boolean(),
  created_at: isoTime,
});

const MosqueCore = {
  id: v.string(),
  name: v.string(),
  timezone: v.string(),
  auto_approve_members: v.boolean(),
  stream_url: nullable(v.string()),
  join_code: nullable(v.string()),
  created_at: isoTime,
};
/** The record without its schedule fields (the mapper's `Mosque` type, held equal below). */
const MosqueBase = v.object(MosqueCore);
const byPrayer = <S extends v.GenericSchema>(rule: S) => v.record(v.picklist(['fajr', 'dhuhr', 'asr', 'maghrib', 'isha']), rule);
/** A mosque with its schedule fields (docs/schedule.md, "Setting a mosque's times"): how its prayer and azaan times are set. */
export const Mosque = v.object({
  ...MosqueCore,
  latitude: nullable(v.number()),
  longitude: nullable(v.number()),
  prayer_times: nullable(v.object({
    method: v.string(),
    madhab: v.picklist(['shafi', 'hanafi']),
    high_latitude_rule: v.optional(v.string()),
    fajr_angle: v.optional(v.number()),
    isha_angle: v.optional(v.number()),
    adjustments: v.optional(byPrayer(v.pipe(v.number(), v.integer()))),
  })),
  azaan: byPrayer(v.union([v.object({ offset_minutes: v.pipe(v.number(), v.integer()) }), v.object({ fixed: v.string() })])),
  iqamah: byPrayer(v.union([v.object({ after_minutes: v.pipe(v.number(), v.integer()) }), v.object({ fixed: v.string() })])),
  jumuah: v.array(v.string()),
  auto_start: v.boolean(),
});

const flags = { is_owner: v.boolean(), can_trigger: v.boolean(), can_manage: v.boolean() };
/** Whether the person's addresses are proven or only claimed (docs/api.md, "Addresses: claims and proof"). */
const proof = { email_proven: v.boolean(), phone_proven: v.boolean() };
export const Admin = v.object({ user_id: v.string(), email: nullable(v.string()), ...proof, ...flags });
/** docs/api.md, "Addresses: claims and proof": an admin named by email, the same whether or not an account holds it. */
export const AdminAccepted = v.object({ status: v.literal('accepted'), email: v.string(), can_trigger: v.boolean(), can_manage: v.boolean() });

export const Membership = v.object({
  id: v.string(),
  mosque_id: v.string(),
  user_id: v.string(),
  status: v.picklist(MEMBERSHIP_STATUSES),
  notify_azaan: v.boolean(),
  notify_jummah: v.boolean(),
  notify_waaz: v.boolean(),
  notify_announcement: v.boolean(),
  created_at: isoTime,
  updated_at: isoTime,
});
export const MembershipWithEmail = v.object({ ...Membership.entries, user_email: v.string(), user_email_is_placeholder: v.boolean(), user_phone: nullable(v.string()), ...proof });

export const Me = v.object({
  user: User,
  memberships: v.array(Membership),
  admin_of: v.array(v.object({ mosque_id: v.string(), ...flags })),
});

export const ActivityEntry = v.object({
  id: v.string(),
  at: isoTime,
  actor_user_id: nullable(v.string()),
  kind: v.string(),
  subject_id: nullable(v.string()),
  data: object,
});

export const Invite = v.object({
  invite: v.object({
    id: v.string(),
    mosque_id: v.string(),
    user_id: nullable(v.string()),
    invited_by: nullable(v.string()),
    channel: v.picklist(['email', 'whatsapp']),
    contact: v.string(),
    auto_approve: v.boolean(),
    waiting_for_proof: v.boolean(),
    created_at: isoTime,
  }),
  membership: nullable(Membership),
});

export const Broadcast = v.object({
  id: v.string(),
  mosque_id: v.string(),
  kind: v.picklist(BROADCAST_KINDS),
  prayer: nullable(v.string()),
  title: nullable(v.string()),
  status: v.picklist(['live', 'stopped']),
  started_by: nullable(v.string()),
  started_at: isoTime,
  stopped_by: nullable(v.string()),
  stopped_at: nullable(isoTime),
  /** Started while the mosque's source was not on air: its players hear it when the source goes live (docs/api.md). */
  waiting_for_source: v.boolean(),
  /** Plays the mosque's recorded azaan because the live one was missed. */
  fallback: v.boolean(),
  report: v.object({
    playing: count,
    unbound: count,
    muted: count,
    offline: count,
    stream_error: count,
    other: count,
    /** Players that played their cached recording for this azaan: no start reached them in time (docs/firmware.md, "The azaan without the network"). */
    covered_locally: count,
    push: v.object({ queued: count, sent: count, failed: count }),
    /** The mosque's transmitters, apart from the players: how many played it and how many did not; absent when it has none. */
    transmitters: v.optional(v.object({ playing: count, not_playing: count })),
    /** With an audio server: who it admitted while the broadcast was on, for how long, and who it refused. */
    listeners: v.optional(v.object({
      admitted: v.object({ devices: count, members: count }),
      seconds: count,
      refused: v.record(v.string(), count),
      heard: v.array(v.object({ device_id: nullable(v.string()), user_id: nullable(v.string()), seconds: count })),
      truncated: v.boolean(),
    })),
    /** Only in the start's 201: the counts are not read yet (all zero); GET of the broadcast has them
     * (docs/decisions.md, "The start's `201` carries a pending report"). */
    pending: v.optional(v.literal(true)),
  }),
});

export const EventTicket = v.object({ ticket: v.string(), expires_in: v.pipe(v.number(), v.integer()) });

export const PushSubscriptionSaved = v.object({ endpoint: v.string() });
/** One of the caller's own subscriptions: never its keys (docs/api.md, "Web Push, from a browser's side"). */
export const PushSubscriptionEntry = v.object({ endpoint: v.string(), created_at: isoTime });
export const PushTestQueued = v.object({ queued: v.pipe(v.number(), v.integer(), v.minValue(0)) });
export const VapidKey = v.object({ public_key: v.string() });
/** GET /join/{code}: the name of the mosque the code invites to, and nothing else of it. */
export const JoinCodeMosque = v.object({ mosque_name: v.string() });

const int = v.pipe(v.number(), v.integer());
export const Device = v.object({
  id: v.string(),
  kind: v.picklist(['transmitter', 'stream_player']),
  name: nullable(v.string()),
  mosque_id: nullable(v.string()),
  owner_user_id: nullable(v.string()),
  enabled: v.boolean(),
  connected: v.boolean(),
  status: v.string(),
  status_detail: object,
  status_at: nullable(isoTime),
  last_seen_at: nullable(isoTime),
  fw: nullable(v.string()),
  mac: nullable(v.string()),
  ssid: nullable(v.string()),
  ip: nullable(v.string()),
  rssi: nullable(int),
  temp_c: nullable(v.number()),
  uptime_s: nullable(int),
  free_heap: nullable(int),
  volume: nullable(int),
  reported_config_version: nullable(int),
  config_version: int,
  config: v.object({
    heartbeat_secs: int,
    log_enabled: v.boolean(),
    volume: nullable(int),
    quiet_hours: nullable(v.object({ start: v.string(), end: v.string() })),
  }),
  created_at: isoTime,
  counters: v.object({
    status_messages: count,
    heartbeats: count,
    logs_accepted: count,
    logs_dropped: count,
    payloads_rejected: count,
    publishes_refused: count,
    connects: count,
    // Over a per-device budget (SECURITY.md, "Per-device budgets"): dropped in memory, never written.
    status_dropped: count,
    heartbeats_dropped: count,
    acks_dropped: count,
    broadcasts_dropped: count,
    connects_refused: count,
    // Messages the database refused to take (disk full, busy): dropped, never acknowledged as written.
    writes_failed: count,
  }),
  /** Players only (transmitters: null). */
  entitlement: nullable(
    v.object({
      entitled: v.boolean(),
      reason: nullable(v.picklist(['no_mosque', 'awaiting_approval', 'membership_lapsed', 'lease_expired'])),
      mosque_id: nullable(v.string()),
      lease_expires_at: nullable(isoTime),
    }),
  ),
});

/** Shown once, at registration and rotation: what firmware needs to connect and to find the JWKS. */
export const Credentials = v.object({
  client_id: v.string(),
  username: v.string(),
  password: v.string(),
  mqtt_url: v.string(),
  /** Present when MQTTS_PORT is set (null otherwise): the TLS door devices on the internet should use. */
  mqtts_url: nullable(v.string()),
  ws_url: v.string(),
  api_url: v.string(),
});
export const DeviceWithCredentials = v.object({ device: Device, credentials: Credentials });

/** POST /devices/pairing (docs/api.md, "Pairing a device"; RFC 8628 §3.2). */
export const PairingStarted = v.object({
  device_code: v.string(),
  user_code: v.pipe(v.string(), v.regex(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/)),
  verification_uri: v.string(),
  verification_uri_complete: v.string(),
  expires_in: v.number(),
  interval: v.number(),
});
/** POST /devices/pairing/approve: the device as registered; its credentials go to the device's poll only. */
export const PairedDevice = v.object({ device: Device });

/** GET /memberships/{id}: one member as the mosque's admins see them (docs/api.md, "Memberships"). */
export const MemberDetail = v.object({
  ...MembershipWithEmail.entries,
  admin: nullable(v.object(flags)),
  history: v.array(ActivityEntry),
  players: v.array(Device),
});

export const LeaseKeys = v.object({
  keys: v.array(v.object({ kty: v.literal('OKP'), crv: v.literal('Ed25519'), x: v.string(), kid: v.string(), alg: v.literal('EdDSA'), use: v.literal('sig') })),
});

export const Why = v.object({
  device_id: v.string(),
  status: v.string(),
  effective_playback_state: v.picklist(['playing', 'ready', 'muted', 'unbound', 'updating', 'connecting', 'error', 'offline', 'unknown']),
  deciding_field: v.string(),
  reason: v.string(),
  detail: object,
  /** With the audio gate: whether the device's mosque's source is on air now; null without it or without a mosque. */
  on_air: nullable(v.boolean()),
  checked_at: isoTime,
});

/** GET /mosques/{id}/on-air: what the audio server says of the mosque now (docs/api.md). */
export const OnAir = v.object({
  audio_server: v.boolean(),
  on_air: v.boolean(),
  since: nullable(isoTime),
  /** Listeners the audio server lets in now, all together: `listening` names them apart. */
  listeners: count,
  /** The same listeners apart: stream players (`devices`) and members listening in the console (`members`). */
  listening: v.object({ devices: count, members: count }),
});

export const CommandOutcome = v.object({
  command_id: v.string(),
  name: v.string(),
  ok: v.boolean(),
  /** The ack's `result`, or `{error}` when the device answered ok: false. */
  result: v.unknown(),
  rtt_ms: count,
});

export const TimelineEntry = v.object({
  id: v.string(),
  at: isoTime,
  device_id: v.string(),
  mosque_id: nullable(v.string()),
  kind: v.string(),
  from: nullable(v.string()),
  to: nullable(v.string()),
  reason: nullable(v.string()),
  actor_user_id: nullable(v.string()),
  detail: object,
});

export const LogLine = v.object({ at: isoTime, ts: nullable(int), level: v.string(), msg: v.string() });

/** GET /devices/{id}/logs: the lines, and whether logging is on, so an empty list explains itself. */
export const DeviceLogs = v.object({
  device_id: v.string(),
  logging: v.object({
    enabled: v.boolean(),
    until: nullable(isoTime),
    source: nullable(v.picklist(['log_enabled', 'set_log_level'])),
  }),
  note: nullable(v.string()),
  lines: v.array(LogLine),
});

/**
 * `degraded` names the part that is not ok. 503 when this node cannot serve (the database cannot take writes or be
 * read, or the broker is down); 200 when only an optional part is (the audio server): docs/operator.md, "Health".
 */
export const Health = v.object({
  status: v.picklist(['ok', 'degraded']),
  db: v.picklist(['ok', 'full', 'busy', 'io_error', 'read_only', 'unavailable', 'down']),
  broker: v.picklist(['ok', 'down']),
  /** Only with ICECAST_URL: whether Icecast's admin API answers (docs/operator.md#audio-icecast). */
  audio: v.optional(v.picklist(['ok', 'down'])),
});

/** POST /mosques/{id}/listen: a short-lived listener address for the console (docs/api.md, "Listening in the console"). */
export const ListenAddress = v.object({ url: v.string(), expires_at: v.string() });

/** An Icecast callback's answer when it admits (with `icecast-auth-user: 1`) or records a notice. */
export const HookAnswer = v.object({ admitted: v.optional(v.literal(true)), time_limit_s: v.optional(v.pipe(v.number(), v.integer())), recorded: v.optional(v.literal(true)) });

/** One azaan slot of GET /mosques/{id}/schedule (docs/schedule.md, "The schedule, for apps"). */
export const ScheduleSlot = v.object({
  date: v.string(),
  prayer: v.picklist(['fajr', 'dhuhr', 'jumuah', 'asr', 'maghrib', 'isha']),
  starts_at: isoTime,
  azaan_at: isoTime,
  iqamah_at: nullable(isoTime),
  azaan_local: v.string(),
  source: v.picklist(['calculated', 'timetable', 'fixed']),
  status: v.picklist(['upcoming', 'ready', 'not_ready', 'live', 'done', 'missed']),
  broadcast_id: nullable(v.string()),
  reason: nullable(v.string()),
  /** The delivery report of the broadcast that served the slot (null when none, or a transmitter's own event). */
  report: v.unknown(),
  /** What the readiness check found at azaan_at - SCHEDULE_READY_LEAD_MINUTES (null before it ran). */
  readiness: v.unknown(),
  auto_started: v.boolean(),
  /** Players that played their cached recording for this slot, a broadcast started or not; null while it is to come (docs/schedule.md, "Covered locally"). */
  covered_locally: nullable(count),
});

/** An iCalendar feed (RFC 5545), one event per azaan. */
export const Calendar = v.string();

/** POST /mosques/{id}/schedule/preview: one date's slots with the settings asked about; nothing is stored. */
export const SchedulePreview = v.object({
  date: v.string(),
  timezone: v.string(),
  slots: v.array(v.object({
    prayer: v.picklist(['fajr', 'dhuhr', 'jumuah', 'asr', 'maghrib', 'isha']),
    starts_at: isoTime,
    azaan_at: isoTime,
    iqamah_at: nullable(isoTime),
    azaan_local: v.string(),
    iqamah_local: nullable(v.string()),
    source: v.picklist(['calculated', 'timetable', 'fixed']),
  })),
});

/** PUT /mosques/{id}/timetable/{month}: what was stored, and rows far (> 30 min) from the computed times. */
export const TimetableUploaded = v.object({
  month: int,
  days: int,
  warnings: v.array(v.object({ day: int, prayer: v.string(), uploaded: v.string(), computed: v.string(), difference_minutes: v.number() })),
});

/** A mosque's recorded azaan, without its bytes (docs/api.md, "Recorded azaan"). */
export const Recording = v.object({
  content_type: v.picklist(['audio/mpeg', 'audio/ogg; codecs=vorbis', 'audio/ogg; codecs=opus']),
  bytes: count,
  duration_s: v.pipe(v.number(), v.minValue(0)),
  sha256: v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/)),
  uploaded_at: isoTime,
});

/** A firmware image as stored (docs/api.md, "Firmware updates"), never its bytes. */
export const FirmwareImage = v.object({
  id: v.string(),
  kind: v.picklist(['stream_player', 'transmitter']),
  hw_rev: v.string(),
  version: v.string(),
  sha256: v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/)),
  size: count,
  signature: v.string(),
  notes: v.nullable(v.string()),
  created_at: isoTime,
});

const RolloutGroup = v.object({ size: count, waiting: count, waiting_for_window: count, offered: count, updating: count, succeeded: count, failed: count });
/** A staged rollout with each group's counts (docs/api.md, "Firmware updates"). */
export const FirmwareRollout = v.object({
  id: v.string(),
  image: v.object({ id: v.string(), kind: v.string(), hw_rev: v.string(), version: v.string() }),
  status: v.picklist(['running', 'paused', 'paused_by_errors', 'cancelled', 'done']),
  mosque_ids: v.nullable(v.array(v.string())),
  fw_range: v.nullable(v.string()),
  success_threshold_pct: count,
  error_threshold_pct: count,
  max_concurrent: count,
  timeout_s: count,
  groups: v.array(RolloutGroup),
  created_at: isoTime,
  updated_at: isoTime,
});

/** One rollout that named a device, and what came of it (GET /devices/{id}/firmware). */
export const FirmwareHistoryEntry = v.object({
  rollout_id: v.string(),
  image_id: v.string(),
  target_fw: v.string(),
  rollout_status: v.string(),
  from_fw: v.nullable(v.string()),
  state: v.picklist(['waiting', 'offered', 'updating', 'succeeded', 'failed']),
  error: v.nullable(v.string()),
  offered_at: v.nullable(isoTime),
  finished_at: v.nullable(isoTime),
  created_at: isoTime,
});

/** A firmware image's bytes. */
export const Binary = v.string();

/** The recording's bytes, as uploaded (MP3 or Ogg). */
export const Audio = v.string();

/** A machine-readable document (OpenAPI, AsyncAPI). */
export const Document = object;

// The mappers' types and these schemas must say the same thing: a field added, renamed or retyped on one
// side only fails the type check here (the OpenAPI test then holds the real answers to the schemas).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const sameShapes: [
  Same<v.InferOutput<typeof User>, UserRecord>,
  Same<v.InferOutput<typeof MosqueBase>, MosqueRecord>,
  Same<v.InferOutput<typeof Membership>, MembershipRecord>,
  Same<v.InferOutput<typeof ActivityEntry>, ActivityRecord>,
  Same<v.InferOutput<typeof Invite>['invite'], InviteRecord>,
  Same<Omit<v.InferOutput<typeof Broadcast>, 'report'>, BroadcastRecord>,
  Same<v.InferOutput<typeof Broadcast>['report'], DeliveryReport>,
  Same<v.InferOutput<typeof TokenResponse>, TokenRecord>,
  Same<v.InferOutput<typeof TimelineEntry>, ReturnType<typeof toTimelineEntry>>,
  Same<v.InferOutput<typeof Why>, WhyAnswer & { device_id: string; status: string; on_air: boolean | null; checked_at: string }>,
  Same<Omit<v.InferOutput<typeof Recording>, 'content_type'> & { content_type: string }, ReturnType<typeof toRecording>>,
] = [true, true, true, true, true, true, true, true, true, true, true];
void sameShapes;
