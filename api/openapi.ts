import { toJsonSchema } from '@valibot/to-json-schema';
import type * as v from 'valibot';
import { httpStatus } from './errors.ts';
import * as r from './responses.ts';
import * as auth from './people/auth.ts';
import { BroadcastQuery, BroadcastStart } from './broadcasts/broadcasts.ts';
import { SchedulePreview, ScheduleQuery, TimetableJson } from './schedule/schedule.ts';
import { InviteCreate } from './mosques/invites.ts';
import { AddressConfirm, AddressVerify, MeUpdate, PushSubscription, PushUnsubscribe } from './people/me.ts';
import { PasswordChange } from './people/sessions.ts';
import { JoinByCode, MembershipPatch } from './mosques/memberships.ts';
import { ActivityQuery, AdminCreate, AdminUpdate, Enrol, MembershipQuery, MosqueCreate, MosqueUpdate } from './mosques/mosques.ts';
import { UserCreate, UserQuery, UserUpdate } from './people/users.ts';
import { HookForm } from './audio/hooks.ts';
import { UPLOAD_TYPES } from '../src/audio/recordings.ts';
import { RolloutCreate } from './firmware/rollouts.ts';
import { PairingApprove, PairingDeny, PairingStart, PairingToken } from './devices/pairing.ts';
import { CommandRequest, DeviceListQuery, DeviceUpdate, EventsQuery, LogsQuery, PlayerCreate, TransmitterCreate } from './devices/devices.ts';

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * Named success shapes: components.schemas of the document, referenced by the operations. The error body is
 * written out in each components.responses.ErrorNNN instead, with the codes of that status.
 */
const SCHEMAS = {
  TokenResponse: r.TokenResponse,
  Accepted: r.Status('accepted'),
  PasswordReset: r.Status('password_reset'),
  SessionStarted: r.SessionStarted,
  SetupOpen: r.SetupState,
  SetupCreated: r.SetupCreated,
  ResetTokenIssued: r.ResetTokenIssued,
  VapidKey: r.VapidKey,
  JoinCodeMosque: r.JoinCodeMosque,
  Me: r.Me,
  User: r.User,
  Mosque: r.Mosque,
  Admin: r.Admin,
  AdminAccepted: r.AdminAccepted,
  Membership: r.Membership,
  MembershipWithEmail: r.MembershipWithEmail,
  MemberDetail: r.MemberDetail,
  ActivityEntry: r.ActivityEntry,
  Invite: r.Invite,
  Broadcast: r.Broadcast,
  PushSubscriptionSaved: r.PushSubscriptionSaved,
  PushSubscriptionEntry: r.PushSubscriptionEntry,
  PushTestQueued: r.PushTestQueued,
  Device: r.Device,
  DeviceWithCredentials: r.DeviceWithCredentials,
  PairingStarted: r.PairingStarted,
  PairedDevice: r.PairedDevice,
  LeaseKeys: r.LeaseKeys,
  Why: r.Why,
  CommandOutcome: r.CommandOutcome,
  EventTicket: r.EventTicket,
  TimelineEntry: r.TimelineEntry,
  LogLine: r.LogLine,
  DeviceLogs: r.DeviceLogs,
  Health: r.Health,
  Document: r.Document,
  ScheduleSlot: r.ScheduleSlot,
  Calendar: r.Calendar,
  TimetableUploaded: r.TimetableUploaded,
  SchedulePreview: r.SchedulePreview,
  ListenAddress: r.ListenAddress,
  OnAir: r.OnAir,
  HookAnswer: r.HookAnswer,
  Recording: r.Recording,
  Audio: r.Audio,
  FirmwareImage: r.FirmwareImage,
  FirmwareRollout: r.FirmwareRollout,
  FirmwareHistoryEntry: r.FirmwareHistoryEntry,
  Binary: r.Binary,
} satisfies Record<string, v.GenericSchema>;
export type ResponseName = keyof typeof SCHEMAS;

/** One documented route: the same valibot schemas that validate the request describe it here. */
export interface RouteDoc {
  /** Stable name for generated clients; never reused for another operation. */
  operationId: string;
  method: Method;
  /** Hono's path syntax (`/api/v1/mosques/:id`). */
  path: string;
  summary: string;
  /** Who may call it (the standings of docs/api.md, "Flags decide"). */
  gate: 'public' | 'any' | 'superadmin' | 'admin' | 'trigger' | 'manager' | 'owner' | 'self or admin' | 'console session';
  success: number;
  /** The success body (absent for 204); `list` when it is a bare array of it. */
  response?: ResponseName;
  list?: boolean;
  /** A second success the route may answer instead, with its own body (by email rather than by id, say). */
  alsoSuccess?: { status: number; response?: ResponseName; description: string };
  /** The success body's media type when it is not JSON (the ICS feed). */
  contentType?: string;
  /** The request body may also be `text/csv` (a timetable upload). */
  csvBody?: true;
  /** Error statuses beyond those every route of its kind can answer (see errorStatuses). */
  errors?: number[];
  body?: v.GenericSchema;
  query?: v.GenericSchema;
  /** A Server-Sent Events stream opened with `?ticket=` (EventSource cannot send a bearer token). */
  eventStream?: true;
  /** The body is a form (application/x-www-form-urlencoded), as Icecast sends its callbacks. */
  formBody?: v.GenericSchema;
  /** Authenticated by ICECAST_HOOK_SECRET as HTTP basic instead of a bearer token. */
  hookSecret?: true;
  /** Sets or reads the console's session cookie: the CSRF rule of docs/api.md "Console sessions" applies (403). */
  consoleCsrf?: true;
  /** The request body is a raw audio file of one of these media types (the recording upload), not JSON. */
  audioBody?: readonly string[];
  /** The success body is audio of one of these media types, opened with `?lease=` (or `?ticket=`). */
  audioResponse?: readonly string[];
  /** The request body, or the success body, is raw bytes (application/octet-stream): a firmware image. */
  binaryBody?: true;
  binaryResponse?: true;
  /** Authenticated by a device's MQTT username and password as HTTP basic (a firmware download), not a bearer token. */
  deviceBasic?: true;
}

