// A mosque's members: the whole list with a search and a status filter, and one member's page (who they are,
// their status and its history, their players at this mosque, and what an admin may do: approve, reject,
// ban, lift a ban, remove). Membership says what someone believes: the API shows these to the mosque's
// admins only, and the pages add nothing it does not answer (docs/console.md, "The members pages").
import { api, currentUser } from '../api.js';
import { h, replace } from '../dom.js';
import { t, when } from '../i18n.js';
import { flash } from '../nav.js';
import { activityText, memberName, mosqueContext, mosqueHeader, nameProven, unprovenMark } from './admin.js';
import { badge, playerBadge } from './why.js';

/** The membership statuses of the API (src/mosques/memberships.ts MEMBERSHIP_STATUSES), in the filter's order. */
const STATUSES = ['pending', 'approved', 'rejected', 'banned'];

/**
 * What the page offers from each status. The API lets an admin move a membership to any status; these are
 * the moves that mean something to a person (docs/console.md, "The members pages"). Lifting a ban puts the
 * member back in the waiting list (`pending`): a ban lifted is not an approval, an admin still decides.
 */
const ACTIONS = {
  pending: ['approve', 'reject', 'ban', 'remove'],
  approved: ['ban', 'remove'],
  rejected: ['approve', 'ban', 'remove'],
  banned: ['unban', 'remove'],
};
const TARGET = { approve: 'approved', reject: 'rejected', ban: 'banned', unban: 'pending' };

export async function membersView(page, id) {
  const { mosque, canManage } = await mosqueContext(id);
  const select = h('select', { id: 'member-filter' });
  const summary = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' });
  const list = h('ul', { class: 'list', 'aria-labelledby': 'members-h' });
  let members = [];
  let search = '';
  const wanted = () => {
    const status = new URLSearchParams(location.search).get('status');
    return STATUSES.includes(status) ? status : 'all';
  };
  // A phone-only account's placeholder email is not something anyone searches for (as on the users page).
  const matches = (m) => `${m.user_email_is_placeholder ? '' : m.user_email} ${m.user_phone ?? ''}`.toLowerCase().includes(search);

  const draw = () => {
    const status = wanted();
    const count = (s) => members.filter((m) => s === 'all' || m.status === s).length;
    replace(select, ['all', ...STATUSES].map((s) => h('option', { value: s }, t('members.filter_option', { status: t(s === 'all' ? 'members.all' : `status.${s}`), n: count(s) }))));
    select.value = status;
    const shown = members.filter((m) => (status === 'all' || m.status === status) && matches(m));
    summary.textContent = t('members.showing', { n: shown.length, total: members.length });
    replace(list, shown.length === 0 ? h('li', { class: 'muted' }, t(members.length ? 'members.none_match' : 'admin.no_members')) : shown.map((m) => h('li', { 'data-member': m.id },
      h('a', { href: `/mosques/${id}/members/${m.id}`, 'data-nav': '', class: 'member-link email' }, memberName(m)),
      h('div', { class: 'row' }, badge(m.status), unprovenMark(nameProven(m), 'name'), h('span', { class: 'muted' }, t('members.since', { when: when(m.created_at) }))))));
  };
  // The filter lives in the query (as the fleet's does): Back from a member's page comes back to it.
  select.addEventListener('change', () => {
    const url = new URL(location.href);
    if (select.value === 'all') url.searchParams.delete('status');
    else url.searchParams.set('status', select.value);
    history.replaceState(null, '', url.pathname + url.search);
    draw();
  });

  replace(page, mosqueHeader(mosque, '/members', canManage),
    h('section', { 'aria-labelledby': 'members-h' }, h('h2', { id: 'members-h' }, t('admin.members')),
      h('label', {}, h('span', {}, t('members.search')), h('input', { type: 'search', oninput: (e) => { search = e.target.value.trim().toLowerCase(); draw(); } })),
      h('label', { for: 'member-filter' }, h('span', {}, t('members.filter'))), select, summary, list));
  // GET /mosques/{id}/memberships answers the whole list (a mosque has hundreds): searched in the page.
  members = await api('GET', `/mosques/${id}/memberships`);
  draw();
}

