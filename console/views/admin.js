// A mosque admin's pages: the overview (broadcasts, pending members, a link to the members), the tabs that lead to the
// other mosque pages, and the activity feed. Live updates come from the API's event stream (never MQTT),
// opened with a single-use ticket.
import { api, currentUser } from '../api.js';
import { button, form, h, replace } from '../dom.js';
import { language, t, when } from '../i18n.js';
import { openLive } from '../live.js';
import { flash } from '../nav.js';
import { allUsers } from './super.js';
import { badge, durationText } from './why.js';

const KINDS = ['azaan', 'jummah', 'waaz', 'announcement'];
const PRAYERS = ['fajr', 'dhuhr', 'jumuah', 'asr', 'maghrib', 'isha'];
const LIVE_REPORT_REFRESH_MS = 5_000;
const ACTIVITY_PAGE = 20;
const WEEK_DAYS = 7;
const DAY_MS = 86_400_000;
const TABS = [['', 'admin.tab_overview'], ['/members', 'admin.tab_members'], ['/devices', 'admin.tab_devices'], ['/team', 'admin.tab_team'], ['/activity', 'admin.tab_activity'], ['/schedule', 'schedule.link'], ['/settings', 'admin.tab_settings']];
/** Tabs only managers see: the API refuses everything on them to anyone else. */
const MANAGERS_TABS = new Set(['/settings']);

/** The mosque and what the signed-in person may do there (the API decides; this only hides what it would refuse). */
export async function mosqueContext(id) {
  const [mosque, me] = await Promise.all([api('GET', `/mosques/${id}`), api('GET', '/me')]);
  const superadmin = currentUser()?.role === 'superadmin';
  const row = me.admin_of.find((a) => a.mosque_id === id);
  return { mosque, superadmin, canTrigger: superadmin || Boolean(row?.can_trigger), canManage: superadmin || Boolean(row?.can_manage) };
}

/** How a member is named to admins: their email, or their phone when the email is an account's placeholder. */
export const memberName = (m) => (m.user_email_is_placeholder ? m.user_phone ?? m.user_email : m.user_email);

/** Whether the address memberName shows is proven. */
export const nameProven = (m) => (m.user_email_is_placeholder && m.user_phone ? m.phone_proven : m.email_proven);

/**
 * The mark beside an address its owner has not proven: until they do, it is only a claim, and approving the
 * member approves whoever claimed it (docs/api.md, "Addresses: claims and proof"). Nothing beside a proven one.
 */
export const unprovenMark = (proven, which) => !proven && h('span', { class: 'badge unproven', 'data-unproven': which, title: t('proof.unproven_hint') }, t('proof.unproven'));

/** The mosque's heading and its tabs; the open tab carries aria-current. */
export function mosqueHeader(mosque, current, canManage = false) {
  return [
    h('h1', {}, mosque.name),
    h('nav', { class: 'tabs', 'aria-label': t('admin.tabs') }, TABS.filter(([suffix]) => canManage || !MANAGERS_TABS.has(suffix)).map(([suffix, key]) => h('a', {
      href: `/mosques/${mosque.id}${suffix}`, 'data-nav': '', 'aria-current': suffix === current ? 'page' : undefined,
    }, t(key)))),
  ];
}

