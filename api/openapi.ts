import { toJsonSchema } from '@valibot/to-json-schema';
import type * as v from 'valibot';
import * as auth from './people/auth.ts';
import { BroadcastQuery, BroadcastStart } from './broadcasts/broadcasts.ts';
import { ScheduleQuery } from './schedule/schedule.ts';
import { InviteCreate } from './mosques/invites.ts';
import { PushSubscription, PushUnsubscribe } from './people/me.ts';
import { JoinByCode, MembershipPatch } from './mosques/memberships.ts';
import { ActivityQuery, AdminCreate, AdminUpdate, Enrol, MembershipQuery, MosqueCreate, MosqueUpdate } from './mosques/mosques.ts';
import { UserCreate, UserQuery, UserUpdate } from './people/users.ts';
import { CommandRequest, DeviceListQuery, DeviceUpdate, EventsQuery, LogsQuery, PlayerCreate, TransmitterCreate } from './devices/devices.ts';

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** One documented route: the same valibot schemas that validate the request describe it here. */
export interface RouteDoc {
  method: Method;
  /** Hono's path syntax (`/api/v1/mosques/:id`). */
  path: string;
  summary: string;
  /** Who may call it (contract 5 standings). */
  gate: 'public' | 'any' | 'superadmin' | 'admin' | 'trigger' | 'manager' | 'owner' | 'self or admin';
  success: number;
  body?: v.GenericSchema;
  query?: v.GenericSchema;
}

const A = '/api/v1/auth';
const M = '/api/v1/mosques/:id';

