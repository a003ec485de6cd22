// Written by `npm run docs` (scripts/tables.ts) from the migrated schema; do not edit.
import type { Generated } from 'kysely';

export interface ActivityTable {
  id: Generated<number>;
  mosque_id: string;
  at: number;
  actor_user_id: string | null;
  kind: string;
  subject_id: string | null;
  data: Generated<string>;
}

export interface AddressGrantsTable {
  id: string;
  mosque_id: string;
  address_hash: string;
  kind: string;
  status: string | null;
  can_trigger: Generated<number>;
  can_manage: Generated<number>;
  invite_id: string | null;
  granted_by: string | null;
  created_at: number;
}

export interface AudioListenerSessionsTable {
  id: string;
  mosque_id: string;
  client_id: number;
  device_id: string | null;
  user_id: string | null;
  ip: string | null;
  started_at: number;
  ended_at: number | null;
  seconds: number | null;
  bytes: number | null;
  end_reason: string | null;
}

export interface AudioOnAirTable {
  id: string;
  mosque_id: string;
  device_id: string | null;
  started_at: number;
  ended_at: number | null;
  end_reason: string | null;
}

export interface AudioRefusalsTable {
  mosque_id: string | null;
  kind: string;
  reason: string;
  device_id: string | null;
  user_id: string | null;
  at: number;
}

export interface BroadcastsTable {
  id: string;
  mosque_id: string;
  kind: string;
  prayer: string | null;
  title: string | null;
  status: string;
  started_by: string | null;
  started_at: number;
  stopped_by: string | null;
  stopped_at: number | null;
  waiting_for_source: Generated<number>;
  fallback: Generated<number>;
}

export interface ChangeLogTable {
  seq: Generated<number>;
  kind: string;
  entity_id: string;
  origin: string;
  at: number;
}

export interface ConsoleSessionsTable {
  id: string;
  secret_hash: string;
  user_id: string;
  token_version: number;
  created_at: number;
  last_used_at: number;
  expires_at: number;
  auth_time: Generated<number>;
}

export interface DataStepsTable {
  name: string;
  applied_at: number;
}

export interface DeviceLogsTable {
  id: Generated<number>;
  device_id: string;
  at: number;
  ts: number | null;
  level: string;
  msg: string;
}

export interface DevicePairingsTable {
  id: string;
  device_code_hash: string;
  user_code_hash: string;
  kind: string;
  name: string | null;
  fw: string | null;
  hw_rev: string | null;
  status: string;
  device_id: string | null;
  approved_by: string | null;
  interval_s: number;
  last_poll_at: number | null;
  created_at: number;
  expires_at: number;
}

export interface DeviceTimelineOrphansTable {
  head: number;
}

export interface DevicesTable {
  id: string;
  kind: string;
  name: string | null;
  mosque_id: string | null;
  owner_user_id: string | null;
  secret_hash: string;
  enabled: Generated<number>;
  status: Generated<string>;
  status_reason: string | null;
  status_detail: Generated<string>;
  status_at: number | null;
  last_seen_at: number | null;
  fw: string | null;
  mac: string | null;
  ssid: string | null;
  ip: string | null;
  rssi: number | null;
  temp_c: number | null;
  uptime_s: number | null;
  free_heap: number | null;
  volume: number | null;
  reported_config_version: number | null;
  config: Generated<string>;
  config_version: Generated<number>;
  created_at: number;
  updated_at: number;
  lease_expires_at: number | null;
  log_level: string | null;
  log_level_until: number | null;
  connected_broker: string | null;
  lease_token: string | null;
  timeline_head: number | null;
  timeline_seq: Generated<number>;
  timeline_floor: Generated<number>;
  hw_rev: string | null;
}

export interface DutyRunsTable {
  duty: string;
  period: number;
  node: string;
  until: number;
  done: number;
}

export interface FirmwareImagesTable {
  id: string;
  kind: string;
  hw_rev: string;
  version: string;
  sha256: string;
  size: number;
  signature: string;
  notes: string | null;
  uploaded_by: string | null;
  created_at: number;
  data: Buffer;
}

export interface FirmwareOffersTable {
  rollout_id: string;
  device_id: string;
  image_id: string;
  group_index: number;
  state: string;
  waiting_for_window: Generated<number>;
  from_fw: string | null;
  progress_pct: number | null;
  error: string | null;
  offered_at: number | null;
  finished_at: number | null;
  updated_at: number;
}

export interface FirmwareRolloutsTable {
  id: string;
  image_id: string;
  kind: string;
  hw_rev: string;
  target_fw: string;
  status: string;
  mosque_ids: string | null;
  fw_range: string | null;
  groups: string;
  success_threshold_pct: number;
  error_threshold_pct: number;
  max_concurrent: number;
  timeout_s: number;
  resumed_at: number | null;
  created_by: string | null;
  created_at: number;
  updated_at: number;
}

export interface InvitesTable {
  id: string;
  mosque_id: string;
  user_id: string | null;
  invited_by: string | null;
  channel: string;
  contact: string;
  auto_approve: number;
  created_at: number;
}

export interface LoginCodesTable {
  user_id: string;
  code_hmac: string;
  attempts_left: number;
  expires_at: number;
  sent_to_hash: string | null;
}

export interface MembershipRemovalsTable {
  mosque_id: string;
  user_id: string;
  removed_at: number;
  by_self: Generated<number>;
}

export interface MembershipsTable {
  id: string;
  mosque_id: string;
  user_id: string;
  status: string;
  notify_azaan: Generated<number>;
  notify_jummah: Generated<number>;
  notify_waaz: Generated<number>;
  notify_announcement: Generated<number>;
  created_at: number;
  updated_at: number;
}

