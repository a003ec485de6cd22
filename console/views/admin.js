// A mosque admin's page: pending members, members, devices with live status, broadcasts and their reports.
// Live updates come from the API's event stream (never MQTT), opened with a single-use ticket.
import { api, currentUser } from '../api.js';
import { button, form, h, replace } from '../dom.js';
import { t, when } from '../i18n.js';
import { flash } from '../nav.js';
import { badge, seenText } from './why.js';

const KINDS = ['azaan', 'jummah', 'waaz', 'announcement'];
const PRAYERS = ['fajr', 'dhuhr', 'jumuah', 'asr', 'maghrib', 'isha'];
const LIVE_REPORT_REFRESH_MS = 5_000;
const RECONNECT_MS = 5_000;

export async function mosqueView(page, id) {
  const [mosque, me] = await Promise.all([api('GET', `/mosques/${id}`), api('GET', '/me')]);
  const superadmin = currentUser()?.role === 'superadmin';
  const row = me.admin_of.find((a) => a.mosque_id === id);
  const canTrigger = superadmin || row?.can_trigger;
  const pending = h('ul', { class: 'list' });
  const members = h('ul', { class: 'list' });
  const devices = h('ul', { class: 'list' });
  const broadcasts = h('div');
  const liveState = h('p', { class: 'muted', role: 'status' }, t('live.connecting'));
  let search = '';

  const loadMembers = async () => {
    const all = await api('GET', `/mosques/${id}/memberships`);
    const waiting = all.filter((m) => m.status === 'pending');
    replace(pending, waiting.length === 0 ? h('li', { class: 'muted' }, t('admin.no_pending')) : waiting.map((m) => h('li', {},
      h('div', {}, h('strong', {}, m.user_email), ' ', h('span', { class: 'muted' }, when(m.created_at))),
      h('div', { class: 'row' }, ['approved', 'rejected', 'banned'].map((status) => button(t(`admin.${status}_action`), async () => {
        await api('PATCH', `/memberships/${m.id}`, { status });
        flash(t('admin.member_now', { email: m.user_email, status: t(`status.${status}`) }));
        await loadMembers();
      }, flash, { class: status === 'approved' ? '' : 'secondary', 'aria-label': `${t(`admin.${status}_action`)}: ${m.user_email}` }))))));
    const shown = all.filter((m) => m.status !== 'pending' && m.user_email.toLowerCase().includes(search));
    replace(members, shown.length === 0 ? h('li', { class: 'muted' }, t('admin.no_members')) : shown.map((m) => h('li', { class: 'row' }, h('span', {}, m.user_email), badge(m.status))));
  };

  const loadDevices = async () => {
    const list = await api('GET', `/devices?mosque_id=${encodeURIComponent(id)}`);
    replace(devices, list.length === 0 ? h('li', { class: 'muted' }, t('admin.no_devices')) : list.map((d) => h('li', { 'data-device': d.id },
      h('div', { class: 'row' }, h('a', { href: `/devices/${d.id}`, 'data-nav': '' }, d.name || d.id), badge(d.status), h('span', { class: 'muted' }, t(`device.kind_${d.kind}`))),
      h('p', { class: 'muted' }, seenText(d), d.rssi !== null ? ` · RSSI ${d.rssi} dBm` : '', d.fw ? ` · ${t('device.fw')} ${d.fw}` : ''))));
  };

  let reportTimer = null;
  const loadBroadcasts = async () => {
    const list = await api('GET', `/mosques/${id}/broadcasts?limit=5`);
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
        await api('POST', `/mosques/${id}/broadcasts`, { kind: data.get('kind'), ...(data.get('prayer') && { prayer: data.get('prayer') }) });
        await loadBroadcasts();
      }),
      list.length === 0 ? h('p', { class: 'muted' }, t('broadcast.none')) : h('ul', { class: 'list' }, list.map((b) => h('li', { 'data-broadcast': b.id },
        h('div', { class: 'row' }, h('strong', {}, t(`broadcast.kind_${b.kind}`)), b.prayer && h('span', {}, t(`prayer.${b.prayer}`)), badge(b.status), h('span', { class: 'muted' }, when(b.started_at))),
        report(b.report),
        canTrigger && b.status === 'live' && button(t('broadcast.stop'), async () => {
          await api('POST', `/mosques/${id}/broadcasts/${b.id}/stop`);
          await loadBroadcasts();
        }, flash, { class: 'danger' })))));
  };

  replace(page,
    h('h1', {}, mosque.name),
    h('p', {}, h('a', { href: `/mosques/${id}/schedule`, 'data-nav': '' }, t('schedule.link'))),
    liveState,
    h('section', { 'aria-labelledby': 'bc-h' }, h('h2', { id: 'bc-h' }, t('admin.broadcasts')), broadcasts),
    h('section', { 'aria-labelledby': 'pend-h' }, h('h2', { id: 'pend-h' }, t('admin.pending')), pending),
    h('section', { 'aria-labelledby': 'dev-h' }, h('h2', { id: 'dev-h' }, t('admin.devices')), devices),
    h('section', { 'aria-labelledby': 'mem-h' }, h('h2', { id: 'mem-h' }, t('admin.members')),
      h('label', {}, h('span', {}, t('admin.search')), h('input', { type: 'search', oninput: (e) => { search = e.target.value.trim().toLowerCase(); void loadMembers(); } })),
      members),
    h('section', { 'aria-labelledby': 'jc-h' }, h('h2', { id: 'jc-h' }, t('admin.join')),
      h('p', {}, t('admin.join_code'), ' ', h('code', {}, mosque.join_code)),
      h('p', {}, t('admin.join_link'), ' ', h('code', {}, `${location.origin}/join/${mosque.join_code}`))));
  await Promise.all([loadMembers(), loadDevices(), loadBroadcasts()]);

  const stopLive = openLive(id, liveState, { device_status: loadDevices, broadcast: loadBroadcasts });
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

/** The mosque's event stream; a dropped stream is reopened with a fresh ticket (a ticket opens one stream). */
function openLive(id, status, handlers) {
  let source = null;
  let timer = null;
  let stopped = false;
  const connect = async () => {
    try {
      const { ticket } = await api('POST', `/mosques/${id}/events/ticket`);
      if (stopped) return;
      source = new EventSource(`/api/v1/mosques/${encodeURIComponent(id)}/events/stream?ticket=${encodeURIComponent(ticket)}`);
      source.onopen = () => { status.textContent = t('live.on'); };
      for (const [type, reload] of Object.entries(handlers)) source.addEventListener(type, () => void reload().catch(() => {}));
      source.onerror = () => {
        source.close();
        status.textContent = t('live.off');
        if (!stopped) timer = setTimeout(connect, RECONNECT_MS);
      };
    } catch {
      status.textContent = t('live.off');
      if (!stopped) timer = setTimeout(connect, RECONNECT_MS);
    }
  };
  void connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    source?.close();
  };
}