/** The API's base, relative to the host serving the document (docs/api.md, "Base URL and conventions"). */
export const API_BASE = '/api/v1';

const A = '/api/v1/auth';
const M = '/api/v1/mosques/:id';
const SERVED_AUDIO = ['audio/mpeg', 'audio/ogg'];

export const ROUTE_DOCS: RouteDoc[] = [
  { operationId: 'getHealth', method: 'GET', path: '/healthz', summary: 'Health of the database and the broker', gate: 'public', success: 200, response: 'Health' },
  { operationId: 'getOpenApi', method: 'GET', path: '/api/v1/openapi.json', summary: 'This document', gate: 'public', success: 200, response: 'Document' },
  { operationId: 'getAsyncApi', method: 'GET', path: '/api/v1/asyncapi.json', summary: 'The AsyncAPI 3 document of the MQTT topics (firmware authors)', gate: 'public', success: 200, response: 'Document' },
  { operationId: 'signup', method: 'POST', path: `${A}/signup`, summary: 'Create an account by email and/or phone', gate: 'public', success: 201, body: auth.Signup, response: 'TokenResponse', errors: [401, 429] },
  { operationId: 'login', method: 'POST', path: `${A}/login`, summary: 'Password login', gate: 'public', success: 200, body: auth.Login, response: 'TokenResponse', errors: [401, 429] },
  { operationId: 'requestLoginCode', method: 'POST', path: `${A}/login-code`, summary: 'Send a 6-digit login code', gate: 'public', success: 202, body: auth.CodeRequest, response: 'Accepted', errors: [429] },
  { operationId: 'verifyLoginCode', method: 'POST', path: `${A}/login-code/verify`, summary: 'Redeem a login code', gate: 'public', success: 200, body: auth.CodeVerify, response: 'TokenResponse', errors: [401, 429] },
  { operationId: 'forgotPassword', method: 'POST', path: `${A}/forgot-password`, summary: 'Send a password reset token', gate: 'public', success: 202, body: auth.CodeRequest, response: 'Accepted', errors: [429] },
  { operationId: 'resetPassword', method: 'POST', path: `${A}/reset-password`, summary: 'Redeem a reset token', gate: 'public', success: 200, body: auth.Reset, response: 'PasswordReset', errors: [429] },
  { operationId: 'startSuperadminLogin', method: 'POST', path: `${A}/superadmin-2fa`, summary: 'Superadmin login, step 1', gate: 'public', success: 200, body: auth.Login, response: 'SessionStarted', errors: [401, 429] },
  { operationId: 'verifySuperadminLogin', method: 'POST', path: `${A}/superadmin-2fa/verify`, summary: 'Superadmin login, step 2 (HMAC of otp|timestamp)', gate: 'public', success: 200, body: auth.SessionVerify, response: 'TokenResponse', errors: [401, 429] },
  { operationId: 'startSuperadminReset', method: 'POST', path: `${A}/superadmin-forgot`, summary: 'Superadmin reset, step 1', gate: 'public', success: 200, body: auth.SuperadminForgot, response: 'SessionStarted', errors: [429] },
  { operationId: 'verifySuperadminReset', method: 'POST', path: `${A}/superadmin-forgot/verify`, summary: 'Superadmin reset, step 2', gate: 'public', success: 200, body: auth.SessionVerify, response: 'ResetTokenIssued', errors: [401, 429] },
  { operationId: 'setupOpen', method: 'GET', path: `${A}/setup`, summary: 'Whether the first superadmin may still be created with the setup link the process logged: open, or closed once one exists', gate: 'public', success: 200, response: 'SetupOpen', errors: [429] },
  { operationId: 'setupFirstSuperadmin', method: 'POST', path: `${A}/setup`, summary: 'Create the first superadmin with the setup token (from the link the process logged at start); 404 once one exists', gate: 'public', success: 201, body: auth.SetupBody, response: 'SetupCreated', errors: [400, 404, 429] },
  { operationId: 'resetSuperadminPassword', method: 'POST', path: `${A}/superadmin-reset-password`, summary: 'Superadmin reset, step 3', gate: 'public', success: 200, body: auth.SuperadminReset, response: 'PasswordReset', errors: [429] },
  { operationId: 'logout', method: 'POST', path: `${A}/logout`, summary: 'Sign out: this token stops working at once, in every process', gate: 'any', success: 204 },
  { operationId: 'logoutAll', method: 'POST', path: `${A}/logout-all`, summary: "Sign out everywhere: every token of the account and its pending superadmin sign-ins and resets stop working", gate: 'any', success: 204 },
  { operationId: 'openConsoleSession', method: 'POST', path: `${A}/session`, summary: "The console's: trade a token from a sign-in in the last 10 minutes for the HttpOnly session cookie (the token stops working); answers a short-lived token. Needs X-Minaret-Console: 1 and the service's own Origin", gate: 'any', success: 201, response: 'TokenResponse', consoleCsrf: true, errors: [429] },
  { operationId: 'mintConsoleToken', method: 'POST', path: `${A}/session/token`, summary: "The console's: a short-lived token from the session cookie (401 and the cookie cleared once the session ended). Needs X-Minaret-Console: 1 and the service's own Origin", gate: 'console session', success: 200, response: 'TokenResponse', consoleCsrf: true, errors: [429],
    alsoSuccess: { status: 204, description: 'No session cookie in the request: nothing to restore (a signed-out page asking is not a failure)' } },
  { operationId: 'getVapidPublicKey', method: 'GET', path: '/api/v1/push/vapid-public-key', summary: 'The VAPID public key browsers subscribe with', gate: 'public', success: 200, response: 'VapidKey' },
  { operationId: 'getMe', method: 'GET', path: '/api/v1/me', summary: 'The caller, their memberships and admin rows', gate: 'any', success: 200, response: 'Me' },
  { operationId: 'listMyMemberships', method: 'GET', path: '/api/v1/me/memberships', summary: "The caller's memberships", gate: 'any', success: 200, response: 'Membership', list: true },
  { operationId: 'updateMe', method: 'PATCH', path: '/api/v1/me', summary: 'Change your own email or phone: the new address is a claim until proven; an email change ends every older token, the answer is a new one', gate: 'any', success: 200, body: MeUpdate, response: 'TokenResponse' },
  { operationId: 'requestAddressConfirmation', method: 'POST', path: '/api/v1/me/addresses/confirm', summary: "Send a 6-digit code to the caller's own email or phone (3 a minute per account, and per address from every account claiming it)", gate: 'any', success: 202, body: AddressConfirm, response: 'Accepted', errors: [429] },
  { operationId: 'confirmAddress', method: 'POST', path: '/api/v1/me/addresses/verify', summary: 'Redeem the code: the address is proven and the account keeps all it has', gate: 'any', success: 200, body: AddressVerify, response: 'User', errors: [409, 429] },
  { operationId: 'changePassword', method: 'POST', path: '/api/v1/me/password', summary: 'Change the password (the current one is required unless the account has none and signed in within 10 minutes); every older token stops working, the answer is a new one', gate: 'any', success: 200, body: PasswordChange, response: 'TokenResponse', errors: [403, 429] },
  { operationId: 'listPushSubscriptions', method: 'GET', path: '/api/v1/me/push-subscriptions', summary: "The caller's own Web Push subscriptions, oldest first (never their keys)", gate: 'any', success: 200, response: 'PushSubscriptionEntry', list: true },
  { operationId: 'addPushSubscription', method: 'POST', path: '/api/v1/me/push-subscriptions', summary: 'Register a Web Push subscription', gate: 'any', success: 201, body: PushSubscription, response: 'PushSubscriptionSaved' },
  { operationId: 'sendTestPush', method: 'POST', path: '/api/v1/me/push-subscriptions/test', summary: "A test notification to each of the caller's own push subscriptions (3 a minute)", gate: 'any', success: 202, response: 'PushTestQueued', errors: [429] },
  { operationId: 'removePushSubscription', method: 'DELETE', path: '/api/v1/me/push-subscriptions', summary: 'Remove a Web Push subscription', gate: 'any', success: 204, body: PushUnsubscribe, errors: [404] },
  { operationId: 'listUsers', method: 'GET', path: '/api/v1/users', summary: 'List users', gate: 'superadmin', success: 200, query: UserQuery, response: 'User', list: true },
  { operationId: 'createUser', method: 'POST', path: '/api/v1/users', summary: 'Create a user', gate: 'superadmin', success: 201, body: UserCreate, response: 'User', errors: [409] },
  { operationId: 'getUser', method: 'GET', path: '/api/v1/users/:id', summary: 'Read a user', gate: 'superadmin', success: 200, response: 'User' },
  { operationId: 'updateUser', method: 'PATCH', path: '/api/v1/users/:id', summary: 'Update a user (a role change revokes their tokens)', gate: 'superadmin', success: 200, body: UserUpdate, response: 'User', errors: [409] },
  { operationId: 'deleteUser', method: 'DELETE', path: '/api/v1/users/:id', summary: 'Delete a user', gate: 'superadmin', success: 204, errors: [409] },
  { operationId: 'createMosque', method: 'POST', path: '/api/v1/mosques', summary: 'Create a mosque', gate: 'superadmin', success: 201, body: MosqueCreate, response: 'Mosque', errors: [404, 409] },
  { operationId: 'listMosques', method: 'GET', path: '/api/v1/mosques', summary: "Mosques the caller administers or belongs to (all for a superadmin)", gate: 'any', success: 200, response: 'Mosque', list: true },
  { operationId: 'getMosque', method: 'GET', path: M, summary: 'Read a mosque', gate: 'admin', success: 200, response: 'Mosque' },
  { operationId: 'updateMosque', method: 'PATCH', path: M, summary: 'Update a mosque', gate: 'admin', success: 200, body: MosqueUpdate, response: 'Mosque' },
  { operationId: 'deleteMosque', method: 'DELETE', path: M, summary: 'Delete a mosque: its owner or a superadmin; any other admin gets 403', gate: 'admin', success: 204 },
  { operationId: 'rotateJoinCode', method: 'POST', path: `${M}/join-code`, summary: 'Issue a new join code (the old one stops working)', gate: 'manager', success: 200, response: 'Mosque' },
  { operationId: 'listAdmins', method: 'GET', path: `${M}/admins`, summary: "The mosque's admins", gate: 'admin', success: 200, response: 'Admin', list: true },
  { operationId: 'addAdmin', method: 'POST', path: `${M}/admins`, summary: 'Add an admin by user_id (201), or by email (202, the same whether or not an account holds the address; the row is added, or waits on the address, after the answer)', gate: 'manager', success: 201, body: AdminCreate, response: 'Admin', errors: [409],
    alsoSuccess: { status: 202, response: 'AdminAccepted', description: 'Accepted: named by email; added (or waiting on the address) after the answer' } },
  { operationId: 'updateAdmin', method: 'PATCH', path: `${M}/admins/:user_id`, summary: "Change an admin's flags or hand over ownership", gate: 'manager', success: 200, body: AdminUpdate, response: 'Admin', errors: [409] },
  { operationId: 'removeAdmin', method: 'DELETE', path: `${M}/admins/:user_id`, summary: 'Remove an admin', gate: 'manager', success: 204, errors: [409] },
  { operationId: 'listMosqueMemberships', method: 'GET', path: `${M}/memberships`, summary: "The mosque's memberships", gate: 'admin', success: 200, query: MembershipQuery, response: 'MembershipWithEmail', list: true },
  { operationId: 'enrolMember', method: 'POST', path: `${M}/memberships`, summary: 'Enrol a user (always approved)', gate: 'admin', success: 201, body: Enrol, response: 'Membership', errors: [404] },
  { operationId: 'joinMosque', method: 'POST', path: `${M}/join`, summary: 'Join the mosque', gate: 'any', success: 201, response: 'Membership', errors: [403] },
  { operationId: 'listActivity', method: 'GET', path: `${M}/activity`, summary: 'Activity feed, newest first', gate: 'admin', success: 200, query: ActivityQuery, response: 'ActivityEntry', list: true },
  { operationId: 'startBroadcast', method: 'POST', path: `${M}/broadcasts`, summary: 'Start a broadcast (answers once it is recorded and with the broker; its report is pending: GET the broadcast for it)', gate: 'trigger', success: 201, body: BroadcastStart, response: 'Broadcast', errors: [409] },
  { operationId: 'stopBroadcast', method: 'POST', path: `${M}/broadcasts/:bid/stop`, summary: 'Stop a broadcast', gate: 'trigger', success: 200, response: 'Broadcast' },
  { operationId: 'listBroadcasts', method: 'GET', path: `${M}/broadcasts`, summary: 'Broadcasts with their delivery reports', gate: 'admin', success: 200, query: BroadcastQuery, response: 'Broadcast', list: true },
  { operationId: 'getBroadcast', method: 'GET', path: `${M}/broadcasts/:bid`, summary: 'One broadcast with its delivery report', gate: 'admin', success: 200, response: 'Broadcast' },
  { operationId: 'getSchedule', method: 'GET', path: `${M}/schedule`, summary: 'Azaan slots of 1..31 days with their status and report (approved members and admins)', gate: 'any', success: 200, query: ScheduleQuery, response: 'ScheduleSlot', list: true, errors: [403, 404] },
  { operationId: 'getScheduleIcs', method: 'GET', path: `${M}/schedule.ics`, summary: 'The azaan times as iCalendar, 30 days ahead (approved members and admins)', gate: 'any', success: 200, response: 'Calendar', contentType: 'text/calendar', errors: [403, 404] },
  { operationId: 'previewSchedule', method: 'POST', path: `${M}/schedule/preview`, summary: "One date's slots (default today in the zone) with the settings given laid over the saved ones, as PATCH /mosques/{id} would set them; computed, nothing stored", gate: 'manager', success: 200, body: SchedulePreview, response: 'SchedulePreview' },
  { operationId: 'putTimetable', method: 'PUT', path: `${M}/timetable/:month`, summary: "Upload a month's times (text/csv Day,Fajr,Shuruk,Duhr,Asr,Maghrib,Isha in standard time, or JSON rows); month 1..12 recurs yearly", gate: 'manager', success: 200, body: TimetableJson, csvBody: true, response: 'TimetableUploaded' },
  { operationId: 'deleteTimetable', method: 'DELETE', path: `${M}/timetable/:month`, summary: 'Remove an uploaded month: back to computed times', gate: 'manager', success: 204 },
  { operationId: 'putRecording', method: 'PUT', path: `${M}/recording`, summary: "Upload the mosque's recorded azaan: the raw file as the body, MP3, Ogg Vorbis or Ogg Opus, at most RECORDING_MAX_BYTES (5 MiB) and 10 minutes; 201, or 200 when it replaces the one stored", gate: 'manager', success: 201, audioBody: Object.keys(UPLOAD_TYPES), response: 'Recording' },
  { operationId: 'getRecording', method: 'GET', path: `${M}/recording`, summary: "The recorded azaan's type, size, length and hash (never its bytes)", gate: 'admin', success: 200, response: 'Recording' },
  { operationId: 'deleteRecording', method: 'DELETE', path: `${M}/recording`, summary: 'Remove the recorded azaan', gate: 'manager', success: 204 },
  { operationId: 'putFirmwareImage', method: 'PUT', path: '/api/v1/firmware/images/:kind/:hw_rev/:version', summary: 'Upload a firmware image: the raw bytes as the body, X-Firmware-Signature the base64 Ed25519 signature of its SHA-256 digest (checked against FIRMWARE_PUBLIC_KEY), at most FIRMWARE_MAX_BYTES; 201, or 200 for the same bytes again', gate: 'superadmin', success: 201, binaryBody: true, response: 'FirmwareImage', errors: [409] },
  { operationId: 'listFirmwareImages', method: 'GET', path: '/api/v1/firmware/images', summary: 'Firmware images, newest first, without their bytes', gate: 'superadmin', success: 200, response: 'FirmwareImage', list: true, errors: [409] },
  { operationId: 'deleteFirmwareImage', method: 'DELETE', path: '/api/v1/firmware/images/:id', summary: 'Remove a firmware image no unfinished rollout offers', gate: 'superadmin', success: 204, errors: [409] },
  { operationId: 'createFirmwareRollout', method: 'POST', path: '/api/v1/firmware/rollouts', summary: "Start a staged rollout of an image to the devices of its kind and hw_rev (in mosque_ids, in fw_range), group by group, inside each mosque's prayer-aware window", gate: 'superadmin', success: 201, body: RolloutCreate, response: 'FirmwareRollout', errors: [409] },
  { operationId: 'listFirmwareRollouts', method: 'GET', path: '/api/v1/firmware/rollouts', summary: 'Rollouts, newest first, with each group\'s counts', gate: 'superadmin', success: 200, response: 'FirmwareRollout', list: true, errors: [409] },
  { operationId: 'getFirmwareRollout', method: 'GET', path: '/api/v1/firmware/rollouts/:id', summary: "A rollout and each group's waiting, waiting_for_window, offered, updating, succeeded and failed devices", gate: 'superadmin', success: 200, response: 'FirmwareRollout', errors: [409] },
  { operationId: 'pauseFirmwareRollout', method: 'POST', path: '/api/v1/firmware/rollouts/:id/pause', summary: 'Pause a running rollout: nothing new is offered; a device offered already finishes', gate: 'superadmin', success: 200, response: 'FirmwareRollout', errors: [409] },
  { operationId: 'resumeFirmwareRollout', method: 'POST', path: '/api/v1/firmware/rollouts/:id/resume', summary: 'Resume a paused rollout (also one paused by errors: the failures so far are accepted)', gate: 'superadmin', success: 200, response: 'FirmwareRollout', errors: [409] },
  { operationId: 'cancelFirmwareRollout', method: 'POST', path: '/api/v1/firmware/rollouts/:id/cancel', summary: 'Cancel an unfinished rollout: nothing new is offered; a device offered already finishes', gate: 'superadmin', success: 200, response: 'FirmwareRollout', errors: [409] },
  { operationId: 'getDeviceFirmware', method: 'GET', path: '/api/v1/devices/:id/firmware', summary: "The device's firmware history: every rollout that named it, newest first, with each outcome", gate: 'self or admin', success: 200, response: 'FirmwareHistoryEntry', list: true },
  { operationId: 'downloadFirmwareImage', method: 'GET', path: '/api/v1/firmware/images/:id/download', summary: "A firmware image's bytes for a device offered it, by its MQTT credentials as HTTP basic, checked on every request; one Range (RFC 9110 §14) answers 206 with that slice", gate: 'public', deviceBasic: true, success: 200, binaryResponse: true, response: 'Binary', errors: [401, 404, 416, 429] },
  { operationId: 'downloadRecording', method: 'GET', path: '/api/v1/audio/recordings/:mosque_id', summary: "The recorded azaan's bytes for a player entitled to the mosque, its lease checked on every request (?lease=); one Range (RFC 9110 §14) answers 206 with that slice", gate: 'public', success: 200, audioResponse: SERVED_AUDIO, response: 'Audio', errors: [403, 404, 416] },
  { operationId: 'issueEventTicket', method: 'POST', path: `${M}/events/ticket`, summary: 'A 30-second, single-use ticket that opens the event stream once', gate: 'admin', success: 201, response: 'EventTicket', errors: [429] },
  { operationId: 'streamMosqueEvents', method: 'GET', path: `${M}/events/stream`, summary: 'Live device status changes, broadcast start/stop and schedule slot changes of the mosque (Server-Sent Events; heartbeat comment every 25 s)', gate: 'public', success: 200, eventStream: true, errors: [401, 429] },
  { operationId: 'getOnAir', method: 'GET', path: `${M}/on-air`, summary: "Whether the audio server hears the mosque's source now, since when, and how many listen (audio_server false without ICECAST_URL)", gate: 'admin', success: 200, response: 'OnAir' },
  { operationId: 'listenInConsole', method: 'POST', path: `${M}/listen`, summary: "A 10-minute listener address (<ICECAST_URL>/m/{id}?ticket=...) for an approved member or an admin; 409 while the audio server is off", gate: 'any', success: 201, response: 'ListenAddress', errors: [403, 404, 409] },
  { operationId: 'icecastHook', method: 'POST', path: '/api/v1/audio/hooks/:action', summary: "Icecast's URL authentication (stream_auth, listener_add, listener_remove, mount_add, mount_remove): 200 with icecast-auth-user: 1 admits, 403 with icecast-auth-message refuses; HTTP basic icecast:<ICECAST_HOOK_SECRET>", gate: 'public', hookSecret: true, success: 200, formBody: HookForm, response: 'HookAnswer', errors: [400, 401, 403, 404, 413, 415, 429] },
  { operationId: 'registerTransmitter', method: 'POST', path: `${M}/devices`, summary: 'Register a transmitter (credentials are shown once)', gate: 'manager', success: 201, body: TransmitterCreate, response: 'DeviceWithCredentials' },
  { operationId: 'registerPlayer', method: 'POST', path: '/api/v1/devices', summary: 'Register a stream player the caller owns (credentials are shown once)', gate: 'any', success: 201, body: PlayerCreate, response: 'DeviceWithCredentials', errors: [404] },
  { operationId: 'startPairing', method: 'POST', path: '/api/v1/devices/pairing', summary: 'A device asks to be paired (RFC 8628 §3.1): a device code to poll with and a user code to show', gate: 'public', success: 200, body: PairingStart, response: 'PairingStarted', errors: [429, 503] },
  { operationId: 'pollPairing', method: 'POST', path: '/api/v1/devices/pairing/token', summary: 'The device polls (RFC 8628 §3.4): 400 authorization_pending, slow_down, expired_token or access_denied; once approved, its credentials once', gate: 'public', success: 200, body: PairingToken, response: 'DeviceWithCredentials' },
  { operationId: 'approvePairing', method: 'POST', path: '/api/v1/devices/pairing/approve', summary: 'Approve the device showing this code: a player becomes the caller\'s, a transmitter (a manager) the mosque\'s; 404 for an unknown code or one not the caller\'s to approve', gate: 'any', success: 200, body: PairingApprove, response: 'PairedDevice', errors: [403, 404, 409, 429] },
  { operationId: 'denyPairing', method: 'POST', path: '/api/v1/devices/pairing/deny', summary: 'Refuse the device showing this code (its next poll: access_denied)', gate: 'any', success: 204, body: PairingDeny, errors: [404, 429] },
  { operationId: 'listDevices', method: 'GET', path: '/api/v1/devices', summary: "Own players, the devices of mosques the caller administers (all for a superadmin)", gate: 'any', success: 200, query: DeviceListQuery, response: 'Device', list: true },
  { operationId: 'getLeaseKeys', method: 'GET', path: '/api/v1/devices/lease-keys', summary: 'JWKS of the keys that sign entitlement leases', gate: 'public', success: 200, response: 'LeaseKeys' },
  { operationId: 'explainDevice', method: 'GET', path: '/api/v1/devices/:id/why', summary: 'Why a device is or is not playing: the deciding fact of the chain', gate: 'self or admin', success: 200, response: 'Why' },
  { operationId: 'getDevice', method: 'GET', path: '/api/v1/devices/:id', summary: 'A device, its status and its config', gate: 'self or admin', success: 200, response: 'Device' },
  { operationId: 'updateDevice', method: 'PATCH', path: '/api/v1/devices/:id', summary: 'Rename, rebind or configure (raises config_version and pushes the config)', gate: 'self or admin', success: 200, body: DeviceUpdate, response: 'Device', errors: [404] },
  { operationId: 'deleteDevice', method: 'DELETE', path: '/api/v1/devices/:id', summary: 'Delete (its credentials stop working, a live connection is closed)', gate: 'self or admin', success: 204 },
  { operationId: 'rotateDeviceCredentials', method: 'POST', path: '/api/v1/devices/:id/credentials', summary: 'New password (the old one stops working, a live connection is closed)', gate: 'self or admin', success: 200, response: 'DeviceWithCredentials' },
  { operationId: 'sendCommand', method: 'POST', path: '/api/v1/devices/:id/commands', summary: 'Send a command and wait for its ack (409 device_offline, 504 device_timeout)', gate: 'self or admin', success: 200, body: CommandRequest, response: 'CommandOutcome', errors: [409, 504] },
  { operationId: 'listDeviceEvents', method: 'GET', path: '/api/v1/devices/:id/events', summary: 'The mosque_device_events timeline, newest first', gate: 'self or admin', success: 200, query: EventsQuery, response: 'TimelineEntry', list: true },
  { operationId: 'listDeviceLogs', method: 'GET', path: '/api/v1/devices/:id/logs', summary: 'Recent device log lines, newest first, and whether logging is on', gate: 'self or admin', success: 200, query: LogsQuery, response: 'DeviceLogs' },
  { operationId: 'lookUpJoinCode', method: 'GET', path: '/api/v1/join/:code', summary: 'The name of the mosque a join code invites to (no token: a join link opened signed out names it)', gate: 'public', success: 200, response: 'JoinCodeMosque', errors: [404, 429] },
  { operationId: 'joinByCode', method: 'POST', path: '/api/v1/join', summary: 'Join a mosque by its join code', gate: 'any', success: 201, body: JoinByCode, response: 'Membership', errors: [403, 404] },
  { operationId: 'invite', method: 'POST', path: '/api/v1/invites', summary: 'Invite by email or WhatsApp (at most INVITES_PER_MOSQUE_PER_HOUR per mosque, INVITES_PER_ADDRESS_PER_DAY per address)', gate: 'admin', success: 201, body: InviteCreate, response: 'Invite', errors: [403, 404, 409, 429] },
  { operationId: 'getMembership', method: 'GET', path: '/api/v1/memberships/:id', summary: "One member as the mosque's admins see them: the membership, the member's email and phone, its status history and the member's players at the mosque (404 to others; 403 to the member themselves)", gate: 'admin', success: 200, response: 'MemberDetail' },
  { operationId: 'updateMembership', method: 'PATCH', path: '/api/v1/memberships/:id', summary: 'Self: the four notify toggles; admin: the status', gate: 'self or admin', success: 200, body: MembershipPatch, response: 'Membership' },
  { operationId: 'removeMembership', method: 'DELETE', path: '/api/v1/memberships/:id', summary: 'Leave (self, unless banned) or remove (admin)', gate: 'self or admin', success: 204 },
];

