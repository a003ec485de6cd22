import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/platform/config.ts';

/** The ICECAST_* settings (docs/settings.md; docs/operator.md#audio-icecast): off unless ICECAST_URL, one line naming a bad one. */
const SECRET = 'h'.repeat(32);
const base = { ICECAST_URL: 'https://audio.example.org/', ICECAST_ADMIN_PASSWORD: 'admin-password-1', ICECAST_HOOK_SECRET: SECRET };

test('without ICECAST_URL the audio gate is off, whatever else is set', () => {
  const r = loadConfig({ ICECAST_HOOK_SECRET: 'short' });
  assert.ok(r.ok);
  assert.equal(r.config.icecast, null);
});

test('with ICECAST_URL the admin URL defaults to it and the admin user to admin', () => {
  const r = loadConfig(base);
  assert.ok(r.ok, JSON.stringify(r));
  assert.deepEqual(r.config.icecast, { url: 'https://audio.example.org', adminUrl: 'https://audio.example.org', adminUser: 'admin', adminPassword: 'admin-password-1', hookSecret: SECRET });
  const own = loadConfig({ ...base, ICECAST_ADMIN_URL: 'http://127.0.0.1:8000', ICECAST_ADMIN_USER: 'ops' });
  assert.ok(own.ok);
  assert.equal(own.config.icecast?.adminUrl, 'http://127.0.0.1:8000');
  assert.equal(own.config.icecast?.adminUser, 'ops');
});

const bad: Array<[string, Record<string, string>, RegExp]> = [
  ['no hook secret', { ICECAST_URL: base.ICECAST_URL, ICECAST_ADMIN_PASSWORD: 'x' }, /^ICECAST_HOOK_SECRET: required when ICECAST_URL is set/],
  ['a hook secret under 32 bytes', { ...base, ICECAST_HOOK_SECRET: 'h'.repeat(31) }, /^ICECAST_HOOK_SECRET: must be at least 32 bytes long$/],
  ['a hook secret with a quote', { ...base, ICECAST_HOOK_SECRET: `${SECRET}"` }, /^ICECAST_HOOK_SECRET: use letters/],
  ['no admin password', { ICECAST_URL: base.ICECAST_URL, ICECAST_HOOK_SECRET: SECRET }, /^ICECAST_ADMIN_PASSWORD: required when ICECAST_URL is set/],
  ['an ICECAST_URL that is not http', { ...base, ICECAST_URL: 'icecast://x' }, /^ICECAST_URL: must be a URL starting with http/],
  ['an ICECAST_URL with a query', { ...base, ICECAST_URL: 'https://a.example/?x=1' }, /^ICECAST_URL: must be an http or https URL without query/],
  ['an admin user with a colon', { ...base, ICECAST_ADMIN_USER: 'a:b' }, /^ICECAST_ADMIN_USER: must be 1 to 64 characters/],
];
for (const [what, env, error] of bad) {
  test(`refused in one line: ${what}`, () => {
    const r = loadConfig(env);
    assert.equal(r.ok, false);
    assert.match((r as { error: string }).error, error);
    assert.doesNotMatch((r as { error: string }).error, /\n/);
    assert.doesNotMatch((r as { error: string }).error, new RegExp(SECRET), 'a secret is never echoed');
  });
}