export const ROUTE_DOCS: RouteDoc[] = [
  { method: 'GET', path: '/healthz', summary: 'Health of the database and the broker', gate: 'public', success: 200 },
  { method: 'GET', path: '/api/v1/openapi.json', summary: 'This document', gate: 'public', success: 200 },
  { method: 'POST', path: `${A}/signup`, summary: 'Create an account by email and/or phone', gate: 'public', success: 201, body: auth.Signup },
  { method: 'POST', path: `${A}/login`, summary: 'Password login', gate: 'public', success: 200, body: auth.Login },
  { method: 'POST', path: `${A}/login-code`, summary: 'Send a 6-digit login code', gate: 'public', success: 202, body: auth.CodeRequest },
  { method: 'POST', path: `${A}/login-code/verify`, summary: 'Redeem a login code', gate: 'public', success: 200, body: auth.CodeVerify },
  { method: 'POST', path: `${A}/forgot-password`, summary: 'Send a password reset token', gate: 'public', success: 202, body: auth.CodeRequest },
  { method: 'POST', path: `${A}/reset-password`, summary: 'Redeem a reset token', gate: 'public', success: 200, body: auth.Reset },
  { method: 'POST', path: `${A}/superadmin-2fa`, summary: 'Superadmin login, step 1', gate: 'public', success: 200, body: auth.Login },
  { method: 'POST', path: `${A}/superadmin-2fa/verify`, summary: 'Superadmin login, step 2 (HMAC of otp|timestamp)', gate: 'public', success: 200, body: auth.SessionVerify },
  { method: 'POST', path: `${A}/superadmin-forgot`, summary: 'Superadmin reset, step 1', gate: 'public', success: 200, body: auth.SuperadminForgot },
  { method: 'POST', path: `${A}/superadmin-forgot/verify`, summary: 'Superadmin reset, step 2', gate: 'public', success: 200, body: auth.SessionVerify },
  { method: 'POST', path: `${A}/superadmin-reset-password`, summary: 'Superadmin reset, step 3', gate: 'public', success: 200, body: auth.SuperadminReset },
  { method: 'GET', path: '/api/v1/push/vapid-public-key', summary: 'The VAPID public key browsers subscribe with', gate: 'public', success: 200 },
  { method: 'GET', path: '/api/v1/me', summary: 'The caller, their memberships and admin rows', gate: 'any', success: 200 },
  { method: 'GET', path: '/api/v1/me/memberships', summary: "The caller's memberships", gate: 'any', success: 200 },
  { method: 'POST', path: '/api/v1/me/push-subscriptions', summary: 'Register a Web Push subscription', gate: 'any', success: 201, body: PushSubscription },
  { method: 'DELETE', path: '/api/v1/me/push-subscriptions', summary: 'Remove a Web Push subscription', gate: 'any', success: 204, body: PushUnsubscribe },
  { method: 'GET', path: '/api/v1/users', summary: 'List users', gate: 'superadmin', success: 200, query: UserQuery },
  { method: 'POST', path: '/api/v1/users', summary: 'Create a user', gate: 'superadmin', success: 201, body: UserCreate },
  { method: 'GET', path: '/api/v1/users/:id', summary: 'Read a user', gate: 'superadmin', success: 200 },
  { method: 'PATCH', path: '/api/v1/users/:id', summary: 'Update a user (a role change revokes their tokens)', gate: 'superadmin', success: 200, body: UserUpdate },
  { method: 'DELETE', path: '/api/v1/users/:id', summary: 'Delete a user', gate: 'superadmin', success: 204 },
  { method: 'POST', path: '/api/v1/mosques', summary: 'Create a mosque', gate: 'superadmin', success: 201, body: MosqueCreate },
  { method: 'GET', path: '/api/v1/mosques', summary: "Mosques the caller administers or belongs to (all for a superadmin)", gate: 'any', success: 200 },
  { method: 'GET', path: M, summary: 'Read a mosque', gate: 'admin', success: 200 },
  { method: 'PATCH', path: M, summary: 'Update a mosque', gate: 'admin', success: 200, body: MosqueUpdate },
  { method: 'DELETE', path: M, summary: 'Delete a mosque (seed: the coarser admin check)', gate: 'admin', success: 204 },
  { method: 'POST', path: `${M}/join-code`, summary: 'Issue a new join code (the old one stops working)', gate: 'manager', success: 200 },
  { method: 'GET', path: `${M}/admins`, summary: "The mosque's admins", gate: 'admin', success: 200 },
  { method: 'POST', path: `${M}/admins`, summary: 'Add an admin', gate: 'manager', success: 201, body: AdminCreate },
  { method: 'PATCH', path: `${M}/admins/:user_id`, summary: "Change an admin's flags or hand over ownership", gate: 'manager', success: 200, body: AdminUpdate },
  { method: 'DELETE', path: `${M}/admins/:user_id`, summary: 'Remove an admin', gate: 'manager', success: 204 },
  { method: 'GET', path: `${M}/memberships`, summary: "The mosque's memberships", gate: 'admin', success: 200, query: MembershipQuery },
  { method: 'POST', path: `${M}/memberships`, summary: 'Enrol a user (always approved)', gate: 'admin', success: 201, body: Enrol },
  { method: 'POST', path: `${M}/join`, summary: 'Join the mosque', gate: 'any', success: 201 },
  { method: 'GET', path: `${M}/activity`, summary: 'Activity feed, newest first', gate: 'admin', success: 200, query: ActivityQuery },
  { method: 'POST', path: `${M}/broadcasts`, summary: 'Start a broadcast', gate: 'trigger', success: 201, body: BroadcastStart },
  { method: 'POST', path: `${M}/broadcasts/:bid/stop`, summary: 'Stop a broadcast', gate: 'trigger', success: 200 },
  { method: 'GET', path: `${M}/broadcasts`, summary: 'Broadcasts with their delivery reports', gate: 'admin', success: 200, query: BroadcastQuery },
  { method: 'GET', path: `${M}/broadcasts/:bid`, summary: 'One broadcast with its delivery report', gate: 'admin', success: 200 },
  { method: 'GET', path: `${M}/schedule`, summary: 'Azaan slots of 1..31 days with their status and report (approved members and admins)', gate: 'any', success: 200, query: ScheduleQuery },
  { method: 'GET', path: `${M}/schedule.ics`, summary: 'The azaan times as iCalendar, 30 days ahead (approved members and admins)', gate: 'any', success: 200 },
  { method: 'PUT', path: `${M}/timetable/:month`, summary: "Upload a month's times (text/csv Day,Fajr,Shuruk,Duhr,Asr,Maghrib,Isha in standard time, or JSON rows); month 1..12 recurs yearly", gate: 'manager', success: 200 },
  { method: 'DELETE', path: `${M}/timetable/:month`, summary: "Remove an uploaded month: back to computed times", gate: 'manager', success: 204 },
  { method: 'POST', path: `${M}/devices`, summary: 'Register a transmitter (credentials are shown once)', gate: 'manager', success: 201, body: TransmitterCreate },
  { method: 'POST', path: '/api/v1/devices', summary: 'Register a stream player the caller owns (credentials are shown once)', gate: 'any', success: 201, body: PlayerCreate },
  { method: 'GET', path: '/api/v1/devices', summary: "Own players, the devices of mosques the caller administers (all for a superadmin)", gate: 'any', success: 200, query: DeviceListQuery },
  { method: 'GET', path: '/api/v1/devices/lease-keys', summary: 'JWKS of the keys that sign entitlement leases', gate: 'public', success: 200 },
  { method: 'GET', path: '/api/v1/devices/:id/why', summary: 'Why a device is or is not playing: the deciding fact of the chain', gate: 'self or admin', success: 200 },
  { method: 'GET', path: '/api/v1/devices/:id', summary: 'A device, its status and its config', gate: 'self or admin', success: 200 },
  { method: 'PATCH', path: '/api/v1/devices/:id', summary: 'Rename, rebind or configure (raises config_version and pushes the config)', gate: 'self or admin', success: 200, body: DeviceUpdate },
  { method: 'DELETE', path: '/api/v1/devices/:id', summary: 'Delete (its credentials stop working, a live connection is closed)', gate: 'self or admin', success: 204 },
  { method: 'POST', path: '/api/v1/devices/:id/credentials', summary: 'New password (the old one stops working, a live connection is closed)', gate: 'self or admin', success: 200 },
  { method: 'POST', path: '/api/v1/devices/:id/commands', summary: 'Send a command and wait for its ack (409 device_offline, 504 device_timeout)', gate: 'self or admin', success: 200, body: CommandRequest },
  { method: 'GET', path: '/api/v1/devices/:id/events', summary: 'The mosque_device_events timeline, newest first', gate: 'self or admin', success: 200, query: EventsQuery },
  { method: 'GET', path: '/api/v1/devices/:id/logs', summary: 'Recent device log lines, newest first', gate: 'self or admin', success: 200, query: LogsQuery },
  { method: 'POST', path: '/api/v1/join', summary: 'Join a mosque by its join code', gate: 'any', success: 201, body: JoinByCode },
  { method: 'POST', path: '/api/v1/invites', summary: 'Invite by email or WhatsApp', gate: 'admin', success: 201, body: InviteCreate },
  { method: 'PATCH', path: '/api/v1/memberships/:id', summary: 'Self: the four notify toggles; admin: the status', gate: 'self or admin', success: 200, body: MembershipPatch },
  { method: 'DELETE', path: '/api/v1/memberships/:id', summary: 'Leave (self, unless banned) or remove (admin)', gate: 'self or admin', success: 204 },
];