export async function mosqueView(page, id) {
  const { mosque, canTrigger, canManage } = await mosqueContext(id);
  const pending = h('ul', { class: 'list' });
  const members = h('p', {});
  const broadcasts = h('div');
  const liveState = h('p', { class: 'muted', role: 'status' }, t('live.connecting'));

  const loadMembers = async () => {
    const all = await api('GET', `/mosques/${id}/memberships`);
    const waiting = all.filter((m) => m.status === 'pending');
    replace(pending, waiting.length === 0 ? h('li', { class: 'muted' }, t('admin.no_pending')) : waiting.map((m) => h('li', {},
      h('div', {}, h('a', { href: `/mosques/${id}/members/${m.id}`, 'data-nav': '', class: 'email' }, memberName(m)), ' ', unprovenMark(nameProven(m), 'name'), ' ', h('span', { class: 'muted' }, when(m.created_at))),
      h('div', { class: 'row' }, ['approved', 'rejected', 'banned'].map((status) => button(t(`admin.${status}_action`), async () => {
        await api('PATCH', `/memberships/${m.id}`, { status });
        flash(t('admin.member_now', { email: m.user_email, status: t(`status.${status}`) }));
        await loadMembers();
      }, flash, { class: status === 'approved' ? '' : 'secondary', 'aria-label': `${t(`admin.${status}_action`)}: ${memberName(m)}` }))))));
    // The whole list, its search and the actions on one member live on the Members tab (views/members.js).
    replace(members, h('a', { href: `/mosques/${id}/members`, 'data-nav': '' }, t('admin.all_members', { n: all.length })));
  };

  let reportTimer = null;
  const onAir = h('div', { 'aria-live': 'polite' });
  const week = h('div');
  const names = listenerNames(id);
  const loadBroadcasts = async () => {
    const since = new Date(Date.now() - WEEK_DAYS * DAY_MS).toISOString();
    const [list, air, recent] = await Promise.all([api('GET', `/mosques/${id}/broadcasts?limit=5`), api('GET', `/mosques/${id}/on-air`),
      api('GET', `/mosques/${id}/broadcasts?limit=200&since=${encodeURIComponent(since)}`)]);
    // What the audio server hears now (docs/api.md, "Broadcasts and the audio server"); nothing without one.
    replace(onAir, air.audio_server && h('p', { class: air.on_air ? 'row' : 'muted', 'data-on-air': String(air.on_air) },
      air.on_air ? [badge('live'), h('span', { 'data-listening': `${air.listening.devices}/${air.listening.members}` }, t('onair.live_now', {
        since: when(air.since), players: t('count.players', { count: air.listening.devices }), members: t('count.members', { count: air.listening.members }),
      }))] : t('onair.off')));
    replace(week, weekPicture(recent));
    const live = list.find((b) => b.status === 'live');
    clearInterval(reportTimer);
    // The report fills in as devices answer: read again while a broadcast is live.
    reportTimer = live ? setInterval(() => void loadBroadcasts().catch(() => {}), LIVE_REPORT_REFRESH_MS) : null;
    const heardNames = list.some((b) => b.report.listeners?.heard.length) ? await names() : null;
    // The server's flag can trail the on-air news by a moment: what the audio server says now decides the words.
    const waiting = (b) => b.status === 'live' && b.waiting_for_source && !(air.audio_server && air.on_air);
    replace(broadcasts,
      canTrigger && !live && startForm(id, loadBroadcasts),
      list.length === 0 ? h('p', { class: 'muted' }, t('broadcast.none')) : h('ul', { class: 'list' }, list.map((b) => h('li', { 'data-broadcast': b.id },
        h('div', { class: 'row' }, h('strong', {}, t(`broadcast.kind_${b.kind}`)), b.prayer && h('span', {}, t(`prayer.${b.prayer}`)), badge(waiting(b) ? 'waiting' : b.status), h('span', { class: 'muted' }, when(b.started_at))),
        waiting(b) && h('p', { class: 'warn', role: 'status' }, t('broadcast.waiting_for_source')),
        b.fallback && h('p', { class: 'muted' }, t('broadcast.fallback')),
        b.report.listeners && heardList(b.report.listeners, heardNames),
        report(b.report),
        canTrigger && b.status === 'live' && button(t('broadcast.stop'), async () => {
          await api('POST', `/mosques/${id}/broadcasts/${b.id}/stop`);
          flash(t('broadcast.stopped'));
          await loadBroadcasts();
        }, flash, { class: 'danger' })))));
  };

  replace(page,
    mosqueHeader(mosque, '', canManage),
    liveState,
    h('section', { 'aria-labelledby': 'bc-h' }, h('h2', { id: 'bc-h' }, t('admin.broadcasts')), onAir, broadcasts),
    h('section', { 'aria-labelledby': 'week-h' }, h('h2', { id: 'week-h' }, t('week.title')), week),
    h('section', { 'aria-labelledby': 'pend-h' }, h('h2', { id: 'pend-h' }, t('admin.pending')), pending),
    h('section', { 'aria-labelledby': 'mem-h' }, h('h2', { id: 'mem-h' }, t('admin.members')), members));
  await Promise.all([loadMembers(), loadBroadcasts()]);

  const stopLive = openLive(id, liveState, { broadcast: loadBroadcasts, on_air: loadBroadcasts, listeners: loadBroadcasts });
  return () => {
    stopLive();
    clearInterval(reportTimer);
  };
}