const schemaOf = (s: v.GenericSchema) => {
  const { $schema: _drop, ...rest } = toJsonSchema(s, { errorMode: 'ignore', target: 'draft-2020-12' }) as Record<string, unknown>;
  return rest;
};

/** What each error status means here, and the codes it carries: from the one Failure -> HTTP table. */
const ERROR_STATUS_TEXT: Record<number, string> = {
  400: 'The body or query does not match the schema (details lists {path, message}), or a token is invalid',
  401: 'No valid bearer token, or the credentials, code or OTP were refused',
  403: 'Signed in but not allowed; nothing was changed',
  404: 'Unknown id, or a mosque or device the caller may not see',
  409: 'Conflicts with the current state (a taken value, a banned membership, an offline device)',
  413: 'The body is over 64 KiB (a recording: over RECORDING_MAX_BYTES)',
  415: 'The body is not JSON (a recording: not audio/mpeg, audio/ogg or audio/opus)',
  416: 'The Range lies past the end of the file (Content-Range: bytes */<size>)',
  429: 'Rate limited; retry after Retry-After seconds',
  500: 'Internal error; the message carries the request id',
  504: 'The device did not acknowledge the command in time',
};

function errorCodes(status: number): string[] {
  const codes = Object.entries(httpStatus).filter(([, s]) => s === status).map(([code]) => code);
  // api/mosques/invites.ts: inviting a banned person answers 409 with the banned code (docs/api.md, "Errors").
  return status === 409 ? [...codes, 'membership_banned'] : codes;
}