export interface MosqueAdminsTable {
  mosque_id: string;
  user_id: string;
  is_owner: Generated<number>;
  can_trigger: Generated<number>;
  can_manage: Generated<number>;
  created_at: number;
  updated_at: number;
}

export interface MosqueDeviceEventsTable {
  id: Generated<number>;
  device_id: string;
  prev_id: number | null;
  mosque_id: string | null;
  at: number;
  kind: string;
  from_status: string | null;
  to_status: string | null;
  reason: string | null;
  actor_user_id: string | null;
  detail: Generated<string>;
}

export interface MosquesTable {
  id: string;
  name: string;
  timezone: Generated<string>;
  auto_approve_members: Generated<number>;
  stream_url: string | null;
  join_code: string;
  created_at: number;
  updated_at: number;
  latitude: number | null;
  longitude: number | null;
  prayer_times: string | null;
  azaan: Generated<string>;
  iqamah: Generated<string>;
  jumuah: Generated<string>;
  auto_start: Generated<number>;
  schedule_since: number | null;
}

export interface PushOutboxTable {
  id: Generated<number>;
  broadcast_id: string | null;
  user_id: string;
  endpoint: string;
  payload: string;
  status: string;
  attempts: Generated<number>;
  next_attempt_at: number;
  last_error: string | null;
  created_at: number;
  updated_at: number;
}

export interface PushSubscriptionsTable {
  endpoint: string;
  user_id: string;
  p256dh: string;
  auth: string;
  created_at: number;
}

export interface RecordingsTable {
  mosque_id: string;
  content_type: string;
  bytes: number;
  duration_s: number;
  sha256: string;
  uploaded_by: string | null;
  uploaded_at: number;
  data: Buffer;
}

export interface ResetTokensTable {
  token_hmac: string;
  user_id: string;
  kind: string;
  expires_at: number;
  sent_to_hash: string | null;
}

export interface RevokedTokensTable {
  token_id_hash: string;
  user_id: string;
  expires_at: number;
}

export interface ScheduleAlertsTable {
  mosque_id: string;
  date: string;
  prayer: string;
  idx: number;
  kind: string;
  sent_at: number;
}

export interface ScheduleSlotsTable {
  mosque_id: string;
  date: string;
  prayer: string;
  idx: number;
  starts_at: number;
  azaan_at: number;
  iqamah_at: number | null;
  source: string;
  status: string;
  reason: string | null;
  readiness: string | null;
  broadcast_id: string | null;
  auto_started: Generated<number>;
  updated_at: number;
}

export interface ScheduleTimetablesTable {
  mosque_id: string;
  month: number;
  day: number;
  fajr: string;
  shuruk: string | null;
  dhuhr: string;
  asr: string;
  maghrib: string;
  isha: string;
}

export interface SignupNoticesTable {
  address_hash: string;
  sent_at: number;
}

export interface SuperadminDecoySessionsTable {
  session_hash: string;
  identifier_hash: string;
  attempts_left: number;
  expires_at: number;
}

export interface SuperadminSessionsTable {
  session_hash: string;
  user_id: string;
  purpose: string;
  otp_sealed: string;
  attempts_left: number;
  expires_at: number;
}

export interface UsersTable {
  id: string;
  email: string;
  email_hash: string;
  email_proven_at: number | null;
  phone: string | null;
  phone_hash: string | null;
  phone_proven_at: number | null;
  used_unproven: Generated<number>;
  password_bcrypt: string | null;
  role: string;
  token_version: Generated<number>;
  created_at: number;
  updated_at: number;
  claim_seq: Generated<number>;
  email_claim_order: Generated<number>;
  phone_claim_order: Generated<number>;
}

export interface WrongGuessesTable {
  subject: string;
  at: number;
}

/** Every table, by name: the type the store (src/platform/store) is built over. */
export interface Tables {
  activity: ActivityTable;
  address_grants: AddressGrantsTable;
  audio_listener_sessions: AudioListenerSessionsTable;
  audio_on_air: AudioOnAirTable;
  audio_refusals: AudioRefusalsTable;
  broadcasts: BroadcastsTable;
  change_log: ChangeLogTable;
  console_sessions: ConsoleSessionsTable;
  data_steps: DataStepsTable;
  device_logs: DeviceLogsTable;
  device_pairings: DevicePairingsTable;
  device_timeline_orphans: DeviceTimelineOrphansTable;
  devices: DevicesTable;
  duty_runs: DutyRunsTable;
  firmware_images: FirmwareImagesTable;
  firmware_offers: FirmwareOffersTable;
  firmware_rollouts: FirmwareRolloutsTable;
  invites: InvitesTable;
  login_codes: LoginCodesTable;
  membership_removals: MembershipRemovalsTable;
  memberships: MembershipsTable;
  mosque_admins: MosqueAdminsTable;
  mosque_device_events: MosqueDeviceEventsTable;
  mosques: MosquesTable;
  push_outbox: PushOutboxTable;
  push_subscriptions: PushSubscriptionsTable;
  recordings: RecordingsTable;
  reset_tokens: ResetTokensTable;
  revoked_tokens: RevokedTokensTable;
  schedule_alerts: ScheduleAlertsTable;
  schedule_slots: ScheduleSlotsTable;
  schedule_timetables: ScheduleTimetablesTable;
  signup_notices: SignupNoticesTable;
  superadmin_decoy_sessions: SuperadminDecoySessionsTable;
  superadmin_sessions: SuperadminSessionsTable;
  users: UsersTable;
  wrong_guesses: WrongGuessesTable;
}
