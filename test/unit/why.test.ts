import { test } from 'node:test';
import assert from 'node:assert/strict';
import { explain, type PlaybackState, type WhyFacts } from '../../src/devices/why.ts';

// GET /devices/{id}/why: the first fact of the chain that decides, in order
// device.enabled -> device.mosque_id -> membership.status -> lease.expires_at -> device.last_seen_at
// -> device.status -> device.status_detail.error. explain() is pure, so every link is a table row.

const NOW = 1_767_225_600;

/** A healthy, entitled, connected stream player that reports ONLINE: every link passes. */
const healthy: WhyFacts = {
  kind: 'stream_player',
  enabled: true,
  mosqueId: 'm1',
  decision: { entitled: true, mosqueId: 'm1' },
  membershipStatus: 'approved',
  leaseExpiresAt: NOW + 3600,
  connected: true,
  lastSeenAt: NOW - 5,
  status: 'ONLINE',
  statusReason: 'connected',
  statusDetail: {},
  now: NOW,
};

const transmitter: WhyFacts = { ...healthy, kind: 'transmitter', decision: null, membershipStatus: null, leaseExpiresAt: null };

interface Row {
  name: string;
  facts: Partial<WhyFacts>;
  base?: WhyFacts;
  state: PlaybackState;
  field: string;
  reason: string;
}

