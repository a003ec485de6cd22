import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type mqtt from 'mqtt';
import { SimDevice } from '../../../simulator/device.ts';
import { icecastEnv, HOOK_SECRET, listenerAdd } from '../../audio/icecast.ts';
import { API, member, ownMembership, setStatus } from '../../support/people.ts';
import { createManualClock, startTestService, type TestService } from '../../support/service.ts';
import { configsOnConnect, connectDevice, endClient, mosqueWithOwner, publish, registerPlayer, registerTransmitter, statusPayload, waitForStatus, type Registered } from '../../support/devices.ts';
import { WAIT_MS, assertAccessible, shot, signedInAdminPage } from '../browser.ts';

const DAY_MS = 86_400_000;

/** Icecast's callbacks as Icecast sends them (docs/api.md, "Broadcasts and the audio server"); no Icecast runs. */
async function hook(ts: TestService, action: string, fields: Record<string, string>) {
  const res = await fetch(`${ts.url}/api/v1/audio/hooks/${action}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`icecast:${HOOK_SECRET}`).toString('base64')}` },
    body: new URLSearchParams({ action, ...fields }).toString(),
  });
  await res.arrayBuffer();
  assert.equal(res.status, 200, `${action}`);
}

/** A player connected as its firmware would be, with the stream address its config gave it. */
async function connectedPlayer(t: TestContext, ts: TestService, reg: Registered): Promise<{ client: mqtt.MqttClient; streamUrl: string }> {
  const [config] = (await configsOnConnect(t, ts, reg)).slice(-1);
  const client = await connectDevice(t, reg.credentials, { url: ts.service.mqttUrl });
  return { client, streamUrl: config!.stream_url as string };
}

async function playing(ts: TestService, token: string, reg: Registered, client: mqtt.MqttClient) {
  await publish(client, `devices/${reg.device.id}/status`, statusPayload('PLAYING', { reason: 'broadcast_start' }), { retain: true });
  await waitForStatus(ts, token, reg.device.id, 'PLAYING', WAIT_MS);
}

test('the broadcast card counts the players, the transmitter and the console listener apart, as the API reports them, and names who heard', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn', env: icecastEnv(9) });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid An-Nur', auto_approve_members: true });
  const tx = await registerTransmitter(ts, owner.token, mosque.id, 'Minbar');
  const amina = await member(ts, 'amina@example.com');
  const bilal = await member(ts, 'bilal@example.com');
  const kitchen = await registerPlayer(ts, amina, mosque.id, 'Kitchen');
  const bedroom = await registerPlayer(ts, bilal, mosque.id, 'Bedroom');
  const players = [[kitchen, await connectedPlayer(t, ts, kitchen)], [bedroom, await connectedPlayer(t, ts, bedroom)]] as const;

  // The transmitter's source goes on air, then the azaan starts: nobody waits for the source.
  const txClient = await connectDevice(t, tx.credentials, { url: ts.service.mqttUrl });
  await hook(ts, 'stream_auth', { mount: `/m/${mosque.id}`, user: tx.credentials.username, pass: tx.credentials.password });
  await hook(ts, 'mount_add', { mount: `/m/${mosque.id}`, server: '127.0.0.1', port: '9' });
  const started = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer: 'maghrib' }, owner.token);
  assert.equal(started.status, 201);
  assert.equal(started.body.waiting_for_source, false);
  await playing(ts, owner.token, tx, txClient);
  let client = 1;
  for (const [reg, p] of players) {
    await playing(ts, owner.token, reg, p.client);
    assert.equal((await listenerAdd(ts, p.streamUrl, client++)).admitted, true);
  }
  // Amina also listens in the console: a member's ticket, admitted by the same gate.
  const listen = await ts.http.post(`${API}/mosques/${mosque.id}/listen`, {}, amina.token);
  assert.equal(listen.status, 201);
  assert.equal((await listenerAdd(ts, listen.body.url, client++)).admitted, true);

  const api = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts/${started.body.id}`, owner.token)).body;
  assert.equal(api.report.playing, 2, 'the two players, not the transmitter');
  assert.deepEqual(api.report.transmitters, { playing: 1, not_playing: 0 });
  assert.deepEqual(api.report.listeners.admitted, { devices: 2, members: 1 });
  const air = (await ts.http.get(`${API}/mosques/${mosque.id}/on-air`, owner.token)).body;
  assert.deepEqual({ on_air: air.on_air, listeners: air.listeners, listening: air.listening }, { on_air: true, listeners: 3, listening: { devices: 2, members: 1 } });

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}` });
  const card = page.locator(`li[data-broadcast="${started.body.id}"]`);
  await card.locator('.badge', { hasText: 'Live' }).waitFor();
  assert.equal(await card.locator('dd[data-report="playing"]').innerText(), String(api.report.playing));
  assert.equal(await card.locator('dd[data-report="transmitter"]').innerText(), 'Sent it');
  assert.equal(await card.getByText('not on air yet').count(), 0, 'no waiting banner beside Live');
  const onAir = page.locator('[data-on-air="true"]');
  assert.match(await onAir.innerText(), /Listening now: 2 players and 1 member in the console\./);
  assert.match(await card.locator('[data-listeners] > p').innerText(), /^Heard by 2 players and 1 member in the console, \d+ minutes? in all\.$/);
  await card.getByText('Who heard it').click();
  const heard = await card.locator('[data-heard] li').allInnerTexts();
  assert.equal(heard.length, 3);
  for (const name of ['Kitchen', 'Bedroom', 'amina@example.com (in the console)']) assert.ok(heard.some((h) => h.startsWith(name)), `${name} in ${heard.join(' | ')}`);
  assert.doesNotMatch(await page.locator('main').innerText(), /\(s\)/, 'no "(s)" plurals');

  // The same card in Arabic: the plural forms of Intl.PluralRules (two players: the dual).
  await page.evaluate(() => (globalThis as unknown as { localStorage: { setItem(k: string, v: string): void } }).localStorage.setItem('minaret.lang', 'ar'));
  await page.reload();
  await page.locator('[data-on-air="true"]').filter({ hasText: 'مشغّلان' }).waitFor();
  assert.match(await card.locator('[data-listeners] > p').innerText(), /سمعه مشغّلان وعضو واحد/);
  await shot(page, 'broadcast-card-ar');
  assert.deepEqual(problems, []);
});