/** The start form: an azaan names its prayer (the report, the push and the transmitter name it: docs/console.md). */
function startForm(id, reload) {
  return form({ 'aria-label': t('broadcast.start') }, [
    h('label', {}, h('span', {}, t('broadcast.kind')), h('select', { name: 'kind' }, KINDS.map((k) => h('option', { value: k }, t(`broadcast.kind_${k}`))))),
    h('label', {}, h('span', {}, t('broadcast.prayer')), h('select', { name: 'prayer' }, h('option', { value: '' }, '—'), PRAYERS.map((p) => h('option', { value: p }, t(`prayer.${p}`))))),
    h('button', { type: 'submit' }, t('broadcast.start')),
  ], async (data) => {
    if (data.get('kind') === 'azaan' && !data.get('prayer')) throw new Error(t('broadcast.prayer_needed'));
    const made = await api('POST', `/mosques/${id}/broadcasts`, { kind: data.get('kind'), ...(data.get('prayer') && { prayer: data.get('prayer') }) });
    await reload();
    // The audio server hears no source yet: players will hear it once the transmitter sends (docs/api.md).
    if (made.waiting_for_source) flash(t('broadcast.waiting_for_source'));
  });
}

/** The devices' own counts: players apart from the transmitter, which sends the azaan (docs/api.md, "Broadcasts and their delivery report"). */
function report(r) {
  const parts = ['playing', 'covered_locally', 'unbound', 'muted', 'offline', 'stream_error', 'other'];
  return h('dl', { class: 'facts', 'aria-label': t('broadcast.report') },
    parts.map((k) => [h('dt', {}, t(`report.${k}`)), h('dd', { 'data-report': k }, String(r[k]))]),
    r.transmitters && [h('dt', {}, t('report.transmitter')), h('dd', { 'data-report': 'transmitter' },
      t(r.transmitters.playing > 0 ? 'report.transmitter_sent' : 'report.transmitter_silent'))],
    h('dt', {}, t('report.push')), h('dd', {}, t('report.push_counts', r.push)));
}

/**
 * Names for who heard (report.listeners.heard): players by their names on the Devices tab, members by the
 * address the Members tab shows. Read once per page, when a report first names someone.
 */
function listenerNames(id) {
  let read = null;
  return () => (read ??= Promise.all([api('GET', `/devices?mosque_id=${encodeURIComponent(id)}`), api('GET', `/mosques/${id}/memberships`)])
    .then(([devices, members]) => ({ devices: new Map(devices.map((d) => [d.id, d.name || d.id])), members: new Map(members.map((m) => [m.user_id, memberName(m)])) }))
    .catch(() => null));
}

/** How many heard the broadcast through the audio server, then each of them and for how long, the longest first. */
function heardList(l, names) {
  const who = (x) => (x.device_id ? names?.devices.get(x.device_id) ?? t('broadcast.heard_gone_player')
    : t('broadcast.heard_member', { name: names?.members.get(x.user_id) ?? t('broadcast.heard_gone_member') }));
  return h('div', { 'data-listeners': '' },
    h('p', { class: 'muted' }, t('broadcast.heard', {
      players: t('count.players', { count: l.admitted.devices }), members: t('count.members', { count: l.admitted.members }),
      minutes: t('count.minutes', { count: Math.round(l.seconds / 60) }),
    })),
    l.heard.length > 0 && h('details', {}, h('summary', {}, t('broadcast.heard_who')),
      h('ul', { class: 'list', 'data-heard': '' }, l.heard.map((x) => h('li', { 'data-heard-by': x.device_id ?? x.user_id },
        h('span', {}, who(x)), ' ', h('span', { class: 'muted' }, durationText(x.seconds))))),
      l.truncated && h('p', { class: 'muted' }, t('broadcast.heard_more'))));
}

/** The homes that heard one broadcast: players that played it (live or their own copy) and members in the console. */
export const homesOf = (r) => r.playing + r.covered_locally + (r.listeners?.admitted.members ?? 0);

/**
 * Each azaan of the last 7 days with the homes that heard it: bars drawn here (no chart service), a title and
 * description for screen readers, and the same numbers in a table under it.
 */