const chain: Row[] = [
  // device.enabled decides before anything else, even for a device that would otherwise play.
  { name: 'a disabled player', facts: { enabled: false, status: 'PLAYING' }, state: 'unbound', field: 'device.enabled', reason: 'device_disabled' },
  { name: 'a disabled transmitter', base: transmitter, facts: { enabled: false }, state: 'unbound', field: 'device.enabled', reason: 'device_disabled' },
  // device.mosque_id
  { name: 'a player bound to no mosque', facts: { mosqueId: null, decision: { entitled: false, reason: 'no_mosque', decidingField: 'device.mosque_id' } }, state: 'unbound', field: 'device.mosque_id', reason: 'no_mosque' },
  { name: 'a transmitter with no mosque', base: transmitter, facts: { mosqueId: null }, state: 'unknown', field: 'device.mosque_id', reason: 'no_mosque' },
  // membership.status (from the entitlement decision)
  {
    name: 'a player whose owner is pending',
    facts: { membershipStatus: 'pending', decision: { entitled: false, reason: 'awaiting_approval', decidingField: 'membership.status' }, status: 'UNBOUND' },
    state: 'unbound', field: 'membership.status', reason: 'awaiting_approval',
  },
  {
    name: 'a player whose owner has no membership',
    facts: { membershipStatus: null, decision: { entitled: false, reason: 'awaiting_approval', decidingField: 'membership.status' } },
    state: 'unbound', field: 'membership.status', reason: 'awaiting_approval',
  },
  {
    name: 'a player whose owner is banned (still reporting PLAYING)',
    facts: { membershipStatus: 'banned', decision: { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' }, status: 'PLAYING' },
    state: 'unbound', field: 'membership.status', reason: 'membership_lapsed',
  },
  {
    name: 'a player whose owner was rejected',
    facts: { membershipStatus: 'rejected', decision: { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' } },
    state: 'unbound', field: 'membership.status', reason: 'membership_lapsed',
  },
  // lease.expires_at: entitled in the store, but no valid lease held (offline while the old one ran out).
  { name: 'a player with no lease', facts: { leaseExpiresAt: null }, state: 'unbound', field: 'lease.expires_at', reason: 'lease_expired' },
  { name: 'a player whose lease expires exactly now', facts: { leaseExpiresAt: NOW }, state: 'unbound', field: 'lease.expires_at', reason: 'lease_expired' },
  { name: 'a player whose lease ran out', facts: { leaseExpiresAt: NOW - 1, connected: false, status: 'OFFLINE' }, state: 'unbound', field: 'lease.expires_at', reason: 'lease_expired' },
  // A transmitter holds no lease: the lease link does not apply.
  { name: 'a transmitter without a lease', base: transmitter, facts: {}, state: 'ready', field: 'device.status', reason: 'connected' },
  // device.last_seen_at
  { name: 'a player that went offline (will)', facts: { connected: false, status: 'OFFLINE', statusReason: 'lwt' }, state: 'offline', field: 'device.last_seen_at', reason: 'lwt' },
  { name: 'a stale player', facts: { connected: false, status: 'OFFLINE', statusReason: 'stale' }, state: 'offline', field: 'device.last_seen_at', reason: 'stale' },
  { name: 'an offline player with no reason recorded', facts: { connected: false, status: 'OFFLINE', statusReason: null }, state: 'offline', field: 'device.last_seen_at', reason: 'disconnected' },
  { name: 'a player never seen', facts: { connected: false, status: 'UNKNOWN', statusReason: null, lastSeenAt: null }, state: 'unknown', field: 'device.last_seen_at', reason: 'never_seen' },
  { name: 'a transmitter never seen', base: transmitter, facts: { connected: false, status: 'UNKNOWN', statusReason: null, lastSeenAt: null }, state: 'unknown', field: 'device.last_seen_at', reason: 'never_seen' },
  { name: 'a disconnected player with no last-seen time', facts: { connected: false, lastSeenAt: null, status: 'PLAYING', statusReason: null }, state: 'offline', field: 'device.last_seen_at', reason: 'never_seen' },
  // A disconnect alone does not stop audio (docs/firmware.md, "3.1 Status"): the last status still decides until the will or staleness.
  { name: 'a disconnected player still believed PLAYING', facts: { connected: false, status: 'PLAYING', statusReason: 'broadcast_start' }, state: 'playing', field: 'device.status', reason: 'broadcast_start' },
  // device.status_detail.error
  { name: 'a stream error with its error', facts: { status: 'STREAM_ERROR', statusReason: 'retries_exhausted', statusDetail: { error: 'http 404' } }, state: 'error', field: 'device.status_detail.error', reason: 'http 404' },
  { name: 'a stream error without an error', facts: { status: 'STREAM_ERROR', statusReason: 'retries_exhausted' }, state: 'error', field: 'device.status_detail.error', reason: 'retries_exhausted' },
  { name: 'a config error with neither error nor reason', facts: { status: 'CONFIG_ERROR', statusReason: null }, state: 'error', field: 'device.status_detail.error', reason: 'config_error' },
  { name: 'a transmitter stream error', base: transmitter, facts: { status: 'STREAM_ERROR', statusDetail: { error: 'timeout' } }, state: 'error', field: 'device.status_detail.error', reason: 'timeout' },
];

for (const row of chain) {
  test(`why: ${row.name} -> ${row.state} by ${row.field} (${row.reason})`, () => {
    const answer = explain({ ...(row.base ?? healthy), ...row.facts });
    assert.equal(answer.effective_playback_state, row.state);
    assert.equal(answer.deciding_field, row.field);
    assert.equal(answer.reason, row.reason);
  });
}

// device.status: every status maps to one playback state (the states of docs/firmware.md, "3.1 Status").
const byStatus: Array<[status: string, state: PlaybackState]> = [
  ['PLAYING', 'playing'],
  ['ONLINE', 'ready'],
  ['MUTED', 'muted'],
  ['UNBOUND', 'unbound'],
  ['UPDATING', 'updating'],
  ['CONNECTING', 'connecting'],
  ['STREAM_ERROR', 'error'],
  ['CONFIG_ERROR', 'error'],
  ['OFFLINE', 'offline'],
  ['UNKNOWN', 'unknown'],
  ['SOMETHING_NEW', 'unknown'],
];

for (const [status, state] of byStatus) {
  test(`why: a connected player reporting ${status} is ${state}`, () => {
    const answer = explain({ ...healthy, status, statusReason: null });
    assert.equal(answer.effective_playback_state, state);
    const field = state === 'error' ? 'device.status_detail.error' : 'device.status';
    assert.equal(answer.deciding_field, field);
    // Without a recorded reason, the status itself (lower case) is the reason.
    assert.equal(answer.reason, status.toLowerCase());
  });
}

test('why: every playback state is reachable', () => {
  const reached = new Set<PlaybackState>([...chain.map((r) => r.state), ...byStatus.map(([, s]) => s)]);
  for (const s of ['playing', 'ready', 'muted', 'unbound', 'updating', 'connecting', 'error', 'offline', 'unknown'] as const) assert.ok(reached.has(s), s);
});

test('why: the detail carries the facts that were weighed, its times as ISO-8601 like every HTTP body', () => {
  const answer = explain({ ...healthy, status: 'PLAYING', statusReason: 'broadcast_start' });
  assert.deepEqual(answer.detail, {
    kind: 'stream_player', enabled: true, mosque_id: 'm1', membership_status: 'approved', lease_expires_at: new Date((NOW + 3600) * 1000).toISOString(),
    connected: true, last_seen_at: new Date((NOW - 5) * 1000).toISOString(), status: 'PLAYING', status_reason: 'broadcast_start',
  });
});

test('why: the chain order holds: an earlier failing link hides every later one', () => {
  // Everything is wrong at once; each step fixes the link that decided and the next one takes over.
  let facts: WhyFacts = {
    ...healthy, enabled: false, mosqueId: null, decision: { entitled: false, reason: 'no_mosque', decidingField: 'device.mosque_id' },
    membershipStatus: 'banned', leaseExpiresAt: null, connected: false, lastSeenAt: NOW - 900, status: 'OFFLINE', statusReason: 'stale',
  };
  const seen: string[] = [];
  const fixes: Array<(f: WhyFacts) => WhyFacts> = [
    (f) => ({ ...f, enabled: true }),
    (f) => ({ ...f, mosqueId: 'm1', decision: { entitled: false, reason: 'membership_lapsed', decidingField: 'membership.status' } }),
    (f) => ({ ...f, membershipStatus: 'approved', decision: { entitled: true, mosqueId: 'm1' } }),
    (f) => ({ ...f, leaseExpiresAt: NOW + 60 }),
    (f) => ({ ...f, connected: true, status: 'STREAM_ERROR', statusReason: 'retries_exhausted', statusDetail: { error: 'refused' } }),
    (f) => ({ ...f, status: 'PLAYING', statusReason: 'retry_ok', statusDetail: {} }),
  ];
  for (const fix of [(f: WhyFacts) => f, ...fixes]) {
    facts = fix(facts);
    seen.push(explain(facts).deciding_field);
  }
  assert.deepEqual(seen, [
    'device.enabled', 'device.mosque_id', 'membership.status', 'lease.expires_at', 'device.last_seen_at', 'device.status_detail.error', 'device.status',
  ]);
});