test('the week picture draws each azaan of the last 7 days with the homes that heard it, as the API reports them', async (t) => {
  // The service's clock starts 9 days ago: one azaan then (outside the week), then one a day from 5 days ago.
  const clock = createManualClock(Date.now() - 9 * DAY_MS);
  // Tokens made 9 days ago still open the API today.
  const ts = await startTestService(t, { clock, logLevel: 'warn', env: { ACCESS_TOKEN_EXPIRE_DAYS: '30' } });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Al-Fajr', auto_approve_members: true });
  const regs = await Promise.all(['a', 'b', 'c'].map(async (n) => registerPlayer(ts, await member(ts, `${n}@example.com`), mosque.id, `Home ${n}`)));
  const history: Array<[string, number, number]> = [['isha', 9, 1], ['fajr', 5, 3], ['maghrib', 4, 0], ['dhuhr', 3, 2]];
  const ids: string[] = [];
  for (const [prayer, daysAgo, homes] of history) {
    clock.set(Date.now() - daysAgo * DAY_MS);
    // Connected on the day itself: a connection left over from days before would be a stale one.
    const clients = await Promise.all(regs.slice(0, homes).map((r) => connectDevice(t, r.credentials, { url: ts.service.mqttUrl })));
    const b = await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'azaan', prayer }, owner.token);
    assert.equal(b.status, 201);
    for (const [i, client] of clients.entries()) await playing(ts, owner.token, regs[i]!, client);
    clock.advance(180_000);
    assert.equal((await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts/${b.body.id}/stop`, {}, owner.token)).status, 200);
    await Promise.all(clients.map((c) => endClient(c)));
    ids.push(b.body.id);
  }
  clock.set(Date.now());
  const since = new Date(Date.now() - 7 * DAY_MS).toISOString();
  const week = (await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts?limit=200&since=${encodeURIComponent(since)}`, owner.token)).body as Array<{ id: string; report: { playing: number } }>;
  assert.deepEqual(week.map((b) => b.id), ids.slice(1).reverse(), 'since leaves out the azaan 9 days ago');
  assert.deepEqual(week.map((b) => b.report.playing), [2, 0, 3]);
  // A malformed since is refused, and a member who is not an admin reads no history at all.
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts?since=last-week`, owner.token)).status, 400);
  const outsider = await member(ts, 'a2@example.com');
  assert.notEqual((await ts.http.get(`${API}/mosques/${mosque.id}/broadcasts?since=${encodeURIComponent(since)}`, outsider.token)).status, 200);

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}` });
  const picture = page.locator('svg[data-week]');
  await picture.waitFor();
  assert.equal(await picture.getAttribute('role'), 'img');
  assert.equal(await picture.locator('title').first().textContent(), 'Homes that heard each azaan, last 7 days');
  const bars = await picture.locator('rect').evaluateAll((els) => els.map((e) => [e.getAttribute('data-bar'), Number(e.getAttribute('data-homes')), Number(e.getAttribute('height'))]));
  assert.deepEqual(bars.map(([id, homes]) => [id, homes]), [[ids[1], 3], [ids[2], 0], [ids[3], 2]], 'oldest first, the homes the API reports');
  assert.ok((bars[0]![2] as number) > (bars[2]![2] as number) && (bars[2]![2] as number) > (bars[1]![2] as number), 'taller for more homes');
  const rows = await page.locator('[data-week-table] tbody tr').allInnerTexts();
  assert.equal(rows.length, 3);
  assert.match(rows[0]!, /Fajr\s+3/);
  assert.match(await picture.locator('rect').first().locator('title').textContent() ?? '', /^Fajr, .+: 3 homes$/);
  await shot(page, 'broadcast-week');
  await assertAccessible(page, 'overview with the week picture');
  assert.deepEqual(problems, []);
});