function errorResponse(status: number) {
  const error = schemaOf(r.ErrorResponse) as { properties: { error: { properties: { code: Record<string, unknown> } } } };
  error.properties.error.properties.code = { type: 'string', enum: errorCodes(status) };
  return {
    description: ERROR_STATUS_TEXT[status] ?? 'Error',
    ...(status === 429 && { headers: { 'Retry-After': { description: 'Seconds to wait', schema: { type: 'integer' } } } }),
    content: { 'application/json': { schema: error } },
  };
}

/** The statuses a route can answer besides success, from what it takes and who may call it. */
function errorStatuses(doc: RouteDoc): number[] {
  const statuses = new Set<number>([500, ...(doc.errors ?? [])]);
  if (doc.body || doc.formBody || doc.audioBody || doc.binaryBody) [400, 413, 415].forEach((s) => statuses.add(s));
  if (doc.query) statuses.add(400);
  if (doc.gate !== 'public') statuses.add(401);
  if ((doc.gate !== 'public' && doc.gate !== 'any') || doc.consoleCsrf) statuses.add(403);
  if (doc.path.includes(':')) statuses.add(404);
  return [...statuses].sort((a, b) => a - b);
}

function successResponse(doc: RouteDoc) {
  if (doc.eventStream) {
    return { description: 'An open stream of `event: device_status`, `event: broadcast` and `event: schedule` (the status of a slot changed: `{date, prayer, index, status, at}`), each with one JSON `data:` line', content: { 'text/event-stream': { schema: { type: 'string' } } } };
  }
  if (!doc.response) return { description: 'Done; no body' };
  const ref = { $ref: `#/components/schemas/${doc.response}` };
  if (doc.audioResponse) return { description: 'The file, or with a Range the slice of it (206)', content: Object.fromEntries(doc.audioResponse.map((type) => [type, { schema: ref }])) };
  if (doc.binaryResponse) return { description: 'The file, or with a Range the slice of it (206)', content: { 'application/octet-stream': { schema: ref } } };
  return { description: SUCCESS_TEXT[doc.success] ?? 'Success', content: { [doc.contentType ?? 'application/json']: { schema: doc.list ? { type: 'array', items: ref } : ref } } };
}
const SUCCESS_TEXT: Record<number, string> = { 200: 'OK', 201: 'Created', 202: 'Accepted' };