export async function memberView(page, id, membershipId) {
  const { mosque, superadmin, canManage } = await mosqueContext(id);
  const admins = await api('GET', `/mosques/${id}/admins`);
  const body = h('div');
  const refusal = h('p', { class: 'error', role: 'alert' });
  replace(page, mosqueHeader(mosque, '/members', canManage),
    h('p', {}, h('a', { href: `/mosques/${id}/members`, 'data-nav': '', class: 'button' }, t('members.back'))),
    refusal, body);

  const draw = (m) => {
    const self = m.user_id === currentUser()?.id && !superadmin;
    const name = memberName(m);
    const emails = new Map([...admins.map((a) => [a.user_id, a.email]), [m.user_id, name]]);
    replace(body,
      h('section', { 'aria-labelledby': 'who-h' }, h('h2', { id: 'who-h', class: 'email' }, name),
        h('dl', { class: 'facts' },
          !m.user_email_is_placeholder && [h('dt', {}, t('members.email')), h('dd', { class: 'email' }, m.user_email, ' ', unprovenMark(m.email_proven, 'email'))],
          m.user_phone && [h('dt', {}, t('members.phone')), h('dd', {}, m.user_phone, ' ', unprovenMark(m.phone_proven, 'phone'))],
          h('dt', {}, t('members.joined')), h('dd', {}, when(m.created_at)),
          m.admin && [h('dt', {}, t('members.role')), h('dd', {}, t(m.admin.is_owner ? 'members.role_owner' : 'members.role_admin'))])),
      h('section', { 'aria-labelledby': 'status-h' }, h('h2', { id: 'status-h' }, t('members.status')),
        h('p', { class: 'row', 'data-status': m.status }, badge(m.status), t(`members.status_${m.status}`)),
        self ? h('p', { class: 'muted' }, t('members.self')) : actions(m)),
      h('section', { 'aria-labelledby': 'players-h' }, h('h2', { id: 'players-h' }, t('members.players')),
        m.players.length === 0 ? h('p', { class: 'muted' }, t('members.no_players')) : h('ul', { class: 'list' }, m.players.map(player))),
      h('section', { 'aria-labelledby': 'history-h' }, h('h2', { id: 'history-h' }, t('members.history')),
        h('ul', { class: 'list' }, m.history.length === 0 ? h('li', { class: 'muted' }, t('activity.none')) : m.history.map((a) => h('li', { 'data-activity': a.id, 'data-kind': a.kind },
          h('div', { class: 'wrap' }, activityText(a, emails)), h('time', { datetime: a.at, class: 'muted' }, when(a.at)))))));
  };

  /** The moves the status allows, each asked about first in the page (a button that becomes "Yes" / "Cancel"). */
  const actions = (m) => {
    const area = h('div', { class: 'row', 'data-actions': '' });
    const offer = () => replace(area, ACTIONS[m.status].map((action) => h('button', {
      type: 'button', class: action === 'approve' || action === 'unban' ? '' : action === 'reject' ? 'secondary' : 'danger',
      onclick: () => ask(action),
    }, t(`members.${action}`))));
    const ask = (action) => {
      const yes = h('button', { type: 'button', class: action === 'ban' || action === 'remove' ? 'danger' : '', onclick: () => void act(action, yes) }, t(`members.confirm_${action}`));
      replace(area, h('div', { role: 'group', 'aria-labelledby': 'confirm-q', class: 'confirm' },
        h('p', { id: 'confirm-q' }, t(`members.ask_${action}`, { name: memberName(m) })),
        h('div', { class: 'row' }, yes, h('button', { type: 'button', class: 'secondary', onclick: () => { offer(); area.querySelector('button')?.focus(); } }, t('members.cancel')))));
      yes.focus();
    };
    offer();
    return area;
  };

  const act = async (action, yes) => {
    yes.disabled = true;
    refusal.textContent = '';
    try {
      if (action === 'remove') await api('DELETE', `/memberships/${membershipId}`);
      else await api('PATCH', `/memberships/${membershipId}`, { status: TARGET[action] });
    } catch (err) {
      await refused(err);
      return;
    }
    if (action === 'remove') {
      replace(body, h('p', { role: 'status', 'data-removed': '' }, t('members.removed_done')));
      return;
    }
    flash(t(`members.done_${action}`));
    await load();
  };

  /** The API's refusal in plain words: it says why for the owner's or one's own membership, the catalogue otherwise. */
  const refused = async (err) => {
    const now = await api('GET', `/memberships/${membershipId}`).catch(() => null);
    const self = now?.user_id === currentUser()?.id;
    const reason = err.code === 'forbidden' && now?.admin?.is_owner && !self ? t('members.refused_owner')
      : err.code === 'forbidden' && self ? t('members.refused_self')
        : err.code === 'not_found' ? t('members.refused_gone') : err.message;
    refusal.textContent = t('members.refused', { reason });
    if (now) draw(now);
  };

  const load = async () => {
    const m = await api('GET', `/memberships/${membershipId}`);
    // A membership of another mosque this admin also runs belongs under that mosque's heading, not this one.
    if (m.mosque_id !== id) replace(body, h('p', { class: 'error', role: 'alert' }, t('error.not_found')));
    else draw(m);
  };
  await load();
}

/** A player of the member bound to this mosque: its state, and whether it may play here now. */
function player(d) {
  const why = d.entitlement?.entitled ? t('members.player_entitled') : t(`members.player_${d.entitlement?.reason ?? 'no_mosque'}`);
  return h('li', { 'data-player': d.id },
    h('a', { href: `/devices/${d.id}`, 'data-nav': '', class: 'member-link' }, d.name || d.id),
    h('div', { class: 'row' }, playerBadge(d, Boolean(d.entitlement?.entitled)), h('span', { 'data-entitled': String(Boolean(d.entitlement?.entitled)) }, why)),
    h('p', { class: 'muted' }, d.last_seen_at ? t('members.player_seen', { when: when(d.last_seen_at) }) : t('time.never_seen')));
}