test('the device page tells its timeline in plain words, in English and Arabic, and a banned member\'s player is not shown as playing', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid As-Salam', auto_approve_members: true });
  const tx = await registerTransmitter(ts, owner.token, mosque.id, 'Minbar');
  const sim = new SimDevice({ kind: 'transmitter', id: tx.device.id, password: tx.credentials.password, mqttUrl: ts.service.mqttUrl, startTimeoutMs: 15_000 });
  await sim.start();
  t.after(() => sim.stop().catch(() => {}));
  await waitForStatus(ts, owner.token, tx.device.id, 'ONLINE', WAIT_MS);
  const zaid = await member(ts, 'zaid@example.com');
  const player = await registerPlayer(ts, zaid, mosque.id, 'Living room');
  const client = await connectDevice(t, player.credentials, { url: ts.service.mqttUrl });
  await playing(ts, owner.token, player, client);
  const membership = await ownMembership(ts, zaid, mosque.id);
  await setStatus(ts, owner.token, String(membership!.id), 'banned');

  const { page, problems } = await signedInAdminPage(t, ts, owner, { path: `/devices/${tx.device.id}` });
  await page.getByRole('button', { name: 'Ping' }).click();
  await page.getByRole('status').filter({ hasText: /^Ping: done\. \(\d+ ms\)/ }).waitFor({ timeout: WAIT_MS });
  await page.reload();
  const timeline = page.locator('section[aria-labelledby="tl-h"]');
  await timeline.getByText('Ping: done.').waitFor();
  await timeline.getByText('Sent: Ping.').waitFor();
  await timeline.getByText('Connected.').first().waitFor();
  // The wire's names (command_acked, config_changed, membership_banned...) are words joined by underscores.
  const raw = /[a-z]+_[a-z_]+/;
  assert.doesNotMatch(await timeline.innerText(), raw);

  await page.goto(`${ts.url}/devices/${player.device.id}`);
  const playerTimeline = page.locator('section[aria-labelledby="tl-h"]');
  await playerTimeline.getByText('Its settings were updated. (because the owner was banned from the mosque)').waitFor();
  assert.doesNotMatch(await playerTimeline.innerText(), raw);
  // Its last report said PLAYING, but it may not play: the badge agrees with the why.
  const status = page.locator('dl.facts .badge').first();
  assert.equal(await status.innerText(), 'Not entitled');
  assert.equal((await ts.http.get(`${API}/devices/${player.device.id}`, owner.token)).body.status, 'PLAYING', 'the device has not reacted yet');
  await assertAccessible(page, 'device page timeline');

  await page.evaluate(() => (globalThis as unknown as { localStorage: { setItem(k: string, v: string): void } }).localStorage.setItem('minaret.lang', 'ar'));
  await page.reload();
  await page.locator('section[aria-labelledby="tl-h"]').getByText('حُدّثت إعداداته. (السبب: حُظر المالك من المسجد)').waitFor();
  assert.doesNotMatch(await page.locator('section[aria-labelledby="tl-h"]').innerText(), raw);
  await shot(page, 'device-timeline-ar');
  assert.deepEqual(problems, []);
});