function weekPicture(recent) {
  const azaans = recent.filter((b) => b.kind === 'azaan' || b.kind === 'jummah').reverse();
  if (azaans.length === 0) return h('p', { class: 'muted' }, t('week.none'));
  const day = new Intl.DateTimeFormat(language(), { weekday: 'short', day: 'numeric' });
  const rows = azaans.map((b) => ({ id: b.id, day: day.format(new Date(b.started_at)), prayer: t(`prayer.${b.prayer ?? 'none'}`), homes: homesOf(b.report) }));
  const most = Math.max(1, ...rows.map((r) => r.homes));
  const bar = 24;
  const gap = 6;
  const height = 120;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = (tag, attrs, ...kids) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    el.append(...kids);
    return el;
  };
  const picture = svg('svg', { viewBox: `0 0 ${rows.length * (bar + gap)} ${height}`, role: 'img', 'aria-labelledby': 'week-title week-desc', class: 'week-chart', 'data-week': '' },
    svg('title', { id: 'week-title' }, t('week.title')), svg('desc', { id: 'week-desc' }, t('week.desc')),
    ...rows.flatMap((r, i) => {
      const tall = Math.round((r.homes / most) * (height - 16));
      return [svg('rect', { x: i * (bar + gap), y: height - tall, width: bar, height: Math.max(tall, 1), 'data-homes': r.homes, 'data-bar': r.id },
        svg('title', {}, t('week.bar', { prayer: r.prayer, day: r.day, homes: t('count.homes', { count: r.homes }) }))),
      // The number over its bar, for the eye; the bar's title and the table say it to a screen reader.
      svg('text', { x: i * (bar + gap) + bar / 2, y: height - tall - 3, 'text-anchor': 'middle', 'font-size': 10, 'aria-hidden': 'true' }, new Intl.NumberFormat(language()).format(r.homes))];
    }));
  return h('div', {}, h('div', { class: 'week-picture' }, picture),
    h('table', { class: 'week-table', 'data-week-table': '' }, h('caption', {}, t('week.table')),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, t('week.day')), h('th', { scope: 'col' }, t('week.prayer')), h('th', { scope: 'col' }, t('week.homes')))),
      h('tbody', {}, rows.map((r) => h('tr', { 'data-row': r.id }, h('td', {}, r.day), h('td', {}, r.prayer), h('td', { 'data-homes': r.homes }, String(r.homes)))))));
}

/** The activity feed, newest first, in plain words; "Load older" asks for the page before the last row. */
export async function activityView(page, id) {
  const { mosque, superadmin, canManage } = await mosqueContext(id);
  // Activity names people by id: the admins and members lists (and a superadmin's users list) give their emails.
  const [admins, memberships, users] = await Promise.all([
    api('GET', `/mosques/${id}/admins`), api('GET', `/mosques/${id}/memberships`), superadmin ? allUsers() : [],
  ]);
  const emails = new Map([...users.map((u) => [u.id, u.email]), ...memberships.map((m) => [m.user_id, m.user_email]), ...admins.map((a) => [a.user_id, a.email])]);
  const list = h('ul', { class: 'list' });
  let before = '';
  const loadPage = async () => {
    const rows = await api('GET', `/mosques/${id}/activity?limit=${ACTIVITY_PAGE}${before && `&before=${before}`}`);
    if (!before && rows.length === 0) list.append(h('li', { class: 'muted' }, t('activity.none')));
    const items = rows.map((a) => h('li', { 'data-activity': a.id, 'data-kind': a.kind, tabindex: -1 },
      h('div', {}, activityText(a, emails)), h('time', { datetime: a.at, class: 'muted' }, when(a.at))));
    list.append(...items);
    if (rows.length < ACTIVITY_PAGE) older.remove();
    // A keyboard or screen-reader user goes on reading where the older rows begin.
    if (before && items[0]) items[0].focus();
    before = rows.at(-1)?.id ?? before;
  };
  const older = button(t('activity.older'), loadPage, flash, { class: 'secondary' });
  replace(page, mosqueHeader(mosque, '/activity', canManage),
    h('section', { 'aria-labelledby': 'act-h' }, h('h2', { id: 'act-h' }, t('activity.title')), list, older));
  await loadPage();
}

/** "imam@x approved ali@y": one catalogue entry per kind, `activity.other` for kinds this console does not know. */
export function activityText(a, emails) {
  const who = (userId) => (userId ? emails.get(userId) ?? t('activity.someone') : t('activity.system'));
  const d = a.data ?? {};
  const subjectUser = a.kind.startsWith('admin.') ? a.subject_id : d.user_id;
  const vars = {
    actor: who(a.actor_user_id), subject: who(subjectUser), status: t(`status.${d.to}`), channel: t(`invites.by_${d.channel}`),
    kind: t(`broadcast.kind_${d.kind}`), prayer: t(`prayer.${d.prayer}`), time: d.azaan_local ?? '', reason: d.reason ?? '', code: a.kind,
    device: d.name ?? a.subject_id ?? '',
  };
  let key = `activity.${a.kind.replace('.', '_')}`;
  if (a.kind === 'membership.status_changed' || a.kind === 'membership.joined') key += `_${d.to}`;
  if (a.kind === 'membership.removed' && a.actor_user_id && a.actor_user_id !== d.user_id) key += '_by';
  const text = t(key, vars);
  return text === key ? t('activity.other', vars) : text;
}
