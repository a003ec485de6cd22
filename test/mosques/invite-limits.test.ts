import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/platform/config.ts';
import { assertError, sent } from '../support/api.ts';
import { createMosque, member, signInSuperadmin } from '../support/people.ts';
import { mosqueWithOwner } from '../support/devices.ts';
import { startTestService, type TestService } from '../support/service.ts';

// SECURITY.md "Limits": POST /invites at most INVITES_PER_MOSQUE_PER_HOUR per mosque (20 by default) and
// INVITES_PER_ADDRESS_PER_DAY per invited address (3), across every mosque.

const INVITES = '/api/v1/invites';

const invite = (ts: TestService, token: string, mosqueId: string, to: { email: string } | { whatsapp: string }) =>
  ts.http.post(INVITES, { mosque_id: mosqueId, ...to }, token);

test('a mosque sends at most 20 invitations an hour; the 21st answers 429 with Retry-After and sends nothing; another mosque has its own budget', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  assert.equal(ts.config.invitesPerMosquePerHour, 20, 'the default');
  const { root, owner, mosque } = await mosqueWithOwner(ts, {}, 'owner@invites.test');
  for (let i = 0; i < 20; i++) assert.equal((await invite(ts, owner.token, mosque.id, { email: `guest${i}@invites.test` })).status, 201);

  const over = await invite(ts, owner.token, mosque.id, { email: 'one-too-many@invites.test' });
  assertError(over, 429, 'rate_limited');
  const wait = Number(over.headers.get('retry-after'));
  assert.ok(wait > 60 && wait <= 3600, `Retry-After ${wait} is within the hour`);
  assertError(await invite(ts, root.token, mosque.id, { whatsapp: '+4712345678' }), 429, 'rate_limited');
  assert.equal((await sent(ts, 'invite')).length, 20, 'the refused invitations sent nothing');
  const users = await ts.http.get('/api/v1/users?limit=200', root.token);
  assert.equal(users.body.some((u: { email: string }) => u.email === 'one-too-many@invites.test'), false, 'and created no account');

  const other = await createMosque(ts, root.token, await member(ts, 'other@invites.test'), { name: 'Other' });
  assert.equal((await invite(ts, root.token, other.id, { email: 'elsewhere@invites.test' })).status, 201);
});

test('one address gets at most 3 invitations a day from every mosque together, whatever its spelling; other addresses are not held up', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  assert.equal(ts.config.invitesPerAddressPerDay, 3, 'the default');
  const root = await signInSuperadmin(ts);
  const mosques = await Promise.all(['A', 'B', 'C', 'D'].map(async (name) => createMosque(ts, root.token, null, { name })));
  assert.equal((await invite(ts, root.token, mosques[0]!.id, { email: 'target@invites.test' })).status, 201);
  assert.equal((await invite(ts, root.token, mosques[1]!.id, { email: ' Target@Invites.TEST ' })).status, 201);
  assert.equal((await invite(ts, root.token, mosques[2]!.id, { email: 'TARGET@invites.test' })).status, 201);

  const over = await invite(ts, root.token, mosques[3]!.id, { email: 'target@invites.test' });
  assertError(over, 429, 'rate_limited');
  const wait = Number(over.headers.get('retry-after'));
  assert.ok(wait > 3600 && wait <= 86_400, `Retry-After ${wait} is within the day`);
  assert.equal((await sent(ts, 'invite')).length, 3);

  assert.equal((await invite(ts, root.token, mosques[3]!.id, { email: 'someone-else@invites.test' })).status, 201);
  for (let i = 0; i < 3; i++) assert.equal((await invite(ts, root.token, mosques[i]!.id, { whatsapp: '+4798765432' })).status, 201);
  assertError(await invite(ts, root.token, mosques[3]!.id, { whatsapp: '+47 98 76 54 32' }), 429, 'rate_limited');
});

test('the budgets follow their settings, which are bounded; a try refused for its address still counts against the mosque', async (t) => {
  for (const [name, value] of [['INVITES_PER_MOSQUE_PER_HOUR', '0'], ['INVITES_PER_MOSQUE_PER_HOUR', '10001'], ['INVITES_PER_ADDRESS_PER_DAY', '101']]) {
    const loaded = loadConfig({ [name!]: value });
    assert.equal(loaded.ok, false);
    assert.match((loaded as { error: string }).error, new RegExp(`^${name}: must be a whole number from`));
  }
  const ts = await startTestService(t, { logLevel: 'warn', env: { INVITES_PER_MOSQUE_PER_HOUR: '2', INVITES_PER_ADDRESS_PER_DAY: '1' } });
  const { owner, mosque } = await mosqueWithOwner(ts, {}, 'owner@invite-settings.test');
  assert.equal((await invite(ts, owner.token, mosque.id, { email: 'a@invite-settings.test' })).status, 201);
  assertError(await invite(ts, owner.token, mosque.id, { email: 'a@invite-settings.test' }), 429, 'rate_limited');
  // The mosque's budget is checked first (a mosque over it must not spend addresses' budgets), so that try counted.
  assertError(await invite(ts, owner.token, mosque.id, { email: 'b@invite-settings.test' }), 429, 'rate_limited');
  assert.equal((await sent(ts, 'invite')).length, 1);
});
