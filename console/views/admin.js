// A mosque admin's pages: the overview (broadcasts, pending members, a link to the members), the tabs that lead to the
// other mosque pages, and the activity feed. Live updates come from the API's event stream (never MQTT),
// opened with a single-use ticket.
import { api, currentUser } from '../api.js';
import { button, form, h, replace } from '../dom.js';
import { t, when } from '../i18n.js';
import { openLive } from '../live.js';
import { flash } from '../nav.js';
import { allUsers } from './super.js';
import { badge } from './why.js';

const KINDS = ['azaan', 'jummah', 'waaz', 'announcement'];
const PRAYERS = ['fajr', 'dhuhr', 'jumuah', 'asr', 'maghrib', 'isha'];
const LIVE_REPORT_REFRESH_MS = 5_000;
const ACTIVITY_PAGE = 20;
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
  const loadBroadcasts = async () => {
    const [list, air] = await Promise.all([api('GET', `/mosques/${id}/broadcasts?limit=5`), api('GET', `/mosques/${id}/on-air`)]);
    // What the audio server hears now (docs/api.md, "Broadcasts and the audio server"); nothing without one.
    replace(onAir, air.audio_server && h('p', { class: air.on_air ? 'row' : 'muted', 'data-on-air': String(air.on_air) },
      air.on_air ? [badge('live'), t('onair.live', { since: when(air.since), listeners: air.listeners })] : t('onair.off')));
    const live = list.find((b) => b.status === 'live');
    clearInterval(reportTimer);
    // The report fills in as devices answer: read again while a broadcast is live.
    reportTimer = live ? setInterval(() => void loadBroadcasts().catch(() => {}), LIVE_REPORT_REFRESH_MS) : null;
    replace(broadcasts,
      canTrigger && !live && form({ 'aria-label': t('broadcast.start') }, [
        h('label', {}, h('span', {}, t('broadcast.kind')), h('select', { name: 'kind' }, KINDS.map((k) => h('option', { value: k }, t(`broadcast.kind_${k}`))))),
        h('label', {}, h('span', {}, t('broadcast.prayer')), h('select', { name: 'prayer' }, h('option', { value: '' }, '—'), PRAYERS.map((p) => h('option', { value: p }, t(`prayer.${p}`))))),
        h('button', { type: 'submit' }, t('broadcast.start')),
      ], async (data) => {
        // An azaan is always a prayer's call: the report, the push and the transmitter name it (docs/console.md).
        if (data.get('kind') === 'azaan' && !data.get('prayer')) throw new Error(t('broadcast.prayer_needed'));
        const made = await api('POST', `/mosques/${id}/broadcasts`, { kind: data.get('kind'), ...(data.get('prayer') && { prayer: data.get('prayer') }) });
        await loadBroadcasts();
        // The audio server hears no source yet: players will hear it once the transmitter sends (docs/api.md).
        if (made.waiting_for_source) flash(t('broadcast.waiting_for_source'));
      }),
      list.length === 0 ? h('p', { class: 'muted' }, t('broadcast.none')) : h('ul', { class: 'list' }, list.map((b) => h('li', { 'data-broadcast': b.id },
        h('div', { class: 'row' }, h('strong', {}, t(`broadcast.kind_${b.kind}`)), b.prayer && h('span', {}, t(`prayer.${b.prayer}`)), badge(b.status), h('span', { class: 'muted' }, when(b.started_at))),
        b.status === 'live' && b.waiting_for_source && h('p', { class: 'warn', role: 'status' }, t('broadcast.waiting_for_source')),
        b.fallback && h('p', { class: 'muted' }, t('broadcast.fallback')),
        b.report.listeners && h('p', { class: 'muted', 'data-listeners': '' }, t('broadcast.listeners', { devices: b.report.listeners.admitted.devices, members: b.report.listeners.admitted.members, minutes: Math.round(b.report.listeners.seconds / 60) })),
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
    h('section', { 'aria-labelledby': 'pend-h' }, h('h2', { id: 'pend-h' }, t('admin.pending')), pending),
    h('section', { 'aria-labelledby': 'mem-h' }, h('h2', { id: 'mem-h' }, t('admin.members')), members));
  await Promise.all([loadMembers(), loadBroadcasts()]);

  const stopLive = openLive(id, liveState, { broadcast: loadBroadcasts, on_air: loadBroadcasts, listeners: loadBroadcasts });
  return () => {
    stopLive();
    clearInterval(reportTimer);
  };
}

function report(r) {
  const parts = ['playing', 'unbound', 'muted', 'offline', 'stream_error', 'other'];
  return h('dl', { class: 'facts', 'aria-label': t('broadcast.report') },
    parts.map((k) => [h('dt', {}, t(`report.${k}`)), h('dd', { 'data-report': k }, String(r[k]))]),
    h('dt', {}, t('report.push')), h('dd', {}, t('report.push_counts', r.push)));
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