/** docs/api.md "Console sessions": the header a cross-site form cannot send (and the Origin, which a browser sets). */
const CONSOLE_HEADER_PARAM = { name: 'X-Minaret-Console', in: 'header', required: true, schema: { type: 'string', const: '1' } };

function operation(doc: RouteDoc) {
  const params = [...doc.path.matchAll(/:(\w+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
  const query = doc.query ? (schemaOf(doc.query) as { properties?: Record<string, unknown> }) : null;
  const queryParams = Object.entries(query?.properties ?? {}).map(([name, schema]) => ({ name, in: 'query', required: false, schema }));
  if (doc.eventStream) queryParams.push({ name: 'ticket', in: 'query', required: true, schema: { type: 'string' } });
  if (doc.audioResponse) queryParams.push({ name: 'lease', in: 'query', required: false, schema: { type: 'string' } }, { name: 'ticket', in: 'query', required: false, schema: { type: 'string' } });
  const parameters = [...params, ...queryParams, ...(doc.consoleCsrf ? [CONSOLE_HEADER_PARAM] : [])];
  return {
    operationId: doc.operationId,
    summary: doc.summary,
    'x-minaret-gate': doc.gate,
    ...(doc.gate === 'public' ? { security: doc.hookSecret ? [{ hookSecret: [] }] : doc.deviceBasic ? [{ deviceBasic: [] }] : [] } : {}),
    ...(doc.gate === 'console session' && { security: [{ consoleSession: [] }] }),
    ...(parameters.length > 0 && { parameters }),
    ...(doc.audioBody && {
      requestBody: { required: true, content: Object.fromEntries(doc.audioBody.map((type) => [type, { schema: { type: 'string', contentMediaType: type } }])) },
    }),
    ...(doc.binaryBody && {
      requestBody: { required: true, content: { 'application/octet-stream': { schema: { type: 'string', contentMediaType: 'application/octet-stream' } } } },
      parameters: [...parameters, { name: 'X-Firmware-Signature', in: 'header', required: true, schema: { type: 'string' } }, { name: 'X-Firmware-Notes', in: 'header', required: false, schema: { type: 'string' } }],
    }),
    ...(doc.body && {
      requestBody: {
        required: true,
        content: { 'application/json': { schema: schemaOf(doc.body) }, ...(doc.csvBody && { 'text/csv': { schema: { type: 'string' } } }) },
      },
    }),
    ...(doc.formBody && { requestBody: { required: true, content: { 'application/x-www-form-urlencoded': { schema: schemaOf(doc.formBody) } } } }),
    responses: {
      [doc.success]: successResponse(doc),
      ...(doc.alsoSuccess && {
        [doc.alsoSuccess.status]: {
          description: doc.alsoSuccess.description,
          ...(doc.alsoSuccess.response && { content: { 'application/json': { schema: { $ref: `#/components/schemas/${doc.alsoSuccess.response}` } } } }),
        },
      }),
      ...Object.fromEntries(errorStatuses(doc).map((s) => [s, { $ref: `#/components/responses/Error${s}` }])),
    },
  };
}

/** The OpenAPI 3.1 document served at GET /api/v1/openapi.json and kept in docs/openapi.json. */
export function buildOpenApi(docs: RouteDoc[] = ROUTE_DOCS) {
  const paths: Record<string, Record<string, unknown>> = {};
  const statuses = new Set<number>();
  for (const doc of docs) {
    // /healthz lives beside the API base, not under it: its path item names its own server.
    const inBase = doc.path.startsWith(`${API_BASE}/`);
    const path = (inBase ? doc.path.slice(API_BASE.length) : doc.path).replace(/:(\w+)/g, '{$1}');
    paths[path] ??= inBase ? {} : { servers: [{ url: '/', description: 'The service root' }] };
    paths[path][doc.method.toLowerCase()] = operation(doc);
    errorStatuses(doc).forEach((s) => statuses.add(s));
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Minaret',
      version: '1.0.0',
      description: 'The HTTP API for people (apps, the console). Devices speak MQTT: see asyncapi.json. Guide: docs/api.md.',
    },
    servers: [{ url: API_BASE, description: 'Relative to the host serving this document, e.g. http://127.0.0.1:8080/api/v1' }],
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: {
        deviceBasic: { type: 'http', scheme: 'basic', description: "A device's MQTT username and password (docs/firmware.md, \"4.4 Firmware updates\")" },
        hookSecret: { type: 'http', scheme: 'basic', description: "Icecast's callbacks: user `icecast`, password ICECAST_HOOK_SECRET (icecast.xml from `minaret icecast-config`)" },
        consoleSession: { type: 'apiKey', in: 'cookie', name: 'minaret_console', description: "The browser console's session cookie (HttpOnly, SameSite=Strict, Path=/api/v1/auth/session): docs/api.md \"Console sessions\"" },
        bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'An access token from /auth/login, /auth/signup, /auth/login-code/verify, /auth/superadmin-2fa/verify or /me/password' },
      },
      schemas: Object.fromEntries(Object.entries(SCHEMAS).map(([name, schema]) => [name, schemaOf(schema)])),
      responses: Object.fromEntries([...statuses].sort((a, b) => a - b).map((s) => [`Error${s}`, errorResponse(s)])),
    },
  };
}