const ERROR = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: {
        code: { type: 'string' },
        message: { type: 'string' },
        details: { type: 'array', items: { type: 'object', properties: { path: { type: 'string' }, message: { type: 'string' } } } },
      },
    },
  },
};

const schemaOf = (s: v.GenericSchema) => {
  const { $schema: _drop, ...rest } = toJsonSchema(s, { errorMode: 'ignore' }) as Record<string, unknown>;
  return rest;
};

function operation(doc: RouteDoc) {
  const params = [...doc.path.matchAll(/:(\w+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
  const query = doc.query ? (schemaOf(doc.query) as { properties?: Record<string, unknown> }) : null;
  const queryParams = Object.entries(query?.properties ?? {}).map(([name, schema]) => ({ name, in: 'query', required: false, schema }));
  return {
    summary: doc.summary,
    'x-minaret-gate': doc.gate,
    ...(doc.gate === 'public' ? { security: [] } : {}),
    parameters: [...params, ...queryParams],
    ...(doc.body && { requestBody: { required: true, content: { 'application/json': { schema: schemaOf(doc.body) } } } }),
    responses: {
      [doc.success]: { description: 'Success' },
      default: { description: 'Error (contract 2)', content: { 'application/json': { schema: ERROR } } },
    },
  };
}

/** The OpenAPI 3.1 document served at GET /api/v1/openapi.json. */
export function buildOpenApi(docs: RouteDoc[] = ROUTE_DOCS) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const doc of docs) {
    const path = doc.path.replace(/:(\w+)/g, '{$1}');
    (paths[path] ??= {})[doc.method.toLowerCase()] = operation(doc);
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Minaret', version: '1.0.0', description: 'Azaan broadcast service: people API (contract sections 2-5, 7).' },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
    security: [{ bearer: [] }],
    paths,
  };
}
